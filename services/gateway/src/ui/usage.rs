//! `GET /ui/usage?key=K&policy=P&last=1h&step=` (or `from=&to=`; `org=`
//! and `team=` before a grouped key's own token): a key's usage over a
//! range as a chart of used and denied per step (SPEC §9), asked with
//! `rl.usage.<key>` as `GET /v1/usage/{key}` and `sluice usage` ask it. A
//! click on a bar zooms in around it; links zoom out and move earlier or
//! later. The chart and its totals ([`series`]) are also a group's own
//! usage on the group page (`group.rs`).

use super::chart::usage_chart;
use super::form::{
    group_inputs, key_href, key_path, last_select, now_ms, policy_select, range_pairs,
};
use super::page::{error_note, frame, ok};
use super::paths;
use super::range::{auto_step, Range};
use crate::App;
use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;
use sluice_client::KeyPath;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::time::utc_minute;
use sluice_core::wire::usage::UsageQuery;
use std::sync::Arc;

#[derive(Deserialize, Default)]
pub(crate) struct UsageForm {
    key: Option<String>,
    org: Option<String>,
    team: Option<String>,
    policy: Option<String>,
    last: Option<String>,
    from: Option<String>,
    to: Option<String>,
    step: Option<String>,
}

pub(crate) async fn page(State(app): State<Arc<App>>, Query(q): Query<UsageForm>) -> Response {
    let key = q.key.as_deref().unwrap_or("").to_string();
    let policy = q
        .policy
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or(DEFAULT_POLICY)
        .to_string();
    let steps: Vec<String> = app.ui().usage.tiers.iter().map(|t| t.name()).collect();
    let form = html! {
        form.query method="get" action=(paths::USAGE) {
            label { "key " input type="text" name="key" value=(key) required; }
            (group_inputs(q.org.as_deref(), q.team.as_deref()))
            (policy_select(&app, Some(&policy), None))
            (last_select(q.last.as_deref()))
            label {
                "step "
                select name="step" {
                    option value="" { "auto" }
                    @for s in &steps {
                        option value=(s) selected[q.step.as_deref() == Some(s.as_str())] { (s) }
                    }
                }
            }
            button type="submit" { "Show" }
        }
    };
    let body = if key.is_empty() {
        html! { (form) p.hint { "Name a key to see what it used and was denied, step by step." } }
    } else {
        html! { (form) (key_series(&app, &key, &policy, &q).await) }
    };
    ok(frame(&app, paths::USAGE, "Usage", body))
}

async fn key_series(app: &App, key: &str, policy: &str, q: &UsageForm) -> Markup {
    let now = now_ms();
    let range = Range::of(now, q.from.as_deref(), q.to.as_deref(), q.last.as_deref());
    let path = key_path(q.org.as_deref(), q.team.as_deref(), key);
    let (range, path) = match (range, path) {
        (Ok(range), Ok(path)) => (range, path),
        (Err(e), _) | (_, Err(e)) => return html! { p.error { (e) } },
    };
    let step = q.step.clone().filter(|s| !s.is_empty());
    let link = |r: Range| {
        let [from, to] = range_pairs(r);
        key_href(
            paths::USAGE,
            path.token(),
            &[
                ("policy", policy),
                ("step", ""),
                (from.0, &from.1),
                (to.0, &to.1),
            ],
        )
    };
    let state = key_href(paths::KEY, path.token(), &[("policy", policy)]);
    let more = html! { a href=(state) { "live state" } };
    series(app, &path, policy, (range, step), &link, more).await
}

/// The chart of `key`'s usage under `policy` over `range` at `step` (the
/// finest that draws the range when `None`), with its totals and the
/// zooms: `link` is the address of the same view over another range;
/// `more` goes beside the zooms.
pub(crate) async fn series(
    app: &App,
    key: &KeyPath,
    policy: &str,
    (range, step): (Range, Option<String>),
    link: &(dyn Fn(Range) -> String + Sync),
    more: Markup,
) -> Markup {
    let now = now_ms();
    let step = step.or_else(|| auto_step(&app.ui().usage, range));
    let query = UsageQuery {
        policy: Some(policy.to_string()),
        from_ms: Some(range.from_ms),
        to_ms: Some(range.to_ms),
        step: step.clone(),
    };
    let reply = match app.client.usage(key, &query).await {
        Ok(r) => r,
        Err(e) => return error_note("cannot read the usage", &e),
    };
    let step = step.unwrap_or_default();
    let sluice_core::usage::Counts { used, denied } = reply.total();
    html! {
        p.summary data-used=(used) data-denied=(denied) {
            strong { (key) } " under " strong { (policy) } ", "
            (utc_minute(range.from_ms)) " to " (utc_minute(range.to_ms)) " UTC, "
            (reply.points.len()) " points" @if !step.is_empty() { " of " (step) } ": "
            span.used { "used " (used) } ", " span.denied { "denied " (denied) }
        }
        nav.zoom {
            a href=(link(range.earlier())) { "← earlier" }
            a href=(link(range.zoom_out(now))) { "zoom out" }
            @if let Some(later) = range.later(now) { a href=(link(later)) { "later →" } }
            (more)
        }
        figure {
            (usage_chart(&reply.points, &reply.parts, |t| link(range.zoom_in(t, now))))
            figcaption {
                span.legend.used { "used" } " " span.legend.denied { "denied" }
                " per step; click a bar to zoom in around it. Complete to "
                (utc_minute(reply.complete_to_ms)) " UTC."
            }
        }
    }
}
