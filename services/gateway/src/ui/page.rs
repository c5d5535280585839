//! The frame every dashboard page shares: the menu, the title, how an
//! error reads; the headers every `/ui` response carries; the stylesheet.
//!
//! All HTML is written with maud's `html!`, which escapes every value put
//! into it (`(value)`), so the escaping of keys, policy names and the
//! workers' sentences happens here and nowhere else: no page writes
//! `PreEscaped` text that came from outside.

use super::paths;
use crate::App;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use std::sync::Arc;

const STYLE: &str = include_str!("assets/style.css");

/// Nothing inline (no script, no style attribute), nothing from another
/// origin; forms post only here; no framing.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the security headers to every `/ui` response.
pub(crate) async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        // Keys travel in page addresses: never to another site. (Not
        // `no-referrer`: with it, browsers send `Origin: null` on a form's
        // POST, and the origin check of gate.rs would learn nothing.)
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ] {
        headers.insert(name, value);
    }
    response
}

/// `GET /ui/assets/style.css`.
pub(crate) async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// What a page says when it could not get what it shows.
pub(crate) fn error_note(what: &str, e: &sluice_client::Error) -> Markup {
    html! {
        p.error data-status=(e.status()) {
            (what) ": " (e.message())
        }
    }
}

/// A whole page: the menu (with `current` marked), the title and `body`.
/// `app` says whether to offer a log-out (only with `--api-token`).
pub(crate) fn frame(app: &App, current: &str, title: &str, body: Markup) -> Markup {
    let logged_in = app.tokens.is_some();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · sluice" }
                link rel="stylesheet" href=(paths::STYLE);
            }
            body {
                header {
                    nav {
                        span.brand { "sluice" }
                        @for (path, title) in paths::MENU {
                            @if *path == current {
                                a.current href=(path) aria-current="page" { (title) }
                            } @else {
                                a href=(path) { (title) }
                            }
                        }
                        @if logged_in {
                            form.logout method="post" action=(paths::LOGOUT) {
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// 200 with a page.
pub(crate) fn ok(markup: Markup) -> Response {
    markup.into_response()
}

/// A page with another status.
pub(crate) fn with_status(status: StatusCode, markup: Markup) -> Response {
    (status, markup).into_response()
}

/// `GET /ui/<anything else>`.
pub(crate) async fn not_found(State(app): State<Arc<App>>) -> Response {
    with_status(
        StatusCode::NOT_FOUND,
        frame(
            &app,
            "",
            "Not found",
            html! { p { "No such page. The menu above lists what there is." } },
        ),
    )
}
