//! Groups (SPEC §17) through the HTTP gateway, against real workers on a
//! real nats-server: `/v1/allow/{org}/{key}` decides the user's and the
//! organisation's levels at once, so the organisation's pool holds across
//! its users; a denial says which level denied (`denied_by`) and lists
//! every level; the RateLimit headers are the most restrictive level's; a
//! denial by the organisation is served again from the deny cache for the
//! same user only; a hold through `/v1/reserve/{org}/{key}` is held and
//! settled at every level; a path of four key segments is a 400 that says
//! why.

use crate::common;
use axum::http::StatusCode;
use common::gateway::{call, header, http, Gateway};
use serde_json::Value;
use sluice_core::config::{Config, Fallback};
use sluice_tests::{serial, Stack};

/// An organisation's pool of 6 an hour, each user 4 an hour of it.
fn groups() -> String {
    common::groups_toml(6, 4, "")
}

/// The levels of a decision's body, as (policy, remaining).
fn levels(body: &Value) -> Vec<(String, u64)> {
    body["levels"]
        .as_array()
        .unwrap_or_else(|| panic!("levels in {body}"))
        .iter()
        .map(|l| {
            (
                l["policy"].as_str().unwrap().to_string(),
                l["remaining"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn pair(policy: &str, remaining: u64) -> (String, u64) {
    (policy.to_string(), remaining)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_organisations_pool_holds_across_its_users_through_http() {
    let _serial = serial().await;
    let toml = groups();
    let stack = Stack::start(common::SLUICE, &toml, 2).await;
    let mut config = Config::from_toml(&toml, "groups.toml").unwrap();
    config.fallback = Fallback::Closed;
    let gw = Gateway::start(&stack.nats.url(), config, None).await;
    let http = http();
    let ask = |path: &str| http.get(gw.url(&format!("{path}?policy=user")));

    // Alice's own 4: the user level is the most restrictive (3 left of 4
    // against the org's 5 of 6), and the headers say so.
    let (status, headers, body) = call(ask("/v1/allow/acme/alice")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(levels(&body), [pair("org", 5), pair("user", 3)]);
    assert_eq!(body["policy"], "user");
    assert_eq!(body.get("denied_by"), None);
    assert_eq!(header(&headers, "ratelimit-limit"), Some("4"));
    assert_eq!(header(&headers, "ratelimit-remaining"), Some("3"));
    for _ in 0..3 {
        assert_eq!(call(ask("/v1/allow/acme/alice")).await.0, StatusCode::OK);
    }
    let (status, _, body) = call(ask("/v1/allow/acme/alice")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["denied_by"], "user", "{body}");
    assert_eq!(levels(&body), [pair("org", 2), pair("user", 0)]);

    // Bob has room of his own, but the org's pool has 2 left: the second
    // leaves it empty (the org's level now the most restrictive), the third
    // is denied by the org, and nothing is taken from bob.
    assert_eq!(call(ask("/v1/allow/acme/bob")).await.0, StatusCode::OK);
    let (status, headers, body) = call(ask("/v1/allow/acme/bob")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(levels(&body), [pair("org", 0), pair("user", 2)]);
    assert_eq!(header(&headers, "ratelimit-limit"), Some("6"));
    assert_eq!(header(&headers, "ratelimit-remaining"), Some("0"));
    let (status, headers, body) = call(ask("/v1/allow/acme/bob")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["denied_by"], "org", "{body}");
    assert_eq!(levels(&body), [pair("org", 0), pair("user", 2)]);
    assert_eq!(header(&headers, "ratelimit-limit"), Some("6"));
    assert!(header(&headers, "retry-after").is_some());
    assert_eq!(header(&headers, "sluice-source"), Some("worker"));

    // Asked again, bob's denial comes from the deny cache with its levels;
    // carol's ask is her own and goes to the worker, denied by the org.
    let (status, headers, body) = call(ask("/v1/allow/acme/bob")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "sluice-source"), Some("deny_cache"));
    assert_eq!(body["denied_by"], "org");
    let (status, headers, body) = call(ask("/v1/allow/acme/carol")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "sluice-source"), Some("worker"));
    assert_eq!(levels(&body), [pair("org", 0), pair("user", 4)]);

    // The org's pool is the plain key `acme` under `org`: inspected and
    // reset as any key; then erin asks (bob and carol would be answered
    // from the deny cache until their retry time, which sees no reset).
    let (status, _, body) = call(http.get(gw.url("/v1/inspect/acme?policy=org"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = call(http.get(gw.url("/v1/inspect/acme/alice?policy=user"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = call(http.post(gw.url("/v1/reset/acme?policy=org"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = call(ask("/v1/allow/acme/erin")).await;
    assert_eq!(
        (status, levels(&body)),
        (StatusCode::OK, vec![pair("org", 5), pair("user", 3)])
    );

    // Three segments: the chain of two levels cuts from the inside (the
    // org level on `acme.eng`), a pool of its own.
    let (status, _, body) = call(ask("/v1/allow/acme/eng/dave")).await;
    assert_eq!(
        (status, levels(&body)),
        (StatusCode::OK, vec![pair("org", 5), pair("user", 3)])
    );

    // A hold of a grouped key is held at every level, and settled at each.
    let reserve = http
        .post(gw.url("/v1/reserve/acme/frank"))
        .body(r#"{"policy":"user","cost":2}"#);
    let (status, _, body) = call(reserve).await;
    assert_eq!(
        (status, levels(&body)),
        (StatusCode::OK, vec![pair("org", 3), pair("user", 2)]),
        "{body}"
    );
    let settle = format!(r#"{{"policy":"user","hold":{},"cost":0}}"#, body["hold"]);
    let (status, _, body) = call(http.post(gw.url("/v1/settle/acme/frank")).body(settle)).await;
    assert_eq!(
        (status, levels(&body)),
        (StatusCode::OK, vec![pair("org", 5), pair("user", 4)]),
        "{body}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_path_of_four_segments_or_an_empty_token_is_a_400_that_says_why() {
    let _serial = serial().await;
    let toml = groups();
    let stack = Stack::start(common::SLUICE, &toml, 1).await;
    let config = Config::from_toml(&toml, "groups.toml").unwrap();
    let gw = Gateway::start(&stack.nats.url(), config, None).await;
    let http = http();
    for path in [
        "/v1/allow/a/b/c/d",
        "/v1/hit/a/b/c/d/e",
        "/v1/inspect/a/b/c/d",
        "/v1/reserve/a/b/c/d",
    ] {
        let (status, _, body) = call(http.post(gw.url(path))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("{org}/{team}/{key}"), "{path}: {message}");
    }
    let (status, _, body) = call(http.get(gw.url("/v1/allow/acme/%2F?policy=user"))).await;
    assert_eq!(status, StatusCode::OK, "a '/' inside a token: {body}");
    // An override of a grouped key is that key's own (`acme.vip`).
    let table = r#"{"limits":[{"max":10,"per":"1h"}]}"#;
    let vip = gw.url("/v1/policies/user/overrides/acme/vip");
    let (status, _, body) = call(http.put(&vip).body(table)).await;
    assert_eq!(
        (status, &body["key"]),
        (StatusCode::OK, &Value::from("acme.vip")),
        "{body}"
    );
    let (status, _, body) = call(http.delete(&vip)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(call(http.delete(&vip)).await.0, StatusCode::NOT_FOUND);
    let deep = gw.url("/v1/policies/user/overrides/a/b/c/d");
    let (status, _, body) = call(http.put(&deep).body(table)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("4 segments"),
        "{body}"
    );

    // A batch item's key is text (one key) or a list of tokens.
    let batch = r#"{"asks":[{"key":["globex","zed"],"policy":"user"},
        {"key":["a","b","c","d"],"policy":"user"},{"key":"a/b"}]}"#;
    let (status, _, body) = call(http.post(gw.url("/v1/batch")).body(batch)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answers = &body["answers"];
    assert_eq!(levels(&answers[0]), [pair("org", 5), pair("user", 3)]);
    assert_eq!(answers[1]["error"], "bad_request", "{body}");
    assert_eq!(answers[2]["allowed"], true, "{body}");
    assert_eq!(answers[2].get("levels"), None, "one key: {body}");
    // Fewer tokens than the chain has levels: the worker's reason.
    let (status, _, body) = call(http.get(gw.url("/v1/allow/acme?policy=user"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    gw.stop().await;
}
