//! The Rust client (`sluice-client`) against a real nats-server and real
//! `sluice worker` processes: decisions with their headers, policy and
//! cost, key encoding, typed errors, hits, and the partition count checked
//! at connect. What the client saves in round trips (the deny cache,
//! batching) is in `client_round_trips.rs`; owner changes and the
//! fallbacks in `client_failover.rs`.

use crate::common;

use common::client::{client, options, stack};
use sluice_client::{Client, ConnectError, Error, Fallback, Source};
use sluice_tests::{ask, eventually, serial, NatsServer, PEEK, TICK};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_are_allowed_then_denied_with_headers_policy_and_cost() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let client = client(&stack, Fallback::Closed).await;

    for remaining in (0..5).rev() {
        let a = client.allow("alice").await.unwrap();
        assert!(a.allowed);
        assert_eq!(
            (a.limit, a.remaining, a.source),
            (5, remaining, Source::Worker)
        );
        assert_eq!(a.policy, "default");
        assert_eq!(a.retry_after, Duration::ZERO);
    }
    let denied = client.allow("alice").await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.source, Source::Worker);
    assert!(
        denied.retry_after > Duration::from_secs(9)
            && denied.retry_after <= Duration::from_secs(10)
    );
    let headers: Vec<(&str, String)> = denied.headers().collect();
    assert_eq!(
        headers,
        [
            ("RateLimit-Limit", "5".to_string()),
            ("RateLimit-Remaining", "0".to_string()),
            ("RateLimit-Reset", "10".to_string()),
            ("Retry-After", "10".to_string()),
        ]
    );
    let allowed_headers: Vec<&str> = client
        .allow("alice-2")
        .await
        .unwrap()
        .headers()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        allowed_headers,
        ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"],
        "no Retry-After when allowed"
    );

    // Another policy, with a cost.
    let a = client.ask("alice", "tenper", 3).await.unwrap();
    assert!(a.allowed);
    assert_eq!((a.policy.as_str(), a.limit, a.remaining), ("tenper", 10, 7));
    let a = client.ask("alice", "tenper", 8).await.unwrap();
    assert!(!a.allowed, "8 more do not fit in the 7 left");
    let a = client.ask("alice", "tenper", 7).await.unwrap();
    assert!(
        a.allowed,
        "a smaller cost is not answered by the deny cache"
    );
    assert_eq!(a.remaining, 0);

    // A peek consumes nothing.
    let p1 = client.peek("bob", "tenper").await.unwrap();
    let p2 = client.peek("bob", "tenper").await.unwrap();
    assert!(p1.allowed && p2.allowed);
    assert_eq!((p1.remaining, p2.remaining), (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_percent_encoded_for_the_caller() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let client = client(&stack, Fallback::Closed).await;
    client.allow("bob@x.io").await.unwrap();
    client.allow(b"\xff\x00 key".as_slice()).await.unwrap();
    // Any NATS client sees the same counters under the canonical tokens.
    let nats = stack.clients(1).await.remove(0);
    let d = ask(&nats, "bob%40x%2Eio", PEEK).await.unwrap();
    assert_eq!(d.remaining, 4);
    let d = ask(&nats, "%FF%00%20key", PEEK).await.unwrap();
    assert_eq!(d.remaining, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_typed_and_carry_the_workers_message() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let client = client(&stack, Fallback::Open).await;

    let e = client.ask("carol", "nope", 1).await.unwrap_err();
    assert!(matches!(e, Error::UnknownPolicy(_)), "{e:?}");
    assert_eq!(e.status(), 404);
    assert!(e.message().contains("no policy named \"nope\""), "{e}");

    let e = client.ask("carol", "default", 6).await.unwrap_err();
    assert!(matches!(e, Error::BadRequest(_)), "{e:?}");
    assert!(e.message().contains("can never be allowed"), "{e}");
    assert_eq!(client.stats().round_trips, 2, "both came from the worker");

    // Refused before sending: no round trip.
    let long_key = "@".repeat(86); // 258 bytes once encoded
    let e = client.allow(&long_key).await.unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(e.message().contains("256"), "{e}");
    assert!(matches!(client.allow("").await, Err(Error::BadRequest(_))));
    assert!(matches!(
        client.ask("k", "a.b", 1).await,
        Err(Error::BadRequest(_))
    ));
    assert!(matches!(
        client.ask("k", "default", 1_000_000_001).await,
        Err(Error::BadRequest(_))
    ));
    assert_eq!(client.stats().round_trips, 2);
    assert_eq!(client.stats().fallbacks(), 0, "errors are not fallbacks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_count_without_asking() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let client = client(&stack, Fallback::Closed).await;
    let a = client.hit_and_peek("frank", "default", 5).await.unwrap();
    assert!(!a.allowed, "after 5 hits a 5-per-10s key has no room");
    assert_eq!((a.remaining, a.source), (0, Source::Worker));
    // A plain hit is a publish; its count shows up at the worker shortly.
    client.hit("grace", "default", 7).await.unwrap();
    let denied = eventually(Duration::from_secs(5), TICK, || async {
        let a = client.peek("grace", "default").await?;
        anyhow::ensure!(!a.allowed, "grace is still allowed: {a:?}");
        Ok(a)
    })
    .await;
    assert!(
        denied.is_ok(),
        "the hit was counted even beyond the limit: {denied:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_another_partition_count_is_refused_at_connect() {
    let server = NatsServer::start_with_partitions(16).unwrap();
    let opts = |partitions| options(Fallback::Closed).partitions(partitions);
    Client::connect_with(&server.url(), opts(16))
        .await
        .expect("the same count connects");
    for wrong in [8, 32, 64] {
        match Client::connect_with(&server.url(), opts(wrong)).await {
            Err(ConnectError::Partitions(m)) => assert!(m.contains("partition"), "{m}"),
            other => panic!("partitions = {wrong}: {other:?}"),
        }
    }
    let mut unchecked = opts(32);
    unchecked.check_partitions = false;
    Client::connect_with(&server.url(), unchecked)
        .await
        .expect("the check can be turned off");

    let bare = NatsServer::start("").unwrap();
    match Client::connect_with(&bare.url(), opts(16)).await {
        Err(ConnectError::Partitions(m)) => assert!(m.contains("mapping"), "{m}"),
        other => panic!("no mapping: {other:?}"),
    }
}

/// SPEC §16: an ask named by the caller's id counts once, however often it
/// is sent, and answers the first decision marked `repeat`; the id reused
/// for another ask is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_with_the_callers_id_counts_once_and_a_reused_id_is_refused() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let client = client(&stack, Fallback::Closed).await;
    let first = client
        .ask_with_id("ivy", "default", 2, "order-7")
        .await
        .unwrap();
    assert_eq!(
        (first.allowed, first.remaining, first.repeat),
        (true, 3, false)
    );
    let again = client
        .ask_with_id("ivy", "default", 2, "order-7")
        .await
        .unwrap();
    assert_eq!(
        (again.allowed, again.remaining, again.repeat),
        (true, 3, true)
    );
    assert_eq!(client.peek("ivy", "default").await.unwrap().remaining, 3);
    match client.ask_with_id("ivy", "default", 1, "order-7").await {
        Err(Error::IdReused(m)) => assert!(m.contains("send a new id"), "{m}"),
        other => panic!("another cost under the same id: {other:?}"),
    }
    match client.ask_with_id("ivy", "default", 1, "").await {
        Err(Error::BadRequest(m)) => assert!(m.contains("1 to 128 bytes"), "{m}"),
        other => panic!("an empty id: {other:?}"),
    }
}

/// The client's own ids: in journal mode with the journal gone, a worker
/// counts an ask in memory and answers 503 "not stored"; the client sends
/// it again, and the owner answers the repeat without counting it. One
/// ask, one count. Without ids, each try counted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_retry_after_an_unstored_503_counts_once() {
    let _serial = serial().await;
    let toml = sluice_tests::TestConfig::new().journal().toml();
    let stack = sluice_tests::Stack::start(common::SLUICE, &toml, 1).await;
    let js = async_nats::jetstream::new(stack.clients(1).await.remove(0));
    js.delete_stream(sluice_core::storage::JOURNAL_STREAM)
        .await
        .unwrap();
    let url = stack.nats.url();
    let connect = |ask_ids| {
        let opts = options(Fallback::Closed).batching(false).ask_ids(ask_ids);
        Client::connect_with(&url, opts)
    };
    let named = connect(true).await.unwrap();
    let answer = named.allow("judy").await.unwrap();
    assert!(answer.allowed && answer.repeat, "{answer:?}");
    assert_eq!(named.peek("judy", "default").await.unwrap().remaining, 4);

    let unnamed = connect(false).await.unwrap();
    let answer = unnamed.allow("kim").await;
    assert!(answer.is_err(), "every try was a 503: {answer:?}");
    let left = unnamed.peek("kim", "default").await.unwrap().remaining;
    assert!(left < 3, "without ids each try counted: {left} left");
}
