//! The HTTP gateway (`sluice-gateway`, CONTRACT §6) through a real HTTP
//! client, against a real nats-server and real `sluice worker` processes.
//! The gateway runs in the test process (`sluice_gateway::serve` on a
//! 127.0.0.1:0 listener); in proxy mode the upstream is a small axum app in
//! the test process too.

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::Value;
use sluice_core::config::{Config, Fallback};
use sluice_core::nats_config::Role;
use sluice_gateway::{GatewayOptions, Url};
use sluice_tests::{
    ask, eventually, one_line_error, rounds, serial, test_password, Load, Stack, TestCa,
    TestConfig, PEEK, TICK,
};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The binary under test (its workers).
const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

const FAST: Duration = Duration::from_millis(500);

/// A stack of two workers with the [`TestConfig`].
async fn stack() -> Stack {
    Stack::start(SLUICE, &TestConfig::new().toml(), 2).await
}

fn config(fallback: Fallback) -> Config {
    let mut c = TestConfig::new().config();
    c.fallback = fallback;
    c
}

/// A gateway served from this process; stopped (gracefully) on drop.
struct Gateway {
    addr: SocketAddr,
    base: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Gateway {
    async fn start(nats_url: &str, config: Config, upstream: Option<Url>) -> Gateway {
        let mut opts = GatewayOptions::new(nats_url, config);
        opts.upstream = upstream;
        Gateway::start_with(opts).await
    }

    async fn start_with(mut opts: GatewayOptions) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        opts.timeout = Duration::from_secs(2);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice_gateway::serve(listener, opts, async move {
            let _ = rx.await;
        }));
        Gateway {
            addr,
            base: format!("http://{addr}"),
            stop: Some(tx),
            task: Some(task),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the gateway stops")
            .unwrap()
            .expect("the gateway ran cleanly");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Status, headers and JSON body.
async fn call(req: reqwest::RequestBuilder) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let resp = req.send().await.expect("the gateway answers");
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.unwrap();
    let json = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("a JSON body ({e}): {}", String::from_utf8_lossy(&body)));
    (status, headers, json)
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_is_200_then_429_with_ratelimit_headers_and_retry_after() {
    let _serial = serial().await;
    let stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Closed), None).await;
    let http = http();

    for remaining in (0..5).rev() {
        let (status, headers, body) = call(http.get(gw.url("/v1/allow/alice"))).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(header(&headers, "ratelimit-limit"), Some("5"));
        assert_eq!(
            header(&headers, "ratelimit-remaining"),
            Some(remaining.to_string().as_str())
        );
        assert_eq!(header(&headers, "ratelimit-reset"), Some("10"));
        assert_eq!(header(&headers, "retry-after"), None);
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert_eq!(header(&headers, "sluice-source"), Some("worker"));
        assert_eq!(body["allowed"], true);
        assert_eq!(body["remaining"], remaining);
        assert_eq!(body["policy"], "default");
    }
    let (status, headers, body) = call(http.post(gw.url("/v1/allow/alice"))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "retry-after"), Some("10"));
    assert_eq!(header(&headers, "ratelimit-remaining"), Some("0"));
    assert_eq!(body["allowed"], false);
    assert!(body["retry_after_ms"].as_u64().unwrap() > 9_000, "{body}");
    let (status, headers, _) = call(http.get(gw.url("/v1/allow/alice"))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "sluice-source"), Some("deny_cache"));

    // Policy and cost in the query, or in a body in the NATS request format.
    let (status, _, body) = call(http.post(gw.url("/v1/allow/alice?policy=tenper&cost=3"))).await;
    assert_eq!(
        (status, &body["remaining"], &body["limit"]),
        (StatusCode::OK, &Value::from(7), &Value::from(10))
    );
    let (status, _, body) = call(
        http.post(gw.url("/v1/allow/alice"))
            .body(r#"{"policy":"tenper","cost":2}"#),
    )
    .await;
    assert_eq!(
        (status, &body["remaining"]),
        (StatusCode::OK, &Value::from(5))
    );
    let (status, _, body) = call(http.get(gw.url("/v1/allow/alice?policy=tenper&cost=0"))).await;
    assert_eq!(
        (status, &body["remaining"]),
        (StatusCode::OK, &Value::from(5)),
        "a peek"
    );

    // The path segment is the raw key, URL-decoded (either hex case), then
    // encoded canonically for NATS: all three spellings are one key.
    for path in [
        "/v1/allow/bob@x.io",
        "/v1/allow/bob%40x.io",
        "/v1/allow/bob%40x%2eio",
    ] {
        call(http.get(gw.url(path))).await;
    }
    let nats = stack.clients(1).await.remove(0);
    let d = ask(&nats, "bob%40x%2Eio", PEEK).await.unwrap();
    assert_eq!(d.remaining, 2);
    gw.stop().await;
}

