//! `GET /v1/inspect/{key}` and `POST /v1/reset/{key}` (SPEC §8): a key's
//! counters as they stand, and forgetting them, through the one request
//! `sluice inspect` / `sluice reset` and the dashboard's key page send
//! ([`sluice_client::queries`]), answered as the worker's JSON reply.
//!
//! Both need NATS credentials that may publish `rl.inspect.*` and
//! `rl.reset.*` (the `admin` role); with the `client` role the request
//! goes unanswered and the reply is 503 with a sentence that says so.

use crate::allow::KeyParam;
use crate::key_path::key_path;
use crate::respond;
use crate::responses::QueryErrors;
use crate::usage::params;
use crate::App;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use sluice_client::queries::{self, QUERY_TIMEOUT};
use sluice_client::Error;
use sluice_core::subject::Verb;
use sluice_core::wire::inspect::{InspectReply, ResetReply};
use std::sync::Arc;

pub(crate) const INSPECT_PREFIX: &str = "/v1/inspect/";
pub(crate) const RESET_PREFIX: &str = "/v1/reset/";

/// A key's state under each policy it has state in (or one), consuming
/// nothing.
#[utoipa::path(
    get,
    path = "/v1/inspect/{key}", operation_id = "inspect",
    tag = "keys",
    params(KeyParam, PolicyQuery),
    responses(
        (status = 200, description = "the key's state, per policy", body = InspectReply),
        QueryErrors,
    )
)]
pub(crate) async fn inspect(State(app): State<Arc<App>>, uri: Uri) -> Response {
    respond::json_or_error(scoped::<InspectReply>(&app, Verb::Inspect, &uri).await)
}

/// Forgets a key's counters under one policy, or every policy (journaled
/// in journal mode; for a global policy, sent to its other regions too).
#[utoipa::path(
    post,
    path = "/v1/reset/{key}", operation_id = "reset",
    tag = "keys",
    params(KeyParam, PolicyQuery),
    responses(
        (status = 200, description = "the policies whose counters of the key were forgotten", body = ResetReply),
        QueryErrors,
    )
)]
pub(crate) async fn reset(State(app): State<Arc<App>>, uri: Uri) -> Response {
    respond::json_or_error(scoped::<ResetReply>(&app, Verb::Reset, &uri).await)
}

/// The query of inspect and reset.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `params`, which refuses anything else
pub(crate) struct PolicyQuery {
    /// Only this policy (default: every policy).
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
}

async fn scoped<T: serde::de::DeserializeOwned>(
    app: &App,
    verb: Verb,
    uri: &Uri,
) -> Result<T, Error> {
    let prefix = match verb {
        Verb::Inspect => INSPECT_PREFIX,
        _ => RESET_PREFIX,
    };
    let key = key_path(uri.path(), prefix)?;
    let policy = params(uri.query(), &["policy"])?.remove("policy");
    queries::scoped(
        app.client.nats(),
        verb,
        &key,
        policy.as_deref(),
        QUERY_TIMEOUT,
    )
    .await
}
