//! Request and reply bodies and headers of `rl.allow.<key>` / `rl.hit.<key>`
//! (SPEC §1), for both ends: the worker decodes requests and encodes
//! replies, client libraries and the gateway encode requests and decode
//! replies. The byte-level format is written up in `docs/PROTOCOL.md`.
//!
//! Everything is used through the names re-exported here
//! (`sluice_core::wire::decode_request`, `wire::ErrorReply`, ...); the files
//! below are split by what they hold:
//!
//! - `wire/request.rs`: [`decode_request`], run on every request a worker
//!   answers, so strict and cheap. An empty body (the common case, `nats req
//!   rl.allow.alice ''`) is policy `default`, cost 1, and allocates nothing.
//!   A body whose first byte is `{` is JSON, anything else MessagePack; the
//!   reply uses the same [`Encoding`], error replies included, so it travels
//!   with the decoded [`Request`] and with the [`RequestError`]. Anything
//!   unexpected is refused, never guessed at: unknown fields, wrong types,
//!   negative or fractional costs, trailing bytes. A refused request changes
//!   no counter, so a typo (`"cots": 5`) must not silently become cost 1.
//!   (`nil`/`null` values count as "not given".)
//! - `wire/encoding.rs`: [`Encoding`], which every body below names.
//! - `wire/fields.rs`: the rules for `policy` and `cost`, shared by single
//!   requests and batch items, one sentence per mistake, and their bounds
//!   ([`MAX_COST`], [`is_valid_policy_name`]).
//! - `wire/reply.rs`: decision replies ([`DecisionReply`],
//!   [`encode_decision`]) and decoding any reply ([`decode_reply`], lenient
//!   about unknown fields because the contract grows only by adding).
//!   Replies are maps with named fields; durations in milliseconds rounded
//!   **up**, so "retry after" is never too early.
//! - `wire/error.rs`: errors are replies too ([`ErrorReply`]): a code word
//!   and one sentence in the body.
//! - `wire/headers.rs`: the same numbers and sentences as headers, as
//!   `(name, value)` pairs, so the worker (NATS headers) and the gateway
//!   (HTTP headers) share one function each: [`decision_headers`] /
//!   [`DecisionReply::headers`] and [`error_headers`].
//! - `wire/msgpack.rs`: MessagePack read from requests value by value (not
//!   through `rmp_serde`, so that every mistake gets its own sentence,
//!   strings are borrowed from the body and trailing bytes are noticed) and
//!   written into replies the same way (the same bytes rmp-serde writes,
//!   property-tested); the bytes themselves are `rmp`'s low-level reader and
//!   writer.
//! - [`batch`]: the batch format of the batching client.
//! - [`inspect`]: bodies of `rl.inspect.<key>` and `rl.reset.<key>` (SPEC §8).
//! - [`hold`]: bodies of `rl.reserve`, `rl.settle` and `rl.extend` (SPEC §13).
//! - [`usage`]: bodies of `rl.usage.<key>` and `rl.top` (SPEC §9).
//! - [`link`]: the link's own bodies between regions' owners (SPEC §12).

pub mod batch;
mod encoding;
mod error;
mod fields;
mod headers;
pub mod hold;
pub mod inspect;
mod levels;
pub mod link;
pub(crate) mod msgpack;
mod reply;
mod request;
pub mod usage;

pub use encoding::Encoding;
pub use error::{ErrorCode, ErrorReply};
pub use fields::{
    check_id, is_valid_policy_name, DEFAULT_COST, MAX_COST, MAX_ID_LEN, MAX_POLICY_NAME,
};
pub use headers::{
    decision_headers, error_headers, RateLimitHeaders, RATELIMIT_LIMIT, RATELIMIT_REMAINING,
    RATELIMIT_RESET, REPEAT_YES, RETRY_AFTER, SERVICE_ERROR, SERVICE_ERROR_CODE, SHADOW_DENIED,
    SLUICE_REPEAT, SLUICE_SHADOW, SLUICE_UNSTORED, UNSTORED_YES,
};
pub use levels::LevelReply;
pub use reply::{
    decode_reply, encode_decision, encode_error, encode_grouped, encode_repeat, DecisionReply,
    MalformedReply, Reply,
};
pub use request::{
    decode_request, encode_ask, encode_request, encode_request_with_id, Request, RequestError,
    MAX_BODY,
};
