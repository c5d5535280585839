//! The headers of replies (SPEC §1): RateLimit headers on decisions,
//! the NATS service error headers on errors.
//!
//! They are returned as `(name, value)` pairs rather than a NATS or HTTP
//! type, so that the worker (NATS headers) and the gateway (HTTP headers)
//! share one function each. Seconds are rounded up, so "retry after" is
//! never too early.

use super::error::ErrorReply;
use crate::policy::Decision;

/// Header: the limit that decided (SPEC §1).
pub const RATELIMIT_LIMIT: &str = "RateLimit-Limit";
/// Header: what is left of that limit.
pub const RATELIMIT_REMAINING: &str = "RateLimit-Remaining";
/// Header: whole seconds, rounded up, until the limit is fully available.
pub const RATELIMIT_RESET: &str = "RateLimit-Reset";
/// Header, on denials only: whole seconds, rounded up, before retrying.
pub const RETRY_AFTER: &str = "Retry-After";
/// Header on a shadow policy's answer to an ask enforcement would deny
/// (SPEC §14), with the value [`SHADOW_DENIED`].
pub const SLUICE_SHADOW: &str = "Sluice-Shadow";
/// The value of [`SLUICE_SHADOW`].
pub const SHADOW_DENIED: &str = "denied";
/// Header of error replies: the numeric code (400, 404, 413, 503).
pub const SERVICE_ERROR_CODE: &str = "Nats-Service-Error-Code";
/// Header of error replies: the human sentence.
pub const SERVICE_ERROR: &str = "Nats-Service-Error";
/// Header of a 503 sent because the journal did not store what the
/// request did (`journal_failure = "unavailable"`), with the value
/// [`UNSTORED_YES`]: unlike other 503s, the owner *did* it in memory, so a
/// client must not send it again as if nothing had happened (a second
/// reserve would keep a second hold).
pub const SLUICE_UNSTORED: &str = "Sluice-Unstored";
/// On the answer to a repeat (SPEC §16): the first answer's decision,
/// nothing counted; the value is [`REPEAT_YES`].
pub const SLUICE_REPEAT: &str = "Sluice-Repeat";
/// The value of [`SLUICE_REPEAT`].
pub const REPEAT_YES: &str = "true";
/// The value of [`SLUICE_UNSTORED`].
pub const UNSTORED_YES: &str = "1";

/// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`, on a
/// denial `Retry-After`, and on a shadow denial `Sluice-Shadow: denied`;
/// durations in whole seconds rounded up. For NATS replies and HTTP
/// responses alike.
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
    /// [`SLUICE_SHADOW`]: [`SHADOW_DENIED`].
    pub shadow_denied: bool,
}

impl RateLimitHeaders {
    pub fn of(decision: &Decision) -> RateLimitHeaders {
        RateLimitHeaders {
            limit: decision.limit,
            remaining: decision.remaining,
            reset_s: decision.reset.as_secs_ceil(),
            retry_after_s: (!decision.allowed).then(|| decision.retry_after.as_secs_ceil()),
            shadow_denied: decision.shadow_denied,
        }
    }

    /// `(`[`SLUICE_SHADOW`]`, `[`SHADOW_DENIED`]`)` on a shadow denial.
    pub fn shadow(self) -> Option<(&'static str, &'static str)> {
        self.shadow_denied.then_some((SLUICE_SHADOW, SHADOW_DENIED))
    }

    /// The numeric `(name, value)` pairs, in the order of
    /// [`decision_headers`] ([`RateLimitHeaders::shadow`] follows them).
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

    pub(super) fn formatted(self) -> impl Iterator<Item = (&'static str, String)> {
        let shadow = self.shadow().map(|(name, value)| (name, value.to_string()));
        self.pairs()
            .map(|(name, value)| (name, value.to_string()))
            .chain(shadow)
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
