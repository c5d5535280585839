//! `POST /v1/batch`: several asks in one HTTP request, answered in order,
//! each as `/v1/allow` would answer it alone (SPEC §6).
//!
//! The asks go through the same client as `/v1/allow`, all at once, so its
//! batching sends those of one worker as one NATS batch (PROTOCOL.md §5);
//! the deny cache, local budgets and the fallback apply to each ask as to a
//! single one. Each item's answer is its decision or its own error: one bad
//! item refuses nothing else, and the reply is 200 whatever each item got.
//! A body that is not a batch (malformed, empty, too many asks) is one 400
//! and asks nothing.

use crate::allow::read_body_up_to;
use crate::metrics::Route;
use crate::respond::{self, ErrorBody};
use crate::usage::params;
use crate::App;
use axum::extract::{Request, State};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use sluice_client::{Error, KeyPath};
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::wire::batch::MAX_ITEMS;
use sluice_core::wire::{DecisionReply, DEFAULT_COST};
use std::sync::Arc;
use std::time::Instant;

/// The most a batch's body may take.
const MAX_BATCH_BODY: usize = 64 * 1024;

/// Several asks, answered in order.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchRequest {
    /// 1 to 256 asks.
    #[schema(min_items = 1, max_items = 256)]
    asks: Vec<BatchAsk>,
}

/// One ask of a batch: the fields of `/v1/allow/{key}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchAsk {
    /// The key (any text; the gateway percent-encodes it for NATS), or a
    /// grouped key's tokens, outermost first (`["acme", "alice"]`, SPEC
    /// §17).
    key: BatchKey,
    /// The policy (default `default`).
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
    /// The units to consume (default 1; 0 peeks).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    cost: Option<u64>,
    /// The ask's id (SPEC §16): sent again, it counts once.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 128)]
    id: Option<String>,
}

/// A batch item's key: text, one key whatever it holds; or a list of one
/// to three tokens, a grouped key (`/v1/allow/{org}/{key}`'s segments).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum BatchKey {
    One(String),
    Path(Vec<String>),
}

impl BatchKey {
    fn path(&self) -> Result<KeyPath, Error> {
        match self {
            BatchKey::One(key) => KeyPath::new([key]),
            BatchKey::Path(tokens) => KeyPath::new(tokens),
        }
    }
}

/// The answers, in the order of the asks.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct BatchReply<'a> {
    answers: Vec<BatchAnswer<'a>>,
}

/// One ask's answer: its decision (`allowed` says allowed or denied), or
/// the error it alone got.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum BatchAnswer<'a> {
    Decision(DecisionReply),
    #[schema(value_type = ErrorBody)]
    Error(ErrorBody<'a>),
}

/// Several asks in one request, each answered as `/v1/allow` would.
#[utoipa::path(post, path = "/v1/batch", operation_id = "batch", tag = "asking",
    request_body(content = BatchRequest, description = "`{\"asks\":[{\"key\":\"alice\",\"policy\":\"default\",\"cost\":1}, ...]}`, at most 64 KiB"),
    responses(
        (status = 200, description = "an answer per ask, in order", body = BatchReply),
        (status = 400, description = "not a batch: malformed, no asks, more than 256, or a query parameter", body = ErrorBody),
        (status = 413, description = "a body over 64 KiB", body = ErrorBody),
    )
)]
pub(crate) async fn batch(State(app): State<Arc<App>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let asks = async {
        params(parts.uri.query(), &[])?;
        let body = read_body_up_to(&parts.headers, body, MAX_BATCH_BODY).await?;
        parse(&body)
    }
    .await;
    let asks = match asks {
        Ok(asks) => asks,
        Err(e) => return respond::error(&e),
    };
    let results = futures::future::join_all(asks.iter().map(|ask| async {
        let started = Instant::now();
        let policy = ask.policy.as_deref().unwrap_or(DEFAULT_POLICY);
        let cost = ask.cost.unwrap_or(DEFAULT_COST);
        let result = match (ask.key.path(), &ask.id) {
            (Err(e), _) => Err(e),
            (Ok(key), Some(id)) => app.client.ask_with_id(&key, policy, cost, id).await,
            (Ok(key), None) => app.client.ask(&key, policy, cost).await,
        };
        app.metrics.observe(
            Route::Batch,
            respond::outcome_of(&result),
            started.elapsed(),
        );
        result
    }))
    .await;
    let answers = results
        .iter()
        .map(|result| match result {
            Ok(answer) => BatchAnswer::Decision(answer.to_reply()),
            Err(e) => BatchAnswer::Error(ErrorBody {
                error: e.code().into(),
                message: e.message(),
            }),
        })
        .collect();
    respond::json(&BatchReply { answers })
}

fn parse(body: &[u8]) -> Result<Vec<BatchAsk>, Error> {
    let request: BatchRequest = serde_json::from_slice(body).map_err(|e| {
        Error::BadRequest(format!(
            "the body is not a batch ({e}); send {{\"asks\":[{{\"key\":\"alice\",\"policy\":\"default\",\"cost\":1}}]}}"
        ))
    })?;
    match request.asks.len() {
        0 => Err(Error::BadRequest(
            "the batch has no asks; send at least one".into(),
        )),
        n if n > MAX_ITEMS => Err(Error::BadRequest(format!(
            "the batch has {n} asks; the limit is {MAX_ITEMS}: send the rest in another"
        ))),
        _ => Ok(request.asks),
    }
}
