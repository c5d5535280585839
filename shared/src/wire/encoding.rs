//! A body's [`Encoding`], MessagePack or JSON. A request decides it and
//! its reply, error replies included, is written in it, so requests,
//! replies and errors all name it: it sits below them all.

/// How a body is encoded. Replies use the encoding of the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Encoding {
    #[default]
    MsgPack,
    Json,
}

impl Encoding {
    /// JSON if the first byte is `{`, else MessagePack (an empty body too).
    /// `{` (0x7b) is a MessagePack integer, never a map, so this is unambiguous.
    pub fn of_body(body: &[u8]) -> Encoding {
        if body.first() == Some(&b'{') {
            Encoding::Json
        } else {
            Encoding::MsgPack
        }
    }
}
