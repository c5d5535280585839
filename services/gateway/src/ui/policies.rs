//! `GET /ui/policies`: the policies in force (SPEC §7) as the gateway
//! follows them (the config file's, overlaid by the `sluice-policies`
//! bucket, as every worker applies them): each one's algorithm, limits,
//! options, the per-key overrides under it, and its whole table as the
//! bucket holds it (`sluice policy get`), so that whatever a policy says
//! shows here.

use super::form::href;
use super::page::{frame, ok};
use super::paths;
use crate::App;
use axum::extract::State;
use axum::response::Response;
use maud::html;
use sluice_core::config::PolicyTable;
use std::sync::Arc;

pub(crate) async fn page(State(app): State<Arc<App>>) -> Response {
    let policies = app.client.policies();
    let body = html! {
        table.policies {
            thead { tr { th { "policy" } th { "algorithm" } th { "limits" } th { "options" } th.num { "overrides" } th { "as stored" } } }
            tbody {
                @for p in policies.iter() {
                    @let table = PolicyTable::of(p);
                    tr data-policy=(p.name()) {
                        td { a href=(href(paths::TOP, &[("policy", p.name())])) { (p.name()) } }
                        td { (table.algorithm.map(|a| a.to_string()).unwrap_or_else(|| "(slots only)".into())) }
                        td {
                            ul.limits {
                                @for l in &table.limits {
                                    li {
                                        (l.max) " per " (l.per)
                                        @if let Some(burst) = l.burst { ", burst " (burst) }
                                    }
                                }
                            }
                        }
                        td {
                            @if table.local_budget { "local budget " }
                            @if p.mode() == sluice_core::policy::Mode::Shadow { "shadow " }
                            @if let Some(n) = p.holding().concurrency { "concurrency " (n) }
                        }
                        td.num { (policies.override_tables(p.name()).count()) }
                        td { code { (serde_json::to_string(&table).unwrap_or_default()) } }
                    }
                }
            }
        }
        p.hint {
            "Change them with " code { "sluice policy set" } " or " code { "sluice policy apply" }
            "; every gateway and worker follows within a second."
        }
    };
    ok(frame(&app, paths::POLICIES, "Policies", body))
}
