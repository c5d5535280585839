//! Holds of a group (SPEC §13, §17) against real workers over a real NATS
//! server: an organisation that may run three jobs at once, its users
//! reserving at once through three workers, holds exactly three, every
//! other reserve denied by the organisation's level with nothing held at
//! the user's; a settle frees the slot at every level; the Rust client's
//! reserve of a key path answers the levels; in journal mode a `kill -9`
//! of the group's owner keeps every level's hold, so a settle after it
//! still frees the organisation's slot.

use crate::common::SLUICE;
use anyhow::{anyhow, bail};
use sluice_client::{Client, ClientOptions, Fallback, KeyPath};
use sluice_core::config::Config;
use sluice_core::partition::partition_of;
use sluice_core::subject::Verb;
use sluice_core::wire::hold::{decode_held, HoldTicket};
use sluice_core::wire::{DecisionReply, Reply};
use sluice_tests::{error_of, eventually, request, serial, Stack, TestConfig, TICK};
use std::time::Duration;

/// An organisation may run 3 jobs at once and spend 1,000 units an hour;
/// each of its users 200 an hour.
const GROUPS: &str = r#"
[policies.org_jobs]
algorithm = "sliding_log"
concurrency = 3
hold_ttl = "5m"
limits = [ { max = 1000, per = "1h" } ]

[policies.user_jobs]
algorithm = "sliding_log"
parent = "org_jobs"
hold_ttl = "5m"
limits = [ { max = 200, per = "1h" } ]
"#;

const USERS: usize = 12;

/// A hold verb's reply over NATS: the decision and the hold it kept.
async fn hold(
    nats: &async_nats::Client,
    verb: Verb,
    key: &str,
    body: &str,
) -> anyhow::Result<(DecisionReply, Option<HoldTicket>)> {
    let msg = request(nats, &verb.client_subject(key), body.as_bytes())
        .await
        .map_err(|e| anyhow!("{e:?}"))?;
    if let Some(e) = error_of(&msg) {
        bail!("{} {}", e.code.status(), e.message);
    }
    match decode_held(&msg.payload)? {
        (Reply::Decision(d), ticket) => Ok((d, ticket)),
        (Reply::Error(e), _) => bail!("{e}"),
    }
}

