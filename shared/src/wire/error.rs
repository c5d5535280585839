//! Error replies (SPEC §1): a code and one sentence saying what is wrong
//! and what to do instead.
//!
//! Errors are replies, not transport failures: the worker answers every
//! refused request with an [`ErrorReply`], encoded like a decision (in the
//! request's encoding, see [`super::reply`]) and with the code and sentence
//! in headers too ([`super::headers::error_headers`]), so a client that
//! reads only headers still learns what went wrong. "Denied, retry later"
//! is not an error; it is a decision.

use crate::key::KeyError;
use crate::policy::DEFAULT_POLICY;
use std::fmt;

/// The kinds of error reply (SPEC §1).
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
    /// 404 `unknown_hold`: no live hold of that name under the key and
    /// policy (unknown, settled, or ended; SPEC §13).
    UnknownHold,
    /// 409 `id_reused`: the ask's `id` was first used by another ask
    /// (another verb, policy or cost; SPEC §16).
    IdReused,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 6] = [
        ErrorCode::BadRequest,
        ErrorCode::UnknownPolicy,
        ErrorCode::TooLarge,
        ErrorCode::Unavailable,
        ErrorCode::UnknownHold,
        ErrorCode::IdReused,
    ];

    /// The numeric code, as in `Nats-Service-Error-Code` and HTTP statuses.
    pub const fn status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::UnknownPolicy => 404,
            ErrorCode::TooLarge => 413,
            ErrorCode::Unavailable => 503,
            ErrorCode::UnknownHold => 404,
            ErrorCode::IdReused => 409,
        }
    }

    /// The word in the body's `error` field.
    pub const fn word(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnknownPolicy => "unknown_policy",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::UnknownHold => "unknown_hold",
            ErrorCode::IdReused => "id_reused",
        }
    }

    pub fn from_word(word: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.word() == word)
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

    /// 404 for a hold that the key has not (SPEC §13).
    pub fn unknown_hold(hold: &str, policy: &str) -> ErrorReply {
        ErrorReply::new(
            ErrorCode::UnknownHold,
            format!(
                "no live hold {} under this key and policy {}: it was settled, ended at its ttl, \
                 reset, or never reserved here (a hold is settled or extended with the key and \
                 policy it was reserved with); nothing was changed",
                quoted(hold),
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
}

impl From<KeyError> for ErrorReply {
    fn from(e: KeyError) -> ErrorReply {
        ErrorReply::bad_request(e.to_string())
    }
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
