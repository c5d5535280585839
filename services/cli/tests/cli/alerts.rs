//! Threshold alerts (SPEC §14) against real workers over a
//! real NATS server: one alert per key, threshold and window through a
//! live handover and through `kill -9` in journal mode, `sluice alerts`
//! (listing, `--policy`, `--json`, `--follow`), thresholds set live, and
//! bad thresholds refused at every entry point.

use anyhow::ensure;
use futures::StreamExt;
use sluice_client::alerts::{alerts, Start};
use sluice_core::alerts::Alert;
use sluice_core::storage::{ALERT_STREAM, POLICY_BUCKET};
use sluice_tests::{a_key_per_partition, ask, eventually, serial, Stack, TICK};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

const PARTITIONS: u32 = 8;

/// `quota`: 10 an hour, alerts at 50, 100 and 150 % (a hit counts past max).
const CONFIG: &str = r#"
partitions = 8
lease_ttl = "2s"
snapshot_interval = "200ms"
alert_retention = "2d"

[policies.default]
algorithm = "sliding_log"
limits = [ { max = 5, per = "10s" } ]

[policies.quota]
algorithm = "fixed_window"
limits = [ { max = 10, per = "1h" } ]
alerts = [ 50, 100, 150 ]
"#;

const WAIT: Duration = Duration::from_secs(20);

fn hour() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    since.as_secs() / 3600
}

/// Whether the hour's window changed since `started` (then the alerts of
/// the new window would start over, and the test has nothing more to check).
fn window_ended(started: u64) -> bool {
    let ended = hour() != started;
    if ended {
        println!("the hour's window ended during the test; nothing more to check");
    }
    ended
}

/// The same thresholds expected for every key.
fn each_key(keys: &[String], thresholds: &[u16]) -> BTreeMap<String, Vec<u16>> {
    keys.iter()
        .map(|k| (k.clone(), thresholds.to_vec()))
        .collect()
}

/// Every alert `SLUICE_ALERTS` holds for `policy`.
async fn stored(client: &async_nats::Client, policy: &str) -> anyhow::Result<Vec<Alert>> {
    let mut read = alerts(client, Some(policy), Start::All, false).await?;
    let mut all = Vec::new();
    while let Some(a) = read.next().await {
        all.push(a?);
    }
    Ok(all)
}

/// The thresholds stored per key, in the order stored.
fn by_key(all: &[Alert]) -> BTreeMap<String, Vec<u16>> {
    let mut keys: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for a in all {
        keys.entry(a.key.clone()).or_default().push(a.threshold_pct);
    }
    keys
}

