//! Reply bodies (SPEC §1): decisions and errors, encoded by the worker
//! and decoded by clients.
//!
//! Decision replies are maps with named fields (never positional arrays),
//! so any MessagePack or JSON library can read them, and durations go out
//! in milliseconds rounded **up**, so "retry after" is never too early.
//!
//! A reply is built for every request, so MessagePack replies are written
//! by [`super::msgpack::Writer`] into a buffer sized once ([`ReplyBody`]),
//! with the same bytes rmp-serde's `to_vec_named` writes (property-tested in
//! `shared/tests/wire/replies.rs`); JSON replies go through serde_json.
//!
//! Decoding ([`decode_reply`]) is lenient about unknown fields, because the
//! contract grows only by adding, and goes through serde (rmp-serde or
//! serde_json): a client decodes only the replies to its own requests, and
//! a hand-written reader for batch replies was tried and gained nothing end
//! to end (docs/BENCHMARKS-HISTORY.md, "Changes made").

use super::encoding::Encoding;
use super::error::{ErrorCode, ErrorReply};
use super::headers::RateLimitHeaders;
use super::levels::{self, LevelReply};
use super::msgpack;
use crate::budget::Grant;
use crate::holds::HoldId;
use crate::policy::Decision;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// A decision reply body (SPEC §1 field names and meanings).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionReply {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub reset_ms: u64,
    pub retry_after_ms: u64,
    pub policy: String,
    /// A shadow policy's answer to an ask enforcement would deny (SPEC
    /// §14): `allowed` is true, nothing was consumed. Sent only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shadow_denied: bool,
    /// The answer to an ask that repeated the id of one already admitted
    /// (SPEC §16): the first answer's decision, nothing counted. Sent
    /// only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub repeat: bool,
    /// An ask allowed for a later moment (SPEC §18): the milliseconds
    /// (rounded up) from now until the asker may go on. Sent only when
    /// not 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wait_ms: u64,
    /// A denial because the key is blocked (SPEC §18): its
    /// `retry_after_ms` is the block's rest. Sent only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub blocked: bool,
    /// A grouped ask's levels, outermost first (SPEC §17). Sent only for
    /// a grouped ask.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub levels: Vec<LevelReply>,
    /// The policy of the level that denied a grouped ask (SPEC §17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied_by: Option<String>,
    /// A slice of the key's budget, in the reply to a batch item that
    /// asked for one ([`crate::budget`]): the fields `slice` (units),
    /// `slice_lease_ns` and `slice_at` (when the owner took it, ns).
    /// Written and read with the other fields by this module.
    #[serde(skip)]
    pub grant: Option<Grant>,
    /// The hold a reserve kept or an extend moved (SPEC §13): the
    /// fields `hold` and `expires_ms`. Written and read with the other
    /// fields by this module.
    #[serde(skip)]
    pub hold: Option<HoldTicket>,
}

impl DecisionReply {
    /// Durations are rounded up to whole milliseconds.
    pub fn new(decision: &Decision, policy: impl Into<String>) -> DecisionReply {
        DecisionReply {
            allowed: decision.allowed,
            limit: decision.limit,
            remaining: decision.remaining,
            reset_ms: decision.reset.as_millis_ceil(),
            retry_after_ms: decision.retry_after.as_millis_ceil(),
            policy: policy.into(),
            shadow_denied: decision.shadow_denied,
            repeat: false,
            wait_ms: decision.wait.as_millis_ceil(),
            blocked: decision.blocked,
            levels: Vec::new(),
            denied_by: None,
            grant: None,
            hold: None,
        }
    }

