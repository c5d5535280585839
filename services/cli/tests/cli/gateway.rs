//! The HTTP gateway (`sluice-gateway`, SPEC §6) deciding through real
//! `sluice worker` processes on a real nats-server, called by a real HTTP
//! client: decisions and their headers, usage queries, bad input, the
//! fallbacks with no worker, health and metrics, and a policy change under
//! load. The gateway runs in the test process (`sluice_gateway::serve` on a
//! 127.0.0.1:0 listener, `common::gateway`). Proxy mode is in
//! `gateway_proxy.rs`, the API token and TLS in `gateway_security.rs`; the
//! rest of the surface (hits, batches, inspect, reset, policies, alerts,
//! status, the read token) in `gateway/api.rs`, part of this binary.

#[path = "gateway/api.rs"]
mod api;
use crate::common;

use axum::http::StatusCode;
use common::gateway::{call, config, header, http, stack, Gateway};
use serde_json::Value;
use sluice_core::config::Fallback;
use sluice_tests::{ask, eventually, rounds, serial, Load, PEEK, TICK};
use std::time::{Duration, Instant};

const FAST: Duration = Duration::from_millis(500);

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

/// `GET /v1/usage/{key}` and `GET /v1/usage?top=N` (SPEC §9): the
/// workers' replies as JSON, their errors with their statuses; top shows
/// keys as they were asked, in the JSON and in `sluice usage --top`.
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
    // The key as it was asked, its token beside it for programs.
    assert_eq!(body["keys"][0]["key"], "carol@x.io", "{body}");
    assert_eq!(body["keys"][0]["key_token"], "carol%40x%2Eio", "{body}");
    assert_eq!(body["keys"][0]["denied"], 1);
    let table = stack.run(&["usage", "--top", "5", "--by", "denied"]);
    let row = table.lines().nth(2).unwrap_or_default();
    assert!(
        row.split_whitespace().nth(1) == Some("carol@x.io"),
        "sluice usage --top shows the key as asked:\n{table}"
    );

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

/// Under steady load from two clients on two workers, a policy
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
