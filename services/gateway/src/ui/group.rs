//! `GET /ui/group?org=acme&policy=org&by=used&n=20&last=1h` (or
//! `from=&to=`): one group (SPEC §17) on one page, over one range: its
//! own usage, the organisation's key (`acme`) under its level's policy,
//! drawn as the usage page draws a key's ([`super::usage::series`]); and
//! its members that used, or were denied, the most (`rl.top` with
//! `group`, as `GET /v1/usage?top=N&group=` and `sluice usage --top N
//! --group` ask), each linked to its usage page.
//!
//! Why both on one page: an organisation that reaches its pool asks
//! "who spent it?", and the answer is its members' ranking over the
//! same range as the pool's chart. The policy chooser is the group's own
//! level's; it starts at the outermost level of the configured chains (a
//! policy that is another's parent and has none itself). The members are
//! ranked under every policy (a user's level, a team's).

use super::form::{
    by_name, by_of, href, key_href, last_select, now_ms, policy_select, range_pairs,
    ranking_inputs, top_n,
};
use super::page::{error_note, frame, ok};
use super::paths;
use super::range::Range;
use super::top::key_table;
use super::usage::series;
use crate::App;
use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;
use sluice_client::KeyPath;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::time::utc_minute;
use sluice_core::usage::By;
use sluice_core::wire::usage::TopQuery;
use std::sync::Arc;

#[derive(Deserialize, Default)]
pub(crate) struct GroupForm {
    org: Option<String>,
    policy: Option<String>,
    by: Option<String>,
    n: Option<String>,
    last: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

pub(crate) async fn page(State(app): State<Arc<App>>, Query(q): Query<GroupForm>) -> Response {
    let org = q.org.as_deref().unwrap_or("");
    let policy = match q.policy.as_deref().filter(|p| !p.is_empty()) {
        Some(p) => p.to_string(),
        None => outermost_policy(&app),
    };
    let by = by_of(q.by.as_deref());
    let form = html! {
        form.query method="get" action=(paths::GROUP) {
            label { "org " input type="text" name="org" value=(org) required; }
            (policy_select(&app, Some(&policy), None))
            (ranking_inputs(by, q.n.as_deref()))
            (last_select(q.last.as_deref()))
            button type="submit" { "Show" }
        }
    };
    let body = if org.is_empty() {
        html! {
            (form)
            p.hint { "Name a group (an organisation, the first token of its keys) to see its own usage and the members that used the most." }
        }
    } else {
        html! { (form) (group(&app, org, &policy, by, &q).await) }
    };
    ok(frame(&app, paths::GROUP, "Group", body))
}

/// The group's own usage, then its members' ranking, over the page's range.
async fn group(app: &App, org: &str, policy: &str, by: By, q: &GroupForm) -> Markup {
    let now = now_ms();
    let range = Range::of(now, q.from.as_deref(), q.to.as_deref(), q.last.as_deref());
    let key = KeyPath::new([org]).map_err(|e| e.message().to_string());
    let (range, key, n) = match (range, key, top_n(q.n.as_deref())) {
        (Ok(range), Ok(key), Ok(n)) => (range, key, n),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return html! { p.error { (e) } },
    };
    let n_text = n.to_string();
    let link = |r: Range| {
        let [from, to] = range_pairs(r);
        href(
            paths::GROUP,
            &[
                ("org", org),
                ("policy", policy),
                ("by", by_name(by)),
                ("n", &n_text),
                (from.0, &from.1),
                (to.0, &to.1),
            ],
        )
    };
    let state = key_href(paths::KEY, key.token(), &[("policy", policy)]);
    let more = html! { a href=(state) { "live state" } };
    let own = series(app, &key, policy, (range, None), &link, more).await;
    html! {
        section.own {
            h2 { "Its own usage" }
            (own)
        }
        section.members {
            h2 { "Its members" }
            (members(app, &key, by, n, range).await)
        }
    }
}

/// The `n` members of the group `key` that used (or were denied) the
/// most in `range`.
async fn members(app: &App, key: &KeyPath, by: By, n: u64, range: Range) -> Markup {
    let query = TopQuery {
        from_ms: Some(range.from_ms),
        to_ms: Some(range.to_ms),
        n: Some(n),
        by: Some(by),
        policy: None,
        group: Some(key.token().to_string()),
    };
    let reply = match app.client.top(&query).await {
        Ok(reply) => reply,
        Err(e) => return error_note("cannot read the group's members", &e),
    };
    html! {
        p.summary {
            (reply.keys.len()) " members by " (by_name(by)) ", "
            (utc_minute(reply.from_ms)) " to " (utc_minute(reply.to_ms)) " UTC"
        }
        @if reply.keys.is_empty() {
            p.hint { "No member of " (key) " was counted in the range." }
        } @else {
            (key_table(&reply.keys, None))
        }
    }
}

/// The policy a group's own level starts at: the first (by name) that is
/// another policy's parent and has no parent itself; `default` when no
/// policy has a parent.
fn outermost_policy(app: &App) -> String {
    let policies = app.client.policies();
    let is_parent = |name: &str| policies.iter().any(|p| p.parent() == Some(name));
    let outermost = policies
        .iter()
        .find(|p| p.parent().is_none() && is_parent(p.name()))
        .map_or(DEFAULT_POLICY, |p| p.name())
        .to_string();
    outermost
}
