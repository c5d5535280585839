//! `POST /v1/reserve/{key}`, `/v1/settle/{key}`, `/v1/extend/{key}`
//! (SPEC §13, docs/HOLDS.md): the holds' verbs over HTTP, with the
//! NATS bodies' JSON fields (`{policy, cost, ttl_ms}`, `{policy, hold,
//! cost}`, `{policy, hold, ttl_ms}`), checked by the one decoder the
//! workers use ([`decode_hold_request`]).
//!
//! The reply is the NATS reply ([`encode_held`]): the decision, plus
//! `hold` and `expires_ms` for a kept hold, with the RateLimit headers. A
//! reserve is 200 when allowed and 429 when denied, as `/v1/allow`; a
//! settle or an extend that was done is 200 (its decision is a peek's:
//! `allowed` says whether one more unit would be now). No fallback: with
//! no worker answering, 503.

use crate::allow::{percent_decode, read_body};
use crate::metrics::{Outcome, Route};
use crate::respond;
use crate::App;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_client::{Answer, Error, Held};
use sluice_core::subject::Verb;
use sluice_core::wire::hold::decode_hold_request;
use sluice_core::wire::Encoding;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `POST /v1/reserve/{key}`.
pub(crate) async fn reserve(State(app): State<Arc<App>>, request: Request) -> Response {
    serve(&app, Verb::Reserve, request).await
}

/// `POST /v1/settle/{key}`.
pub(crate) async fn settle(State(app): State<Arc<App>>, request: Request) -> Response {
    serve(&app, Verb::Settle, request).await
}

/// `POST /v1/extend/{key}`.
pub(crate) async fn extend(State(app): State<Arc<App>>, request: Request) -> Response {
    serve(&app, Verb::Extend, request).await
}

/// `/v1/reserve/`, `/v1/settle/` or `/v1/extend/` with no key.
pub(crate) async fn empty_key(State(app): State<Arc<App>>) -> Response {
    crate::allow::no_key(&app, Route::Hold)
}

async fn serve(app: &App, verb: Verb, request: Request) -> Response {
    let started = Instant::now();
    let result = hold(app, verb, request).await;
    let outcome = match &result {
        Ok(_) if verb != Verb::Reserve => Outcome::Allowed,
        _ => respond::outcome_of(&result.clone().map(|held| held.answer)),
    };
    app.metrics.observe(Route::Hold, outcome, started.elapsed());
    match result {
        Ok(held) => reply(verb, &held),
        Err(e) => respond::error(&e),
    }
}

async fn hold(app: &App, verb: Verb, request: Request) -> Result<Held, Error> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let segment = path.rsplit_once('/').map_or("", |(_, key)| key);
    let key = percent_decode(segment.as_bytes());
    if parts.uri.query().is_some() {
        return Err(Error::BadRequest(format!(
            "{path} takes its fields in a JSON body, not in the query (docs/HOLDS.md)"
        )));
    }
    let body = read_body(&parts.headers, body).await?;
    let r = decode_hold_request(verb, &body).map_err(|e| Error::from(e.reply))?;
    let ttl = r.ttl_ms.map(Duration::from_millis);
    let hold = r.hold.map(|id| id.to_string()).unwrap_or_default();
    let client = &app.client;
    match verb {
        Verb::Reserve => client.reserve(&key, &r.policy, r.cost, ttl).await,
        Verb::Settle => {
            let answer = client.settle(&key, &r.policy, &hold, r.cost).await?;
            Ok(Held {
                answer,
                ticket: None,
            })
        }
        _ => client.extend(&key, &r.policy, &hold, ttl).await,
    }
}

/// The decision as JSON (with the hold, if any) and its headers.
fn reply(verb: Verb, held: &Held) -> Response {
    let answer: &Answer = &held.answer;
    let status = if answer.allowed || verb != Verb::Reserve {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let body = held.encode(Encoding::Json);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    respond::put_decision_headers(headers, answer);
    response
}
