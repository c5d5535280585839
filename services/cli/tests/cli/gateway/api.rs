//! The rest of the HTTP surface (docs/GATEWAY.md): hits, batches, inspect
//! and reset, policies and overrides written and read, alerts listed and
//! streamed, the fleet's status and the description, each checked against
//! what the workers then do; the two tokens' roles; and the hostile input
//! schemathesis found (`scripts/test-api.sh`), kept as regressions. Part of
//! the `gateway` test binary (`gateway.rs`), on its stack and helpers.

use crate::common::gateway::{call, config, header, http, stack, Gateway};
use axum::http::StatusCode;
use serde_json::{json, Value};
use sluice_core::config::Fallback;
use sluice_gateway::{ApiToken, GatewayOptions};
use sluice_tests::{ask, eventually, serial, PEEK, TICK};
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_batches_inspect_reset_and_status_answer_over_http() {
    let _serial = serial().await;
    let stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Closed), None).await;
    let http = http();
    let nats = stack.clients(1).await.remove(0);

    // A hit counts whatever the limit (5 per 10 s), and says what a peek
    // would after it: 200 always, Retry-After once the key is spent.
    let (status, _, body) = call(http.post(gw.url("/v1/hit/h1?cost=3"))).await;
    assert_eq!((status, &body["remaining"]), (StatusCode::OK, &json!(2)));
    let (status, headers, body) = call(http.post(gw.url("/v1/hit/h1")).body(r#"{"cost":3}"#)).await;
    assert_eq!((status, &body["allowed"]), (StatusCode::OK, &json!(false)));
    assert!(header(&headers, "retry-after").is_some(), "{headers:?}");
    assert_eq!(ask(&nats, "h1", PEEK).await.unwrap().remaining, 0);

    let (status, _, body) = call(http.get(gw.url("/v1/inspect/h1"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["key"], "h1");
    assert_eq!(body["policies"][0]["policy"], "default");
    assert_eq!(body["policies"][0]["limits"][0]["remaining"], 0);
    let (status, _, body) = call(http.post(gw.url("/v1/reset/h1?policy=default"))).await;
    assert_eq!(
        (status, &body["reset"]),
        (StatusCode::OK, &json!(["default"]))
    );
    assert_eq!(ask(&nats, "h1", PEEK).await.unwrap().remaining, 5);

    // A batch: each ask answered in order, as /v1/allow would alone.
    let asks = json!({"asks": [
        {"key": "b1", "cost": 2},
        {"key": "b2", "cost": 6},
        {"key": "b3", "policy": "nope"},
        {"key": "b4@x", "policy": "tenper", "cost": 0},
    ]});
    let (status, _, body) = call(http.post(gw.url("/v1/batch")).body(asks.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answers = body["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 4);
    assert_eq!(
        (&answers[0]["allowed"], &answers[0]["remaining"]),
        (&json!(true), &json!(3))
    );
    assert_eq!(answers[1]["error"], "bad_request", "above capacity");
    assert_eq!(answers[2]["error"], "unknown_policy");
    assert_eq!(answers[3]["remaining"], 10);
    assert_eq!(ask(&nats, "b1", PEEK).await.unwrap().remaining, 3);
    let too_many = json!({"asks": vec![json!({"key": "k"}); 257]});
    for bad in [
        json!({"asks": []}),
        json!({"asks": [{"kee": "x"}]}),
        too_many,
    ] {
        let (status, _, body) = call(http.post(gw.url("/v1/batch")).body(bad.to_string())).await;
        assert_eq!(
            (status, &body["error"]),
            (StatusCode::BAD_REQUEST, &json!("bad_request"))
        );
    }
    assert_eq!(
        ask(&nats, "k", PEEK).await.unwrap().remaining,
        5,
        "nothing asked"
    );

    let (status, _, body) = call(http.get(gw.url("/v1/status"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["workers"].as_array().unwrap().len(), 2);
    assert_eq!(body["partitions"].as_array().unwrap().len(), 16);
    let (status, _, body) = call(http.get(gw.url("/v1/openapi.json"))).await;
    assert_eq!(
        (status, &body["openapi"]),
        (StatusCode::OK, &json!("3.1.0"))
    );
    assert_eq!(
        body,
        serde_json::from_str::<Value>(&sluice_gateway::openapi_json()).unwrap()
    );
    gw.stop().await;
}

/// Found by schemathesis: a usage range past any calendar was a 503
/// from the store ("starts out of the calendar"), and one near `u64::MAX`
/// overflowed at the worker while rounded up to whole steps: both are a
/// 400 that says what to send, and the workers answer on. A top over
/// decades was a 503 too (below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_ranges_past_any_calendar_or_over_decades_are_answered_not_503() {
    let _serial = serial().await;
    let stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Closed), None).await;
    let http = http();
    for path in [
        "/v1/usage/0?to=9223372036854775808",
        "/v1/usage/0?from=18446744073709551614&to=18446744073709551615",
        "/v1/usage?top=5&to=18446744073709551615",
    ] {
        let (status, _, body) = call(http.get(gw.url(path))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("past the year 9999"),
            "{body}"
        );
    }
    let (status, _, body) = call(http.get(gw.url("/v1/usage/0"))).await;
    assert_eq!(status, StatusCode::OK, "the workers answer on: {body}");
    // A top over decades was a 503: every day's bucket since 1970 read in
    // every partition, past the scatter's 5 s. Cut to what is kept.
    let (status, _, body) = call(http.get(gw.url("/v1/usage?top=247&from=7"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_overrides_and_alerts_are_written_read_and_streamed_over_http() {
    let _serial = serial().await;
    let stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Closed), None).await;
    let http = http();

    let web = json!({"algorithm": "fixed_window", "limits": [{"max": 2, "per": "1m"}], "alerts": [50, 100]});
    let (status, _, body) = call(http.put(gw.url("/v1/policies/web")).body(web.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!((&body["policy"], &body["value"]), (&json!("web"), &web));
    // In force on the workers and here within a second.
    eventually(WITHIN, TICK, || async {
        let (status, _, body) = call(http.get(gw.url("/v1/policies/web"))).await;
        let (ask, _, _) = call(http.get(gw.url("/v1/allow/warm?policy=web&cost=0"))).await;
        match (status, ask) {
            (StatusCode::OK, StatusCode::OK) => Ok(body),
            other => Err(anyhow::anyhow!("not yet: {other:?}")),
        }
    })
    .await
    .unwrap();
    let (_, _, body) = call(http.get(gw.url("/v1/policies/web"))).await;
    assert_eq!((&body["from"], &body["policy"]), (&json!("bucket"), &web));
    let (_, _, body) = call(http.get(gw.url("/v1/policies"))).await;
    let names: Vec<&str> = body["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"web") && names.contains(&"default"),
        "{names:?}"
    );

    // Values a config file would refuse are refused the same way, before anything is written.
    for (what, req, status) in [
        (
            "a bad duration",
            http.put(gw.url("/v1/policies/web")).body(
                json!({"algorithm": "fixed_window", "limits": [{"max": 2, "per": "1x"}]})
                    .to_string(),
            ),
            400,
        ),
        (
            "a typo",
            http.put(gw.url("/v1/policies/web"))
                .body(json!({"algoritm": "gcra"}).to_string()),
            400,
        ),
        (
            "a bad name",
            http.put(gw.url("/v1/policies/a.b")).body(web.to_string()),
            400,
        ),
        (
            "removing default",
            http.delete(gw.url("/v1/policies/default")),
            400,
        ),
        (
            "removing what the bucket lacks",
            http.delete(gw.url("/v1/policies/tenper")),
            404,
        ),
        (
            "overriding an unknown policy",
            http.put(gw.url("/v1/policies/nope/overrides/k"))
                .body(json!({"limits": [{"max": 1, "per": "1m"}]}).to_string()),
            404,
        ),
    ] {
        let (got, _, body) = call(req).await;
        assert_eq!(got.as_u16(), status, "{what}: {body}");
    }
    let (_, _, body) = call(http.get(gw.url("/v1/policies/web"))).await;
    assert_eq!(body["policy"], web, "unchanged");

    // One key's override, by its token.
    let vip = json!({"limits": [{"max": 4, "per": "1m"}]});
    let (status, _, body) = call(
        http.put(gw.url("/v1/policies/web/overrides/vip%40x"))
            .body(vip.to_string()),
    )
    .await;
    assert_eq!(
        (status, &body["key"]),
        (StatusCode::OK, &json!("vip%40x")),
        "{body}"
    );
    let read = eventually(WITHIN, TICK, || async {
        match call(http.get(gw.url("/v1/policies/web/overrides/vip@x"))).await {
            (StatusCode::OK, _, body) => Ok(body),
            other => Err(anyhow::anyhow!("not yet: {other:?}")),
        }
    })
    .await
    .unwrap();
    assert_eq!(read, vip);
    let (_, _, body) = call(http.get(gw.url("/v1/policies/web/overrides"))).await;
    assert_eq!(body["overrides"]["vip%40x"], vip);
    let (status, _, _) = call(http.delete(gw.url("/v1/policies/web/overrides/vip%40x"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = call(http.delete(gw.url("/v1/policies/web/overrides/vip%40x"))).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );

    // Alerts: streamed as they are stored, then listed.
    let mut events = http
        .get(gw.url("/v1/alerts/stream?policy=web"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    assert_eq!(
        header(events.headers(), "content-type"),
        Some("text/event-stream")
    );
    for _ in 0..2 {
        let (status, _, _) = call(http.get(gw.url("/v1/allow/spender?policy=web"))).await;
        assert_eq!(status, StatusCode::OK);
    }
    let mut text = String::new();
    tokio::time::timeout(WITHIN, async {
        while text.matches("event: alert").count() < 2 {
            let chunk = events.chunk().await.unwrap().expect("the stream goes on");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("two alerts streamed within {WITHIN:?}: {text:?}"));
    assert!(
        text.contains(r#""key":"spender""#) && text.contains(r#""threshold_pct":100"#),
        "{text}"
    );
    let (status, _, body) = call(http.get(gw.url("/v1/alerts?policy=web&last=10"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed: Vec<u64> = body["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["key"] == "spender")
        .map(|a| a["threshold_pct"].as_u64().unwrap())
        .collect();
    assert_eq!(listed, [50, 100]);
    let (status, _, _) = call(http.get(gw.url("/v1/alerts?last=1001"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, _, body) = call(http.delete(gw.url("/v1/policies/web"))).await;
    assert_eq!((status, &body["removed"]), (StatusCode::OK, &json!(true)));
    // The open event stream does not hold the gateway's stop up.
    gw.stop().await;
    drop(events);
}

/// `--api-read-token`: a second token reads (usage, inspect, policies,
/// alerts, status) and is 403 everywhere else, counting nothing; it needs
/// the full token beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_reads_and_may_not_ask_reset_or_write() {
    let _serial = serial().await;
    let stack = stack().await;
    let mut opts = GatewayOptions::new(stack.nats.url(), config(Fallback::Closed));
    opts.read_token = Some(ApiToken::new("reader"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = sluice_gateway::serve(listener, opts.clone(), async {})
        .await
        .unwrap_err();
    assert!(
        format!("{refused:#}").contains("--api-token"),
        "{refused:#}"
    );

    opts.api_token = Some(ApiToken::new("writer"));
    let gw = Gateway::start_with(opts).await;
    let http = http();
    let nats = stack.clients(1).await.remove(0);
    for path in [
        "/v1/policies",
        "/v1/inspect/r1",
        "/v1/status",
        "/v1/usage/r1",
        "/v1/alerts",
    ] {
        let (status, _, body) = call(http.get(gw.url(path)).bearer_auth("reader")).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    for req in [
        http.get(gw.url("/v1/allow/r1")),
        http.post(gw.url("/v1/hit/r1")),
        http.post(gw.url("/v1/reset/r1")),
        http.post(gw.url("/v1/batch"))
            .body(json!({"asks": [{"key": "r1"}]}).to_string()),
        http.delete(gw.url("/v1/policies/tenper")),
    ] {
        let (status, _, body) = call(req.bearer_auth("reader")).await;
        assert_eq!(
            (status, &body["error"]),
            (StatusCode::FORBIDDEN, &json!("forbidden")),
            "{body}"
        );
    }
    assert_eq!(
        ask(&nats, "r1", PEEK).await.unwrap().remaining,
        5,
        "nothing counted"
    );
    let (status, _, _) = call(http.get(gw.url("/v1/policies"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) = call(http.get(gw.url("/v1/allow/r1")).bearer_auth("writer")).await;
    assert_eq!((status, &body["remaining"]), (StatusCode::OK, &json!(4)));
    gw.stop().await;
}

/// SPEC §16 over HTTP: an allow, a hit and a batch ask sent twice with one
/// `Idempotency-Key` (or body `id`) count once; the repeat is the first
/// answer with `Sluice-Repeat: true`; the key reused for another ask is
/// 409, and a bad key 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_makes_a_retried_ask_count_once() {
    let _serial = serial().await;
    let stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(Fallback::Closed), None).await;
    let http = http();
    let nats = stack.clients(1).await.remove(0);
    let allow = || {
        http.post(gw.url("/v1/allow/idem?cost=2"))
            .header("Idempotency-Key", "order-1")
    };
    let (status, headers, first) = call(allow()).await;
    assert_eq!((status, &first["remaining"]), (StatusCode::OK, &json!(3)));
    assert!(header(&headers, "sluice-repeat").is_none());
    let (status, headers, again) = call(allow()).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(header(&headers, "sluice-repeat"), Some("true"));
    assert_eq!(
        (&again["remaining"], &again["repeat"]),
        (&json!(3), &json!(true))
    );
    assert_eq!(ask(&nats, "idem", PEEK).await.unwrap().remaining, 3);

    let other = http
        .post(gw.url("/v1/allow/idem?cost=1"))
        .header("Idempotency-Key", "order-1");
    let (status, _, body) = call(other).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("id_reused"))
    );
    let bad = http
        .post(gw.url("/v1/allow/idem"))
        .header("Idempotency-Key", "");
    let (status, _, body) = call(bad).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );

    let hit = || {
        http.post(gw.url("/v1/hit/idem"))
            .body(r#"{"cost":1,"id":"h-1"}"#)
    };
    call(hit()).await;
    let (_, headers, body) = call(hit()).await;
    assert_eq!(
        header(&headers, "sluice-repeat"),
        Some("true"),
        "{body} {headers:?}"
    );
    assert_eq!(ask(&nats, "idem", PEEK).await.unwrap().remaining, 2);

    let asks = json!({"asks": [{"key": "idem", "id": "b-1"}, {"key": "idem", "id": "b-1"}]});
    let (status, _, body) = call(http.post(gw.url("/v1/batch")).body(asks.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        ask(&nats, "idem", PEEK).await.unwrap().remaining,
        1,
        "{body}"
    );
}
