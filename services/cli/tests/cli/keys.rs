//! `rl.inspect.<key>` and `rl.reset.<key>` (SPEC §8) against real
//! workers, through the server's partition mapping, and the commands that
//! send them.

use sluice_core::subject::Verb;
use sluice_core::wire::inspect::{decode_admin_reply, InspectReply, ResetReply};
use sluice_tests::{ask, eventually, key_in_partition, request, serial, Stack, TICK};
use std::time::Duration;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// One multi-limit policy with windows far longer than a test.
const CONFIG: &str = r#"
partitions = 16
lease_ttl = "2s"
snapshot_interval = "60s"
{durability}
[policies.default]
algorithm = "sliding_log"
limits = [ { max = 5, per = "5m" } ]

[policies.login]
algorithm = "sliding_log"
limits = [ { max = 3, per = "10s" }, { max = 5, per = "5m" } ]
"#;

fn config(journal: bool) -> String {
    let durability = if journal {
        r#"durability = "journal""#
    } else {
        ""
    };
    CONFIG.replace("{durability}", durability)
}

async fn inspect(client: &async_nats::Client, key: &str, body: &[u8]) -> InspectReply {
    let msg = request(client, &Verb::Inspect.client_subject(key), body)
        .await
        .expect("an inspect is answered");
    decode_admin_reply(&msg.payload).expect("an inspect reply")
}

async fn reset(client: &async_nats::Client, key: &str, body: &[u8]) -> ResetReply {
    let msg = request(client, &Verb::Reset.client_subject(key), body)
        .await
        .expect("a reset is answered");
    decode_admin_reply(&msg.payload).expect("a reset reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_every_limit_and_consumes_nothing_and_reset_forgets_the_key() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &config(false), 2).await;
    let client = stack.clients(1).await.remove(0);
    let key = key_in_partition(3, stack.partitions);
    let login = br#"{"policy":"login"}"#;
    for _ in 0..2 {
        assert!(ask(&client, &key, login).await.unwrap().allowed);
    }
    let seen = inspect(&client, &key, login).await;
    assert_eq!(seen.policies.len(), 1);
    assert_eq!(seen.policies[0].algorithm, "sliding_log");
    let limits: Vec<_> = seen.policies[0]
        .limits
        .iter()
        .map(|l| (l.max, l.per_ms, l.used, l.remaining))
        .collect();
    assert_eq!(limits, [(3, 10_000, 2, 1), (5, 300_000, 2, 3)]);
    // Inspecting consumed nothing: the third still fits, the fourth not.
    assert_eq!(inspect(&client, &key, b"").await.policies.len(), 1);
    assert!(ask(&client, &key, login).await.unwrap().allowed);
    assert!(!ask(&client, &key, login).await.unwrap().allowed);

    let done = reset(&client, &key, login).await;
    assert_eq!(done.reset, ["login"]);
    assert!(inspect(&client, &key, b"").await.policies.is_empty());
    assert!(ask(&client, &key, login).await.unwrap().allowed);

    // The commands, through the same subjects.
    let shown = stack.run(&["inspect", &key, "--policy", "login", "--json"]);
    let shown: InspectReply = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown.policies[0].limits[0].used, 1);
    assert!(stack.run(&["reset", &key]).contains("reset under login"));
    let out = stack.command(&["inspect", &key, "--policy", "nope"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404 unknown_policy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A reset is journaled like a count: after `kill -9` the new owner replays
/// the counts, then the reset, then what came after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_survives_kill_9_in_journal_mode() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &config(true), 1).await;
    let client = stack.clients(1).await.remove(0);
    let key = key_in_partition(5, stack.partitions);
    for _ in 0..5 {
        assert!(ask(&client, &key, b"").await.unwrap().allowed);
    }
    assert!(!ask(&client, &key, b"").await.unwrap().allowed);
    assert_eq!(reset(&client, &key, b"").await.reset, ["default"]);
    for _ in 0..2 {
        assert!(ask(&client, &key, b"").await.unwrap().allowed);
    }
    let id = stack.worker_ids().remove(0);
    stack.kill_worker(&id);
    stack.start_workers(1).await;
    let peek = eventually(Duration::from_secs(15), TICK, || {
        ask(&client, &key, br#"{"cost":0}"#)
    })
    .await
    .expect("the key's partition answers again");
    assert_eq!(
        peek.remaining, 3,
        "after the crash: 5 counted, reset, 2 counted; the reset was lost if 0 remain"
    );
}

/// A worker bounded to 300 live counters under a flood of 3000 new keys:
/// it answers every ask, holds no more than the bound (plus at most one key
/// per partition), keeps the count of a key asked again, and `sluice
/// status` shows what it forgot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_keys_stays_within_max_keys_and_spares_a_key_in_use() {
    let _serial = serial().await;
    let bounded = format!("max_keys = 300\n{}", config(false));
    let stack = Stack::start(SLUICE, &bounded, 1).await;
    let client = stack.clients(1).await.remove(0);
    let user = key_in_partition(5, stack.partitions);
    for _ in 0..3 {
        assert!(ask(&client, &user, b"").await.unwrap().allowed);
    }
    for i in 0..3_000 {
        let decision = ask(&client, &format!("flood-{i}"), b"")
            .await
            .unwrap_or_else(|e| panic!("flood key {i} was not answered: {e:?}"));
        assert!(
            decision.allowed,
            "flood key {i}: a new key has its whole limit"
        );
    }
    let decision = ask(&client, &user, b"").await.unwrap();
    assert_eq!(
        (decision.allowed, decision.remaining),
        (true, 1),
        "the key asked again kept its 3 of 5"
    );

    let status: serde_json::Value =
        serde_json::from_str(&stack.run(&["status", "--json"])).unwrap();
    let worker = &status["workers"][0];
    let (keys, max, evicted) = (
        worker["keys"].as_u64().unwrap(),
        worker["max_keys"].as_u64().unwrap(),
        worker["evicted_keys"].as_u64().unwrap(),
    );
    assert_eq!(max, 300);
    assert!(keys <= 300 + 16, "{keys} keys held over a bound of 300");
    assert_eq!(
        keys + evicted,
        3_001,
        "every key stored is held or counted as forgotten"
    );
}
