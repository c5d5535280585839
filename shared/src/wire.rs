//! Request and reply bodies and headers of `rl.allow.<key>` / `rl.hit.<key>`
//! (CONTRACT §1), for both ends: the worker decodes requests and encodes
//! replies, client libraries and the gateway encode requests and decode
//! replies. The byte-level format is written up in `docs/PROTOCOL.md`.
//!
//! # Requests
//!
//! [`decode_request`] runs on every request a worker answers, so it is
//! strict and cheap:
//! - An empty body (the common case, `nats req rl.allow.alice ''`) is
//!   policy `default`, cost 1, and allocates nothing.
//! - A body whose first byte is `{` is JSON; anything else is MessagePack.
//!   The reply uses the same [`Encoding`], including error replies, so it
//!   travels with the decoded [`Request`] and with the [`RequestError`].
//! - MessagePack is read by a small hand-written reader (not `rmp_serde`) so
//!   that every mistake gets its own sentence, strings are borrowed from the
//!   body, and trailing bytes are noticed.
//! - Anything unexpected is refused, never guessed at: unknown fields, wrong
//!   types, negative or fractional costs, trailing bytes. A request that is
//!   refused changes no counter, so a typo (`"cots": 5`) must not silently
//!   become cost 1. (`nil`/`null` values count as "not given".)
//!
//! # Replies
//!
//! Decision replies are maps with named fields (never positional arrays), so
//! any MessagePack or JSON library can read them. Decoding replies
//! ([`decode_reply`]) is lenient about unknown fields, because the contract
//! grows only by adding. Durations are sent in milliseconds rounded **up**
//! and headers in seconds rounded up, so "retry after" is never too early.
//! A reply is built for every request, so MessagePack replies are written
//! by a small hand-written writer (beside the reader in `msgpack`) into a
//! buffer sized once, with the same bytes rmp-serde wrote (property-tested);
//! JSON replies go through serde_json.
//!
//! Errors are replies too ([`ErrorReply`]): a code word and a sentence in the
//! body, the numeric code and the sentence in headers ([`error_headers`]).
//!
//! Headers are returned as `(name, value)` pairs rather than a NATS or HTTP
//! type, so that the worker (NATS headers) and the gateway (HTTP headers)
//! share one function each: [`decision_headers`] / [`DecisionReply::headers`]
//! and [`error_headers`].
//!
//! The batch format used by the batching client is in [`batch`].

pub mod batch;
mod msgpack;

use crate::key::KeyError;
use crate::policy::Decision;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// The largest request body accepted; larger ones get a 413 reply.
pub const MAX_BODY: usize = 4096;
/// The largest cost one request may carry (a sanity bound; the worker also
/// refuses costs above the policy's capacity).
pub const MAX_COST: u64 = 1_000_000_000;
/// The policy of a request that names none.
pub const DEFAULT_POLICY: &str = "default";
/// The cost of a request that gives none.
pub const DEFAULT_COST: u64 = 1;
/// The longest policy name, in bytes.
pub const MAX_POLICY_NAME: usize = 64;

/// Header: the limit that decided (CONTRACT §1).
pub const RATELIMIT_LIMIT: &str = "RateLimit-Limit";
/// Header: what is left of that limit.
pub const RATELIMIT_REMAINING: &str = "RateLimit-Remaining";
/// Header: whole seconds, rounded up, until the limit is fully available.
pub const RATELIMIT_RESET: &str = "RateLimit-Reset";
/// Header, on denials only: whole seconds, rounded up, before retrying.
pub const RETRY_AFTER: &str = "Retry-After";
/// Header of error replies: the numeric code (400, 404, 413, 503).
pub const SERVICE_ERROR_CODE: &str = "Nats-Service-Error-Code";
/// Header of error replies: the human sentence.
pub const SERVICE_ERROR: &str = "Nats-Service-Error";

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

