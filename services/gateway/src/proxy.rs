//! Proxy mode (`--upstream URL`): every path that is not the gateway's own
//! is rate-limited, then forwarded.
//!
//! - The key is the value of the key header (default `X-User-Id`), or, when
//!   the request has none (or an empty one), the client's IP address as seen
//!   on the TCP connection. `X-Forwarded-For` is not trusted for the key: any
//!   client could set it.
//! - Every request costs 1 of the proxy policy (default `default`).
//! - When that policy has `concurrency` (SPEC §13), each request holds
//!   one of its slots instead (a reserve of 1, all or nothing over the
//!   policy's limits and slots) from before it is forwarded until the
//!   upstream's response ends: its last byte, an upstream error, or the
//!   client going away. The slot is then settled (cost 1: the request was
//!   served) on a spawned task; a request the upstream never answered
//!   (502, or abandoned before the answer) releases it (cost 0). So at
//!   most `concurrency` requests per key are at the upstream at once.
//! - When that policy has a `max_wait` (SPEC §18; a `token_bucket` or
//!   `gcra` one), each request asks to wait up to it, and one allowed for
//!   a later start is held until then before it is forwarded (its
//!   response carries `Sluice-Wait-Ms`): callers are paced at the rate
//!   rather than answered 429, which only a request whose start would
//!   come later than `max_wait` gets. A held request keeps its connection
//!   open meanwhile. Asks for slots (`concurrency`) do not wait.
//! - Denied: 429 with the RateLimit headers, `Retry-After` and the decision
//!   as JSON; the upstream never sees the request. No worker and fallback
//!   `closed`: 503. Otherwise the request (method, path, query, headers,
//!   body) goes to the upstream, and its response (status, headers, body) is
//!   streamed back with the RateLimit headers added.
//! - Hop-by-hop headers (`Connection` and the ones it names, `Keep-Alive`,
//!   `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, `Proxy-*`) are not
//!   forwarded either way; `Host` becomes the upstream's; `X-Forwarded-For`
//!   (appended), `X-Forwarded-Host` and `X-Forwarded-Proto` are set. No
//!   protocol upgrades (WebSocket) and no TLS.

use crate::metrics::{Outcome, Route};
use crate::respond::{self, ErrorWord};
use crate::App;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, Version};
use axum::response::Response;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use sluice_client::{Answer, Error, HoldGuard, Reserved};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use url::Url;

/// Where proxied requests go.
pub(crate) struct Upstream {
    /// `host:port`
    authority: String,
    /// The URL's path without its trailing `/`, prefixed to every request path.
    prefix: String,
    http: HttpClient<HttpConnector, Body>,
}

