//! How a string is written in a nats-server config: one function, shared by
//! the server's settings ([`crate::nats_config`]) and the accounts
//! ([`super::auth`]), apart so that neither needs the other for it.

/// A double-quoted nats-server config string.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
