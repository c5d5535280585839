//! Responses: decisions (200 / 429 with RateLimit headers) and errors
//! (`{error, message}` with the SPEC §1 status), always JSON.

use crate::metrics::Outcome;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_client::{Answer, Error};
use sluice_core::wire::{Encoding, ErrorCode, ErrorReply};

/// Says who decided: `worker`, `deny_cache`, `budget`, `fallback_open`, `fallback_local`.
pub const SOURCE_HEADER: &str = "Sluice-Source";

/// On an ask allowed for a later start (SPEC §18): its wait, whole ms
/// rounded up, as the body's `wait_ms`.
pub const WAIT_MS_HEADER: &str = "sluice-wait-ms";

const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// Puts the RateLimit headers of `answer` (and, when denied, Retry-After;
/// on a shadow denial, `Sluice-Shadow: denied`; on a repeat,
/// `Sluice-Repeat: true`; with a wait, `Sluice-Wait-Ms`) and the source
/// header into `headers`, replacing any of the same name.
pub(crate) fn put_decision_headers(headers: &mut HeaderMap, answer: &Answer) {
    for (name, value) in answer.headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(lower(name)), value);
        }
    }
    headers.insert(
        HeaderName::from_static("sluice-source"),
        HeaderValue::from_static(answer.source.as_str()),
    );
    if answer.repeat {
        headers.insert(
            HeaderName::from_static("sluice-repeat"),
            HeaderValue::from_static(sluice_core::wire::REPEAT_YES),
        );
    }
    let wait_ms = sluice_core::time::Nanos::from(answer.wait).as_millis_ceil();
    if wait_ms > 0 {
        headers.insert(HeaderName::from_static(WAIT_MS_HEADER), wait_ms.into());
    }
}

/// `HeaderName::from_static` wants lower case.
fn lower(name: &'static str) -> &'static str {
    match name {
        "RateLimit-Limit" => "ratelimit-limit",
        "RateLimit-Remaining" => "ratelimit-remaining",
        "RateLimit-Reset" => "ratelimit-reset",
        "Retry-After" => "retry-after",
        "Sluice-Shadow" => "sluice-shadow",
        _ => "x-sluice-unknown",
    }
}

/// 200 when allowed, 429 when denied; the decision as JSON.
pub(crate) fn decision(answer: &Answer) -> Response {
    let status = if answer.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = (status, answer.to_reply().encode(Encoding::Json)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, JSON);
    put_decision_headers(headers, answer);
    response
}

/// An error reply with its status.
pub(crate) fn error(e: &Error) -> Response {
    error_reply(&e.to_reply())
}

pub(crate) fn error_reply(reply: &ErrorReply) -> Response {
    let status = StatusCode::from_u16(reply.code.status()).unwrap_or(StatusCode::BAD_REQUEST);
    json_error(status, reply.code.into(), &reply.message)
}

/// The body of every error the gateway answers.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody<'a> {
    pub(crate) error: ErrorWord,
    /// One sentence: what was wrong and what to send instead.
    pub(crate) message: &'a str,
}

/// What went wrong, one word: a SPEC §1 code (`ErrorCode`) or one of
/// the gateway's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorWord {
    BadRequest,
    UnknownPolicy,
    UnknownHold,
    TooLarge,
    Unavailable,
    /// The ask's `Idempotency-Key` was first used by another ask (SPEC §16).
    IdReused,
    /// No such path, policy entry or override.
    NotFound,
    /// No API token, or a wrong one.
    Unauthorized,
    /// The read token, on a route that needs the full one.
    Forbidden,
    /// Proxy mode: the upstream did not answer.
    BadGateway,
}

impl From<ErrorCode> for ErrorWord {
    fn from(code: ErrorCode) -> ErrorWord {
        match code {
            ErrorCode::BadRequest => ErrorWord::BadRequest,
            ErrorCode::UnknownPolicy => ErrorWord::UnknownPolicy,
            ErrorCode::UnknownHold => ErrorWord::UnknownHold,
            ErrorCode::TooLarge => ErrorWord::TooLarge,
            ErrorCode::Unavailable => ErrorWord::Unavailable,
            ErrorCode::IdReused => ErrorWord::IdReused,
        }
    }
}

/// A JSON `{error, message}` body with any status (e.g. 404 `not_found`,
/// 502 `bad_gateway`, which are not sluice error codes).
pub(crate) fn json_error(status: StatusCode, word: ErrorWord, message: &str) -> Response {
    let body = ErrorBody {
        error: word,
        message,
    };
    json_status(status, &body)
}

/// Any reply body as JSON, 200.
pub(crate) fn json<T: serde::Serialize>(reply: &T) -> Response {
    json_status(StatusCode::OK, reply)
}

/// Any reply body as JSON, with `status`.
pub(crate) fn json_status<T: serde::Serialize>(status: StatusCode, reply: &T) -> Response {
    let body = serde_json::to_vec(reply).expect("a reply encodes as JSON");
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, JSON);
    response
}