impl Upstream {
    pub(crate) fn new(url: &Url) -> anyhow::Result<Upstream> {
        if url.scheme() != "http" {
            anyhow::bail!(
                "upstream {url}: only http:// upstreams are supported (the gateway does no TLS)"
            );
        }
        let host = url
            .host_str()
            .ok_or_else(|| anyhow::anyhow!("upstream {url} has no host"))?;
        let port = url.port_or_known_default().unwrap_or(80);
        if url.query().is_some() || url.fragment().is_some() {
            anyhow::bail!("upstream {url}: give a base URL without a query or fragment");
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        Ok(Upstream {
            authority: format!("{host}:{port}"),
            prefix: url.path().trim_end_matches('/').to_string(),
            http: HttpClient::builder(TokioExecutor::new()).build(connector),
        })
    }

    fn target(&self, uri: &Uri) -> Result<Uri, axum::http::Error> {
        let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
        Uri::builder()
            .scheme("http")
            .authority(self.authority.as_str())
            .path_and_query(format!("{}{path_and_query}", self.prefix))
            .build()
    }
}

pub(crate) async fn proxy(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let Some(upstream) = &app.upstream else {
        return respond::json_error(
            StatusCode::NOT_FOUND,
            ErrorWord::NotFound,
            &format!(
                "no such endpoint: {}; the gateway serves the /v1 routes its description lists (GET /v1/openapi.json), /healthz and /metrics (and proxies other paths when started with --upstream)",
                request.uri().path()
            ),
        );
    };
    let started = Instant::now();
    let key = match request.headers().get(&app.key_header) {
        Some(v) if !v.is_empty() => v.as_bytes().to_vec(),
        _ => peer.ip().to_string().into_bytes(),
    };
    let (answer, slot) = match admit(&app, &key).await {
        // Paced: its start is this far off, its unit already taken.
        Ok(admitted) if !admitted.0.wait.is_zero() => {
            tokio::time::sleep(admitted.0.wait).await;
            admitted
        }
        Ok(admitted) => admitted,
        Err(refused) => {
            app.metrics.observe(
                Route::Proxy,
                respond::outcome_of(&refused),
                started.elapsed(),
            );
            return match refused {
                Ok(denied) => respond::decision(&denied),
                Err(e) => respond::error(&e),
            };
        }
    };
    let response = forward(upstream, peer, request).await;
    let outcome = if response.is_ok() {
        Outcome::Allowed
    } else {
        Outcome::UpstreamError
    };
    app.metrics
        .observe(Route::Proxy, outcome, started.elapsed());
    match response {
        Ok(mut response) => {
            respond::put_decision_headers(response.headers_mut(), &answer);
            match slot {
                Some(slot) => response.map(|body| Body::new(SlotBody::new(body, slot))),
                None => response,
            }
        }
        // The upstream did nothing: dropping the slot releases it.
        Err(message) => {
            respond::json_error(StatusCode::BAD_GATEWAY, ErrorWord::BadGateway, &message)
        }
    }
}

/// Lets a request through (its decision, and the slot it holds when the
/// proxy policy has `concurrency`), or says why not: a denial or an error.
async fn admit(
    app: &App,
    key: &[u8],
) -> Result<(Answer, Option<HoldGuard>), Result<Answer, Error>> {
    let policy = &app.proxy_policy;
    let policies = app.client.policies();
    let in_force = policies.get(policy);
    let holds_slots = in_force.is_some_and(|p| p.holding().concurrency.is_some());
    let max_wait = in_force.map_or(Duration::ZERO, |p| p.max_wait().into());
    drop(policies);
    if holds_slots {
        return match app.client.hold(key, policy, 1, None).await {
            Ok(Reserved::Held(slot)) => Ok((slot.answer().clone(), Some(slot))),
            Ok(Reserved::Denied(denied)) => Err(Ok(denied)),
            Err(e) => Err(Err(e)),
        };
    }
    let asking = async {
        if max_wait.is_zero() {
            app.client.ask(key, policy, 1).await
        } else {
            app.client.ask_waiting(key, policy, 1, max_wait).await
        }
    };
    match crate::traces::ask(app, &sluice_core::key::encode_key(key), policy, 1, asking).await {
        Ok(allowed) if allowed.allowed => Ok((allowed, None)),
        other => Err(other),
    }
}

/// A proxied response's body that keeps its request's slot until the
/// response ends: its last frame, an error from the upstream, or a drop
/// before either (the client went away). Then the slot is settled with
/// the request's cost of 1.
struct SlotBody {
    inner: Body,
    slot: Option<HoldGuard>,
}

impl SlotBody {
    fn new(inner: Body, slot: HoldGuard) -> SlotBody {
        SlotBody {
            inner,
            slot: Some(slot),
        }
    }

    fn end(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.settle_later(1);
        }
    }
}

impl hyper::body::Body for SlotBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.end();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for SlotBody {
    fn drop(&mut self) {
        self.end();
    }
}

async fn forward(
    upstream: &Upstream,
    peer: SocketAddr,
    request: Request,
) -> Result<Response, String> {
    let (mut parts, body) = request.into_parts();
    parts.uri = upstream
        .target(&parts.uri)
        .map_err(|e| format!("cannot build the upstream URL: {e}"))?;
    parts.version = Version::HTTP_11;
    let original_host = parts.headers.remove(header::HOST);
    strip_hop_by_hop(&mut parts.headers);
    let forwarded_for = match parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
    {
        Some(prior) => format!("{prior}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&forwarded_for) {
        parts.headers.insert("x-forwarded-for", v);
    }
    if let Some(host) = original_host {
        parts.headers.insert("x-forwarded-host", host);
    }
    parts
        .headers
        .insert("x-forwarded-proto", HeaderValue::from_static("http"));
    let response = upstream
        .http
        .request(Request::from_parts(parts, body))
        .await
        .map_err(|e| format!("the upstream {} did not answer: {e}", upstream.authority))?;
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, Body::new(body)))
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// Removes the headers that describe one connection, not the message
/// (RFC 9110 §7.6.1), including those the `Connection` header names.
/// `Transfer-Encoding` goes too: hyper frames the body itself.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::TRANSFER_ENCODING);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_path_and_query_under_the_upstream_prefix() {
        let u = Upstream::new(&Url::parse("http://127.0.0.1:9000/api/").unwrap()).unwrap();
        let t = u.target(&"/users/7?x=1&y=%20".parse().unwrap()).unwrap();
        assert_eq!(t.to_string(), "http://127.0.0.1:9000/api/users/7?x=1&y=%20");
        let u = Upstream::new(&Url::parse("http://localhost").unwrap()).unwrap();
        assert_eq!(
            u.target(&"/".parse().unwrap()).unwrap().to_string(),
            "http://localhost:80/"
        );
        assert!(Upstream::new(&Url::parse("https://example.com").unwrap()).is_err());
    }

    #[test]
    fn hop_by_hop_headers_are_not_forwarded() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("close, x-secret"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-user-id", HeaderValue::from_static("alice"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-user-id"));
    }
}
