//! `GET /ui/status`: what `sluice status` shows (the same
//! [`sluice_worker::fleet::collect`]): every worker's health and counts,
//! refused policy values, each partition's owner and snapshot, and with
//! regions (SPEC §12) the regions this one's workers see and whether
//! each link is up.

use super::page::{frame, ok};
use super::paths;
use crate::App;
use axum::extract::State;
use axum::response::Response;
use maud::html;
use std::sync::Arc;
use std::time::Duration;

/// The most the page waits for workers that have a heartbeat but do not
/// answer (a worker that just died); answering ones take milliseconds.
const WORKER_WAIT: Duration = Duration::from_millis(150);

pub(crate) async fn page(State(app): State<Arc<App>>) -> Response {
    let status =
        sluice_worker::fleet::collect(app.client.nats(), app.partitions, WORKER_WAIT).await;
    let body = match status {
        Err(e) => html! { p.error { "cannot read the status: " (format!("{e:#}")) } },
        Ok(s) => html! {
            p.summary {
                (s.workers.len()) " workers, " (s.partitions.len()) " partitions, "
                span.unowned data-unowned=(s.unowned.len()) { (s.unowned.len()) " unowned" }
            }
            @if !s.regions.is_empty() {
                h2 { "Regions" }
                table.regions {
                    thead { tr { th { "region" } th { "link" } } }
                    tbody {
                        @for r in &s.regions {
                            tr data-region=(r.region) data-link-up=(r.link_up) {
                                td { (r.region) }
                                td {
                                    @if r.here { "this region" }
                                    @else if r.link_up { "up" }
                                    @else { span.error { "down" } }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Workers" }
            table.workers {
                thead { tr {
                    th { "worker" } th.num { "partitions" } th.num { "allowed" } th.num { "denied" }
                    th.num { "hits" } th.num { "errors" } th.num { "journal errors" }
                    th.num { "policy revision" } th.num { "keys / max" } th.num { "evicted" }
                } }
                tbody {
                    @for w in &s.workers {
                        tr data-worker=(w.worker) {
                            td { (w.worker) } td.num { (w.partitions.len()) } td.num { (w.allowed) }
                            td.num { (w.denied) } td.num { (w.hits) } td.num { (w.errors) }
                            td.num { (w.journal_errors) } td.num { (w.policy_revision) }
                            td.num { (w.keys) " / " (w.max_keys) } td.num { (w.evicted_keys) }
                        }
                    }
                }
            }
            @for w in &s.workers {
                @for (key, why) in &w.refused_policies {
                    p.error { (w.worker) " refused the policy value " code { (key) } ": " (why) }
                }
            }
            h2 { "Partitions" }
            table.partitions {
                thead { tr { th.num { "partition" } th { "owner" } th.num { "snapshot age" } th.num { "keys in snapshot" } th.num { "decisions" } } }
                tbody {
                    @for r in &s.partitions {
                        tr data-partition=(r.partition) {
                            td.num { (r.partition) }
                            td { @if let Some(o) = &r.owner { (o) } @else { span.error { "none" } } }
                            td.num { @if let Some(ms) = r.snapshot_age_ms { (format!("{:.1} s", ms as f64 / 1000.0)) } @else { "-" } }
                            td.num { @if let Some(k) = r.snapshot_keys { (k) } @else { "-" } }
                            td.num { @if let Some(d) = r.decisions { (d) } @else { "-" } }
                        }
                    }
                }
            }
        },
    };
    ok(frame(&app, paths::STATUS, "Status", body))
}
