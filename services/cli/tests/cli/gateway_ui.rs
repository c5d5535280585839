//! The dashboard's action and its permissions (SPEC §15, §8, §10),
//! against a nats-server that enforces sluice's roles: a key's reset is
//! offered only by a gateway whose NATS credentials may reset (the `admin`
//! role, not `client`), needs the page's CSRF field, a same-site request
//! and a confirmation, and then resets exactly as `sluice reset` does (a
//! grouped key named by its fields, that key alone). A read token's login
//! sees the pages but may not reset. `--no-ui` leaves no dashboard. A
//! group's page shows its own usage and its members in order, linked by
//! their key fields. What a browser sees (the chart's points, the top
//! list's order, escaping, the token gate, the CSP) is checked by a real
//! headless browser: tests/ui/test_dashboard.py.

use crate::common;

use common::gateway::{call, config, http, Gateway};
use common::SLUICE;
use sluice_core::config::Fallback;
use sluice_core::nats_config::Role;
use sluice_gateway::GatewayOptions;
use sluice_tests::{ask, eventually, serial, test_password, Stack, TestConfig, TICK};
use std::time::Duration;

/// The test config's `tenper` policy (10 per 5 min): what the test counts
/// stays counted while it runs.
const TENPER: &[u8] = br#"{"policy":"tenper"}"#;
const TENPER_PEEK: &[u8] = br#"{"policy":"tenper","cost":0}"#;

/// The options of a gateway of the secured stack, connected to NATS as
/// `role`.
fn options_as(stack: &Stack, role: Role) -> GatewayOptions {
    let mut opts = GatewayOptions::new(stack.nats.url(), config(Fallback::Closed));
    opts.nats_auth = sluice_client::NatsAuth {
        user: Some(role.name().into()),
        password: Some(test_password(role)),
        ..Default::default()
    };
    opts
}

async fn gateway_as(stack: &Stack, role: Role) -> Gateway {
    Gateway::start_with(options_as(stack, role)).await
}

/// The secured stack's admin connection, after `n` asks of `key` under
/// `tenper`, all allowed.
async fn admin_after(stack: &Stack, key: &str, n: usize) -> async_nats::Client {
    let admin = stack
        .nats
        .connect_as("admin", &test_password(Role::Admin))
        .await
        .unwrap();
    for _ in 0..n {
        assert!(ask(&admin, key, TENPER).await.unwrap().allowed);
    }
    admin
}

/// The body of a page, once `ready` holds of it (the permission probe
/// answers within a second or two of the gateway's start).
async fn page_when(gw: &Gateway, path: &str, ready: impl Fn(&str) -> bool) -> String {
    let url = gw.url(path);
    eventually(Duration::from_secs(15), TICK, || async {
        let body = http().get(&url).send().await?.text().await?;
        anyhow::ensure!(ready(&body), "not yet: {body}");
        Ok(body)
    })
    .await
    .unwrap_or_else(|e| panic!("{path}: {e:#}"))
}

/// The value of the hidden field `name` in `page`.
fn field<'a>(page: &'a str, name: &str) -> &'a str {
    let at = format!("name=\"{name}\" value=\"");
    let start = page
        .find(&at)
        .unwrap_or_else(|| panic!("no {name} field in {page}"))
        + at.len();
    &page[start..start + page[start..].find('"').unwrap()]
}