/// The kinds of error reply (CONTRACT §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 400 `bad_request`: a malformed body or key, or a cost that can never pass.
    BadRequest,
    /// 404 `unknown_policy`: the named policy is not configured.
    UnknownPolicy,
    /// 413 `too_large`: the body is over the size limit.
    TooLarge,
    /// 503 `unavailable`: no worker can answer for the key right now.
    Unavailable,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 4] = [
        ErrorCode::BadRequest,
        ErrorCode::UnknownPolicy,
        ErrorCode::TooLarge,
        ErrorCode::Unavailable,
    ];

    /// The numeric code, as in `Nats-Service-Error-Code` and HTTP statuses.
    pub const fn status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::UnknownPolicy => 404,
            ErrorCode::TooLarge => 413,
            ErrorCode::Unavailable => 503,
        }
    }

    /// The word in the body's `error` field.
    pub const fn word(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnknownPolicy => "unknown_policy",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Unavailable => "unavailable",
        }
    }

    pub fn from_word(word: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.word() == word)
    }

    pub fn from_status(status: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.status() == status)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// An error reply: `{error: <code word>, message: <sentence>}` plus headers.
/// Built by the worker, decoded by clients.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ErrorReply {
    pub code: ErrorCode,
    /// One sentence: what is wrong and what to do instead.
    pub message: String,
}

impl ErrorReply {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorReply {
        ErrorReply {
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ErrorReply {
        ErrorReply::new(ErrorCode::BadRequest, message)
    }

    pub fn unavailable(message: impl Into<String>) -> ErrorReply {
        ErrorReply::new(ErrorCode::Unavailable, message)
    }

    /// 404 for a policy name that is valid but not configured.
    pub fn unknown_policy(policy: &str) -> ErrorReply {
        ErrorReply::new(
            ErrorCode::UnknownPolicy,
            format!(
                "no policy named {} is configured; name a configured policy, or leave \"policy\" out to use {DEFAULT_POLICY:?}",
                quoted(policy)
            ),
        )
    }

    /// 400 for a cost the policy can never allow, however long one waits
    /// ("can never pass" is an error; "not now" is a denial).
    pub fn cost_above_capacity(cost: u64, policy: &str, capacity: u64) -> ErrorReply {
        ErrorReply::bad_request(format!(
            "cost {cost} can never be allowed by policy {}, which allows at most {capacity} at once; split the work into smaller requests",
            quoted(policy)
        ))
    }

    /// The body, in the request's encoding.
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        encode_reply_body(&ErrorOut::new(self), encoding)
    }
}

impl From<KeyError> for ErrorReply {
    fn from(e: KeyError) -> ErrorReply {
        ErrorReply::bad_request(e.to_string())
    }
}

/// A decoded request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// A valid policy name (not yet checked against the config).
    pub policy: Cow<'a, str>,
    /// At most [`MAX_COST`]; 0 means "look, don't consume".
    pub cost: u64,
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
            encoding,
        });
    }
    let refuse = |reply| RequestError { encoding, reply };
    if body.len() > MAX_BODY {
        return Err(refuse(ErrorReply::new(
            ErrorCode::TooLarge,
            format!(
                "the request body is {} bytes; the limit is {MAX_BODY} bytes (a request carries at most a policy name and a cost)",
                body.len()
            ),
        )));
    }
    let fields = match encoding {
        Encoding::Json => json_fields(body),
        Encoding::MsgPack => msgpack_fields(body),
    };
    let (policy, cost) = fields
        .and_then(Fields::finish)
        .map_err(|m| refuse(ErrorReply::bad_request(m)))?;
    Ok(Request {
        policy,
        cost,
        encoding,
    })
}

/// Encodes a request body (client side). Fields left `None` are left out,
/// so `encode_request(None, None, Encoding::MsgPack)` is the empty body.
/// Nothing is validated here; a worker refuses what is invalid.
pub fn encode_request(policy: Option<&str>, cost: Option<u64>, encoding: Encoding) -> Vec<u8> {
    if policy.is_none() && cost.is_none() && encoding == Encoding::MsgPack {
        return Vec::new();
    }
    #[derive(Serialize)]
    struct RequestOut<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost: Option<u64>,
    }
    encode_body(&RequestOut { policy, cost }, encoding)
}

