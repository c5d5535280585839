//! `GET /ui/top?by=used|denied&n=20&last=1h&policy=`: the keys that used
//! (or were denied) the most in a range, with their exact totals (SPEC
//! §9, `rl.top`, as `GET /v1/usage?top=` and `sluice usage --top` ask).

use super::form::{href, last_select, now_ms, policy_select};
use super::page::{error_note, frame, ok};
use super::paths;
use super::range::Range;
use crate::App;
use axum::extract::{Query, State};
use axum::response::Response;
use maud::html;
use serde::Deserialize;
use sluice_core::time::utc_minute;
use sluice_core::usage::By;
use sluice_core::wire::usage::TopQuery;
use std::sync::Arc;

const DEFAULT_N: u64 = 20;

#[derive(Deserialize, Default)]
pub(crate) struct TopForm {
    by: Option<String>,
    n: Option<String>,
    policy: Option<String>,
    last: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

pub(crate) async fn page(State(app): State<Arc<App>>, Query(q): Query<TopForm>) -> Response {
    let by = match q.by.as_deref() {
        Some("denied") => By::Denied,
        _ => By::Used,
    };
    let policy = q.policy.as_deref().filter(|p| !p.is_empty());
    let n = q.n.as_deref().filter(|n| !n.is_empty());
    let form = html! {
        form.query method="get" action=(paths::TOP) {
            label {
                "by "
                select name="by" {
                    option value="used" selected[by == By::Used] { "used" }
                    option value="denied" selected[by == By::Denied] { "denied" }
                }
            }
            label { "top " input type="number" name="n" min="1" max="1000" value=(n.unwrap_or("20")); }
            (policy_select(&app, policy, Some("every policy")))
            (last_select(q.last.as_deref()))
            button type="submit" { "Show" }
        }
    };
    let result = async {
        let n = match n {
            None => DEFAULT_N,
            Some(n) => n
                .trim()
                .parse()
                .map_err(|_| format!("top is a number of keys (1 to 1000), not {n:?}"))?,
        };
        let range = Range::of(
            now_ms(),
            q.from.as_deref(),
            q.to.as_deref(),
            q.last.as_deref(),
        )?;
        let query = TopQuery {
            from_ms: Some(range.from_ms),
            to_ms: Some(range.to_ms),
            n: Some(n),
            by: Some(by),
            policy: policy.map(str::to_string),
            group: None,
        };
        Ok::<_, String>(app.client.top(&query).await)
    }
    .await;
    let listing = match result {
        Err(e) => html! { p.error { (e) } },
        Ok(Err(e)) => error_note("cannot read the top keys", &e),
        Ok(Ok(reply)) => html! {
            p.summary {
                (reply.keys.len()) " keys by " (if by == By::Used { "used" } else { "denied" }) ", "
                (utc_minute(reply.from_ms)) " to " (utc_minute(reply.to_ms)) " UTC"
            }
            @if reply.keys.is_empty() {
                p.hint { "Nothing was counted in the range." }
            } @else {
                table.top {
                    thead { tr { th { "#" } th { "key" } th { "policy" } th.num { "used" } th.num { "denied" } } }
                    tbody {
                        @for (i, k) in reply.keys.iter().enumerate() {
                            tr data-key=(k.shown_key()) data-used=(k.used) data-denied=(k.denied) {
                                td.num { (i + 1) }
                                td.key {
                                    @if k.key_is_printable() {
                                        a href=(href(paths::USAGE, &[("key", &k.key), ("policy", &k.policy)])) { (k.key) }
                                    } @else {
                                        code { (k.key_token) }
                                    }
                                }
                                td { (k.policy) }
                                td.num { (k.used) }
                                td.num { (k.denied) }
                            }
                        }
                    }
                }
            }
        },
    };
    ok(frame(
        &app,
        paths::TOP,
        "Top keys",
        html! { (form) (listing) },
    ))
}
