//! Request bodies (SPEC §1): decoding, on every request a worker
//! answers, and encoding, for clients.
//!
//! [`decode_request`] is strict because a refused request changes no
//! counter: a typo (`"cots": 5`) must be an error, not a silent cost of 1.
//! It is cheap because it runs for every request: the empty body (the
//! common case) allocates nothing, and MessagePack strings are borrowed
//! from the body. The field rules themselves live in [`super::fields`],
//! shared with batch items; this module only finds the map in either
//! encoding and refuses whatever is around it (trailing bytes, a body that
//! is neither a map nor an object, one over [`MAX_BODY`]).
//!
//! A request decides the [`Encoding`] of its reply, error replies included.

use super::encoding::Encoding;
use super::error::{ErrorCode, ErrorReply};
use super::fields::{read_msgpack_field, Fields, JsonScalar, JsonStr, DEFAULT_COST};
use super::msgpack;
use crate::policy::DEFAULT_POLICY;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Serialize;
use std::borrow::Cow;
use std::fmt;

/// The largest request body accepted; larger ones get a 413 reply.
pub const MAX_BODY: usize = 4096;
/// A decoded request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// A valid policy name (not yet checked against the config).
    pub policy: Cow<'a, str>,
    /// At most [`MAX_COST`]; 0 means "look, don't consume".
    pub cost: u64,
    /// The caller's name for the ask, so that a retry counts once (SPEC §16).
    pub id: Option<Cow<'a, str>>,
    /// How long the ask may wait for its start (SPEC §18); 0, the
    /// default, not at all.
    pub wait_ms: u64,
    /// The encoding to reply in.
    pub encoding: Encoding,
}

/// A request body that was refused, with the encoding to reply in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reply}")]
pub struct RequestError {
    pub encoding: Encoding,
    pub reply: ErrorReply,
}

/// Decodes a request body (see the module doc for the rules).
///
/// ```
/// use sluice_core::wire::{decode_request, Encoding};
///
/// let r = decode_request(b"").unwrap();
/// assert_eq!((&*r.policy, r.cost, r.encoding), ("default", 1, Encoding::MsgPack));
///
/// let r = decode_request(br#"{"policy":"login","cost":0}"#).unwrap();
/// assert_eq!((&*r.policy, r.cost, r.encoding), ("login", 0, Encoding::Json));
///
/// let e = decode_request(br#"{"cots":5}"#).unwrap_err();
/// assert_eq!((e.reply.code.status(), e.encoding), (400, Encoding::Json));
/// ```
pub fn decode_request(body: &[u8]) -> Result<Request<'_>, RequestError> {
    let encoding = Encoding::of_body(body);
    if body.is_empty() {
        return Ok(Request {
            policy: Cow::Borrowed(DEFAULT_POLICY),
            cost: DEFAULT_COST,
            id: None,
            wait_ms: 0,
            encoding,
        });
    }
    let refuse = |reply| RequestError { encoding, reply };
    if let Some(too_large) = too_large(body, "a policy name and a cost") {
        return Err(refuse(too_large));
    }
    let fields = match encoding {
        Encoding::Json => json_fields(body),
        Encoding::MsgPack => msgpack_fields(body),
    };
    let finished = fields
        .and_then(Fields::finish)
        .map_err(|m| refuse(ErrorReply::bad_request(m)))?;
    Ok(Request {
        policy: finished.policy,
        cost: finished.cost,
        id: finished.id,
        wait_ms: finished.wait_ms,
        encoding,
    })
}

/// Encodes a request body (client side). Fields left `None` are left out,
/// so `encode_request(None, None, Encoding::MsgPack)` is the empty body.
/// Nothing is validated here; a worker refuses what is invalid.
pub fn encode_request(policy: Option<&str>, cost: Option<u64>, encoding: Encoding) -> Vec<u8> {
    encode_request_with_id(policy, cost, None, encoding)
}

/// [`encode_request`] of an ask named by `id` (SPEC §16), so that the
/// owner counts it once however often it is sent.
pub fn encode_request_with_id(
    policy: Option<&str>,
    cost: Option<u64>,
    id: Option<&str>,
    encoding: Encoding,
) -> Vec<u8> {
    encode_ask(policy, cost, id, None, encoding)
}

