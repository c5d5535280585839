//! The API tokens for the dashboard, and the checks of its `POST`s.
//!
//! With tokens, every `/ui` page but the login page (and its stylesheet)
//! needs either `Authorization: Bearer <token>` (scripts) or the session
//! cookie that the login page sets once a token was typed: `HttpOnly`
//! (no script reads it), `SameSite=Strict` (no other site's page sends
//! it), `Path=/ui`, `Secure` under HTTPS. The cookie holds a random
//! session secret made at start, not the token: restarting the gateway
//! logs everyone out, and the token never sits in a browser.
//!
//! A token's role carries over to its login: there are two session
//! secrets, one per role, so a read token's cookie (`--api-read-token`,
//! role `read`) shows every page but is refused the one action, a key's
//! reset, which needs a full token's login (or bearer), as `POST
//! /v1/reset` does. The request's [`Login`] tells a page which it serves.
//!
//! Every `POST` (log in, log out, reset a key) is refused when the browser
//! says it comes from another site (`Sec-Fetch-Site`, `Origin`), and a
//! reset also needs the form's CSRF field, a third random secret made at
//! start that only the gateway's own pages carry.

use super::paths;
use crate::api_token::Role;
use crate::App;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde::Deserialize;
use std::sync::Arc;
use subtle::ConstantTimeEq;

const COOKIE: &str = "sluice_ui";

/// The dashboard's random secrets, made once per gateway process.
pub(crate) struct Secrets {
    /// The cookie of a full token's login.
    full_session: String,
    /// The cookie of a read token's login.
    read_session: String,
    csrf: String,
    /// Under HTTPS: the cookie is `Secure`.
    secure: bool,
}

impl Secrets {
    pub(crate) fn new(secure: bool) -> anyhow::Result<Secrets> {
        Ok(Secrets {
            full_session: random_hex()?,
            read_session: random_hex()?,
            csrf: random_hex()?,
            secure,
        })
    }

    /// The value of every form's CSRF field.
    pub(crate) fn csrf(&self) -> &str {
        &self.csrf
    }

    /// The role of the login whose cookie `headers` carry, if any.
    fn signed_in(&self, headers: &HeaderMap) -> Option<Role> {
        let is = |v: &str, secret: &str| bool::from(v.as_bytes().ct_eq(secret.as_bytes()));
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .filter_map(
                |v| match (is(v, &self.full_session), is(v, &self.read_session)) {
                    (true, _) => Some(Role::Full),
                    (_, true) => Some(Role::Read),
                    _ => None,
                },
            )
            .reduce(stronger)
    }

    fn session(&self, role: Role) -> &str {
        match role {
            Role::Full => &self.full_session,
            Role::Read => &self.read_session,
        }
    }

    fn cookie(&self, value: &str, max_age: Option<u64>) -> String {
        let mut c = format!("{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/ui");
        if let Some(age) = max_age {
            c.push_str(&format!("; Max-Age={age}"));
        }
        if self.secure {
            c.push_str("; Secure");
        }
        c
    }
}

fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("no randomness for the dashboard's secrets: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn secrets(app: &App) -> &Secrets {
    &app.ui
        .as_ref()
        .expect("the dashboard's routes exist only with the dashboard on")
        .secrets
}

/// Who a dashboard request comes from: a full login (or no tokens at
/// all), which may reset keys, or a read one, which may only look. Every
/// request behind [`require`] carries one, for the page to offer only what
/// it may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Login(pub(crate) Role);

impl Login {
    pub(crate) fn may_reset(self) -> bool {
        self.0 == Role::Full
    }
}

fn stronger(a: Role, b: Role) -> Role {
    if a == Role::Full || b == Role::Full {
        Role::Full
    } else {
        Role::Read
    }
}

/// The middleware on every page but the login page.
pub(crate) async fn require(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(tokens) = &app.tokens else {
        request.extensions_mut().insert(Login(Role::Full));
        return next.run(request).await;
    };
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let bearer = tokens.now().find(bearer).map(|named| named.role);
    let cookie = secrets(&app).signed_in(request.headers());
    let role = match (bearer, cookie) {
        (Some(a), Some(b)) => Some(stronger(a, b)),
        (one, other) => one.or(other),
    };
    if let Some(role) = role {
        let looks = matches!(*request.method(), Method::GET | Method::HEAD);
        if role == Role::Read && !looks {
            return Refused(READ_ONLY).into_response();
        }
        request.extensions_mut().insert(Login(role));
        return next.run(request).await;
    }
    if request.method() == Method::GET {
        let target = request
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or(paths::PREFIX);
        let to: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("next", target)
            .finish();
        return Redirect::to(&format!("{}?{to}", paths::LOGIN)).into_response();
    }
    login_form(StatusCode::UNAUTHORIZED, "Log in first.", "/ui")
}

#[derive(Deserialize)]
pub(crate) struct NextQuery {
    next: Option<String>,
}

/// `GET /ui/login`.
pub(crate) async fn login_page(
    State(app): State<Arc<App>>,
    axum::extract::Query(q): axum::extract::Query<NextQuery>,
) -> Response {
    let next = local_target(q.next.as_deref());
    if app.tokens.is_none() {
        return Redirect::to(next).into_response();
    }
    login_form(StatusCode::OK, "", next)
}

