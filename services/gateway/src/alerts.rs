//! `GET /v1/alerts` and `GET /v1/alerts/stream` (SPEC §14): the threshold
//! alerts the stream `SLUICE_ALERTS` keeps, read through
//! [`sluice_client::alerts`] as `sluice alerts` and the dashboard read
//! them: the last ones as JSON, or each new one as it is stored as
//! server-sent events.
//!
//! The event stream never ends by itself: it ends when the client leaves
//! or the gateway stops (its shutdown ends every stream, so that it does
//! not wait for them). A comment line every 15 s keeps proxies from
//! closing a quiet stream. A reconnecting client reads the alerts it
//! missed with `GET /v1/alerts`, or `?last=N` on the stream.

use crate::respond::{self, ErrorBody};
use crate::usage::{number, params};
use crate::App;
use axum::extract::State;
use axum::http::Uri;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Serialize;
use sluice_client::alerts::Start;
use sluice_client::Error;
use sluice_core::alerts::Alert;
use sluice_core::wire::is_valid_policy_name;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The most alerts one `GET /v1/alerts` reads.
const MAX_LAST: u64 = 1000;
/// What `GET /v1/alerts` reads without `last`.
const DEFAULT_LAST: u64 = 100;

/// Alerts, oldest first.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct AlertList {
    pub(crate) alerts: Vec<Alert>,
}

/// The last alerts the stream stored (of one policy among them when
/// `policy` is given), oldest first.
#[utoipa::path(get, path = "/v1/alerts", operation_id = "list_alerts", tag = "alerts", params(AlertsQuery), responses(
    (status = 200, description = "the alerts, oldest first", body = AlertList),
    (status = 400, description = "a bad `last` or `policy`, or an unknown parameter", body = ErrorBody),
    (status = 503, description = "the alert stream cannot be read (no worker ever started)", body = ErrorBody),
))]
pub(crate) async fn list(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let result = async {
        let (policy, last) = query(&uri, DEFAULT_LAST)?;
        if last == 0 {
            return Ok(AlertList { alerts: Vec::new() });
        }
        let start = Start::Last(last);
        let read = app.client.alerts(policy.as_deref(), start, false).await?;
        let alerts = read
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AlertList { alerts })
    }
    .await;
    respond::json_or_error(result)
}

/// Each new alert as it is stored, as server-sent events (`event: alert`,
/// `data:` the alert as JSON), after the last `last` stored ones.
#[utoipa::path(get, path = "/v1/alerts/stream", operation_id = "stream_alerts", tag = "alerts", params(AlertsQuery), responses(
    (status = 200, description = "an endless `text/event-stream`: one `alert` event per alert", content_type = "text/event-stream", body = String),
    (status = 400, description = "a bad `last` or `policy`, or an unknown parameter", body = ErrorBody),
    (status = 503, description = "the alert stream cannot be read (no worker ever started)", body = ErrorBody),
))]
pub(crate) async fn stream(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let read = async {
        let (policy, last) = query(&uri, 0)?;
        let start = if last == 0 {
            Start::New
        } else {
            Start::Last(last)
        };
        app.client.alerts(policy.as_deref(), start, true).await
    }
    .await;
    let alerts = match read {
        Ok(alerts) => alerts,
        Err(e) => return respond::error(&e),
    };
    let mut stop = app.stop.clone();
    let stopped = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    let events = alerts
        .map(|alert| {
            Ok::<_, std::convert::Infallible>(match alert {
                Ok(alert) => Event::default()
                    .event("alert")
                    .json_data(&alert)
                    .unwrap_or_default(),
                Err(e) => Event::default().event("error").data(e.to_string()),
            })
        })
        .take_until(stopped);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The query of both: `policy` and `last`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `query`, which refuses anything else
pub(crate) struct AlertsQuery {
    /// Only this policy's alerts.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
    /// How many of the last stored alerts, 0 to 1000 (of any policy; those
    /// of other policies then left out). Default 100 for the list, 0 for
    /// the stream (only new ones).
    #[param(minimum = 0, maximum = 1000)]
    last: Option<u64>,
}

fn query(uri: &Uri, default_last: u64) -> Result<(Option<String>, u64), Error> {
    let mut q: BTreeMap<String, String> = params(uri.query(), &["policy", "last"])?;
    let last = number(&mut q, "last")?.unwrap_or(default_last);
    if last > MAX_LAST {
        return Err(Error::BadRequest(format!(
            "the query parameter \"last\" is at most {MAX_LAST}, not {last}"
        )));
    }
    let policy = q.remove("policy");
    if let Some(p) = &policy {
        if !is_valid_policy_name(p) {
            return Err(Error::BadRequest(format!(
                "{p:?} is not a valid policy name: use 1 to 64 letters, digits, '_' or '-'"
            )));
        }
    }
    Ok((policy, last))
}