/// JSON already encoded, 200.
pub(crate) fn json_text(text: &str) -> Response {
    let mut response = text.to_string().into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, JSON);
    response
}

/// A reply, or the error instead, as JSON.
pub(crate) fn json_or_error<T: serde::Serialize>(result: Result<T, Error>) -> Response {
    match result {
        Ok(reply) => json(&reply),
        Err(e) => error(&e),
    }
}

/// A hit's reply: always 200 (the units were counted whatever the
/// limit), with the decision a peek gives after it and its headers.
pub(crate) fn counted(answer: &Answer) -> Response {
    let mut response = decision(answer);
    *response.status_mut() = StatusCode::OK;
    response
}

pub(crate) fn outcome_of(result: &Result<Answer, Error>) -> Outcome {
    match result {
        Ok(a) if a.allowed => Outcome::Allowed,
        Ok(_) => Outcome::Denied,
        Err(e) => match e.code() {
            ErrorCode::BadRequest => Outcome::BadRequest,
            ErrorCode::UnknownPolicy => Outcome::UnknownPolicy,
            ErrorCode::TooLarge => Outcome::TooLarge,
            ErrorCode::Unavailable => Outcome::Unavailable,
            ErrorCode::UnknownHold => Outcome::UnknownHold,
            ErrorCode::IdReused => Outcome::IdReused,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The description lists the words as `ErrorWord` spells them: each
    /// SPEC §1 code's must be the same word.
    #[test]
    fn every_error_code_is_its_word() {
        for code in ErrorCode::ALL {
            let word = serde_json::to_value(ErrorWord::from(code)).unwrap();
            assert_eq!(word, code.word(), "{code:?}");
        }
    }
    use sluice_client::Source;
    use std::time::Duration;

    /// A shadow policy's answer to an ask enforcement would deny is a 200
    /// with `Sluice-Shadow: denied` and no Retry-After (SPEC §14).
    #[test]
    fn a_shadow_denial_is_200_with_the_shadow_header() {
        let answer = Answer {
            allowed: true,
            limit: 3,
            remaining: 0,
            reset: Duration::from_secs(30),
            retry_after: Duration::ZERO,
            policy: "p".into(),
            shadow_denied: true,
            repeat: false,
            wait: Duration::ZERO,
            levels: Vec::new(),
            denied_by: None,
            blocked: false,
            source: Source::Worker,
        };
        let response = decision(&answer);
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers();
        assert_eq!(headers.get("sluice-shadow").unwrap(), "denied");
        assert_eq!(headers.get("ratelimit-reset").unwrap(), "30");
        assert!(headers.get("retry-after").is_none());
        let plain = decision(&Answer {
            shadow_denied: false,
            repeat: false,
            ..answer
        });
        assert!(plain.headers().get("sluice-shadow").is_none());
        assert!(plain.headers().get(WAIT_MS_HEADER).is_none());
    }

    /// An ask allowed for a later start says so in a header and the body
    /// (SPEC §18), the header in whole ms rounded up as the body's field.
    #[test]
    fn a_waited_ask_carries_its_wait_in_a_header_and_the_body() {
        let answer = Answer {
            allowed: true,
            limit: 20,
            remaining: 0,
            reset: Duration::from_secs(1),
            retry_after: Duration::ZERO,
            policy: "paced".into(),
            shadow_denied: false,
            repeat: false,
            wait: Duration::from_micros(149_200),
            levels: Vec::new(),
            denied_by: None,
            blocked: false,
            source: Source::Worker,
        };
        let response = decision(&answer);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers().get(WAIT_MS_HEADER).unwrap(), "150");
        let body = answer.to_reply().encode(Encoding::Json);
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["wait_ms"], 150);
    }

    /// A grouped denial (SPEC §17): 429 with the denying level's numbers in
    /// the RateLimit headers, and `levels` and `denied_by` in the body.
    #[test]
    fn a_grouped_denial_carries_its_levels_and_the_level_that_denied() {
        let level = |policy: &str, remaining, reset_ms| sluice_core::wire::LevelReply {
            policy: policy.into(),
            remaining,
            reset_ms,
        };
        let answer = Answer {
            allowed: false,
            limit: 50,
            remaining: 0,
            reset: Duration::from_secs(60),
            retry_after: Duration::from_secs(2),
            policy: "user".into(),
            shadow_denied: false,
            repeat: false,
            wait: Duration::ZERO,
            levels: vec![level("org", 0, 60_000), level("user", 4, 30_000)],
            denied_by: Some("org".into()),
            blocked: false,
            source: Source::Worker,
        };
        let response = decision(&answer);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers().get("ratelimit-limit").unwrap(), "50");
        assert_eq!(response.headers().get("ratelimit-remaining").unwrap(), "0");
        let body = answer.to_reply().encode(Encoding::Json);
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["denied_by"], "org");
        assert_eq!(body["levels"][0]["policy"], "org");
        assert_eq!(body["levels"][1]["remaining"], 4);
    }
}
