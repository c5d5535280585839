//! `GET` / `POST /v1/allow/{key}?policy=P&cost=N` (SPEC §6).
//!
//! - The key is the path segment, percent-decoded to bytes here (not by
//!   axum, which would refuse keys that are not UTF-8); the client
//!   re-encodes it canonically for NATS.
//! - `policy` and `cost` come from the query, or from a body in the NATS
//!   request format (a JSON object or a MessagePack map, at most 4 KiB),
//!   not both. Unknown query parameters are refused, like unknown body
//!   fields: a typo such as `?cots=5` must not silently mean cost 1.

use crate::metrics::Route;
use crate::respond;
use crate::App;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use sluice_client::{Answer, Error};
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::wire::{self, ErrorReply, DEFAULT_COST, MAX_BODY};
use std::sync::Arc;
use std::time::Instant;

pub(crate) const PREFIX: &str = "/v1/allow/";

pub(crate) async fn allow(State(app): State<Arc<App>>, request: Request) -> Response {
    let started = Instant::now();
    let result = decide(&app, request).await;
    app.metrics.observe(
        Route::Allow,
        respond::outcome_of(&result),
        started.elapsed(),
    );
    match result {
        Ok(answer) => respond::decision(&answer),
        Err(e) => respond::error(&e),
    }
}

/// `/v1/allow/` with no key.
pub(crate) async fn empty_key(State(app): State<Arc<App>>) -> Response {
    no_key(&app, Route::Allow)
}

/// The 400 for a path that names no key (`/v1/allow/`, `/v1/reserve/`, ...).
pub(crate) fn no_key(app: &App, route: Route) -> Response {
    let e = Error::from(ErrorReply::from(sluice_core::key::KeyError::Empty));
    app.metrics.observe(
        route,
        respond::outcome_of(&Err(e.clone())),
        Default::default(),
    );
    respond::error(&e)
}

async fn decide(app: &App, request: Request) -> Result<Answer, Error> {
    let (parts, body) = request.into_parts();
    let segment = parts.uri.path().strip_prefix(PREFIX).unwrap_or_default();
    let key = percent_decode(segment.as_bytes());
    let query = Query::parse(parts.uri.query())?;
    let body = read_body(&parts.headers, body).await?;
    let (policy, cost) = if body.is_empty() {
        (
            query.policy.unwrap_or_else(|| DEFAULT_POLICY.to_string()),
            query.cost.unwrap_or(DEFAULT_COST),
        )
    } else {
        if query.policy.is_some() || query.cost.is_some() {
            return Err(Error::BadRequest(
                "give policy and cost either in the query or in the body, not both".into(),
            ));
        }
        let r = wire::decode_request(&body).map_err(|e| Error::from(e.reply))?;
        (r.policy.into_owned(), r.cost)
    };
    app.client.ask(&key, &policy, cost).await
}

/// The query parameters of an allow.
#[derive(Debug, Default, PartialEq)]
struct Query {
    policy: Option<String>,
    cost: Option<u64>,
}

impl Query {
    fn parse(query: Option<&str>) -> Result<Query, Error> {
        let mut q = Query::default();
        let bad = |m: String| Err(Error::BadRequest(m));
        for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*name {
                "policy" => {
                    if q.policy.replace(value.into_owned()).is_some() {
                        return bad("the query parameter \"policy\" appears twice; give it once".into());
                    }
                }
                "cost" => {
                    let Ok(cost) = value.parse::<u64>() else {
                        return bad(format!(
                            "the query parameter \"cost\" must be an unsigned integer (0 to look without consuming), not {value:?}"
                        ));
                    };
                    if q.cost.replace(cost).is_some() {
                        return bad("the query parameter \"cost\" appears twice; give it once".into());
                    }
                }
                other => {
                    return bad(format!(
                        "unknown query parameter {other:?}; /v1/allow/{{key}} takes only \"policy\" and \"cost\""
                    ))
                }
            }
        }
        Ok(q)
    }
}

/// The body, refused with 413 past [`MAX_BODY`] (before reading it when the
/// Content-Length says so).
pub(crate) async fn read_body(headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, Error> {
    let too_large = |len: Option<u64>| {
        let size = len.map_or_else(
            || "more than 4096 bytes".to_string(),
            |n| format!("{n} bytes"),
        );
        Error::TooLarge(format!(
            "the request body is {size}; the limit is {MAX_BODY} bytes (a request carries at most a policy name and a cost)"
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large(declared));
    }
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| too_large(None))
}

/// URL percent-decoding to bytes; a `%` not followed by two hex digits is
/// kept as it is (as browsers and axum do).
pub(crate) fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            if let (Some(hi), Some(lo)) = (
                s.get(i + 1).copied().and_then(hex),
                s.get(i + 2).copied().and_then(hex),
            ) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_decode_to_the_raw_key_bytes() {
        assert_eq!(percent_decode(b"bob%40x.io"), b"bob@x.io");
        assert_eq!(
            percent_decode(b"bob%40x%2eio"),
            b"bob@x.io",
            "lower-case hex is legal in URLs"
        );
        assert_eq!(percent_decode(b"%FF%fe"), [0xff, 0xfe]);
        assert_eq!(percent_decode(b"100%"), b"100%");
        assert_eq!(percent_decode(b"%zz%4"), b"%zz%4");
    }

    #[test]
    fn the_query_takes_policy_and_cost_and_nothing_else() {
        assert_eq!(Query::parse(None).unwrap(), Query::default());
        assert_eq!(
            Query::parse(Some("policy=login&cost=3")).unwrap(),
            Query {
                policy: Some("login".into()),
                cost: Some(3)
            }
        );
        for bad in [
            "cost=abc",
            "cost=-1",
            "cost=1.5",
            "cost=",
            "cots=5",
            "cost=1&cost=2",
        ] {
            let e = Query::parse(Some(bad)).unwrap_err();
            assert_eq!(e.status(), 400, "{bad}: {e}");
        }
    }
}
