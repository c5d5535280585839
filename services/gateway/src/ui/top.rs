//! `GET /ui/top?by=used|denied&n=20&last=1h&policy=`: the keys that used
//! (or were denied) the most in a range, with their exact totals (SPEC
//! §9, `rl.top`, as `GET /v1/usage?top=` and `sluice usage --top` ask).
//! A grouped key's row links its group's page (`group.rs`), which lists
//! the group's members in the same table ([`key_table`]).

use super::form::{
    by_name, by_of, href, key_href, last_select, now_ms, policy_select, ranking_inputs, top_n,
};
use super::page::{error_note, frame, ok};
use super::paths;
use super::range::Range;
use crate::App;
use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;
use sluice_core::key::{group_of, shown_key};
use sluice_core::time::utc_minute;
use sluice_core::wire::usage::{TopEntry, TopQuery};
use std::sync::Arc;

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
    let by = by_of(q.by.as_deref());
    let policy = q.policy.as_deref().filter(|p| !p.is_empty());
    let form = html! {
        form.query method="get" action=(paths::TOP) {
            (ranking_inputs(by, q.n.as_deref()))
            (policy_select(&app, policy, Some("every policy")))
            (last_select(q.last.as_deref()))
            button type="submit" { "Show" }
        }
    };
    let result = async {
        let n = top_n(q.n.as_deref())?;
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
    // A group's page over the same range.
    let range = [("last", &q.last), ("from", &q.from), ("to", &q.to)]
        .map(|(name, v)| (name, v.as_deref().unwrap_or("")));
    let listing = match result {
        Err(e) => html! { p.error { (e) } },
        Ok(Err(e)) => error_note("cannot read the top keys", &e),
        Ok(Ok(reply)) => html! {
            p.summary {
                (reply.keys.len()) " keys by " (by_name(by)) ", "
                (utc_minute(reply.from_ms)) " to " (utc_minute(reply.to_ms)) " UTC"
            }
            @if reply.keys.is_empty() {
                p.hint { "Nothing was counted in the range." }
            } @else {
                (key_table(&reply.keys, Some(&range)))
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

/// The ranked keys as a table, each printable key linked to its usage
/// page; with `group_range`, a column that links a grouped key's group
/// page over that range (the page's `last`, `from`, `to`).
pub(crate) fn key_table(keys: &[TopEntry], group_range: Option<&[(&str, &str)]>) -> Markup {
    html! {
        table.top {
            thead { tr {
                th { "#" } th { "key" } th { "policy" } th.num { "used" } th.num { "denied" }
                @if group_range.is_some() { th { "group" } }
            } }
            tbody {
                @for (i, k) in keys.iter().enumerate() {
                    tr data-key=(k.shown_key()) data-used=(k.used) data-denied=(k.denied) {
                        td.num { (i + 1) }
                        td.key {
                            @if k.key_is_printable() {
                                a href=(key_href(paths::USAGE, &k.key_token, &[("policy", &k.policy)])) { (k.key) }
                            } @else {
                                code { (k.key_token) }
                            }
                        }
                        td { (k.policy) }
                        td.num { (k.used) }
                        td.num { (k.denied) }
                        @if let Some(range) = group_range {
                            td.group { (group_link(&k.key_token, range)) }
                        }
                    }
                }
            }
        }
    }
}

/// A link to the group page of the group whose member `key_token` is,
/// if it is one.
fn group_link(key_token: &str, range: &[(&str, &str)]) -> Markup {
    let Some(group) = group_of(key_token) else {
        return html! {};
    };
    let org = shown_key(group);
    let mut pairs = vec![("org", org.as_str())];
    pairs.extend_from_slice(range);
    html! { a href=(href(paths::GROUP, &pairs)) data-group=(org) { (org) } }
}
