//! `GET` / `POST /v1/allow/{key}?policy=P&cost=N` (SPEC §6), and
//! `POST /v1/hit/{key}` (SPEC §2), which takes the same fields.
//!
//! - The key is the path segment, percent-decoded to bytes here (not by
//!   axum, which would refuse keys that are not UTF-8); the client
//!   re-encodes it canonically for NATS.
//! - `policy` and `cost` come from the query, or from a body in the NATS
//!   request format (a JSON object or a MessagePack map, at most 4 KiB),
//!   not both. Unknown query parameters are refused, like unknown body
//!   fields: a typo such as `?cots=5` must not silently mean cost 1.
//! - The `Idempotency-Key` header names the ask (SPEC §16; or `id` in a
//!   body): sent again with the same key, it counts once and is answered
//!   as the first time, with `Sluice-Repeat: true`.
//! - `?wait=250ms`, the `Sluice-Wait` header or a body's `wait_ms` lets
//!   the ask wait for a later start (SPEC §18, [`crate::wait`]); allowed
//!   so, it is answered at once with `Sluice-Wait-Ms` and `wait_ms`.

use crate::key_path::key_path;
use crate::metrics::Route;
use crate::respond;
use crate::responses::{AskErrors, Counted, Decided};
use crate::wait::{one_wait, parse_wait, wait_header, WaitHeader};
use crate::App;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use sluice_client::{Error, KeyPath};
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::wire::{self, ErrorReply, DEFAULT_COST, MAX_BODY};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const PREFIX: &str = "/v1/allow/";
const HIT_PREFIX: &str = "/v1/hit/";

/// Asks for `cost` units of `key` under `policy` (from the query): 200
/// with the decision when allowed, 429 (with `Retry-After`) when denied.
#[utoipa::path(
    get,
    path = "/v1/allow/{key}",
    operation_id = "allow",
    tag = "asking",
    params(KeyParam, AskQuery, IdempotencyKey, WaitHeader),
    responses(Decided, AskErrors)
)]
pub(crate) async fn allow_get(state: State<Arc<App>>, request: Request) -> Response {
    allow(state, request).await
}

/// The same ask, its fields in the query or, instead, in a body.
#[utoipa::path(post, path = "/v1/allow/{key}", operation_id = "allow_post", tag = "asking",
    params(KeyParam, AskQuery, IdempotencyKey, WaitHeader),
    request_body(content = Option<AskBody>, description = "policy and cost (and id, wait_ms) as a JSON body instead of the query (or a MessagePack map); at most 4 KiB"),
    responses(Decided, AskErrors),
)]
pub(crate) async fn allow_post(state: State<Arc<App>>, request: Request) -> Response {
    allow(state, request).await
}

async fn allow(State(app): State<Arc<App>>, request: Request) -> Response {
    let started = Instant::now();
    let result = async {
        let Ask {
            key,
            policy,
            cost,
            id,
            wait,
        } = ask_of(request, PREFIX).await?;
        let client = &app.client;
        let asking = async {
            match id {
                _ if !wait.is_zero() => {
                    client
                        .ask_waiting_named(&key, &policy, cost, wait, id.as_deref())
                        .await
                }
                Some(id) => client.ask_with_id(&key, &policy, cost, &id).await,
                None => client.ask(&key, &policy, cost).await,
            }
        };
        crate::traces::ask(&app, key.token(), &policy, cost, asking).await
    }
    .await;
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

/// Counts `cost` units of `key` under `policy` whatever the limit (a
/// request that happened anyway, SPEC §2): always 200, with what a peek
/// says after the hit (`allowed`: would one more unit pass now).
#[utoipa::path(post, path = "/v1/hit/{key}", operation_id = "hit", tag = "asking",
    params(KeyParam, AskQuery, IdempotencyKey),
    request_body(content = Option<AskBody>, description = "policy and cost as a JSON body instead of the query; at most 4 KiB"),
    responses(Counted, AskErrors),
)]
pub(crate) async fn hit(State(app): State<Arc<App>>, request: Request) -> Response {
    let started = Instant::now();
    let result = async {
        let ask = ask_of(request, HIT_PREFIX).await?;
        if !ask.wait.is_zero() {
            return Err(Error::BadRequest(
                "a hit counts at once and waits for nothing; send no wait (it is for /v1/allow)"
                    .into(),
            ));
        }
        app.client
            .hit_named(&ask.key, &ask.policy, ask.cost, ask.id.as_deref())
            .await
    }
    .await;
    let outcome = match &result {
        Ok(_) => crate::metrics::Outcome::Allowed,
        Err(_) => respond::outcome_of(&result),
    };
    app.metrics.observe(Route::Hit, outcome, started.elapsed());
    match result {
        Ok(answer) => respond::counted(&answer),
        Err(e) => respond::error(&e),
    }
}

