//! The HTTP gateway in reverse-proxy mode (docs/GATEWAY.md): an allowed
//! request goes on to the upstream intact, a denied one is answered 429
//! without reaching it, and an upstream that does not answer is a 502. The
//! upstream is a small axum app in the test process that echoes what it
//! received as JSON; the gateway (`common::gateway`) and the workers are
//! real.

use crate::common;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use common::gateway::{call, config, header, http, stack, Gateway};
use sluice_core::config::Fallback;
use sluice_gateway::Url;
use sluice_tests::{ask, serial, PEEK};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;

/// What the upstream saw of a request.
#[derive(Default)]
struct Upstream {
    requests: AtomicUsize,
}

async fn echo(
    State(upstream): State<Arc<Upstream>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    upstream.requests.fetch_add(1, Ordering::SeqCst);
    let h = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_string());
    let seen = serde_json::json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query(),
        "x_custom": h("x-custom"),
        "x_user_id": h("x-user-id"),
        "x_forwarded_for": h("x-forwarded-for"),
        "host": h("host"),
        "body_len": body.len(),
        "body_sum": body.iter().map(|&b| b as u64).sum::<u64>(),
        "body_head": String::from_utf8_lossy(&body[..body.len().min(32)]),
    });
    (
        StatusCode::CREATED,
        [("x-upstream", "yes"), ("content-type", "application/json")],
        seen.to_string(),
    )
}

async fn start_upstream() -> (SocketAddr, Arc<Upstream>) {
    let state = Arc::new(Upstream::default());
    let app = axum::Router::new().fallback(echo).with_state(state.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_forwards_allowed_requests_intact_and_answers_429_when_denied() {
    let _serial = serial().await;
    let stack = stack().await;
    let (upstream_addr, upstream) = start_upstream().await;
    let upstream_url = Url::parse(&format!("http://{upstream_addr}")).unwrap();
    let gw = Gateway::start(
        &stack.nats.url(),
        config(Fallback::Closed),
        Some(upstream_url),
    )
    .await;
    let http = http();

    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let sum: u64 = body.iter().map(|&b| b as u64).sum();
    let (status, headers, seen) = call(
        http.post(gw.url("/things/7?x=1&y=two%20words"))
            .header("X-User-Id", "mallory")
            .header("X-Custom", "kept")
            .body(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "the upstream's status: {seen}");
    assert_eq!(header(&headers, "x-upstream"), Some("yes"));
    assert_eq!(header(&headers, "ratelimit-remaining"), Some("4"));
    assert_eq!(header(&headers, "ratelimit-limit"), Some("5"));
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["path"], "/things/7");
    assert_eq!(seen["query"], "x=1&y=two%20words");
    assert_eq!(seen["x_custom"], "kept");
    assert_eq!(seen["x_user_id"], "mallory");
    assert_eq!(seen["x_forwarded_for"], "127.0.0.1");
    assert_eq!(seen["host"], upstream_addr.to_string());
    assert_eq!(seen["body_len"], body.len());
    assert_eq!(seen["body_sum"], sum);

    for _ in 0..4 {
        let resp = http
            .get(gw.url("/anything"))
            .header("X-User-Id", "mallory")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201);
    }
    let (status, headers, body) =
        call(http.get(gw.url("/anything")).header("X-User-Id", "mallory")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "retry-after"), Some("10"));
    assert_eq!(body["allowed"], false);
    assert_eq!(
        upstream.requests.load(Ordering::SeqCst),
        5,
        "a denied request never reaches the upstream"
    );

    // Another key is not affected; without the header the key is the client's IP.
    let resp = http
        .get(gw.url("/x"))
        .header("X-User-Id", "nina")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let mut by_ip = Vec::new();
    for _ in 0..6 {
        by_ip.push(
            http.get(gw.url("/x"))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(by_ip, [201, 201, 201, 201, 201, 429]);
    let nats = stack.clients(1).await.remove(0);
    let d = ask(&nats, "127%2E0%2E0%2E1", PEEK).await.unwrap();
    assert!(!d.allowed, "the IP key is 127.0.0.1");

    // The gateway's own endpoints are not proxied.
    let (status, _, _) = call(http.get(gw.url("/healthz"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 11);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_502() {
    let _serial = serial().await;
    let stack = stack().await;
    // A port nobody listens on: bind one, then close it.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let upstream = Url::parse(&format!("http://{closed}/base")).unwrap();
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Closed), Some(upstream)).await;
    let (status, _, body) = call(http().get(gw.url("/x")).header("X-User-Id", "oscar")).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(body["error"], "bad_gateway");
    gw.stop().await;
}
