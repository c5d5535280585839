//! `GET /ui/key?key=K&policy=P` (`org=` and `team=` before a grouped
//! key's own token): a key's live state (SPEC §8,
//! `rl.inspect.<key>`, as `sluice inspect` asks it): per policy with state,
//! each limit's max, window, used, remaining and time to reset, and any
//! override in force.
//!
//! `POST /ui/key/reset`: forgets the key's counters (`rl.reset.<key>`, as
//! `sluice reset`), with the gateway's NATS credentials, so exactly what
//! they allow. The button shows only when they allow it (`access.rs`) and
//! the login is a full token's (a read token's may only look: `gate.rs`
//! refuses its `POST`s); the first `POST` asks for a confirmation, a second
//! one with `confirm=yes` resets; both carry the CSRF field (`gate.rs`).

use super::access::Access;
use super::form::{group_inputs, key_fields, key_href, key_path, policy_select};
use super::gate::{check_post, Login};
use super::page::{error_note, frame, ok, with_status};
use super::paths;
use crate::App;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;
use sluice_client::{queries, KeyPath};
use sluice_core::config::format_duration;
use std::sync::Arc;
use std::time::Duration;

/// How long an inspect or reset may take: one key's owner answers in
/// milliseconds; longer means it cannot answer (or the request was dropped
/// before the credentials were probed).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);
const DENIED: &str = "This gateway's NATS credentials may not publish there: inspect and reset need the admin role of `sluice nats-config --auth` (SPEC §10).";

#[derive(Deserialize, Default)]
pub(crate) struct KeyForm {
    key: Option<String>,
    org: Option<String>,
    team: Option<String>,
    policy: Option<String>,
}

pub(crate) async fn page(
    State(app): State<Arc<App>>,
    Extension(login): Extension<Login>,
    Query(q): Query<KeyForm>,
) -> Response {
    let key = q.key.as_deref().unwrap_or("");
    let policy = q.policy.as_deref().filter(|p| !p.is_empty());
    let form = html! {
        form.query method="get" action=(paths::KEY) {
            label { "key " input type="text" name="key" value=(key) required; }
            (group_inputs(q.org.as_deref(), q.team.as_deref()))
            (policy_select(&app, policy, Some("every policy")))
            button type="submit" { "Inspect" }
        }
    };
    let state = if key.is_empty() {
        html! { p.hint { "Name a key to see its counters as they stand now." } }
    } else {
        match key_path(q.org.as_deref(), q.team.as_deref(), key) {
            Ok(path) => state(&app, login, &path, policy).await,
            Err(e) => html! { p.error { (e) } },
        }
    };
    ok(frame(&app, paths::KEY, "Key", html! { (form) (state) }))
}

async fn state(app: &App, login: Login, key: &KeyPath, policy: Option<&str>) -> Markup {
    let access = &app.ui().access;
    if access.inspect() == Access::Denied {
        return html! { p.error.denied { "Cannot inspect keys. " (DENIED) } };
    }
    let reply = match queries::inspect(app.client.nats(), key, policy, ADMIN_TIMEOUT).await {
        Ok(r) => r,
        Err(e) => return error_note("cannot inspect the key", &e),
    };
    let ms = |v: u64| format_duration(Duration::from_millis(v));
    html! {
        nav.zoom {
            a href=(key_href(paths::USAGE, key.token(), &[("policy", policy.unwrap_or(""))])) { "usage history" }
        }
        @if reply.policies.is_empty() {
            p.hint.whole { (key) ": no state (every limit is whole)." }
        }
        @for p in &reply.policies {
            section.policy-state data-policy=(p.policy) {
                h2 {
                    (p.policy) " (" (p.algorithm) ")"
                    @if let Some(o) = &p.overridden {
                        " " span.override { @if o.blocked { "blocked by an override" } @else { "limits from an override" } }
                    }
                }
                table {
                    thead { tr { th.num { "max" } th.num { "per" } th.num { "used" } th.num { "remaining" } th.num { "whole again in" } } }
                    tbody {
                        @for l in &p.limits {
                            tr data-used=(l.used) data-remaining=(l.remaining) {
                                td.num { (l.max) } td.num { (ms(l.per_ms)) } td.num { (l.used) }
                                td.num { (l.remaining) } td.num { (format!("{:.1} s", l.reset_ms as f64 / 1000.0)) }
                            }
                        }
                    }
                }
            }
        }
        @if access.reset() == Access::Allowed {
            @if login.may_reset() {
                (reset_form(app, key, policy, false))
            } @else {
                p.hint.read-only { "This login may only look: log in with a full token to reset the key." }
            }
        }
    }
}

/// The reset button; `confirm`: the second step's.
fn reset_form(app: &App, key: &KeyPath, policy: Option<&str>, confirm: bool) -> Markup {
    let fields = key_fields(key.token());
    html! {
        form.reset method="post" action=(paths::RESET) {
            @for (name, value) in &fields {
                input type="hidden" name=(name) value=(value);
            }
            input type="hidden" name="policy" value=(policy.unwrap_or(""));
            input type="hidden" name="csrf" value=(app.ui().secrets.csrf());
            @if confirm {
                input type="hidden" name="confirm" value="yes";
                button.danger type="submit" { "Yes, reset" }
                " "
                a href=(key_href(paths::KEY, key.token(), &[("policy", policy.unwrap_or(""))])) { "Cancel" }
            } @else {
                button type="submit" { "Reset…" }
            }
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct ResetForm {
    key: String,
    #[serde(default)]
    org: String,
    #[serde(default)]
    team: String,
    #[serde(default)]
    policy: String,
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirm: String,
}

/// `POST /ui/key/reset`.
pub(crate) async fn reset(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<ResetForm>,
) -> Response {
    if let Err(refused) = check_post(&app, &headers, &form.csrf) {
        return refused.into_response();
    }
    let key = match key_path(Some(&form.org), Some(&form.team), &form.key) {
        Ok(path) => path,
        Err(e) => {
            let body = html! { p.error { (e) } };
            return with_status(
                StatusCode::BAD_REQUEST,
                frame(&app, paths::KEY, "Reset", body),
            );
        }
    };
    let key = &key;
    let policy = Some(form.policy.as_str()).filter(|p| !p.is_empty());
    let under = policy.map_or("every policy".to_string(), |p| format!("policy {p}"));
    if app.ui().access.reset() == Access::Denied {
        let body = html! { p.error.denied { "Cannot reset keys. " (DENIED) } };
        return with_status(
            StatusCode::FORBIDDEN,
            frame(&app, paths::KEY, "Reset", body),
        );
    }
    if form.confirm != "yes" {
        let body = html! {
            p.confirm {
                "Reset " strong { (key) } " under " (under)
                "? Its counters are forgotten: its next asks start from full limits. This cannot be undone."
            }
            (reset_form(&app, key, policy, true))
        };
        return ok(frame(&app, paths::KEY, "Reset a key", body));
    }
    let body = match queries::reset(app.client.nats(), key, policy, ADMIN_TIMEOUT).await {
        Ok(reply) if reply.reset.is_empty() => {
            html! { p.done { (key) ": nothing to reset under " (under) "." } }
        }
        Ok(reply) => html! { p.done { (key) ": reset under " (reply.reset.join(", ")) "." } },
        Err(e) => error_note("cannot reset the key", &e),
    };
    let back = html! {
        (body)
        p { a href=(key_href(paths::KEY, key.token(), &[("policy", policy.unwrap_or(""))])) { "Back to the key" } }
    };
    ok(frame(&app, paths::KEY, "Reset a key", back))
}
