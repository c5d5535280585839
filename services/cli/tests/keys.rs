//! `rl.inspect.<key>` and `rl.reset.<key>` (CONTRACT §8) against real
//! workers, through the server's partition mapping, and the commands that
//! send them.

use sluice_core::subject::Verb;
use sluice_core::wire::inspect::{decode_admin_reply, InspectReply, ResetReply};
use sluice_tests::{ask, eventually, key_in_partition, request, serial, Stack, TICK};
use std::process::Command;
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
    let out = Command::new(SLUICE)
        .args([
            "inspect",
            &key,
            "--policy",
            "login",
            "--json",
            "--nats",
            &stack.nats.url(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: InspectReply = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown.policies[0].limits[0].used, 1);
    let out = Command::new(SLUICE)
        .args(["reset", &key, "--nats", &stack.nats.url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("reset under login"));
    let out = Command::new(SLUICE)
        .args([
            "inspect",
            &key,
            "--policy",
            "nope",
            "--nats",
            &stack.nats.url(),
        ])
        .output()
        .unwrap();
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