fn login_form(status: StatusCode, note: &str, next: &str) -> Response {
    let page = html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Log in · sluice" }
                link rel="stylesheet" href=(paths::STYLE);
            }
            body.login {
                main {
                    h1 { "sluice" }
                    p {
                        "This gateway needs an API token: a full one ("
                        code { "--api-token" }
                        "), or a read one ("
                        code { "--api-read-token" }
                        ") to look without resetting keys."
                    }
                    @if !note.is_empty() { p.error { (note) } }
                    form method="post" action=(paths::LOGIN) {
                        input type="hidden" name="next" value=(next);
                        label { "API token " input type="password" name="token" autocomplete="current-password" autofocus; }
                        button type="submit" { "Log in" }
                    }
                }
            }
        }
    };
    (status, page).into_response()
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
    next: Option<String>,
}

/// `POST /ui/login`: the token typed; the cookie when it is right.
pub(crate) async fn login(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if let Err(refused) = same_site(&headers) {
        return refused.into_response();
    }
    let next = local_target(form.next.as_deref());
    let Some(tokens) = &app.tokens else {
        return Redirect::to(next).into_response();
    };
    let Some(role) = tokens.now().role_of(form.token.trim().as_bytes()) else {
        return login_form(
            StatusCode::UNAUTHORIZED,
            "That is not one of this gateway's tokens.",
            next,
        );
    };
    let s = secrets(&app);
    let mut response = Redirect::to(next).into_response();
    if let Ok(v) = s.cookie(s.session(role), None).parse() {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// `POST /ui/logout`: forgets the cookie.
pub(crate) async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(refused) = same_site(&headers) {
        return refused.into_response();
    }
    let mut response = Redirect::to(paths::LOGIN).into_response();
    if let Ok(v) = secrets(&app).cookie("", Some(0)).parse() {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// The checks of a `POST` that changes something: from this site, and
/// carrying the CSRF field of this gateway's pages.
pub(crate) fn check_post(app: &App, headers: &HeaderMap, csrf: &str) -> Result<(), Refused> {
    same_site(headers)?;
    if !bool::from(csrf.as_bytes().ct_eq(secrets(app).csrf.as_bytes())) {
        return Err(Refused(
            "this form is not one of this gateway's pages (its CSRF field is missing or stale: reload the page and try again)",
        ));
    }
    Ok(())
}

/// Refuses what the browser says comes from another site.
fn same_site(headers: &HeaderMap) -> Result<(), Refused> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if site != "same-origin" && site != "none" {
            return Err(Refused("a request from another site"));
        }
    }
    // `null`: a browser that does not say (privacy settings); the CSRF
    // field still has to match.
    let origin = text(header::ORIGIN).filter(|o| *o != "null");
    if let (Some(origin), Some(host)) = (origin, text(header::HOST)) {
        let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
        if origin_host != host {
            return Err(Refused("a request from another origin"));
        }
    }
    Ok(())
}

/// What a read login is told when it tries to change something.
pub(crate) const READ_ONLY: &str = "this login may only look (a read token: --api-read-token, or role \"read\" in --api-tokens); log in with a full token to reset keys";

/// A `POST` refused: 403 with the reason.
pub(crate) struct Refused(&'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        (StatusCode::FORBIDDEN, format!("refused: {}", self.0)).into_response()
    }
}

/// `next` when it is a dashboard address, else the dashboard (never
/// another site: no open redirect).
fn local_target(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if (n == paths::PREFIX || n.starts_with("/ui/") || n.starts_with("/ui?"))
                && !n.contains("//")
                && !n.contains('\\') =>
        {
            n
        }
        _ => paths::PREFIX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_goes_back_only_to_the_dashboard() {
        assert_eq!(local_target(Some("/ui/top?by=denied")), "/ui/top?by=denied");
        for elsewhere in [
            "https://evil.example/",
            "//evil.example",
            "/v1/allow/x",
            "/ui/..//x",
            "/ui\\x",
        ] {
            assert_eq!(local_target(Some(elsewhere)), "/ui", "{elsewhere}");
        }
        assert_eq!(local_target(None), "/ui");
    }

    #[test]
    fn only_a_session_cookie_signs_in_and_it_keeps_its_role() {
        let s = Secrets::new(false).unwrap();
        let with = |cookie: String| {
            let mut h = HeaderMap::new();
            h.insert(header::COOKIE, cookie.parse().unwrap());
            s.signed_in(&h)
        };
        assert_eq!(s.signed_in(&HeaderMap::new()), None);
        assert_eq!(with(format!("a=b; {COOKIE}=nope")), None);
        assert_eq!(with(format!("{COOKIE}={}", s.csrf)), None);
        assert_eq!(
            with(format!("a=b; {COOKIE}={}", s.full_session)),
            Some(Role::Full)
        );
        assert_eq!(
            with(format!("a=b; {COOKIE}={}", s.read_session)),
            Some(Role::Read)
        );
        // Two cookies (two logins in one browser): the stronger counts.
        assert_eq!(
            with(format!(
                "{COOKIE}={}; {COOKIE}={}",
                s.read_session, s.full_session
            )),
            Some(Role::Full)
        );
        assert!(s.cookie("x", None).contains("HttpOnly; SameSite=Strict"));
        assert_ne!(s.full_session, s.read_session);
        assert_ne!(s.full_session, s.csrf);
    }

    #[test]
    fn a_post_from_another_site_is_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8080".parse().unwrap());
        assert!(same_site(&h).is_ok());
        h.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        assert!(same_site(&h).is_ok());
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(same_site(&h).is_err());
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(same_site(&h).is_err());
    }
}