/// `/v1/allow/` (or `/v1/hit/`, ...) with no key.
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

/// What an ask names: its key, policy, cost, id and wait (zero: none).
struct Ask {
    key: KeyPath,
    policy: String,
    cost: u64,
    id: Option<String>,
    wait: Duration,
}

/// The key (the path's segment after `prefix`), policy and cost of an
/// ask, from the query or the body, its id, from `Idempotency-Key` or
/// the body, and its wait, from the query, `Sluice-Wait` or the body.
async fn ask_of(request: Request, prefix: &str) -> Result<Ask, Error> {
    let (parts, body) = request.into_parts();
    let key = key_path(parts.uri.path(), prefix)?;
    let query = Query::parse(parts.uri.query())?;
    let header_id = idempotency_key(&parts.headers)?;
    let header_wait = wait_header(&parts.headers)?;
    let body = read_body(&parts.headers, body).await?;
    if body.is_empty() {
        return Ok(Ask {
            key,
            policy: query.policy.unwrap_or_else(|| DEFAULT_POLICY.to_string()),
            cost: query.cost.unwrap_or(DEFAULT_COST),
            id: header_id,
            wait: one_wait(query.wait, header_wait, 0)?,
        });
    }
    if query.policy.is_some() || query.cost.is_some() {
        return Err(Error::BadRequest(
            "give policy and cost either in the query or in the body, not both".into(),
        ));
    }
    let r = wire::decode_request(&body).map_err(|e| Error::from(e.reply))?;
    Ok(Ask {
        key,
        policy: r.policy.into_owned(),
        cost: r.cost,
        id: one_id(header_id, r.id.map(|id| id.into_owned()))?,
        wait: one_wait(query.wait, header_wait, r.wait_ms)?,
    })
}

/// An ask's id, from `Idempotency-Key` or the body's `id`: either, or
/// both if they agree.
pub(crate) fn one_id(
    header: Option<String>,
    body: Option<String>,
) -> Result<Option<String>, Error> {
    match (header, body) {
        (Some(header), Some(body)) if header != body => Err(Error::BadRequest(
            "the Idempotency-Key header and the body's \"id\" differ; send the ask's id once"
                .into(),
        )),
        (header, body) => Ok(header.or(body)),
    }
}

/// The `Idempotency-Key` header (SPEC §16), checked as an ask's id.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Error> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let id = value.to_str().map_err(|_| {
        Error::BadRequest("the Idempotency-Key header must be printable ASCII".into())
    })?;
    wire::check_id(id).map_err(|m| Error::BadRequest(format!("Idempotency-Key: {m}")))?;
    Ok(Some(id.to_string()))
}

/// The header that names an ask (SPEC §16).
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The `Idempotency-Key` header, as the description lists it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // read by `idempotency_key`
pub(crate) struct IdempotencyKey {
    /// The caller's name for the ask, 1 to 128 bytes of printable ASCII
    /// (SPEC §16): sent again, the ask counts once and is answered as the
    /// first time, with `Sluice-Repeat: true`.
    #[param(rename = "Idempotency-Key", min_length = 1, max_length = 128)]
    idempotency_key: Option<String>,
}

/// `{key}` in a path: any bytes, one segment, percent-encoded (a `/` as
/// `%2F`); encoded for NATS by the client (PROTOCOL.md §1).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read from the raw path (`grouped::key_path`), described here
pub(crate) struct KeyParam {
    /// The key: any bytes, at most 255 once percent-encoded for NATS.
    key: String,
}

