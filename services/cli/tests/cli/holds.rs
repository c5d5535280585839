//! Holds (SPEC §13) against real workers over a real NATS
//! server: concurrency slots taken by many clients at once never pass the
//! policy's `concurrency`; a settle for less gives back at once; a hold a
//! client never settles frees its slot at its ttl; a hold is settled while
//! a worker joins; in journal mode holds survive `kill -9` of their owner,
//! none lost, none doubled, each settle counted once; an unknown hold is
//! 404 and changes nothing; `rl.allow` on a concurrency policy is refused. The Rust
//! client's `reserve`/`settle`/`extend` and its guard (and, in journal
//! mode with the journal gone, its named reserve sent again after an
//! unstored 503 keeping one hold), and the gateway's
//! `POST /v1/reserve|settle|extend/{key}`, and `sluice reserve|settle|extend`,
//! over the same.

use crate::common;

use anyhow::{anyhow, bail};
use sluice_client::{Client, ClientOptions, Error, Reserved};
use sluice_core::config::Config;
use sluice_core::subject::Verb;
use sluice_core::wire::hold::{decode_held, HoldTicket};
use sluice_core::wire::inspect::{decode_admin_reply, InspectReply};
use sluice_core::wire::{DecisionReply, Reply};
use sluice_tests::{error_of, eventually, request, serial, Stack, TICK};
use std::time::Duration;

use common::gateway::{call, header, http, Gateway};
use common::SLUICE;

const CONFIG: &str = common::HOLDS_CONFIG;