/// Every user of `org` reserves a job of 10 units at once: the held
/// ones, (user, hold).
async fn everyone_reserves(stack: &Stack, org: &str) -> Vec<(usize, HoldTicket)> {
    let clients = stack.clients(4).await;
    let go = std::sync::Arc::new(tokio::sync::Barrier::new(USERS));
    let users: Vec<_> = (0..USERS)
        .map(|u| {
            let (nats, go) = (clients[u % clients.len()].clone(), go.clone());
            let key = format!("{org}.user-{u}");
            tokio::spawn(async move {
                go.wait().await;
                let body = r#"{"policy":"user_jobs","cost":10}"#;
                (u, hold(&nats, Verb::Reserve, &key, body).await)
            })
        })
        .collect();
    let mut held = Vec::new();
    for user in users {
        let (u, answer) = user.await.unwrap();
        let (d, ticket) = answer.expect("every reserve is answered");
        let levels: Vec<&str> = d.levels.iter().map(|l| l.policy.as_str()).collect();
        assert_eq!(levels, ["org_jobs", "user_jobs"], "{d:?}");
        match ticket {
            Some(ticket) => {
                assert!(d.allowed && d.denied_by.is_none(), "{d:?}");
                held.push((u, ticket));
            }
            None => {
                assert!(!d.allowed, "{d:?}");
                assert_eq!(d.denied_by.as_deref(), Some("org_jobs"), "{d:?}");
                assert_eq!(
                    d.levels[1].remaining, 200,
                    "nothing held at the user's: {d:?}"
                );
            }
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_organisations_slots_hold_across_its_users_and_a_settle_frees_every_level() {
    let _serial = serial().await;
    let toml = format!("{}{GROUPS}", TestConfig::new().toml());
    let stack = Stack::start(SLUICE, &toml, 3).await;
    let held = everyone_reserves(&stack, "acme").await;
    assert_eq!(held.len(), 3, "the organisation's three slots, exactly");
    let nats = stack.nats.connect().await.unwrap();
    let waiting = (0..USERS)
        .find(|u| held.iter().all(|(h, _)| h != u))
        .unwrap();
    let waiting_key = format!("acme.user-{waiting}");
    let body = r#"{"policy":"user_jobs","cost":10}"#;
    let (d, none) = hold(&nats, Verb::Reserve, &waiting_key, body)
        .await
        .unwrap();
    assert!(!d.allowed && none.is_none(), "still full: {d:?}");

    // One job ends having used 4 of its 10: its slot frees at the org, and
    // 6 units go back at both levels.
    let (u, ticket) = &held[0];
    let settle = format!(
        r#"{{"policy":"user_jobs","hold":"{}","cost":4}}"#,
        ticket.hold
    );
    let (d, _) = hold(&nats, Verb::Settle, &format!("acme.user-{u}"), &settle)
        .await
        .unwrap();
    let left: Vec<u64> = d.levels.iter().map(|l| l.remaining).collect();
    assert_eq!(
        left,
        [1, 196],
        "a slot free at the org; user: 200 - 4: {d:?}"
    );
    let (d, ticket) = hold(&nats, Verb::Reserve, &waiting_key, body)
        .await
        .unwrap();
    assert!(d.allowed && ticket.is_some(), "the freed slot: {d:?}");

    // The Rust client reserves with a key path and is told the levels.
    let config = Config::from_toml(&toml, "groups.toml").unwrap();
    let opts = ClientOptions::from_config(&config).fallback(Fallback::Closed);
    let client = Client::connect_with(&stack.nats.url(), opts)
        .await
        .expect("the client connects");
    let path = KeyPath::new(["globex", "ann"]).unwrap();
    let held = client
        .reserve(&path, "user_jobs", 50, None)
        .await
        .expect("answered");
    assert!(held.ticket.is_some(), "{held:?}");
    let levels: Vec<(&str, u64)> = held
        .answer
        .levels
        .iter()
        .map(|l| (l.policy.as_str(), l.remaining))
        .collect();
    assert_eq!(levels, [("org_jobs", 2), ("user_jobs", 150)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_levels_hold_survives_a_kill_of_the_groups_owner_in_journal_mode() {
    let _serial = serial().await;
    let config = TestConfig::new().snapshot_interval("60s").journal();
    let toml = format!("{}{GROUPS}", config.toml());
    let mut stack = Stack::start(SLUICE, &toml, 2).await;
    let owners = stack.owners().await;
    let victim = stack.worker_ids().remove(0);
    // An organisation whose partition the victim owns.
    let org = (0..)
        .map(|i| format!("org{i}"))
        .find(|o| owners.get(&partition_of(o, stack.partitions)) == Some(&victim))
        .unwrap();
    let held = everyone_reserves(&stack, &org).await;
    assert_eq!(held.len(), 3);
    stack.kill_worker(&victim);
    let nats = stack.nats.connect().await.unwrap();
    let body = r#"{"policy":"user_jobs","cost":10}"#;
    let late = format!("{org}.late");
    let (d, none) = eventually(Duration::from_secs(15), TICK, || {
        hold(&nats, Verb::Reserve, &late, body)
    })
    .await
    .unwrap_or_else(|e| panic!("the group never answered again: {e:#}"));
    assert!(
        !d.allowed && none.is_none(),
        "three holds still at the org: {d:?}"
    );
    let (u, ticket) = &held[1];
    let settle = format!(
        r#"{{"policy":"user_jobs","hold":"{}","cost":10}}"#,
        ticket.hold
    );
    let (d, _) = hold(&nats, Verb::Settle, &format!("{org}.user-{u}"), &settle)
        .await
        .expect("the hold is known at every level after the takeover");
    assert_eq!(d.levels[0].remaining, 1, "{d:?}");
    let (d, ticket) = hold(&nats, Verb::Reserve, &late, body).await.unwrap();
    assert!(d.allowed && ticket.is_some(), "{d:?}");
}
