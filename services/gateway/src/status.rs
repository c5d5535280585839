//! `GET /v1/status`: the fleet as `sluice status --json` and the
//! dashboard's status page show it, gathered by [`sluice_worker::fleet`]:
//! partitions, their owners and snapshots, each worker's counts.

use crate::respond::{self, ErrorBody};
use crate::usage::params;
use crate::App;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use sluice_client::Error;
use sluice_worker::fleet::{self, Status};
use std::sync::Arc;
use std::time::Duration;

/// How long the workers' own reports are waited for (the gather ends as
/// soon as every worker with a heartbeat answered).
const WAIT: Duration = Duration::from_millis(500);

/// Workers, partitions, owners, snapshot ages (what `sluice status` shows).
#[utoipa::path(get, path = "/v1/status", operation_id = "status", tag = "status", responses(
    (status = 200, description = "the fleet", body = Status),
    (status = 400, description = "a query parameter (this takes none)", body = ErrorBody),
    (status = 503, description = "the fleet cannot be read (no worker ever ran against this NATS)", body = ErrorBody),
))]
pub(crate) async fn status(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let result = async {
        params(uri.query(), &[])?;
        fleet::collect(app.client.nats(), app.partitions, WAIT)
            .await
            .map_err(|e| Error::Unavailable(format!("cannot read the fleet's status: {e:#}")))
    }
    .await;
    respond::json_or_error(result)
}