    /// The decision this reply says, durations in whole milliseconds.
    pub fn decision(&self) -> Decision {
        Decision {
            allowed: self.allowed,
            limit: self.limit,
            remaining: self.remaining,
            reset: Nanos::from_millis(self.reset_ms),
            retry_after: Nanos::from_millis(self.retry_after_ms),
            shadow_denied: self.shadow_denied,
            wait: Nanos::from_millis(self.wait_ms),
            blocked: self.blocked,
        }
    }

    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        encode_reply_body(&DecisionOut::from_reply(self), encoding)
    }

    /// The RateLimit headers for this reply; the same values
    /// [`decision_headers`](super::decision_headers) gives for the decision
    /// it was built from (rounding milliseconds up to seconds loses nothing).
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, String)> {
        RateLimitHeaders {
            limit: self.limit,
            remaining: self.remaining,
            reset_s: self.reset_ms.div_ceil(1000),
            retry_after_s: (!self.allowed).then(|| self.retry_after_ms.div_ceil(1000)),
            shadow_denied: self.shadow_denied,
        }
        .formatted()
    }
}

/// Encodes a decision reply body straight from a [`Decision`] (worker side;
/// no intermediate [`DecisionReply`]).
pub fn encode_decision(decision: &Decision, policy: &str, encoding: Encoding) -> Vec<u8> {
    encode_reply_body(&DecisionOut::new(decision, policy), encoding)
}

/// [`encode_decision`] of the answer to a repeat (SPEC §16): the first
/// answer's decision, with `"repeat": true`.
pub fn encode_repeat(decision: &Decision, policy: &str, encoding: Encoding) -> Vec<u8> {
    encode_reply_body(&DecisionOut::new(decision, policy).repeated(true), encoding)
}

/// [`encode_decision`] of a grouped ask (SPEC §17): its levels, outermost
/// first, and the policy of the level that denied; with `"repeat": true`
/// when it answers a repeat.
pub fn encode_grouped(
    decision: &Decision,
    policy: &str,
    (levels, denied_by): (&[LevelReply], Option<&str>),
    repeat: bool,
    encoding: Encoding,
) -> Vec<u8> {
    let out = DecisionOut::new(decision, policy)
        .repeated(repeat)
        .grouped(levels, denied_by);
    encode_reply_body(&out, encoding)
}

/// Encodes an error reply body; the same as [`ErrorReply::encode`].
pub fn encode_error(reply: &ErrorReply, encoding: Encoding) -> Vec<u8> {
    reply.encode(encoding)
}

/// Here rather than with [`ErrorReply`]: an error reply is encoded like a
/// decision, by the same writer, so `error.rs` needs nothing from this file.
impl ErrorReply {
    /// The body, in the request's encoding.
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        encode_reply_body(&ErrorOut::new(self), encoding)
    }
}
fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A decoded reply body (client side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Decision(DecisionReply),
    Error(ErrorReply),
}

impl Reply {
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        match self {
            Reply::Decision(d) => d.encode(encoding),
            Reply::Error(e) => e.encode(encoding),
        }
    }
}

impl Serialize for Reply {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Reply::Decision(d) => DecisionOut::from_reply(d).serialize(s),
            Reply::Error(e) => ErrorOut::new(e).serialize(s),
        }
    }
}

/// A reply body that is neither a decision nor an error reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed reply from sluice: {0}")]
pub struct MalformedReply(pub String);

/// Decodes a reply body: JSON if it starts with `{`, else MessagePack. A
/// body with an `error` field is an [`ErrorReply`]; otherwise all decision
/// fields must be present. Unknown fields are ignored.
pub fn decode_reply(body: &[u8]) -> Result<Reply, MalformedReply> {
    let raw: RawReply = match Encoding::of_body(body) {
        Encoding::Json => serde_json::from_slice(body).map_err(|e| MalformedReply(e.to_string())),
        Encoding::MsgPack => rmp_serde::from_slice(body).map_err(|e| MalformedReply(e.to_string())),
    }?;
    raw.into_reply()
}

// ---------------------------------------------------------------------------
// Reply bodies on the wire.

#[derive(Serialize)]
pub(super) struct DecisionOut<'a> {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_ms: u64,
    retry_after_ms: u64,
    policy: &'a str,
    #[serde(skip_serializing_if = "is_false")]
    shadow_denied: bool,
    #[serde(skip_serializing_if = "is_false")]
    repeat: bool,
    #[serde(skip_serializing_if = "is_zero")]
    wait_ms: u64,
    #[serde(skip_serializing_if = "is_false")]
    blocked: bool,
    #[serde(skip_serializing_if = "<[LevelReply]>::is_empty")]
    levels: &'a [LevelReply],
    #[serde(skip_serializing_if = "Option::is_none")]
    denied_by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slice: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slice_lease_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slice_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_ms: Option<u64>,
}