/// 1 to [`MAX_POLICY_NAME`] characters of `[A-Za-z0-9_-]`. Policies whose
/// names fail this cannot be asked for.
pub fn is_valid_policy_name(name: &str) -> bool {
    (1..=MAX_POLICY_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A decision reply body (CONTRACT §1 field names and meanings).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionReply {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub reset_ms: u64,
    pub retry_after_ms: u64,
    pub policy: String,
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
        }
    }

    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        encode_reply_body(&DecisionOut::from_reply(self), encoding)
    }

    /// The RateLimit headers for this reply; the same values
    /// [`decision_headers`] gives for the decision it was built from
    /// (rounding milliseconds up to seconds loses nothing).
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, String)> {
        RateLimitHeaders {
            limit: self.limit,
            remaining: self.remaining,
            reset_s: self.reset_ms.div_ceil(1000),
            retry_after_s: (!self.allowed).then(|| self.retry_after_ms.div_ceil(1000)),
        }
        .formatted()
    }
}

/// Encodes a decision reply body straight from a [`Decision`] (worker side;
/// no intermediate [`DecisionReply`]).
pub fn encode_decision(decision: &Decision, policy: &str, encoding: Encoding) -> Vec<u8> {
    encode_reply_body(&DecisionOut::new(decision, policy), encoding)
}

/// Encodes an error reply body; the same as [`ErrorReply::encode`].
pub fn encode_error(reply: &ErrorReply, encoding: Encoding) -> Vec<u8> {
    reply.encode(encoding)
}

/// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` and, on a
/// denial, `Retry-After`; durations in whole seconds rounded up. For NATS
/// replies and HTTP responses alike.
pub fn decision_headers(decision: &Decision) -> impl Iterator<Item = (&'static str, String)> {
    RateLimitHeaders::of(decision).formatted()
}

/// The numbers behind [`decision_headers`], for a caller that formats them
/// into its own header type without a `String` each (the worker, per reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// [`RATELIMIT_LIMIT`].
    pub limit: u64,
    /// [`RATELIMIT_REMAINING`].
    pub remaining: u64,
    /// [`RATELIMIT_RESET`], whole seconds rounded up.
    pub reset_s: u64,
    /// [`RETRY_AFTER`], whole seconds rounded up; on denials only.
    pub retry_after_s: Option<u64>,
}

impl RateLimitHeaders {
    pub fn of(decision: &Decision) -> RateLimitHeaders {
        RateLimitHeaders {
            limit: decision.limit,
            remaining: decision.remaining,
            reset_s: decision.reset.as_secs_ceil(),
            retry_after_s: (!decision.allowed).then(|| decision.retry_after.as_secs_ceil()),
        }
    }

    /// `(name, value)` pairs, in the order of [`decision_headers`].
    pub fn pairs(self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            Some((RATELIMIT_LIMIT, self.limit)),
            Some((RATELIMIT_REMAINING, self.remaining)),
            Some((RATELIMIT_RESET, self.reset_s)),
            self.retry_after_s.map(|s| (RETRY_AFTER, s)),
        ]
        .into_iter()
        .flatten()
    }

    fn formatted(self) -> impl Iterator<Item = (&'static str, String)> {
        self.pairs().map(|(name, value)| (name, value.to_string()))
    }
}