/// `GET /v1/usage/{key}` and `GET /v1/usage?top=N` (CONTRACT §9): the
/// workers' replies as JSON, their errors with their statuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_top_are_served_as_json() {
    let _serial = serial().await;
    let stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Closed), None).await;
    let http = http();
    // 5 allowed, 1 denied by the worker; the 7th is denied by the
    // gateway's deny cache and never reaches a worker (not usage).
    for _ in 0..7 {
        call(http.get(gw.url("/v1/allow/carol@x.io"))).await;
    }
    let (status, headers, body) = call(http.get(gw.url("/v1/usage/carol@x.io?step=1m"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert_eq!(body["key"], "carol%40x%2Eio");
    assert_eq!(body["step_ms"], 60_000);
    let points = body["points"].as_array().unwrap();
    let sum = |field: &str| {
        points
            .iter()
            .map(|p| p[field].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!((sum("used"), sum("denied")), (5, 1), "{body}");

    let (status, _, body) = call(http.get(gw.url("/v1/usage?top=5&by=denied"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["by"], "denied");
    assert_eq!(body["keys"][0]["key"], "carol%40x%2Eio");
    assert_eq!(body["keys"][0]["denied"], 1);

    for (path, status, says) in [
        ("/v1/usage/carol?step=2m", StatusCode::BAD_REQUEST, "1m"),
        (
            "/v1/usage/carol?from=9&to=1",
            StatusCode::BAD_REQUEST,
            "after",
        ),
        ("/v1/usage/carol?policy=nope", StatusCode::NOT_FOUND, "nope"),
        (
            "/v1/usage/carol?form=1",
            StatusCode::BAD_REQUEST,
            "unknown query parameter",
        ),
        (
            "/v1/usage/carol?from=yesterday",
            StatusCode::BAD_REQUEST,
            "unsigned integer",
        ),
        ("/v1/usage?top=1001", StatusCode::BAD_REQUEST, "1 to 1000"),
        ("/v1/usage?top=3&by=cost", StatusCode::BAD_REQUEST, "by"),
        ("/v1/usage", StatusCode::BAD_REQUEST, "top=N"),
    ] {
        let (got, _, body) = call(http.get(gw.url(path))).await;
        assert_eq!(got, status, "{path}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains(says),
            "{path}: {body}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_400_404_or_413_with_a_json_error_body() {
    let _serial = serial().await;
    let stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Open), None).await;
    let http = http();

    let cases: Vec<(&str, reqwest::RequestBuilder, StatusCode, &str)> = vec![
        (
            "bad cost",
            http.get(gw.url("/v1/allow/k?cost=abc")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "negative cost",
            http.get(gw.url("/v1/allow/k?cost=-1")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "typo",
            http.get(gw.url("/v1/allow/k?cots=1")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "bad policy name",
            http.get(gw.url("/v1/allow/k?policy=a.b")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "cost above capacity",
            http.get(gw.url("/v1/allow/k?cost=6")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "key too long",
            http.get(gw.url(&format!("/v1/allow/{}", "%40".repeat(86)))),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "empty key",
            http.get(gw.url("/v1/allow/")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "bad body",
            http.post(gw.url("/v1/allow/k")).body(r#"{"cots":1}"#),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "query and body",
            http.post(gw.url("/v1/allow/k?cost=1"))
                .body(r#"{"cost":1}"#),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "unknown policy",
            http.get(gw.url("/v1/allow/k?policy=nope")),
            StatusCode::NOT_FOUND,
            "unknown_policy",
        ),
        (
            "large body",
            http.post(gw.url("/v1/allow/k")).body(vec![b' '; 5000]),
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
        ),
        (
            "no such path",
            http.get(gw.url("/v2/nothing")),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    for (what, req, status, word) in cases {
        let (got, headers, body) = call(req).await;
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(body["error"], word, "{what}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
        assert_eq!(
            header(&headers, "content-type"),
            Some("application/json"),
            "{what}"
        );
    }
    let (_, _, body) = call(http.get(gw.url("/v1/allow/k?policy=nope"))).await;
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no policy named \"nope\""),
        "the worker's sentence: {body}"
    );
    let resp = http.put(gw.url("/v1/allow/k")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_worker_open_answers_200_closed_503_and_local_limits_locally() {
    let _serial = serial().await;
    let mut stack = stack().await;
    let open = Gateway::start(&stack.nats.url(), config(Fallback::Open), None).await;
    let closed = Gateway::start(&stack.nats.url(), config(Fallback::Closed), None).await;
    let local = Gateway::start(&stack.nats.url(), config(Fallback::Local), None).await;
    let http = http();
    let (status, headers, _) = call(http.get(open.url("/v1/allow/warmup"))).await;
    assert_eq!(
        (status, header(&headers, "sluice-source")),
        (StatusCode::OK, Some("worker"))
    );
    stack.stop_workers();

    let started = Instant::now();
    let (status, headers, body) = call(http.get(open.url("/v1/allow/kate"))).await;
    assert!(
        started.elapsed() < FAST,
        "open took {:?}",
        started.elapsed()
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "sluice-source"), Some("fallback_open"));
    assert_eq!(header(&headers, "ratelimit-limit"), Some("5"));
    assert_eq!(body["allowed"], true);

    let started = Instant::now();
    let (status, _, body) = call(http.get(closed.url("/v1/allow/kate"))).await;
    assert!(
        started.elapsed() < FAST,
        "closed took {:?}",
        started.elapsed()
    );
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"], "unavailable");

    let mut statuses = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        let (status, headers, _) = call(http.get(local.url("/v1/allow/kate"))).await;
        assert!(
            started.elapsed() < FAST,
            "local took {:?}",
            started.elapsed()
        );
        assert_eq!(header(&headers, "sluice-source"), Some("fallback_local"));
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(header(&headers, "retry-after"), Some("10"));
        }
        statuses.push(status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);

    let metrics = http
        .get(local.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("sluice_gateway_fallbacks_total{fallback=\"local\"} 7\n"),
        "{metrics}"
    );
    for gw in [open, closed, local] {
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_follows_the_nats_connection_and_metrics_count_outcomes() {
    let _serial = serial().await;
    let mut stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Open), None).await;
    let http = http();

    let (status, _, body) = call(http.get(gw.url("/healthz"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["nats"], "connected");

    for _ in 0..6 {
        http.get(gw.url("/v1/allow/leo")).send().await.unwrap();
    }
    http.get(gw.url("/v1/allow/leo?cost=x"))
        .send()
        .await
        .unwrap();
    let resp = http.get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = resp.text().await.unwrap();
    for line in [
        "sluice_gateway_requests_total{route=\"allow\",outcome=\"allowed\"} 5",
        "sluice_gateway_requests_total{route=\"allow\",outcome=\"denied\"} 1",
        "sluice_gateway_requests_total{route=\"allow\",outcome=\"bad_request\"} 1",
        "sluice_gateway_decisions_total{source=\"worker\"} 6",
        "sluice_gateway_fallbacks_total{fallback=\"open\"} 0",
        "sluice_gateway_request_duration_seconds_count{route=\"allow\"} 7",
        "sluice_gateway_request_duration_seconds_bucket{route=\"allow\",le=\"+Inf\"} 7",
        "# TYPE sluice_gateway_request_duration_seconds histogram",
        "sluice_gateway_nats_connected 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }

    // NATS goes away: /healthz says so, and asks are answered by the
    // fallback at once (no waiting for the timeout).
    stack.nats.stop().unwrap();
    let unhealthy = eventually(Duration::from_secs(10), TICK, || async {
        let r = http.get(gw.url("/healthz")).send().await?;
        anyhow::ensure!(r.status().as_u16() == 503, "/healthz is {}", r.status());
        Ok(())
    })
    .await;
    assert!(
        unhealthy.is_ok(),
        "/healthz turns 503 without NATS: {unhealthy:?}"
    );
    let started = Instant::now();
    let (status, headers, _) = call(http.get(gw.url("/v1/allow/leo2"))).await;
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
    assert_eq!(
        (status, header(&headers, "sluice-source")),
        (StatusCode::OK, Some("fallback_open"))
    );
    let text = http
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.lines().any(|l| l == "sluice_gateway_nats_connected 0"),
        "{text}"
    );
    gw.stop().await;
}

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

/// Issue 17: under steady load from two clients on two workers, a policy
/// lowered from 100/min to 10/min is in force on both workers and at the
/// gateway within 1 s of `sluice policy set` returning; raised again, the
/// gateway's deny cache stops denying within 1 s. Both are awaited events,
/// timed from the command's return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_change_under_load_is_in_force_on_both_workers_and_the_gateway_within_a_second() {
    const WITHIN: Duration = Duration::from_secs(1);
    let _serial = serial().await;
    let stack = stack().await;
    let worker_keys = stack.a_key_per_worker().await;
    assert_eq!(worker_keys.len(), 2, "two workers own partitions");
    let set_gate = |limit: &str| stack.set_policy("gate", "fixed_window", limit);
    set_gate("100/1m");
    let gateway = Gateway::start(&stack.nats.url(), config(Fallback::Closed), None).await;
    let http = http();
    let url = gateway.url("/v1/allow/carol?policy=gate");
    let peek_url = gateway.url("/v1/allow/carol?policy=gate&cost=0");
    // Until the workers have the new policy, it is unknown (404).
    eventually(Duration::from_secs(5), TICK, || async {
        let (status, _, body) = call(http.get(&peek_url)).await;
        anyhow::ensure!(status == StatusCode::OK, "not yet: {status} {body}");
        Ok(())
    })
    .await
    .unwrap();

    // Steady load: two clients asking 200 other keys under `default`.
    let clients = stack.clients(2).await;
    let others: Vec<String> = (0..200).map(|i| format!("steady-{i}")).collect();
    let mut load = Load::start(&clients, rounds(&others, 100), 8, b"");
    load.reached(500).await;

    let gate = br#"{"policy":"gate","cost":0}"#;
    let in_force = |limit: u64| {
        let (http, peek_url, worker_keys, client) = (&http, &peek_url, &worker_keys, &clients[0]);
        async move {
            for key in worker_keys {
                let d = ask(client, key, gate).await?;
                anyhow::ensure!(d.limit == limit, "{key}: limit {}", d.limit);
            }
            let (_, headers, _) = call(http.get(peek_url)).await;
            let at_gateway = header(&headers, "ratelimit-limit")
                .unwrap_or_default()
                .to_string();
            anyhow::ensure!(at_gateway == limit.to_string(), "gateway: {at_gateway}");
            Ok(())
        }
    };
    set_gate("10/1m");
    let lowered = Instant::now();
    eventually(Duration::from_secs(5), TICK, || in_force(10))
        .await
        .expect("the lowered limit is in force everywhere");
    let took = lowered.elapsed();
    println!("10/min in force on both workers and the gateway after {took:?}");
    assert!(took <= WITHIN, "lowered: in force after {took:?}");

    // Used up at the gateway: its deny cache answers.
    for _ in 0..10 {
        assert_eq!(call(http.get(&url)).await.0, StatusCode::OK);
    }
    assert_eq!(call(http.get(&url)).await.0, StatusCode::TOO_MANY_REQUESTS);
    let (status, headers, _) = call(http.get(&url)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "sluice-source"), Some("deny_cache"));

    set_gate("100/1m");
    let raised = Instant::now();
    eventually(Duration::from_secs(5), TICK, || async {
        let (status, headers, _) = call(http.get(&url)).await;
        anyhow::ensure!(
            status == StatusCode::OK,
            "still denied by {:?}",
            header(&headers, "sluice-source")
        );
        Ok(())
    })
    .await
    .expect("the deny cache was emptied and the raised limit allows");
    let took = raised.elapsed();
    println!("raised limit allowed at the gateway after {took:?}");
    assert!(took <= WITHIN, "raised: still denied after {took:?}");

    let answered = load.finish().await;
    assert!(
        answered.iter().all(|a| a.answered),
        "the steady load was answered throughout"
    );
    gateway.stop().await;
}

/// CONTRACT §10: with `--api-token`, `/v1/*` needs the bearer token (401
/// and nothing counted otherwise); `/healthz` and `/metrics` stay open. The
/// gateway runs as the `client` role of `sluice nats-config --auth`, which
/// is all it needs (batching, the partition probe, following policies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_api_token_v1_needs_the_bearer_token_and_health_and_metrics_stay_open() {
    let _serial = serial().await;
    let stack = Stack::start_secured(SLUICE, &TestConfig::new().toml(), 1).await;
    let mut opts = GatewayOptions::new(stack.nats.url(), config(Fallback::Closed));
    opts.nats_auth = sluice_client::NatsAuth {
        user: Some("client".into()),
        password: Some(test_password(Role::Client)),
        ..Default::default()
    };
    opts.api_token = Some(sluice_gateway::ApiToken::new("s3cret"));
    let gw = Gateway::start_with(opts).await;
    let http = http();
    let url = gw.url("/v1/allow/tok-key");

    let (status, headers, body) = call(http.get(&url)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "unauthorized");
    assert!(header(&headers, "www-authenticate").is_some());
    let (status, _, _) = call(http.get(&url).bearer_auth("wrong")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = call(http.post(&url).header("authorization", "s3cret")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let admin = stack
        .nats
        .connect_as("admin", &test_password(Role::Admin))
        .await
        .unwrap();
    assert_eq!(
        ask(&admin, "tok-key", PEEK).await.unwrap().remaining,
        5,
        "refused requests count nothing"
    );
    let (status, _, body) = call(http.get(&url).bearer_auth("s3cret")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["remaining"], 4);
    assert_eq!(ask(&admin, "tok-key", PEEK).await.unwrap().remaining, 4);

    for open in ["/healthz", "/metrics"] {
        let resp = http.get(gw.url(open)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{open}");
    }
    gw.stop().await;
}

/// CONTRACT §10: with `--tls-cert/--tls-key` the one HTTP listener serves
/// HTTPS (decisions with the API token, `/healthz` and `/metrics`), the
/// Envoy rate limit service serves gRPC over TLS with the same
/// certificate, and plain HTTP or a client that does not trust the
/// certificate gets no answer. The CA is made by the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_files_the_gateway_answers_https_and_grpc_over_tls_and_plain_http_gets_nothing() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use tonic::transport::{Certificate, Channel, ClientTlsConfig};

    let _serial = serial().await;
    let stack = stack().await;
    let ca = TestCa::new().unwrap();
    let grpc_port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut opts = GatewayOptions::new(stack.nats.url(), config(Fallback::Closed));
    opts.api_token = Some(sluice_gateway::ApiToken::new("s3cret"));
    opts.grpc_listen = Some(SocketAddr::from(([127, 0, 0, 1], grpc_port)));
    opts.tls = Some(sluice_gateway::TlsFiles {
        cert: ca.server_cert(),
        key: ca.server_key(),
    });
    let gw = Gateway::start_with(opts).await;

    // Connections wait in the listener's backlog until the gateway has
    // read its files and connected to NATS; its first answer means the
    // gRPC port is bound too.
    let healthz = eventually(Duration::from_secs(10), TICK, || async {
        let r = ca.https(gw.addr, "GET", "/healthz", &[]).await?;
        anyhow::ensure!(r.status == 200, "healthz {}", r.status);
        Ok(r)
    })
    .await
    .expect("/healthz answers over HTTPS");
    assert_eq!(healthz.json().unwrap()["status"], "ok");
    let metrics = ca.https(gw.addr, "GET", "/metrics", &[]).await.unwrap();
    assert_eq!(metrics.status, 200);

    let path = "/v1/allow/tls-key";
    let refused = ca.https(gw.addr, "GET", path, &[]).await.unwrap();
    assert_eq!(refused.status, 401, "the token is still required");
    let auth = [("authorization", "Bearer s3cret")];
    let decided = ca.https(gw.addr, "GET", path, &auth).await.unwrap();
    assert_eq!(decided.status, 200);
    assert_eq!(decided.json().unwrap()["remaining"], 4);

    // Plain HTTP to the TLS port: the handshake fails, no answer.
    let plain = http().get(gw.url(path)).bearer_auth("s3cret").send().await;
    assert!(plain.is_err(), "plain HTTP got an answer: {plain:?}");
    // A client trusting another CA refuses the certificate.
    let other = TestCa::new().unwrap();
    let err = other
        .https(gw.addr, "GET", "/healthz", &[])
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("certificate"), "{err:#}");

    // gRPC over TLS with the same certificate (no [envoy] table: every
    // descriptor counts under the default policy).
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca.ca()).unwrap()))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://127.0.0.1:{grpc_port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("gRPC over TLS connects");
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "tls-grpc".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    });
    request
        .metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    let reply = RateLimitServiceClient::new(channel)
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit over TLS")
        .into_inner();
    assert_eq!(reply.overall_code, Code::Ok as i32);
    // Plain-text gRPC to the TLS port fails.
    let plain = Channel::from_shared(format!("http://127.0.0.1:{grpc_port}"))
        .unwrap()
        .connect()
        .await
        .map(RateLimitServiceClient::new);
    if let Ok(mut client) = plain {
        let r = client.should_rate_limit(RateLimitRequest::default()).await;
        assert!(r.is_err(), "plain gRPC got an answer: {r:?}");
    }
    gw.stop().await;
}

/// Bad TLS files end `sluice gateway` at start with one line that names
/// the file and its flag (before it connects to anything: no NATS here).
#[test]
fn bad_tls_files_end_the_gateway_with_one_line_naming_the_file_and_flag() {
    let ca = TestCa::new().unwrap();
    let missing = ca.dir().join("missing.pem");
    let gateway = |cert: &std::path::Path, key: &std::path::Path| {
        std::process::Command::new(SLUICE)
            .args([
                "gateway",
                "--listen",
                "127.0.0.1:0",
                "--nats",
                "nats://127.0.0.1:1",
            ])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .env("SLUICE_LOG", "error")
            .output()
            .unwrap()
    };
    let cases = [
        (
            missing.clone(),
            ca.server_key(),
            "cannot read the TLS certificate file",
            "--tls-cert",
        ),
        (
            ca.server_cert(),
            missing.clone(),
            "cannot read the TLS key file",
            "--tls-key",
        ),
        (
            ca.server_key(),
            ca.server_key(),
            "holds no certificate",
            "--tls-cert",
        ),
        (
            ca.server_cert(),
            ca.server_cert(),
            "holds no private key",
            "--tls-key",
        ),
        (
            ca.server_cert(),
            ca.client_key(),
            "do not go together",
            "--tls-key",
        ),
    ];
    for (cert, key, what, flag) in cases {
        let line = one_line_error(&gateway(&cert, &key));
        assert!(line.contains(what) && line.contains(flag), "{line}");
        let named = if flag == "--tls-cert" { &cert } else { &key };
        assert!(line.contains(&named.display().to_string()), "{line}");
    }
    let only_cert = std::process::Command::new(SLUICE)
        .args(["gateway", "--tls-cert"])
        .arg(ca.server_cert())
        .output()
        .unwrap();
    assert!(one_line_error(&only_cert).contains("--tls-cert needs --tls-key"));
}