async fn post_reset(gw: &Gateway, form: &str, origin: Option<&str>) -> (u16, String) {
    let mut req = http()
        .post(gw.url("/ui/key/reset"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.to_string());
    if let Some(origin) = origin {
        req = req.header("origin", origin);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reset_is_offered_only_with_credentials_that_allow_it_and_needs_csrf_and_a_confirmation(
) {
    let _serial = serial().await;
    let stack = Stack::start_secured(SLUICE, &TestConfig::new().toml(), 1).await;
    let admin = admin_after(&stack, "ui-key", 3).await;

    // The client role may not inspect or reset: the page says so at once
    // and offers no reset.
    let client_gw = gateway_as(&stack, Role::Client).await;
    let page = page_when(&client_gw, "/ui/key?key=ui-key", |b| {
        b.contains("Cannot inspect keys")
    })
    .await;
    assert!(page.contains("admin role"), "{page}");
    assert!(
        !page.contains("class=\"reset\""),
        "no reset offered: {page}"
    );

    // The admin role may: the state and the button.
    let gw = gateway_as(&stack, Role::Admin).await;
    let page = page_when(&gw, "/ui/key?key=ui-key", |b| b.contains("class=\"reset\"")).await;
    assert!(
        page.contains("data-used=\"3\" data-remaining=\"7\""),
        "{page}"
    );
    let csrf = field(&page, "csrf").to_string();
    let remaining = || async { ask(&admin, "ui-key", TENPER_PEEK).await.unwrap().remaining };

    // Without the page's CSRF field, or from another site: refused.
    let (status, body) = post_reset(&gw, "key=ui-key&policy=&csrf=forged&confirm=yes", None).await;
    assert_eq!(status, 403, "{body}");
    let form = format!("key=ui-key&policy=&csrf={csrf}&confirm=yes");
    let (status, body) = post_reset(&gw, &form, Some("http://evil.example")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(remaining().await, 7, "a refused reset resets nothing");

    // The first POST asks for a confirmation and resets nothing.
    let (status, body) = post_reset(&gw, &format!("key=ui-key&policy=&csrf={csrf}"), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("Yes, reset") && field(&body, "confirm") == "yes",
        "{body}"
    );
    assert_eq!(remaining().await, 7);

    // Confirmed, from the gateway's own origin: reset.
    let origin = format!("http://{}", gw.addr);
    let (status, body) = post_reset(&gw, &form, Some(&origin)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("reset under tenper"), "{body}");
    assert_eq!(remaining().await, 10, "the key's limit is whole again");

    // A grouped key (SPEC §17) is reset by its fields, `org` and `key`:
    // that key alone, not the organisation's own.
    for key in ["ui-org.ui-user", "ui-org.ui-user", "ui-org"] {
        assert!(ask(&admin, key, TENPER).await.unwrap().allowed);
    }
    let left = |key: &'static str| {
        let admin = admin.clone();
        async move { ask(&admin, key, TENPER_PEEK).await.unwrap().remaining }
    };
    let grouped = format!("org=ui-org&team=&key=ui-user&policy=&csrf={csrf}&confirm=yes");
    let (status, body) = post_reset(&gw, &grouped, Some(&origin)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        left("ui-org.ui-user").await,
        10,
        "the member's key is whole"
    );
    assert_eq!(
        left("ui-org").await,
        9,
        "the organisation's key is untouched"
    );

    // The client role's gateway refuses the action outright.
    let client_page = page_when(&client_gw, "/ui/key?key=ui-key", |b| {
        b.contains("Cannot inspect")
    })
    .await;
    assert!(!client_page.contains("name=\"csrf\""));
    let own = field(&page, "csrf");
    let (status, _) = post_reset(
        &client_gw,
        &format!("key=ui-key&csrf={own}&confirm=yes"),
        None,
    )
    .await;
    assert_eq!(
        status, 403,
        "another gateway's CSRF field is not this one's"
    );

    client_gw.stop().await;
    gw.stop().await;
}

/// A login's cookie (`name=value`), from the login form's answer.
async fn log_in(gw: &Gateway, token: &str) -> Option<String> {
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = no_redirects
        .post(gw.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}&next=/ui/top"))
        .send()
        .await
        .unwrap();
    let cookie = resp.headers().get("set-cookie")?.to_str().unwrap();
    assert_eq!(resp.status().as_u16(), 303, "a login goes on to the page");
    Some(cookie.split(';').next().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_logs_in_to_look_and_only_a_full_one_may_reset() {
    let _serial = serial().await;
    let stack = Stack::start_secured(SLUICE, &TestConfig::new().toml(), 1).await;
    let admin = admin_after(&stack, "ui-read", 4).await;
    let remaining = || async { ask(&admin, "ui-read", TENPER_PEEK).await.unwrap().remaining };
    let mut opts = options_as(&stack, Role::Admin);
    opts.api_token = Some(sluice_gateway::ApiToken::new("full-secret"));
    opts.read_token = Some(sluice_gateway::ApiToken::new("read-secret"));
    let gw = Gateway::start_with(opts).await;
    let get = |path: &str, cookie: &str| {
        http()
            .get(gw.url(path))
            .header("cookie", cookie.to_string())
            .send()
    };

    // Neither token: no cookie. Each token: its own cookie.
    assert_eq!(log_in(&gw, "not-a-token").await, None);
    let read = log_in(&gw, "read-secret").await.expect("a read login");
    let full = log_in(&gw, "full-secret").await.expect("a full login");
    assert_ne!(read, full, "each role has its own session");
    assert!(!read.contains("read-secret") && !full.contains("full-secret"));

    // The read login sees the pages, the key's state, and no reset.
    for path in ["/ui/top", "/ui/policies", "/ui/status", "/ui/alerts"] {
        let resp = get(path, &read).await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
    let url = gw.url("/ui/key?key=ui-read");
    let page = eventually(Duration::from_secs(15), TICK, || async {
        let body = http()
            .get(&url)
            .header("cookie", read.clone())
            .send()
            .await?
            .text()
            .await?;
        anyhow::ensure!(body.contains("may only look"), "not yet: {body}");
        Ok(body)
    })
    .await
    .unwrap();
    assert!(
        page.contains("data-used=\"4\" data-remaining=\"6\""),
        "{page}"
    );
    assert!(!page.contains("class=\"reset\""), "{page}");
    assert!(!page.contains("name=\"csrf\""), "{page}");

    // With a CSRF field taken from a full login's page, the read login's
    // reset is still refused, and so is a read bearer's: nothing reset.
    let full_page = get("/ui/key?key=ui-read", &full)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = field(&full_page, "csrf").to_string();
    let form = format!("key=ui-read&policy=&csrf={csrf}&confirm=yes");
    let refused = |req: reqwest::RequestBuilder| async {
        let resp = req
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.clone())
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    };
    let (status, body) = refused(
        http()
            .post(gw.url("/ui/key/reset"))
            .header("cookie", read.clone()),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("may only look"), "{body}");
    let (status, body) = refused(
        http()
            .post(gw.url("/ui/key/reset"))
            .bearer_auth("read-secret"),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(remaining().await, 6, "a refused reset resets nothing");

    // The full login resets.
    let (status, body) = refused(
        http()
            .post(gw.url("/ui/key/reset"))
            .header("cookie", full.clone()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("reset under tenper"), "{body}");
    assert_eq!(remaining().await, 10);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_ui_there_is_no_dashboard() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &TestConfig::new().toml(), 1).await;
    let mut opts = GatewayOptions::new(stack.nats.url(), config(Fallback::Closed));
    opts.ui = false;
    let gw = Gateway::start_with(opts).await;
    for path in ["/ui", "/ui/top", "/ui/assets/style.css"] {
        let resp = http().get(gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 404, "{path}");
    }
    let on = Gateway::start_with(GatewayOptions::new(
        stack.nats.url(),
        config(Fallback::Closed),
    ))
    .await;
    let resp = http()
        .get(on.url("/ui/assets/style.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    gw.stop().await;
    on.stop().await;
}

/// Where `needle` is in `page`, or a panic that shows the page.
fn at(page: &str, needle: &str) -> usize {
    page.find(needle)
        .unwrap_or_else(|| panic!("no {needle} in {page}"))
}

/// A group's page (SPEC §17): its own usage (the org's key under the
/// outermost policy) and its members in order, each linked to its usage
/// page by `org` and `key`; the top page links a grouped key's group; a
/// grouped key's usage and state pages; and `/v1/usage?top=N&group=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_page_shows_its_own_usage_and_its_members_in_order() {
    let _serial = serial().await;
    let toml = common::groups_toml(100, 3, "");
    let stack = Stack::start(SLUICE, &toml, 2).await;
    let nats = stack.nats.connect().await.unwrap();
    crate::common::ask_each(
        &nats,
        &[
            ("acme.alice", "user", 4),
            ("acme.bob", "user", 1),
            ("acme.eng.carol", "tenper", 2),
            ("globex.dave", "user", 2),
        ],
    )
    .await;
    let config = sluice_core::config::Config::from_toml(&toml, "groups.toml").unwrap();
    let gw = Gateway::start(&stack.nats.url(), config, None).await;

    // The org's pool: alice's 3 and bob's 1 used, alice's 4th denied.
    let page = page_when(&gw, "/ui/group?org=acme&last=1h", |b| {
        b.contains("data-key=\"acme/bob\"")
    })
    .await;
    let own = at(&page, "data-used=\"4\" data-denied=\"1\"");
    let rows = [
        at(
            &page,
            "data-key=\"acme/alice\" data-used=\"3\" data-denied=\"1\"",
        ),
        at(&page, "data-key=\"acme/eng/carol\" data-used=\"2\""),
        at(&page, "data-key=\"acme/bob\" data-used=\"1\""),
    ];
    assert!(own < rows[0] && rows.is_sorted(), "{page}");
    assert!(page.contains("<option value=\"org\" selected>"), "{page}");
    assert!(!page.contains("globex") && !page.contains("data-key=\"acme\""));
    assert!(
        page.contains("href=\"/ui/usage?org=acme&amp;key=alice&amp;policy=user\""),
        "{page}"
    );
    assert!(
        page.contains("href=\"/ui/usage?org=acme&amp;team=eng&amp;key=carol&amp;policy=tenper\"")
    );
    let denied = page_when(&gw, "/ui/group?org=acme&by=denied&last=1h", |b| {
        b.contains("1 members by denied")
    })
    .await;
    assert!(denied.contains("data-key=\"acme/alice\""), "{denied}");

    // The top page links each grouped key's group over its range.
    let top = page_when(&gw, "/ui/top?last=1h", |b| b.contains("globex")).await;
    assert!(
        top.contains("href=\"/ui/group?org=acme&amp;last=1h\" data-group=\"acme\""),
        "{top}"
    );
    assert!(top.contains("data-group=\"globex\""), "{top}");

    // A member's usage and state pages name it by org and key.
    let usage = page_when(&gw, "/ui/usage?org=acme&key=alice&policy=user", |b| {
        b.contains("class=\"summary\"")
    })
    .await;
    assert!(
        usage.contains("data-used=\"3\" data-denied=\"1\""),
        "{usage}"
    );
    assert!(usage.contains("acme/alice"), "{usage}");
    assert!(usage.contains("href=\"/ui/key?org=acme&amp;key=alice&amp;policy=user\""));
    let state = page_when(&gw, "/ui/key?org=acme&key=alice&policy=user", |b| {
        b.contains("data-remaining")
    })
    .await;
    assert!(
        state.contains("data-used=\"3\" data-remaining=\"0\""),
        "{state}"
    );
    let lost = page_when(&gw, "/ui/usage?team=eng&key=carol", |b| b.contains("error")).await;
    assert!(lost.contains("a team is named with its org"), "{lost}");

    // The same ranking as JSON; a group that is no key is a 400.
    let (status, _, top) = call(http().get(gw.url("/v1/usage?top=5&group=acme"))).await;
    assert_eq!(status.as_u16(), 200, "{top}");
    let keys: Vec<&str> = top["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key_token"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["acme.alice", "acme.eng.carol", "acme.bob"]);
    let (status, _, refused) = call(http().get(gw.url("/v1/usage?top=5&group="))).await;
    assert_eq!(status.as_u16(), 400, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("group"),
        "{refused}"
    );
    gw.stop().await;
}
