//! Errors: what the worker (or the client itself) refused, typed by the
//! SPEC §1 codes, plus what can go wrong while connecting.
//!
//! A denial is not an error: it is an [`Answer`](crate::Answer) with
//! `allowed == false`. An [`Error`] means there is no decision: the request
//! can never pass as sent (400, 404, 413), or nobody could decide and the
//! fallback is `closed` (503).

use sluice_core::wire::{ErrorCode, ErrorReply};

/// A request that got no decision. The message is the worker's sentence when
/// the worker refused the request, or the client's own (same style) when the
/// client refused it before sending (a bad key, policy name or cost) or when
/// no worker answered and the fallback is `closed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// 400: a malformed key, policy name or cost, or a cost the policy can
    /// never allow.
    #[error("{0}")]
    BadRequest(String),
    /// 404: the policy is not configured.
    #[error("{0}")]
    UnknownPolicy(String),
    /// 413: the request is too large.
    #[error("{0}")]
    TooLarge(String),
    /// 503: no worker answered (and the fallback is `closed`), or the
    /// worker could not decide right now.
    #[error("{0}")]
    Unavailable(String),
    /// 404: no live hold of that name under the key and policy (settled,
    /// ended, or never reserved there).
    #[error("{0}")]
    UnknownHold(String),
    /// 409: the ask's id was first used by another ask (SPEC §16).
    #[error("{0}")]
    IdReused(String),
}

impl Error {
    /// The SPEC §1 code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::BadRequest(_) => ErrorCode::BadRequest,
            Error::UnknownPolicy(_) => ErrorCode::UnknownPolicy,
            Error::TooLarge(_) => ErrorCode::TooLarge,
            Error::Unavailable(_) => ErrorCode::Unavailable,
            Error::UnknownHold(_) => ErrorCode::UnknownHold,
            Error::IdReused(_) => ErrorCode::IdReused,
        }
    }

    /// 400, 404, 409, 413 or 503 (also the gateway's HTTP status).
    pub fn status(&self) -> u16 {
        self.code().status()
    }

    /// The human sentence.
    pub fn message(&self) -> &str {
        match self {
            Error::BadRequest(m)
            | Error::UnknownPolicy(m)
            | Error::TooLarge(m)
            | Error::Unavailable(m)
            | Error::UnknownHold(m)
            | Error::IdReused(m) => m,
        }
    }

    /// The wire form (`{error, message}` body and error headers).
    pub fn to_reply(&self) -> ErrorReply {
        ErrorReply::new(self.code(), self.message())
    }
}

impl From<ErrorReply> for Error {
    fn from(e: ErrorReply) -> Error {
        match e.code {
            ErrorCode::BadRequest => Error::BadRequest(e.message),
            ErrorCode::UnknownPolicy => Error::UnknownPolicy(e.message),
            ErrorCode::TooLarge => Error::TooLarge(e.message),
            ErrorCode::Unavailable => Error::Unavailable(e.message),
            ErrorCode::UnknownHold => Error::UnknownHold(e.message),
            ErrorCode::IdReused => Error::IdReused(e.message),
        }
    }
}

/// Why [`Client::connect`](crate::Client::connect) failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The NATS connection could not be made: the message says whether a
    /// credentials file was unreadable, the server refused the credentials,
    /// TLS failed or the server could not be reached.
    #[error(transparent)]
    Nats(#[from] crate::nats_auth::NatsConnectError),
    /// The options cannot work (e.g. 0 partitions, a zero timeout).
    #[error("invalid client options: {0}")]
    Options(String),
    /// The startup check found that the server maps keys with another
    /// partition count than [`ClientOptions::partitions`](crate::ClientOptions::partitions),
    /// or has no mapping at all. Batches would go to the wrong workers.
    #[error("{0}")]
    Partitions(String),
}