/// Asks `key` under `policy` `n` times at cost 1 (allowed or not).
async fn ask_n(client: &async_nats::Client, key: &str, policy: &str, n: usize) {
    let body = format!(r#"{{"policy":"{policy}"}}"#);
    for _ in 0..n {
        ask(client, key, body.as_bytes()).await.unwrap();
    }
}

/// Hits `key` under `policy` at `cost` (counted whether it fits or not).
async fn hit(client: &async_nats::Client, key: &str, policy: &str, cost: u64) {
    let subject = sluice_core::subject::Verb::Hit.client_subject(key);
    let body = format!(r#"{{"policy":"{policy}","cost":{cost}}}"#);
    client.publish(subject, body.into()).await.unwrap();
    client.flush().await.unwrap();
}

/// Waits until `policy`'s alerts are exactly `expected` per key.
async fn alerts_become(
    client: &async_nats::Client,
    policy: &str,
    expected: &BTreeMap<String, Vec<u16>>,
) -> Vec<Alert> {
    eventually(WAIT, TICK, || async {
        let all = stored(client, policy).await?;
        ensure!(&by_key(&all) == expected, "stored {:?}", by_key(&all));
        Ok(all)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_threshold_fires_once_per_window_through_a_live_handover() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    let client = stack.clients(1).await.remove(0);
    let started = hour();
    let keys = a_key_per_partition(PARTITIONS);
    // 6 of 10 each: 50 % reached once.
    for k in &keys {
        ask_n(&client, k, "quota", 6).await;
    }
    let expected = each_key(&keys, &[50]);
    let first = alerts_become(&client, "quota", &expected).await;
    let a = &first[0];
    assert_eq!(
        (a.policy.as_str(), a.max, a.per.as_str(), a.used),
        ("quota", 10, "1h", 5)
    );
    assert_eq!(a.window_end_ms - a.window_start_ms, 3_600_000);
    assert!(a.window_start_ms <= a.at_ms && a.at_ms < a.window_end_ms);

    // A second worker joins: half the partitions are handed over to it.
    let before = stack.owners().await;
    stack.start_workers(1).await;
    let after = stack.owners().await;
    let moved = (0..PARTITIONS)
        .filter(|p| before.get(p) != after.get(p))
        .count();
    assert!(
        moved > 0,
        "some partitions changed owners: {before:?} {after:?}"
    );

    // 6 more each (12: 100 % reached, denied past 10), then a hit of 4
    // (16: 150 %), then more that reach nothing new.
    for k in &keys {
        ask_n(&client, k, "quota", 6).await;
        hit(&client, k, "quota", 4).await;
        hit(&client, k, "quota", 1).await;
    }
    if window_ended(started) {
        return;
    }
    let expected = each_key(&keys, &[50, 100, 150]);
    let all = alerts_become(&client, "quota", &expected).await;
    // Once more after another handover (the new worker leaves): nothing new.
    let joined = stack.worker_ids().remove(1);
    stack.stop_worker(&joined);
    for k in &keys {
        hit(&client, k, "quota", 1).await;
    }
    let peek = br#"{"policy":"quota","cost":0}"#;
    for k in &keys {
        eventually(WAIT, TICK, || ask(&client, k, peek))
            .await
            .unwrap();
    }
    assert_eq!(by_key(&stored(&client, "quota").await.unwrap()), expected);
    assert_eq!(all.len(), keys.len() * 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_journal_mode_alerts_go_out_once_through_a_kill_9() {
    let _serial = serial().await;
    // Snapshots far apart: the new owner counts from the journal, and
    // reaches the thresholds again while it replays.
    let config = CONFIG.replace(
        "snapshot_interval = \"200ms\"",
        "snapshot_interval = \"1h\"\ndurability = \"journal\"",
    );
    let mut stack = Stack::start(SLUICE, &config, 1).await;
    let client = stack.clients(1).await.remove(0);
    let started = hour();
    let keys = a_key_per_partition(PARTITIONS);
    for k in &keys {
        ask_n(&client, k, "quota", 10).await;
    }
    let expected = each_key(&keys, &[50, 100]);
    alerts_become(&client, "quota", &expected).await;

    let old = stack.worker_ids().remove(0);
    stack.kill_worker(&old);
    stack.start_workers(1).await;
    // The counts came back from the journal: full, so denied.
    let peek = br#"{"policy":"quota","cost":0}"#;
    for k in &keys {
        let d = eventually(WAIT, TICK, || ask(&client, k, peek))
            .await
            .unwrap();
        assert!(!d.allowed && d.remaining == 0, "{k}: {d:?}");
    }
    for k in &keys {
        hit(&client, k, "quota", 5).await;
    }
    if window_ended(started) {
        return;
    }
    let expected = each_key(&keys, &[50, 100, 150]);
    alerts_become(&client, "quota", &expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_alerts_lists_and_follows_and_thresholds_are_set_live_or_refused() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 2).await;
    let client = stack.clients(1).await.remove(0);

    // The stream keeps alerts as long as the config says.
    let js = async_nats::jetstream::new(client.clone());
    let info = js
        .get_stream(ALERT_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    assert_eq!(info.max_age, Duration::from_secs(2 * 24 * 3600));
    assert_eq!(stack.run(&["alerts"]), "", "nothing yet");

    // Thresholds set live: in force for the next asks.
    let set_live = |algorithm: &str, alert: &str| {
        stack.command(&[
            "policy",
            "set",
            "live",
            "--algorithm",
            algorithm,
            "--limit",
            "4/1h",
            "--alert",
            alert,
        ])
    };
    assert!(set_live("fixed_window", "75").status.success());
    let got = stack.run(&["policy", "get", "live"]);
    assert!(got.contains(r#""alerts":[75]"#), "{got}");
    eventually(Duration::from_secs(5), TICK, || {
        ask(&client, "carol", br#"{"policy":"live","cost":0}"#)
    })
    .await
    .unwrap();
    ask_n(&client, "carol", "live", 3).await;
    ask_n(&client, "dave", "quota", 5).await;
    let started = hour();
    eventually(WAIT, TICK, || async {
        let out = stack.run(&["alerts"]);
        ensure!(out.lines().count() == 2, "{out}");
        Ok(())
    })
    .await
    .unwrap();
    let live = stack.run(&["alerts", "--policy", "live"]);
    assert!(
        live.contains("live  carol  75% of 4/1h reached (used 3)"),
        "{live}"
    );
    let json = stack.run(&["alerts", "--policy", "quota", "--json"]);
    let a: Alert = serde_json::from_str(json.trim()).unwrap();
    assert_eq!((a.key.as_str(), a.threshold_pct, a.used), ("dave", 50, 5));

    // --follow prints what is stored, then each new alert as it comes.
    let mut follow = Command::new(SLUICE)
        .args([
            "--nats",
            &stack.nats.url(),
            "alerts",
            "--follow",
            "--json",
            "--policy",
            "quota",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok).take(2) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(WAIT).expect("the stored alert");
    assert!(first.contains(r#""key":"dave""#), "{first}");
    ask_n(&client, "dave", "quota", 5).await;
    let second = rx.recv_timeout(WAIT).expect("the new alert");
    let _ = follow.kill();
    let _ = follow.wait();
    reader.join().unwrap();
    if !window_ended(started) {
        let a: Alert = serde_json::from_str(&second).unwrap();
        assert_eq!((a.key.as_str(), a.threshold_pct), ("dave", 100));
    }

    // Bad thresholds are refused with the reason, by the command...
    for bad in ["0", "1001", "-3"] {
        let out = set_live("fixed_window", bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("1 to 1000"),
            "{bad}: {stderr}"
        );
    }
    let out = set_live("gcra", "80");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("alerts need fixed_window"), "{stderr}");
    // ... and by the workers when written straight into the bucket.
    let bucket = js.get_key_value(POLICY_BUCKET).await.unwrap();
    let bad = r#"{"algorithm":"fixed_window","limits":[{"max":4,"per":"1h"}],"alerts":[0]}"#;
    bucket.put("live", bad.into()).await.unwrap();
    eventually(Duration::from_secs(5), TICK, || async {
        let status = stack.run(&["status", "--json"]);
        ensure!(
            status.matches("1 to 1000").count() >= 2,
            "not refused by both workers yet: {status}"
        );
        Ok(())
    })
    .await
    .unwrap();
    // ... and in a config file.
    let file = stack.config_path().with_file_name("bad.toml");
    std::fs::write(&file, CONFIG.replace("[ 50, 100, 150 ]", "[ 50, 1001 ]")).unwrap();
    let out = Command::new(SLUICE)
        .args(["--config", file.to_str().unwrap(), "nats-config"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("policies.quota.alerts")
            && stderr.contains("1 to 1000"),
        "{stderr}"
    );
}
