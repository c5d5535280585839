//! `GET /ui/alerts?policy=`: the threshold alerts of SPEC §14, newest
//! first: the last [`SHOWN`] the stream `SLUICE_ALERTS` stored (those of
//! one policy among them when one is chosen), read as `sluice alerts` reads
//! them ([`sluice_client::alerts`]). Bounded: one read of at most
//! [`SHOWN`] messages, whatever the stream holds.

use super::form::{href, policy_select};
use super::page::{error_note, frame, ok};
use super::paths;
use crate::App;
use axum::extract::{Query, State};
use axum::response::Response;
use futures::StreamExt;
use maud::html;
use serde::Deserialize;
use sluice_client::alerts::{alerts, Start};
use sluice_core::key::shown_key;
use sluice_core::time::utc_minute;
use std::sync::Arc;
use std::time::Duration;

/// The most alerts the page reads and shows.
const SHOWN: u64 = 200;
/// How long the page waits for them.
const READ_WITHIN: Duration = Duration::from_secs(2);

#[derive(Deserialize, Default)]
pub(crate) struct AlertsForm {
    policy: Option<String>,
}

pub(crate) async fn page(State(app): State<Arc<App>>, Query(q): Query<AlertsForm>) -> Response {
    let policy = q.policy.as_deref().filter(|p| !p.is_empty());
    let form = html! {
        form.query method="get" action=(paths::ALERTS) {
            (policy_select(&app, policy, Some("every policy")))
            button type="submit" { "Show" }
        }
    };
    let read = async {
        let mut read = alerts(app.client.nats(), policy, Start::Last(SHOWN), false).await?;
        let mut all = Vec::new();
        while let Some(alert) = read.next().await {
            all.push(alert?);
        }
        all.reverse();
        Ok::<_, sluice_client::Error>(all)
    };
    let read = match tokio::time::timeout(READ_WITHIN, read).await {
        Ok(read) => read,
        Err(_) => Err(sluice_client::Error::Unavailable(format!(
            "the alerts stream did not answer within {READ_WITHIN:?}"
        ))),
    };
    let listing = match read {
        Err(e) => error_note("cannot read the alerts", &e),
        Ok(all) if all.is_empty() => html! {
            p.hint {
                "No alerts stored. A policy announces when a key's count in a window reaches a share of a limit with "
                code { "alerts = [80, 100]" } " (fixed_window)."
            }
        },
        Ok(all) => html! {
            p.summary { (all.len()) " alerts, newest first (of the last " (SHOWN) " stored)" }
            table.alerts {
                thead { tr {
                    th { "at (UTC)" } th { "policy" } th { "key" } th.num { "threshold" }
                    th.num { "used" } th { "limit" } th { "window (UTC)" }
                } }
                tbody {
                    @for a in &all {
                        @let key = shown_key(&a.key);
                        tr data-key=(key) data-policy=(a.policy) data-threshold=(a.threshold_pct) data-used=(a.used) {
                            td { (utc_minute(a.at_ms)) }
                            td { (a.policy) }
                            td.key { a href=(href(paths::KEY, &[("key", &key), ("policy", &a.policy)])) { (key) } }
                            td.num { (a.threshold_pct) "%" }
                            td.num { (a.used) }
                            td { (a.max) " per " (a.per) }
                            td { (utc_minute(a.window_start_ms)) " to " (utc_minute(a.window_end_ms)) }
                        }
                    }
                }
            }
        },
    };
    ok(frame(
        &app,
        paths::ALERTS,
        "Alerts",
        html! { (form) (listing) p.hint { "Follow them with " code { "sluice alerts --follow" } "." } },
    ))
}