/// A hold verb's reply: the decision and the hold it kept, or the error's
/// status and message.
async fn hold(
    client: &async_nats::Client,
    verb: Verb,
    key: &str,
    body: &str,
) -> anyhow::Result<(DecisionReply, Option<HoldTicket>)> {
    let msg = request(client, &verb.client_subject(key), body.as_bytes())
        .await
        .map_err(|e| anyhow!("{e:?}"))?;
    if let Some(e) = error_of(&msg) {
        bail!("{} {} {}", e.code.status(), e.code.word(), e.message);
    }
    match decode_held(&msg.payload)? {
        (Reply::Decision(d), ticket) => Ok((d, ticket)),
        (Reply::Error(e), _) => bail!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_slots_hold_under_many_clients_and_free_at_settle_or_ttl() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 2).await;
    let clients = stack.clients(10).await;
    let reserve = r#"{"policy":"inflight","ttl_ms":60000}"#;
    // Ten clients at once: three slots.
    let tries = clients
        .iter()
        .map(|c| hold(c, Verb::Reserve, "tenant-1", reserve));
    let results = futures::future::join_all(tries).await;
    let held: Vec<HoldTicket> = results
        .into_iter()
        .map(|r| r.expect("every reserve is answered"))
        .filter_map(|(d, ticket)| {
            assert_eq!(d.allowed, ticket.is_some(), "{d:?}");
            ticket
        })
        .collect();
    assert_eq!(held.len(), 3, "never more than concurrency = 3 live");
    let client = &clients[0];
    let (d, none) = hold(client, Verb::Reserve, "tenant-1", reserve)
        .await
        .unwrap();
    assert!(!d.allowed && none.is_none());
    assert!(d.retry_after_ms > 0, "until the first slot ends: {d:?}");

    // `rl.inspect` shows them.
    let msg = request(
        client,
        &Verb::Inspect.client_subject("tenant-1"),
        br#"{"policy":"inflight"}"#,
    )
    .await
    .unwrap();
    let shown: InspectReply = decode_admin_reply(&msg.payload).unwrap();
    let holds = shown.policies[0].holds.clone().expect("live holds shown");
    assert_eq!((holds.live, holds.slots), (3, Some((3, 3))));

    // `rl.allow` cannot take a slot.
    let msg = request(
        client,
        &Verb::Allow.client_subject("tenant-1"),
        br#"{"policy":"inflight"}"#,
    )
    .await
    .unwrap();
    let e = error_of(&msg).expect("refused");
    assert_eq!(e.code.status(), 400);
    assert!(e.message.contains("rl.reserve"), "{}", e.message);

    // A settle frees a slot at once; settling again is 404, nothing changes.
    let settle = format!(
        r#"{{"policy":"inflight","hold":"{}","cost":1}}"#,
        held[0].hold
    );
    hold(client, Verb::Settle, "tenant-1", &settle)
        .await
        .unwrap();
    let again = hold(client, Verb::Settle, "tenant-1", &settle)
        .await
        .unwrap_err();
    assert!(again.to_string().starts_with("404 unknown_hold"), "{again}");
    let other_key = hold(client, Verb::Settle, "tenant-2", &settle)
        .await
        .unwrap_err();
    assert!(
        other_key.to_string().starts_with("404 unknown_hold"),
        "{other_key}"
    );
    let (d, short) = hold(
        client,
        Verb::Reserve,
        "tenant-1",
        r#"{"policy":"inflight","ttl_ms":300}"#,
    )
    .await
    .unwrap();
    assert!(
        d.allowed && short.is_some(),
        "the settled slot is free: {d:?}"
    );
    // Its client "dies": the slot is free once its 300 ms are up.
    eventually(Duration::from_secs(10), TICK, || async {
        let (d, ticket) = hold(client, Verb::Reserve, "tenant-1", reserve).await?;
        anyhow::ensure!(d.allowed && ticket.is_some(), "still full: {d:?}");
        Ok(())
    })
    .await
    .expect("a hold nobody settles ends at its ttl");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_for_less_gives_back_while_a_worker_joins() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    let client = stack.clients(1).await.remove(0);
    let reserve = r#"{"policy":"llm","cost":4000,"ttl_ms":600000}"#;
    let (d, ticket) = hold(&client, Verb::Reserve, "user-7", reserve)
        .await
        .unwrap();
    let ticket = ticket.expect("held");
    assert_eq!(d.remaining, 6000, "held counts at once");
    assert!(ticket.expires_ms > 590_000 && ticket.expires_ms <= 600_000);

    // A second worker joins: about half the partitions hand over, their
    // holds carried by the handover's snapshot (whether this key's moved
    // before the settle is up to timing; the kept state's own tests pin
    // the carrying down).
    stack.start_workers(1).await;
    let settle = format!(r#"{{"policy":"llm","hold":"{}","cost":1500}}"#, ticket.hold);
    let (d, _) = eventually(Duration::from_secs(20), TICK, || {
        hold(&client, Verb::Settle, "user-7", &settle)
    })
    .await
    .expect("settled, before or after a handover");
    assert!(
        d.remaining >= 8500,
        "2500 of the 4000 held went back: {d:?}"
    );
    let bad = hold(
        &client,
        Verb::Reserve,
        "user-7",
        r#"{"policy":"llm","ttl_ms":7200000}"#,
    )
    .await
    .unwrap_err();
    assert!(bad.to_string().starts_with("400"), "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_journal_mode_holds_survive_a_kill_9_each_settle_counted_once() {
    let _serial = serial().await;
    // Snapshots far apart: what the new owner knows comes from the journal.
    let config = CONFIG.replace(
        "snapshot_interval = \"200ms\"",
        "snapshot_interval = \"1h\"\ndurability = \"journal\"",
    );
    let mut stack = Stack::start(SLUICE, &config, 1).await;
    let client = stack.clients(1).await.remove(0);
    let slots = r#"{"policy":"inflight","ttl_ms":600000}"#;
    let mut held = Vec::new();
    for _ in 0..3 {
        let (_, ticket) = hold(&client, Verb::Reserve, "tenant-9", slots)
            .await
            .unwrap();
        held.push(ticket.expect("a slot"));
    }
    let tokens = r#"{"policy":"exact","cost":3000,"ttl_ms":600000}"#;
    let (_, tokens_hold) = hold(&client, Verb::Reserve, "user-9", tokens)
        .await
        .unwrap();
    let tokens_hold = tokens_hold.expect("held");
    // One settled before the crash: 1000 of its 3000 used.
    let settle = format!(
        r#"{{"policy":"exact","hold":"{}","cost":1000}}"#,
        tokens_hold.hold
    );
    let (d, _) = hold(&client, Verb::Settle, "user-9", &settle)
        .await
        .unwrap();
    assert_eq!(d.remaining, 9000);
    let (_, second) = hold(&client, Verb::Reserve, "user-9", tokens)
        .await
        .unwrap();
    let second = second.expect("held");

    let old = stack.worker_ids().remove(0);
    stack.kill_worker(&old);
    stack.start_workers(1).await;

    // No slot leaked or doubled: still three held, the fourth refused.
    let (d, none) = eventually(Duration::from_secs(20), TICK, || {
        hold(&client, Verb::Reserve, "tenant-9", slots)
    })
    .await
    .expect("the new owner answers");
    assert!(
        !d.allowed && none.is_none(),
        "three slots still held: {d:?}"
    );
    // A settle before the crash is not given back again; one after, once.
    let (d, _) = hold(
        &client,
        Verb::Settle,
        "user-9",
        &format!(r#"{{"policy":"exact","hold":"{}","cost":0}}"#, second.hold),
    )
    .await
    .expect("the hold reserved before the crash is known");
    assert_eq!(
        d.remaining, 9000,
        "exact: 1000 used, the second hold given back"
    );
    let again = hold(&client, Verb::Settle, "user-9", &settle)
        .await
        .unwrap_err();
    assert!(again.to_string().starts_with("404"), "{again}");
    let settle_slot = format!(
        r#"{{"policy":"inflight","hold":"{}","cost":1}}"#,
        held[0].hold
    );
    hold(&client, Verb::Settle, "tenant-9", &settle_slot)
        .await
        .unwrap();
    let (d, ticket) = hold(&client, Verb::Reserve, "tenant-9", slots)
        .await
        .unwrap();
    assert!(d.allowed && ticket.is_some(), "the settled slot is free");
}

/// A Rust client for [`CONFIG`]'s stack.
async fn client_of(stack: &Stack) -> Client {
    let config = Config::from_toml(CONFIG, "holds.toml").unwrap();
    let opts = ClientOptions::from_config(&config).timeout(Duration::from_secs(2));
    Client::connect_with(&stack.nats.url(), opts).await.unwrap()
}

/// In journal mode with the journal gone, an owner does a reserve in
/// memory and answers 503 "not stored". The client names its reserve
/// (SPEC §16), sends it again under the same id, and the owner answers
/// the repeat: one hold. Unnamed, it is not sent again: the caller gets
/// the 503, and still one hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_reserve_sent_again_after_an_unstored_503_keeps_one_hold() {
    let _serial = serial().await;
    let toml = format!("durability = \"journal\"\n{CONFIG}");
    let stack = Stack::start(SLUICE, &toml, 1).await;
    let js = async_nats::jetstream::new(stack.clients(1).await.remove(0));
    js.delete_stream(sluice_core::storage::JOURNAL_STREAM)
        .await
        .unwrap();
    let config = Config::from_toml(&toml, "holds.toml").unwrap();
    let url = stack.nats.url();
    let connect = |ask_ids| {
        let opts = ClientOptions::from_config(&config)
            .batching(false)
            .ask_ids(ask_ids)
            .timeout(Duration::from_secs(2));
        Client::connect_with(&url, opts)
    };
    let named = connect(true).await.unwrap();
    let held = named.reserve("user-7", "llm", 4000, None).await.unwrap();
    assert!(held.answer.repeat && held.ticket.is_some(), "{held:?}");
    let left = named.peek("user-7", "llm").await.unwrap().remaining;
    assert_eq!(left, 6000, "one hold of 4000");

    let unnamed = connect(false).await.unwrap();
    let once = unnamed.reserve("user-8", "llm", 4000, None).await;
    assert!(
        matches!(&once, Err(Error::Unavailable(m)) if m.contains("store")),
        "{once:?}"
    );
    let left = unnamed.peek("user-8", "llm").await.unwrap().remaining;
    assert_eq!(left, 6000, "sent once: one hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_reserves_settles_extends_and_its_guard_releases() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    let client = client_of(&stack).await;

    let held = client
        .reserve("user-7", "llm", 4000, Some(Duration::from_secs(600)))
        .await
        .unwrap();
    assert_eq!(held.answer.remaining, 6000, "held counts at once");
    let ticket = held.ticket.expect("held");
    let extended = client
        .extend(
            "user-7",
            "llm",
            &ticket.hold,
            Some(Duration::from_secs(1200)),
        )
        .await
        .unwrap();
    let longer = extended.ticket.expect("the new end");
    assert!(longer.expires_ms > 600_000, "{longer:?}");
    let after = client
        .settle("user-7", "llm", &ticket.hold, 1500)
        .await
        .unwrap();
    assert_eq!(after.remaining, 8500, "2500 of the 4000 held went back");
    let again = client.settle("user-7", "llm", &ticket.hold, 1500).await;
    assert!(matches!(again, Err(Error::UnknownHold(_))), "{again:?}");
    let bad = client.settle("user-7", "llm", "guess", 1).await;
    assert!(matches!(bad, Err(Error::BadRequest(_))), "{bad:?}");
    let too_long = client
        .reserve("user-7", "llm", 1, Some(Duration::from_secs(7200)))
        .await;
    assert!(
        matches!(too_long, Err(Error::BadRequest(_))),
        "{too_long:?}"
    );

    // Guards: three slots; a fourth is denied with a retry time.
    let mut guards = Vec::new();
    for _ in 0..3 {
        match client.hold("tenant-1", "inflight", 1, None).await.unwrap() {
            Reserved::Held(guard) => guards.push(guard),
            Reserved::Denied(answer) => panic!("a slot is free: {answer:?}"),
        }
    }
    let Reserved::Denied(full) = client.hold("tenant-1", "inflight", 1, None).await.unwrap() else {
        panic!("three slots only")
    };
    assert!(full.retry_after > Duration::ZERO, "{full:?}");
    // A settled guard frees its slot at once.
    guards.pop().unwrap().settle(1).await.unwrap();
    let Reserved::Held(fourth) = client.hold("tenant-1", "inflight", 1, None).await.unwrap() else {
        panic!("the settled slot is free")
    };
    guards.push(fourth);
    // A dropped guard releases its slot (on a spawned task).
    drop(guards.pop());
    let freed = eventually(Duration::from_secs(10), TICK, || async {
        match client.hold("tenant-1", "inflight", 1, None).await? {
            Reserved::Held(guard) => Ok(guard),
            Reserved::Denied(a) => anyhow::bail!("still full: {a:?}"),
        }
    })
    .await
    .expect("a dropped guard releases its slot before its 60 s ttl");
    freed.release().await.unwrap();

    // No worker: no fallback, a 503.
    stack.stop_workers();
    let none = client.reserve("user-7", "llm", 1, None).await;
    let Err(Error::Unavailable(why)) = none else {
        panic!("{none:?}")
    };
    assert!(why.contains("no fallback"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_reserves_settles_and_extends_over_http_with_the_api_token() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    let config = Config::from_toml(CONFIG, "holds.toml").unwrap();
    let mut opts = sluice_gateway::GatewayOptions::new(stack.nats.url(), config);
    opts.api_token = Some(sluice_gateway::ApiToken::new("s3cret"));
    let gw = Gateway::start_with(opts).await;
    let http = http();
    let post = |verb: &str, key: &str, body: String| {
        http.post(gw.url(&format!("/v1/{verb}/{key}")))
            .bearer_auth("s3cret")
            .header("content-type", "application/json")
            .body(body)
    };

    let reserve = r#"{"policy":"llm","cost":4000,"ttl_ms":600000}"#;
    let (status, _, body) = call(http.post(gw.url("/v1/reserve/user-7")).body(reserve)).await;
    assert_eq!(
        (status.as_u16(), &body["error"]),
        (401, &"unauthorized".into())
    );
    let (status, headers, body) = call(post("reserve", "user-7", reserve.into())).await;
    assert_eq!(status.as_u16(), 200, "{body}");
    assert_eq!(body["remaining"], 6000, "held counts at once");
    assert_eq!(header(&headers, "ratelimit-remaining"), Some("6000"));
    let hold = body["hold"].as_str().expect("the hold's name").to_string();
    assert!(body["expires_ms"].as_u64().unwrap() > 590_000, "{body}");

    let (status, _, body) = call(post(
        "extend",
        "user-7",
        format!(r#"{{"policy":"llm","hold":"{hold}","ttl_ms":1200000}}"#),
    ))
    .await;
    assert_eq!(status.as_u16(), 200, "{body}");
    assert!(body["expires_ms"].as_u64().unwrap() > 600_000, "{body}");
    let settle = format!(r#"{{"policy":"llm","hold":"{hold}","cost":1500}}"#);
    let (status, _, body) = call(post("settle", "user-7", settle.clone())).await;
    assert_eq!(status.as_u16(), 200, "{body}");
    assert_eq!(body["remaining"], 8500, "2500 of the 4000 held went back");
    assert!(body.get("hold").is_none(), "{body}");
    let (status, _, body) = call(post("settle", "user-7", settle)).await;
    assert_eq!(
        (status.as_u16(), &body["error"]),
        (404, &"unknown_hold".into())
    );

    // SPEC §16: a reserve sent again with its Idempotency-Key is the same
    // hold, marked; a settle sent again with its body id is answered, not
    // 404; the key reused by another verb is 409.
    let named = || post("reserve", "user-8", reserve.into()).header("Idempotency-Key", "r-1");
    let (_, headers, first) = call(named()).await;
    assert!(header(&headers, "sluice-repeat").is_none(), "{first}");
    let (status, headers, again) = call(named()).await;
    assert_eq!(status.as_u16(), 200, "{again}");
    assert_eq!(header(&headers, "sluice-repeat"), Some("true"));
    assert_eq!(
        (&again["hold"], &again["remaining"]),
        (&first["hold"], &serde_json::json!(6000))
    );
    let hold = first["hold"].as_str().unwrap();
    let settle = format!(r#"{{"policy":"llm","hold":"{hold}","cost":0,"id":"s-1"}}"#);
    let (_, _, body) = call(post("settle", "user-8", settle.clone())).await;
    assert_eq!(body["remaining"], 10_000, "{body}");
    let (status, headers, body) = call(post("settle", "user-8", settle)).await;
    assert_eq!(status.as_u16(), 200, "{body}");
    assert_eq!(header(&headers, "sluice-repeat"), Some("true"));
    let extend = format!(r#"{{"policy":"llm","hold":"{hold}"}}"#);
    let reused = post("extend", "user-8", extend).header("Idempotency-Key", "r-1");
    let (status, _, body) = call(reused).await;
    assert_eq!(
        (status.as_u16(), &body["error"]),
        (409, &"id_reused".into())
    );

    // Three slots, then 429 with Retry-After and no hold.
    let slot = || post("reserve", "tenant-1", r#"{"policy":"inflight"}"#.into());
    for _ in 0..3 {
        let (status, _, body) = call(slot()).await;
        assert_eq!(status.as_u16(), 200, "{body}");
    }
    let (status, headers, body) = call(slot()).await;
    assert_eq!(status.as_u16(), 429, "{body}");
    assert!(header(&headers, "retry-after").is_some());
    assert!(body.get("hold").is_none(), "{body}");

    // Bad input: 400 with the reason.
    let (status, _, body) = call(post("reserve", "user-7", r#"{"cots":5}"#.into())).await;
    assert_eq!(status.as_u16(), 400, "{body}");
    let (status, _, body) = call(
        http.post(gw.url("/v1/reserve/user-7?policy=llm"))
            .bearer_auth("s3cret"),
    )
    .await;
    assert_eq!(status.as_u16(), 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("JSON body"),
        "{body}"
    );
    let (status, _, body) = call(post("settle", "", "{}".into())).await;
    assert_eq!(status.as_u16(), 400, "no key: {body}");

    // No worker: 503, whatever the fallback.
    stack.stop_workers();
    let (status, _, body) = call(post("reserve", "user-7", reserve.into())).await;
    assert_eq!(status.as_u16(), 503, "{body}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_reserve_prints_the_hold_that_sluice_settle_ends() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 1).await;
    let config = stack.config_path().to_str().unwrap().to_string();
    let sluice = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", &config]);
        stack.command(&all)
    };
    let out = sluice(&[
        "reserve", "user-7", "--policy", "llm", "--cost", "4000", "--ttl-ms", "60000",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = text.lines().next().unwrap();
    let hold = first
        .strip_prefix("hold=")
        .and_then(|rest| rest.split_once(" expires_ms="))
        .map(|(hold, _)| hold.to_string())
        .unwrap_or_else(|| panic!("the hold and its end first: {text}"));
    assert!(text.contains("remaining=6000"), "{text}");

    let out = sluice(&[
        "extend", "user-7", "--policy", "llm", "--hold", &hold, "--json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["hold"], hold.as_str(), "{json}");
    let out = sluice(&[
        "settle", "user-7", "--policy", "llm", "--hold", &hold, "--cost", "1500",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("remaining=8500"), "{text}");
    let again = sluice(&[
        "settle", "user-7", "--policy", "llm", "--hold", &hold, "--cost", "1500",
    ]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("no live hold"),
        "says the hold is unknown: {err}"
    );
}
