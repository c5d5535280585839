//! `POST /v1/reserve/{key}`, `/v1/settle/{key}`, `/v1/extend/{key}`
//! (SPEC §13, docs/HOLDS.md): the holds' verbs over HTTP, with the
//! NATS bodies' JSON fields (`{policy, cost, ttl_ms, wait_ms}`, `{policy,
//! hold, cost}`, `{policy, hold, ttl_ms}`), checked by the one decoder the
//! workers use ([`decode_hold_request`]). A reserve with `wait_ms` (SPEC
//! §18) kept for a later start is answered at once with `wait_ms` and
//! `Sluice-Wait-Ms`; the caller sleeps it.
//!
//! The reply is the NATS reply ([`encode_held`]): the decision, plus
//! `hold` and `expires_ms` for a kept hold, with the RateLimit headers. A
//! reserve is 200 when allowed and 429 when denied, as `/v1/allow`; a
//! settle or an extend that was done is 200 (its decision is a peek's:
//! `allowed` says whether one more unit would be now). No fallback: with
//! no worker answering, 503.

use crate::allow::{idempotency_key, one_id, read_body, IdempotencyKey, KeyParam};
use crate::key_path::key_path;
use crate::metrics::{Outcome, Route};
use crate::respond;
use crate::responses::{Done, HeldReplies, HoldErrors};
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

/// Reserves `cost` units now, to settle later with the real cost (SPEC
/// §13): 200 with the hold when allowed, 429 holding nothing when denied.
#[utoipa::path(post, path = "/v1/reserve/{key}", operation_id = "reserve", tag = "holds",
    params(KeyParam, IdempotencyKey),
    request_body(content = ReserveBody, description = "JSON, at most 4 KiB"),
    responses(HeldReplies, HoldErrors),
)]
pub(crate) async fn reserve(State(app): State<Arc<App>>, request: Request) -> Response {
    serve(&app, Verb::Reserve, request).await
}

/// Settles a hold with the real cost (0 for work that failed): 200 with
/// what a peek gives after it.
#[utoipa::path(post, path = "/v1/settle/{key}", operation_id = "settle", tag = "holds",
    params(KeyParam, IdempotencyKey),
    request_body(content = SettleBody, description = "JSON, at most 4 KiB"),
    responses(Done, HoldErrors),
)]
pub(crate) async fn settle(State(app): State<Arc<App>>, request: Request) -> Response {
    serve(&app, Verb::Settle, request).await
}

/// Moves a hold's end to `ttl_ms` from now: 200 with the hold.
#[utoipa::path(post, path = "/v1/extend/{key}", operation_id = "extend", tag = "holds",
    params(KeyParam, IdempotencyKey),
    request_body(content = ExtendBody, description = "JSON, at most 4 KiB"),
    responses(Done, HoldErrors),
)]
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
    let verb_prefix = match verb {
        Verb::Reserve => "/v1/reserve/",
        Verb::Settle => "/v1/settle/",
        _ => "/v1/extend/",
    };
    let key = key_path(path, verb_prefix)?;
    if parts.uri.query().is_some() {
        return Err(Error::BadRequest(format!(
            "{path} takes its fields in a JSON body, not in the query (docs/HOLDS.md)"
        )));
    }
    let header_id = idempotency_key(&parts.headers)?;
    let body = read_body(&parts.headers, body).await?;
    let r = decode_hold_request(verb, &body).map_err(|e| Error::from(e.reply))?;
    let id = one_id(header_id, r.id)?;
    let id = id.as_deref();
    let ttl = r.ttl_ms.map(Duration::from_millis);
    let hold = r.hold.map(|id| id.to_string()).unwrap_or_default();
    let client = &app.client;
    match verb {
        Verb::Reserve if r.wait_ms > 0 => {
            let wait = Duration::from_millis(r.wait_ms);
            let asked = (r.policy.as_str(), r.cost, ttl);
            client.reserve_waiting_named(&key, asked, wait, id).await
        }
        Verb::Reserve => client.reserve_named(&key, &r.policy, r.cost, ttl, id).await,
        Verb::Settle => {
            let answer = client
                .settle_named(&key, &r.policy, &hold, r.cost, id)
                .await?;
            Ok(Held {
                answer,
                ticket: None,
            })
        }
        _ => client.extend_named(&key, &r.policy, &hold, ttl, id).await,
    }
}

/// The body of a reserve (the fields of `rl.reserve`, docs/HOLDS.md).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // described here, decoded by the workers' decoder
pub(crate) struct ReserveBody {
    /// The policy (default `default`).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
    /// The units to hold (default 1).
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    cost: Option<u64>,
    /// How long the hold lives, 1 ms to 1 h (default the policy's `hold_ttl`).
    #[schema(minimum = 1, maximum = 3_600_000)]
    ttl_ms: Option<u64>,
    /// How long the reserve may wait for its start instead of being denied
    /// (SPEC §18; at most the policy's `max_wait`); the hold's ttl runs
    /// from the start.
    #[schema(minimum = 0, maximum = 60_000)]
    wait_ms: Option<u64>,
    /// The verb's id, as `Idempotency-Key` gives it (SPEC §16).
    #[schema(min_length = 1, max_length = 128)]
    id: Option<String>,
}

/// The body of a settle.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // described here, decoded by the workers' decoder
pub(crate) struct SettleBody {
    /// The policy (default `default`).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
    /// The hold, as the reserve named it.
    hold: String,
    /// The real cost (0 for work that failed).
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    cost: Option<u64>,
    /// The verb's id, as `Idempotency-Key` gives it (SPEC §16).
    #[schema(min_length = 1, max_length = 128)]
    id: Option<String>,
}

/// The body of an extend.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // described here, decoded by the workers' decoder
pub(crate) struct ExtendBody {
    /// The policy (default `default`).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
    /// The hold, as the reserve named it.
    hold: String,
    /// Its new end, from now: 1 ms to 1 h.
    #[schema(minimum = 1, maximum = 3_600_000)]
    ttl_ms: Option<u64>,
    /// The verb's id, as `Idempotency-Key` gives it (SPEC §16).
    #[schema(min_length = 1, max_length = 128)]
    id: Option<String>,
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
