//! What one round trip to a worker ends in: a reply decoded, worth
//! another try, or no answer and why ([`NoAnswer`]). Below the client, its
//! shared state and the batching, which all speak of it.

use sluice_core::wire::{self, ErrorCode, Reply};
use std::fmt;

/// Why no worker decided.
#[derive(Clone, Debug)]
pub(crate) enum NoAnswer {
    NoResponders,
    TimedOut,
    Disconnected,
    /// A worker answered 503 (e.g. it does not own the key's partition).
    Unavailable(String),
    Malformed(String),
    Other(String),
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoAnswer::NoResponders => f.write_str("no responders: no worker owns the partition"),
            NoAnswer::TimedOut => f.write_str("timed out"),
            NoAnswer::Disconnected => f.write_str("not connected to NATS"),
            NoAnswer::Unavailable(m) => write!(f, "the worker is unavailable: {m}"),
            NoAnswer::Malformed(m) => write!(f, "malformed reply: {m}"),
            NoAnswer::Other(m) => f.write_str(m),
        }
    }
}

/// What a reply decoder makes of one reply.
pub(crate) enum Decoded<T> {
    Done(T),
    /// Worth another try (a 503 reply).
    Retry(NoAnswer),
    Fail(NoAnswer),
}

/// A single reply: a decision or an error; a 503 is worth a retry.
pub(crate) fn decode_single(msg: &async_nats::Message) -> Decoded<Reply> {
    match wire::decode_reply(&msg.payload) {
        Ok(Reply::Error(e)) if e.code == ErrorCode::Unavailable => {
            Decoded::Retry(NoAnswer::Unavailable(e.message))
        }
        Ok(reply) => Decoded::Done(reply),
        Err(e) => {
            tracing::warn!(subject = %msg.subject, "{e}");
            Decoded::Fail(NoAnswer::Malformed(e.to_string()))
        }
    }
}

/// An error reply as a worker sends it: `error` in `encoding`, with its
/// error headers and `more`.
#[cfg(test)]
pub(crate) fn error_message(
    error: &wire::ErrorReply,
    encoding: wire::Encoding,
    more: &[(&str, &str)],
) -> async_nats::Message {
    let mut headers = async_nats::HeaderMap::new();
    for (name, value) in wire::error_headers(error) {
        headers.insert(name, value.as_str());
    }
    for (name, value) in more {
        headers.insert(*name, *value);
    }
    let payload = bytes::Bytes::from(error.encode(encoding));
    async_nats::Message {
        subject: "_INBOX.x".into(),
        reply: None,
        length: payload.len(),
        payload,
        headers: Some(headers),
        status: None,
        description: None,
    }
}