/// The query of an ask: `policy` and `cost`, or neither (then from the
/// body), and `wait`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // parsed by `Query::parse`, which refuses anything else
pub(crate) struct AskQuery {
    /// The policy (default `default`).
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
    /// The units to consume, 0 to 1000000000 (default 1; 0 peeks).
    #[param(minimum = 0, maximum = 1_000_000_000)]
    cost: Option<u64>,
    /// How long the ask may wait for its start instead of being denied
    /// (SPEC §18): an integer and a unit (`250ms`, `2s`), at most the
    /// policy's `max_wait` (`/v1/allow` only). Allowed for a later start,
    /// the answer carries `Sluice-Wait-Ms` and `wait_ms`.
    #[param(pattern = "^[0-9]+(ms|s|m|h|d)$")]
    wait: Option<String>,
}

/// An ask's fields as a body, the NATS request format (PROTOCOL.md §2).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // decoded by `wire::decode_request`, described here
pub(crate) struct AskBody {
    /// The policy (default `default`).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
    /// The units to consume (default 1; 0 peeks).
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    cost: Option<u64>,
    /// The ask's id (SPEC §16), as the `Idempotency-Key` header gives it.
    #[schema(min_length = 1, max_length = 128)]
    id: Option<String>,
    /// How long, in ms, the ask may wait for its start (SPEC §18), as
    /// `?wait=` gives it; at most the policy's `max_wait`.
    #[schema(minimum = 0, maximum = 60_000)]
    wait_ms: Option<u64>,
}

/// The query parameters of an allow.
#[derive(Debug, Default, PartialEq)]
struct Query {
    policy: Option<String>,
    cost: Option<u64>,
    wait: Option<Duration>,
}

impl Query {
    fn parse(query: Option<&str>) -> Result<Query, Error> {
        let mut q = Query::default();
        let bad = |m: String| Err(Error::BadRequest(m));
        for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*name {
                "policy" => {
                    if q.policy.replace(value.into_owned()).is_some() {
                        return bad(
                            "the query parameter \"policy\" appears twice; give it once".into()
                        );
                    }
                }
                "cost" => {
                    let Ok(cost) = value.parse::<u64>() else {
                        return bad(format!(
                            "the query parameter \"cost\" must be an unsigned integer (0 to look without consuming), not {value:?}"
                        ));
                    };
                    if q.cost.replace(cost).is_some() {
                        return bad(
                            "the query parameter \"cost\" appears twice; give it once".into()
                        );
                    }
                }
                "wait" => {
                    let wait = parse_wait(&value, "the query parameter \"wait\"")?;
                    if q.wait.replace(wait).is_some() {
                        return bad("the query parameter \"wait\" appears twice; give it once".into());
                    }
                }
                other => {
                    return bad(format!(
                    "unknown query parameter {other:?}; an ask takes only \"policy\", \"cost\" and \"wait\""
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
    read_body_up_to(headers, body, MAX_BODY).await
}

/// The body, refused with 413 past `limit` bytes (before reading it when
/// the Content-Length says so).
pub(crate) async fn read_body_up_to(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<bytes::Bytes, Error> {
    let too_large = |len: Option<u64>| {
        let size = len.map_or_else(
            || format!("more than {limit} bytes"),
            |n| format!("{n} bytes"),
        );
        Error::TooLarge(format!(
            "the request body is {size}; the limit here is {limit} bytes"
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(declared));
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_takes_policy_and_cost_and_nothing_else() {
        assert_eq!(Query::parse(None).unwrap(), Query::default());
        assert_eq!(
            Query::parse(Some("policy=login&cost=3")).unwrap(),
            Query {
                policy: Some("login".into()),
                cost: Some(3),
                wait: None,
            }
        );
        assert_eq!(
            Query::parse(Some("wait=250ms")).unwrap().wait,
            Some(Duration::from_millis(250))
        );
        for bad in [
            "cost=abc",
            "cost=-1",
            "cost=1.5",
            "cost=",
            "cots=5",
            "cost=1&cost=2",
            "wait=250",
            "wait=1s&wait=2s",
        ] {
            let e = Query::parse(Some(bad)).unwrap_err();
            assert_eq!(e.status(), 400, "{bad}: {e}");
        }
    }
}