impl<'a> DecisionOut<'a> {
    pub(super) fn new(d: &Decision, policy: &'a str) -> DecisionOut<'a> {
        DecisionOut {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_ms: d.reset.as_millis_ceil(),
            retry_after_ms: d.retry_after.as_millis_ceil(),
            policy,
            shadow_denied: d.shadow_denied,
            repeat: false,
            wait_ms: d.wait.as_millis_ceil(),
            blocked: d.blocked,
            levels: &[],
            denied_by: None,
            slice: None,
            slice_lease_ns: None,
            slice_at: None,
            hold: None,
            expires_ms: None,
        }
    }

    /// The same, marked the answer to a repeat (SPEC §16) when `repeat`.
    pub(super) fn repeated(self, repeat: bool) -> DecisionOut<'a> {
        DecisionOut { repeat, ..self }
    }

    /// The same, with a grouped ask's levels and the level that denied.
    pub(super) fn grouped(
        self,
        levels: &'a [LevelReply],
        denied_by: Option<&'a str>,
    ) -> DecisionOut<'a> {
        DecisionOut {
            levels,
            denied_by,
            ..self
        }
    }

    /// The same, naming the hold a reserve kept or an extend moved.
    pub(super) fn with_hold(self, ticket: Option<&'a HoldTicket>) -> DecisionOut<'a> {
        DecisionOut {
            hold: ticket.map(|t| t.hold.as_str()),
            expires_ms: ticket.map(|t| t.expires_ms),
            ..self
        }
    }

    fn from_reply(r: &'a DecisionReply) -> DecisionOut<'a> {
        DecisionOut {
            allowed: r.allowed,
            limit: r.limit,
            remaining: r.remaining,
            reset_ms: r.reset_ms,
            retry_after_ms: r.retry_after_ms,
            policy: &r.policy,
            shadow_denied: r.shadow_denied,
            repeat: r.repeat,
            wait_ms: r.wait_ms,
            blocked: r.blocked,
            levels: &r.levels,
            denied_by: r.denied_by.as_deref(),
            slice: r.grant.map(|g| g.units),
            slice_lease_ns: r.grant.map(|g| g.lease.as_u64()),
            slice_at: r.grant.map(|g| g.taken_at.as_u64()),
            hold: None,
            expires_ms: None,
        }
        .with_hold(r.hold.as_ref())
    }
}

#[derive(Serialize)]
pub(super) struct ErrorOut<'a> {
    error: &'static str,
    message: &'a str,
}

impl<'a> ErrorOut<'a> {
    pub(super) fn new(e: &'a ErrorReply) -> ErrorOut<'a> {
        ErrorOut {
            error: e.code.word(),
            message: &e.message,
        }
    }
}

/// The longest MessagePack header of a string (marker and u32 length).
const MSGPACK_STR_HEADER: usize = 5;

/// A reply body: written by hand in MessagePack (replies are built for every
/// request; see [`msgpack::Writer`]), by serde in JSON.
pub(crate) trait ReplyBody: Serialize {
    /// At least the MessagePack length, so the buffer is allocated once.
    fn msgpack_len(&self) -> usize;
    /// The same bytes as `rmp_serde::to_vec_named`.
    fn write_msgpack(&self, w: &mut msgpack::Writer);
}

impl ReplyBody for DecisionOut<'_> {
    fn msgpack_len(&self) -> usize {
        // Map header; six names; a bool, four u64s of at most 9 bytes, a string.
        const FIXED: usize = 1
            + (1 + "allowed".len())
            + (1 + "limit".len())
            + (1 + "remaining".len())
            + (1 + "reset_ms".len())
            + (1 + "retry_after_ms".len())
            + (1 + "policy".len())
            + 1
            + 4 * 9
            + MSGPACK_STR_HEADER;
        const GRANT: usize =
            (1 + "slice".len()) + (1 + "slice_lease_ns".len()) + (1 + "slice_at".len()) + 3 * 9;
        const SHADOW: usize = 1 + "shadow_denied".len() + 1;
        const REPEAT: usize = 1 + "repeat".len() + 1;
        const WAIT: usize = 1 + "wait_ms".len() + 9;
        const BLOCKED: usize = 1 + "blocked".len() + 1;
        const HOLD: usize = (1 + "hold".len()) + MSGPACK_STR_HEADER + (1 + "expires_ms".len()) + 9;
        FIXED
            + self.policy.len()
            + if self.shadow_denied { SHADOW } else { 0 }
            + if self.repeat { REPEAT } else { 0 }
            + if self.wait_ms > 0 { WAIT } else { 0 }
            + if self.blocked { BLOCKED } else { 0 }
            + if self.slice.is_some() { GRANT } else { 0 }
            + self.hold.map_or(0, |h| HOLD + h.len())
            + levels::msgpack_len(self.levels, self.denied_by)
    }