/// `Nats-Service-Error-Code` and `Nats-Service-Error`. The sentence is
/// made header-safe: anything but printable ASCII is escaped (`\u{e9}`),
/// so no message can break the header block.
pub fn error_headers(reply: &ErrorReply) -> [(&'static str, String); 2] {
    let mut sentence = String::with_capacity(reply.message.len());
    for c in reply.message.chars() {
        if c == ' ' || c.is_ascii_graphic() {
            sentence.push(c);
        } else {
            sentence.extend(c.escape_default());
        }
    }
    [
        (SERVICE_ERROR_CODE, reply.code.status().to_string()),
        (SERVICE_ERROR, sentence),
    ]
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
struct DecisionOut<'a> {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_ms: u64,
    retry_after_ms: u64,
    policy: &'a str,
}

impl<'a> DecisionOut<'a> {
    fn new(d: &Decision, policy: &'a str) -> DecisionOut<'a> {
        DecisionOut {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_ms: d.reset.as_millis_ceil(),
            retry_after_ms: d.retry_after.as_millis_ceil(),
            policy,
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
        }
    }
}

#[derive(Serialize)]
struct ErrorOut<'a> {
    error: &'static str,
    message: &'a str,
}

impl<'a> ErrorOut<'a> {
    fn new(e: &'a ErrorReply) -> ErrorOut<'a> {
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
    fn write_msgpack(&self, w: &mut msgpack::Writer<'_>);
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
        FIXED + self.policy.len()
    }

    fn write_msgpack(&self, w: &mut msgpack::Writer<'_>) {
        w.map(6);
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

    fn write_msgpack(&self, w: &mut msgpack::Writer<'_>) {
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

    fn write_msgpack(&self, w: &mut msgpack::Writer<'_>) {
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
            let mut buf = Vec::with_capacity(value.msgpack_len());
            value.write_msgpack(&mut msgpack::Writer::new(&mut buf));
            buf
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

/// Maps with named fields in MessagePack; compact JSON. For requests (client
/// side); replies go through [`encode_reply_body`].
pub(crate) fn encode_body<T: Serialize>(value: &T, encoding: Encoding) -> Vec<u8> {
    match encoding {
        // Both only fail for maps with non-string keys or failing writers;
        // these are plain structs written to a Vec.
        Encoding::MsgPack => rmp_serde::to_vec_named(value).expect("a reply struct encodes"),
        Encoding::Json => serde_json::to_vec(value).expect("a reply struct encodes"),
    }
}

// ---------------------------------------------------------------------------
// Request fields, shared by the JSON and MessagePack paths and by batch items.

/// What a single request may contain, for "unknown field" messages.
const REQUEST_FIELDS: &str =
    "a request has only the optional fields \"policy\" (a string) and \"cost\" (an unsigned integer)";

/// A field value, whichever encoding it came in.
pub(crate) enum Scalar<'a> {
    Nil,
    Uint(u64),
    NegInt(i64),
    Float(f64),
    Str(Cow<'a, str>),
    /// Anything else, by type name ("a boolean", "an array", ...).
    Other(&'static str),
}

impl<'a> From<msgpack::Value<'a>> for Scalar<'a> {
    fn from(v: msgpack::Value<'a>) -> Scalar<'a> {
        match v {
            msgpack::Value::Nil => Scalar::Nil,
            msgpack::Value::Uint(u) => Scalar::Uint(u),
            msgpack::Value::Int(i) => Scalar::NegInt(i),
            msgpack::Value::Float(f) => Scalar::Float(f),
            msgpack::Value::Str(s) => Scalar::Str(Cow::Borrowed(s)),
            other => Scalar::Other(other.type_name()),
        }
    }
}

/// `policy` and `cost` as read, before the checks that need both or none.
#[derive(Default)]
pub(crate) struct Fields<'a> {
    policy: Option<Cow<'a, str>>,
    cost: Option<u64>,
    seen_policy: bool,
    seen_cost: bool,
}

impl<'a> Fields<'a> {
    /// Takes one field; `known` describes the allowed fields for the
    /// "unknown field" message.
    pub(crate) fn set(&mut self, name: &str, value: Scalar<'a>, known: &str) -> Result<(), String> {
        match name {
            "policy" => {
                if std::mem::replace(&mut self.seen_policy, true) {
                    return Err(duplicate("policy"));
                }
                match value {
                    Scalar::Str(s) => self.policy = Some(s),
                    Scalar::Nil => {}
                    other => {
                        return Err(format!(
                            "\"policy\" must be a string naming a configured policy, not {}",
                            other.type_name()
                        ))
                    }
                }
            }
            "cost" => {
                if std::mem::replace(&mut self.seen_cost, true) {
                    return Err(duplicate("cost"));
                }
                match value {
                    Scalar::Uint(c) => self.cost = Some(c),
                    Scalar::Nil => {}
                    Scalar::NegInt(c) => {
                        return Err(format!(
                            "\"cost\" must not be negative (got {c}); send 0 to look without consuming"
                        ))
                    }
                    Scalar::Float(c) => {
                        return Err(format!(
                            "\"cost\" must be an unsigned integer, not the floating-point number {c:?}"
                        ))
                    }
                    other => {
                        return Err(format!(
                            "\"cost\" must be an unsigned integer (0 to look without consuming), not {}",
                            other.type_name()
                        ))
                    }
                }
            }
            _ => return Err(format!("unknown field {}; {known}", quoted(name))),
        }
        Ok(())
    }

    /// Defaults, a valid policy name, a sane cost.
    pub(crate) fn finish(self) -> Result<(Cow<'a, str>, u64), String> {
        let policy = self.policy.unwrap_or(Cow::Borrowed(DEFAULT_POLICY));
        if !is_valid_policy_name(&policy) {
            return Err(format!(
                "the policy name {} is not valid; policy names are 1 to {MAX_POLICY_NAME} characters of A-Z, a-z, 0-9, '_' and '-'",
                quoted(&policy)
            ));
        }
        let cost = self.cost.unwrap_or(DEFAULT_COST);
        if cost > MAX_COST {
            return Err(format!(
                "cost {cost} is absurd; no request may cost more than {MAX_COST}"
            ));
        }
        Ok((policy, cost))
    }
}

impl Scalar<'_> {
    fn type_name(&self) -> &'static str {
        match self {
            Scalar::Nil => "nil",
            Scalar::Uint(_) => "an unsigned integer",
            Scalar::NegInt(_) => "a negative integer",
            Scalar::Float(_) => "a floating-point number",
            Scalar::Str(_) => "a string",
            Scalar::Other(t) => t,
        }
    }
}

fn duplicate(name: &str) -> String {
    format!("the field {name:?} appears twice; send it once")
}

/// `s` in quotes with escapes, cut to 64 characters (names in messages come
/// from the request and may be anything).
pub(crate) fn quoted(s: &str) -> String {
    const SHOWN: usize = 64;
    match s.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{:?}...", &s[..cut]),
        None => format!("{s:?}"),
    }
}

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

/// Reads one `name: value` entry of a map into `fields`.
pub(crate) fn read_msgpack_field<'a>(
    r: &mut msgpack::Reader<'a>,
    fields: &mut Fields<'a>,
    known: &str,
) -> Result<(), String> {
    let name = read_msgpack_name(r, known)?;
    let value = r.next().map_err(|e| e.sentence().to_string())?;
    fields.set(name, Scalar::from(value), known)
}

/// Reads a map key, which must be a string.
pub(crate) fn read_msgpack_name<'a>(
    r: &mut msgpack::Reader<'a>,
    known: &str,
) -> Result<&'a str, String> {
    match r.next() {
        Ok(msgpack::Value::Str(s)) => Ok(s),
        Ok(other) => Err(format!(
            "map keys must be strings naming fields, not {}; {known}",
            other.type_name()
        )),
        Err(e) => Err(e.sentence().to_string()),
    }
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

/// A JSON string, borrowed when it has no escapes.
struct JsonStr<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for JsonStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonStr<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JsonStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any JSON value, as a [`Scalar`]; arrays and objects are skipped over.
struct JsonScalar<'a>(Scalar<'a>);

impl<'de> Deserialize<'de> for JsonScalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonScalar<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Nil)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Other("a boolean"))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Uint(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
                Ok(match u64::try_from(v) {
                    Ok(u) => Scalar::Uint(u),
                    Err(_) => Scalar::NegInt(v),
                })
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(s)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an array"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an object"))
            }
        }
        d.deserialize_any(V).map(JsonScalar)
    }
}
