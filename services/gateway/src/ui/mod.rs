//! The dashboard at `/ui` (SPEC §15): plain HTML pages rendered on the
//! server, charts drawn as SVG on the server, one stylesheet compiled into
//! the binary, and no script at all.
//!
//! Every page is a `GET` that asks the workers through the gateway's own
//! [`sluice_client::Client`] (the paths `/v1/usage`, `sluice usage`,
//! `sluice key inspect` use) and renders the answer with maud, which
//! escapes every value it is given: a key `<script>` shows as text. The one
//! action, a key's reset, is a `POST` with a confirmation step.
//!
//! Files, one job each:
//!
//! - `page.rs`: the frame of every page (menu, title, errors), the security
//!   headers every `/ui` response carries (a Content-Security-Policy that
//!   allows nothing inline and nothing from elsewhere), and the stylesheet.
//! - `gate.rs`: `--api-token` for the dashboard: a login page that asks for
//!   the token once and sets an HttpOnly, SameSite=Strict cookie; the CSRF
//!   check of every `POST`.
//! - `access.rs`: whether the gateway's NATS credentials may inspect and
//!   reset keys (probed in the background), so that a page neither waits
//!   for a request that cannot be answered nor offers an action that would
//!   be refused.
//! - `range.rs`: the time range and step a page shows, and its zooms.
//! - `chart.rs`: the SVG chart of a series (used and denied per step).
//! - one file per page: `usage.rs` (a key's usage over a range), `top.rs`
//!   (the top keys), `group.rs` (a group's own usage and its top members,
//!   SPEC §17), `policies.rs` (the policies in force), `key.rs` (a
//!   key's live state and its reset), `status.rs` (partitions, owners,
//!   workers), `alerts.rs` (the threshold alerts of SPEC §14).
//!
//! - `paths.rs`: every address, and the menu.
//!
//! A page is added with its line in the menu (`paths.rs`) and its handler
//! in [`page_route`].

mod access;
mod alerts;
mod chart;
mod form;
mod gate;
mod group;
mod key;
mod page;
mod paths;
mod policies;
mod range;
mod status;
mod top;
mod usage;

pub(crate) use access::AdminAccess;
pub(crate) use gate::Secrets;

use crate::App;
use axum::response::Redirect;
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use std::sync::Arc;

pub use paths::PREFIX;

/// The handler of a menu page.
fn page_route(path: &str) -> Option<MethodRouter<Arc<App>>> {
    Some(match path {
        paths::TOP => get(top::page),
        paths::GROUP => get(group::page),
        paths::USAGE => get(usage::page),
        paths::KEY => get(key::page),
        paths::POLICIES => get(policies::page),
        paths::STATUS => get(status::page),
        paths::ALERTS => get(alerts::page),
        _ => return None,
    })
}

/// The dashboard's routes: the pages, the reset action, the login and the
/// stylesheet; every response with [`page::security_headers`], every one
/// but the login page and the stylesheet behind [`gate::require`].
pub(crate) fn router(app: Arc<App>) -> Router<Arc<App>> {
    let first = paths::MENU[0].0;
    let mut pages = Router::new()
        .route(PREFIX, get(move || async move { Redirect::to(first) }))
        .route("/ui/", get(move || async move { Redirect::to(first) }))
        .route(paths::RESET, post(key::reset))
        .route("/ui/{*rest}", get(page::not_found));
    for (path, _) in paths::MENU {
        let route = page_route(path).expect("every page of the menu has a handler in page_route");
        pages = pages.route(path, route);
    }
    let pages = pages.route_layer(axum::middleware::from_fn_with_state(app, gate::require));
    Router::new()
        .merge(pages)
        .route(paths::LOGIN, get(gate::login_page).post(gate::login))
        .route(paths::LOGOUT, post(gate::logout))
        .route(paths::STYLE, get(page::style))
        .layer(axum::middleware::map_response(page::security_headers))
}