    fn write_msgpack(&self, w: &mut msgpack::Writer) {
        let grant = self.slice.zip(self.slice_lease_ns).zip(self.slice_at);
        let hold = self.hold.zip(self.expires_ms);
        let fields = 6
            + usize::from(self.shadow_denied)
            + usize::from(self.repeat)
            + usize::from(self.wait_ms > 0)
            + usize::from(self.blocked)
            + if grant.is_some() { 3 } else { 0 }
            + if hold.is_some() { 2 } else { 0 }
            + levels::fields(self.levels, self.denied_by);
        w.map(fields as u32);
        w.str("allowed");
        w.bool(self.allowed);
        w.str("limit");
        w.uint(self.limit);
        w.str("remaining");
        w.uint(self.remaining);
        w.str("reset_ms");
        w.uint(self.reset_ms);
        w.str("retry_after_ms");
        w.uint(self.retry_after_ms);
        w.str("policy");
        w.str(self.policy);
        if self.shadow_denied {
            w.str("shadow_denied");
            w.bool(true);
        }
        if self.repeat {
            w.str("repeat");
            w.bool(true);
        }
        if self.wait_ms > 0 {
            w.str("wait_ms");
            w.uint(self.wait_ms);
        }
        if self.blocked {
            w.str("blocked");
            w.bool(true);
        }
        levels::write_msgpack(w, self.levels, self.denied_by);
        if let Some(((units, lease), at)) = grant {
            w.str("slice");
            w.uint(units);
            w.str("slice_lease_ns");
            w.uint(lease);
            w.str("slice_at");
            w.uint(at);
        }
        if let Some((hold, expires_ms)) = hold {
            w.str("hold");
            w.str(hold);
            w.str("expires_ms");
            w.uint(expires_ms);
        }
    }
}

impl ReplyBody for ErrorOut<'_> {
    fn msgpack_len(&self) -> usize {
        1 + (1 + "error".len())
            + (1 + "message".len())
            + 2 * MSGPACK_STR_HEADER
            + self.error.len()
            + self.message.len()
    }

    fn write_msgpack(&self, w: &mut msgpack::Writer) {
        w.map(2);
        w.str("error");
        w.str(self.error);
        w.str("message");
        w.str(self.message);
    }
}

impl ReplyBody for Reply {
    fn msgpack_len(&self) -> usize {
        match self {
            Reply::Decision(d) => DecisionOut::from_reply(d).msgpack_len(),
            Reply::Error(e) => ErrorOut::new(e).msgpack_len(),
        }
    }

    fn write_msgpack(&self, w: &mut msgpack::Writer) {
        match self {
            Reply::Decision(d) => DecisionOut::from_reply(d).write_msgpack(w),
            Reply::Error(e) => ErrorOut::new(e).write_msgpack(w),
        }
    }
}

