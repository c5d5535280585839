//! Groups (SPEC §17) through the Rust client against real workers on a
//! real nats-server: a [`KeyPath`] goes wherever a key goes; users of one
//! organisation asking at once through a batching client share its pool
//! exactly, every answer lists the levels and every denial the level that
//! denied; a denial by the organisation is answered again from the deny
//! cache for that user alone; no slice of a grouped key is asked for.

use crate::common;
use sluice_client::{Client, ClientOptions, Error, Fallback, KeyPath, Source};
use sluice_core::config::Config;
use sluice_tests::{serial, Stack};
use std::sync::Arc;
use std::time::Duration;

/// A policy with local budgets, which no grouped key may use.
const HOT: &str = r#"
[policies.hot]
algorithm = "fixed_window"
limits = [ { max = 300, per = "1h" } ]
local_budget = true
"#;

const USERS: usize = 8;
const ASKS_EACH: usize = 3;
const POOL: usize = 12;

/// The stack, two workers, and a client with `options` (and no fallback).
async fn start(options: fn(ClientOptions) -> ClientOptions) -> (Stack, Client) {
    // An organisation's pool of 12 an hour, each user 3 an hour of it.
    let toml = common::groups_toml(POOL as u64, 3, HOT);
    let stack = Stack::start(common::SLUICE, &toml, 2).await;
    let config = Config::from_toml(&toml, "groups.toml").unwrap();
    let opts = ClientOptions::from_config(&config)
        .fallback(Fallback::Closed)
        .timeout(Duration::from_secs(2));
    let client = Client::connect_with(&stack.nats.url(), options(opts))
        .await
        .expect("the client connects");
    (stack, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_asking_at_once_through_one_batching_client_share_the_pool_exactly() {
    let _serial = serial().await;
    let (_stack, client) = start(|o| o.batching(true)).await;
    let go = Arc::new(tokio::sync::Barrier::new(USERS));
    let users: Vec<_> = (0..USERS)
        .map(|u| {
            let (client, go) = (client.clone(), go.clone());
            tokio::spawn(async move {
                let key = KeyPath::new(["acme".to_string(), format!("user-{u}")]).unwrap();
                go.wait().await;
                let mut answers = Vec::new();
                for _ in 0..ASKS_EACH {
                    answers.push(client.ask(&key, "user", 1).await);
                }
                answers
            })
        })
        .collect();
    let (mut allowed, mut by_org) = (0, 0);
    for user in users {
        for answer in user.await.unwrap() {
            let a = answer.expect("every ask is decided");
            let levels: Vec<&str> = a.levels.iter().map(|l| l.policy.as_str()).collect();
            assert_eq!(levels, ["org", "user"], "{a:?}");
            // A user's asks after their first denial come from the deny
            // cache, levels and all.
            assert!(
                matches!(a.source, Source::Worker | Source::DenyCache),
                "{a:?}"
            );
            if a.allowed {
                allowed += 1;
                assert_eq!(a.denied_by, None);
            } else {
                assert_eq!(a.denied_by.as_deref(), Some("org"), "{a:?}");
                assert_eq!(a.to_reply().denied_by.as_deref(), Some("org"));
                by_org += 1;
            }
        }
    }
    assert_eq!(allowed, POOL, "the org's pool, exactly");
    assert_eq!(by_org, USERS * ASKS_EACH - POOL);
    assert!(client.stats().batched_asks > 0, "{:?}", client.stats());

    // A newcomer is denied by the org: asked again, answered from the
    // deny cache with the level that denied; another user who has not
    // asked goes to the worker, which denies them too, for the same reason.
    let fresh = KeyPath::from_shown("acme/newcomer").unwrap();
    let first = client.ask(&fresh, "user", 1).await.unwrap();
    assert_eq!((first.allowed, first.source), (false, Source::Worker));
    assert_eq!(first.denied_by.as_deref(), Some("org"));
    let again = client.ask(&fresh, "user", 1).await.unwrap();
    assert_eq!((again.allowed, again.source), (false, Source::DenyCache));
    assert_eq!(again.denied_by.as_deref(), Some("org"));
    assert_eq!(again.levels.len(), 2);
    let other = KeyPath::from_shown("acme/another").unwrap();
    let theirs = client.ask(&other, "user", 1).await.unwrap();
    assert_eq!((theirs.allowed, theirs.source), (false, Source::Worker));
    // The org's own key, a plain key under `org`: the same pool.
    let org = client.peek("acme", "org").await.unwrap();
    assert_eq!((org.allowed, org.remaining), (false, 0));
    assert!(org.levels.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_takes_a_key_path_and_a_grouped_key_asks_for_no_slice() {
    let _serial = serial().await;
    let (_stack, client) = start(|o| o.budgets(true)).await;
    let alice = KeyPath::new(["acme", "eng", "alice"]).unwrap();
    let a = client.ask(&alice, "user", 2).await.unwrap();
    assert!(a.allowed);
    // user on acme.eng.alice, org on acme.eng (cut from the inside).
    let levels: Vec<_> = a
        .levels
        .iter()
        .map(|l| (l.policy.as_str(), l.remaining))
        .collect();
    assert_eq!(levels, [("org", 10), ("user", 1)]);
    let peek = client.peek(alice.clone(), "user").await.unwrap();
    assert_eq!((peek.allowed, peek.remaining), (true, 1));
    client.hit(&alice, "user", 1).await.unwrap();
    let counted = client.hit_and_peek(&alice, "user", 0).await.unwrap();
    assert_eq!(counted.remaining, 0, "{counted:?}");
    let usage = client.usage(&alice, &Default::default()).await;
    assert!(usage.is_ok(), "{usage:?}");
    let inspect = sluice_client::queries::inspect(
        client.nats(),
        &alice,
        Some("user"),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(!inspect.policies.is_empty(), "{inspect:?}");

    // A hot key with local budgets asks for slices; a grouped key under
    // the same policy asks for none, and the owner refuses it with the
    // reason (SPEC §17).
    for _ in 0..50 {
        client.ask("plain", "hot", 1).await.unwrap();
    }
    let slices = client.stats().slices;
    let grouped = KeyPath::new(["acme", "hot-user"]).unwrap();
    for _ in 0..50 {
        match client.ask(&grouped, "hot", 1).await {
            Err(Error::BadRequest(why)) => assert!(why.contains("local"), "{why}"),
            other => panic!("a 400, not {other:?}"),
        }
    }
    assert_eq!(client.stats().slices, slices, "no slice of a grouped key");
}
