//! `GET /livez` and `GET /readyz` (docs/GATEWAY.md, "Health and
//! readiness"): what an orchestrator asks before it sends the gateway
//! traffic or restarts it. `/healthz` stays as it was (the NATS
//! connection only).
//!
//! Live: it answers HTTP. Ready ([`sluice_core::readiness::gateway`]): its
//! NATS connection is up and a worker answers a peek of the key
//! [`PROBE_KEY`] under the default policy, sent on the raw connection so
//! that it counts in none of the gateway's metrics (the worker counts it
//! as an allowed decision; a peek is no usage). Without a worker the
//! gateway still answers every ask, by its fallback, but holds no shared
//! limit: not ready.

use crate::App;
use async_nats::RequestErrorKind;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sluice_core::readiness;
use sluice_core::subject::Verb;
use std::sync::Arc;
use std::time::Duration;

/// The key `/readyz` peeks at.
pub const PROBE_KEY: &str = "sluice-readyz";

/// How long a worker may take to answer the peek: under the 1 s a
/// Kubernetes probe waits by default.
const PEEK_WITHIN: Duration = Duration::from_millis(500);

/// How many times a peek that found no responders (the key's partition
/// between two owners for a few milliseconds) is sent again.
const NO_RESPONDERS_RETRIES: usize = 3;

/// The routes, merged into the gateway's router.
pub(crate) fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
}

async fn livez() -> Response {
    json(StatusCode::OK, readiness::LIVE_BODY.to_string())
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    let connected = app.client.is_connected();
    let peek = if connected {
        peek_a_worker(app.client.nats()).await
    } else {
        Err("not connected".to_string())
    };
    let verdict = readiness::gateway(connected, peek);
    let status =
        StatusCode::from_u16(verdict.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    json(status, verdict.body())
}

/// A peek of [`PROBE_KEY`]: `Ok` once a worker answers it (a decision or
/// an error reply both say a worker is there).
async fn peek_a_worker(nats: &async_nats::Client) -> Result<(), String> {
    let subject = Verb::Allow.client_subject(PROBE_KEY);
    let mut tries = 0;
    loop {
        let request = nats.request(subject.clone(), r#"{"cost":0}"#.into());
        match tokio::time::timeout(PEEK_WITHIN, request).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) if e.kind() == RequestErrorKind::NoResponders => {
                tries += 1;
                if tries > NO_RESPONDERS_RETRIES {
                    return Err(format!("no responders on {subject}"));
                }
                // The pace of tries while the partition changes owner.
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Ok(Err(e)) => return Err(format!("{subject}: {e}")),
            Err(_) => return Err(format!("no answer on {subject} within {PEEK_WITHIN:?}")),
        }
    }
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