/// A reply body in the request's encoding.
pub(crate) fn encode_reply_body<T: ReplyBody>(value: &T, encoding: Encoding) -> Vec<u8> {
    match encoding {
        Encoding::MsgPack => {
            let mut w = msgpack::Writer::with_capacity(value.msgpack_len());
            value.write_msgpack(&mut w);
            w.into_vec()
        }
        Encoding::Json => serde_json::to_vec(value).expect("a reply struct encodes"),
    }
}

/// Both kinds of reply, every field optional: decoded first, then sorted out.
#[derive(Deserialize)]
pub(crate) struct RawReply {
    allowed: Option<bool>,
    limit: Option<u64>,
    remaining: Option<u64>,
    reset_ms: Option<u64>,
    retry_after_ms: Option<u64>,
    policy: Option<String>,
    error: Option<String>,
    message: Option<String>,
    shadow_denied: Option<bool>,
    repeat: Option<bool>,
    wait_ms: Option<u64>,
    blocked: Option<bool>,
    levels: Option<Vec<LevelReply>>,
    denied_by: Option<String>,
    slice: Option<u64>,
    slice_lease_ns: Option<u64>,
    slice_at: Option<u64>,
    hold: Option<String>,
    expires_ms: Option<u64>,
}

impl RawReply {
    pub(crate) fn into_reply(self) -> Result<Reply, MalformedReply> {
        if let Some(word) = self.error {
            return error_reply(word, self.message).map(Reply::Error);
        }
        fn field<T>(v: Option<T>, name: &str) -> Result<T, MalformedReply> {
            v.ok_or_else(|| MalformedReply(format!("the decision has no {name:?} field")))
        }
        Ok(Reply::Decision(DecisionReply {
            allowed: field(self.allowed, "allowed")?,
            limit: field(self.limit, "limit")?,
            remaining: field(self.remaining, "remaining")?,
            reset_ms: field(self.reset_ms, "reset_ms")?,
            retry_after_ms: field(self.retry_after_ms, "retry_after_ms")?,
            policy: field(self.policy, "policy")?,
            shadow_denied: self.shadow_denied.unwrap_or(false),
            repeat: self.repeat.unwrap_or(false),
            wait_ms: self.wait_ms.unwrap_or(0),
            blocked: self.blocked.unwrap_or(false),
            levels: self.levels.unwrap_or_default(),
            denied_by: self.denied_by,
            grant: match (self.slice, self.slice_lease_ns, self.slice_at) {
                (Some(units), Some(lease), Some(at)) => Some(Grant {
                    units,
                    lease: Nanos(lease),
                    taken_at: Nanos(at),
                }),
                (None, None, None) => None,
                _ => {
                    return Err(MalformedReply(
                        "a slice needs \"slice\", \"slice_lease_ns\" and \"slice_at\"".into(),
                    ))
                }
            },
            hold: match (self.hold, self.expires_ms) {
                (Some(hold), Some(expires_ms)) => Some(HoldTicket { hold, expires_ms }),
                (None, None) => None,
                _ => {
                    return Err(MalformedReply(
                        "a hold needs both \"hold\" and \"expires_ms\"".into(),
                    ))
                }
            },
        }))
    }
}

pub(crate) fn error_reply(
    word: String,
    message: Option<String>,
) -> Result<ErrorReply, MalformedReply> {
    let code = ErrorCode::from_word(&word)
        .ok_or_else(|| MalformedReply(format!("unknown error code word {word:?}")))?;
    Ok(ErrorReply {
        code,
        message: message.unwrap_or_default(),
    })
}

/// A kept hold, as a reply names it (the fields `hold` and `expires_ms`
/// of a [`DecisionReply`](super::DecisionReply)).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldTicket {
    /// The hold's name, for settle and extend.
    pub hold: String,
    /// Milliseconds until it ends by itself (rounded down: never later
    /// than the owner's end).
    pub expires_ms: u64,
}

impl HoldTicket {
    /// Hold `id`, ending in `expires` from now.
    pub fn new(id: HoldId, expires: Nanos) -> HoldTicket {
        HoldTicket {
            hold: id.to_string(),
            expires_ms: expires.as_u64() / 1_000_000,
        }
    }
}