/// [`encode_request_with_id`] of an ask that may wait up to `wait_ms` for
/// its start (SPEC §18); `None` (or 0) sends no wait.
///
/// ```
/// use sluice_core::wire::{decode_request, encode_ask, Encoding};
///
/// let body = encode_ask(Some("paced"), None, None, Some(250), Encoding::MsgPack);
/// let r = decode_request(&body).unwrap();
/// assert_eq!((&*r.policy, r.cost, r.wait_ms), ("paced", 1, 250));
/// ```
pub fn encode_ask(
    policy: Option<&str>,
    cost: Option<u64>,
    id: Option<&str>,
    wait_ms: Option<u64>,
    encoding: Encoding,
) -> Vec<u8> {
    let wait_ms = wait_ms.filter(|&ms| ms > 0);
    if policy.is_none()
        && cost.is_none()
        && id.is_none()
        && wait_ms.is_none()
        && encoding == Encoding::MsgPack
    {
        return Vec::new();
    }
    #[derive(Serialize)]
    struct RequestOut<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    }
    let out = RequestOut {
        policy,
        cost,
        id,
        wait_ms,
    };
    encode_body(&out, encoding)
}

/// Maps with named fields in MessagePack; compact JSON. For requests (client
/// side); replies go through [`super::reply::encode_reply_body`].
/// The 413 for a body over [`MAX_BODY`]; `carries` says what a request of
/// its kind holds at most.
pub(crate) fn too_large(body: &[u8], carries: &str) -> Option<ErrorReply> {
    (body.len() > MAX_BODY).then(|| {
        ErrorReply::new(
            ErrorCode::TooLarge,
            format!(
                "the request body is {} bytes; the limit is {MAX_BODY} bytes (a request carries at most {carries})",
                body.len()
            ),
        )
    })
}

pub(crate) fn encode_body<T: Serialize>(value: &T, encoding: Encoding) -> Vec<u8> {
    match encoding {
        // Both only fail for maps with non-string keys or failing writers;
        // these are plain structs written to a Vec.
        Encoding::MsgPack => rmp_serde::to_vec_named(value).expect("a reply struct encodes"),
        Encoding::Json => serde_json::to_vec(value).expect("a reply struct encodes"),
    }
}

/// What a single request may contain, for "unknown field" messages.
const REQUEST_FIELDS: &str =
    "a request has only the optional fields \"policy\" (a string), \"cost\" (an unsigned integer), \"id\" (a string) and \"wait_ms\" (an unsigned integer)";

const EXPECTED_BODY: &str = "send an empty body, a MessagePack map, or a JSON object (whose first byte is '{') with the optional fields \"policy\" and \"cost\"";

fn msgpack_fields(body: &[u8]) -> Result<Fields<'_>, String> {
    let mut r = msgpack::Reader::new(body);
    let n = match r.next() {
        Ok(msgpack::Value::Map(n)) => n,
        // Printable ASCII is a MessagePack integer, but whoever sent it meant text.
        Ok(_) if body[0].is_ascii_graphic() || body[0] == b' ' => {
            return Err(format!(
                "the request body starts with {:?}, which begins neither a JSON object ('{{') nor a MessagePack map; {EXPECTED_BODY}",
                char::from(body[0])
            ))
        }
        Ok(other) => {
            return Err(format!(
                "the request body is {}, not a map; {EXPECTED_BODY}",
                other.type_name()
            ))
        }
        Err(e) => return Err(format!("{}; {EXPECTED_BODY}", e.sentence())),
    };
    let mut fields = Fields::default();
    for _ in 0..n {
        read_msgpack_field(&mut r, &mut fields, REQUEST_FIELDS)?;
    }
    if r.remaining() > 0 {
        return Err(format!(
            "the request body has {} bytes after the end of its MessagePack map; send exactly one map",
            r.remaining()
        ));
    }
    Ok(fields)
}

fn json_fields(body: &[u8]) -> Result<Fields<'_>, String> {
    let mut fields = Fields::default();
    let mut refused = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = JsonRequest {
        fields: &mut fields,
        refused: &mut refused,
    }
    .deserialize(&mut de);
    if let Some(message) = refused {
        return Err(message);
    }
    if let Err(e) = read {
        return Err(format!(
            "the request body starts with '{{' but is not a valid JSON object ({e}); send for example {{\"policy\":\"default\",\"cost\":1}}"
        ));
    }
    if let Err(e) = de.end() {
        return Err(format!(
            "the request body has bytes after the end of its JSON object ({e}); send exactly one object"
        ));
    }
    Ok(fields)
}

/// Reads a JSON object into [`Fields`]. A field that is refused is put in
/// `refused`, so its sentence reaches the caller without serde_json's
/// "at line 1 column 12" appended.
struct JsonRequest<'f, 'a> {
    fields: &'f mut Fields<'a>,
    refused: &'f mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for JsonRequest<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for JsonRequest<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(JsonStr(name)) = map.next_key()? {
            let JsonScalar(value) = map.next_value()?;
            if let Err(message) = self.fields.set(&name, value, REQUEST_FIELDS) {
                *self.refused = Some(message);
                return Err(de::Error::custom("refused field"));
            }
        }
        Ok(())
    }
}
