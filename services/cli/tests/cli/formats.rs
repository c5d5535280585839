//! Versioned state: a current worker takes a partition
//! over from state a previous release wrote (format 1: a manifest without
//! `"v"`, journal messages without the `Sluice-Format` header, a lease value
//! that is the bare worker id), committed under `tests/fixtures/format-1/`,
//! and holds its limits exactly under load; and it refuses state of a newer
//! format instead of misreading it.

use async_nats::jetstream;
use serde_json::Value;
use sluice_core::partition::partition_of;
use sluice_core::storage::{
    chunk_key, journal_subject, partition_key, LEASE_BUCKET, SNAPSHOT_BUCKET,
};
use sluice_tests::{
    ask, eventually, key_in_partition, rounds, serial, workspace_root, Load, Stack, PEEK, TICK,
};
use sluice_worker::journal::record::Record;
use std::path::PathBuf;
use std::time::Duration;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// Journal mode, 16 partitions, and a policy whose window (100 years) keeps
/// the fixture's counts live for as long as this test exists.
const CONFIG: &str = r#"
partitions = 16
lease_ttl = "2s"
snapshot_interval = "60s"
durability = "journal"

[policies.fixture]
algorithm = "sliding_log"
limits = [ { max = 5, per = "36500d" } ]
"#;

/// The partition the fixture holds, and the worker that wrote it.
const PARTITION: u32 = 3;
const OLD_WORKER: &str = "old-worker";
/// The fixture's generation of snapshot chunks.
const GENERATION: &str = "fixture";
/// 2026-11-25 00:00 UTC, when the fixture's requests were counted.
const COUNTED_AT_NS: u64 = 1_795_564_800 * 1_000_000_000;

fn fixture_dir() -> PathBuf {
    workspace_root().join("tests/fixtures/format-1")
}

/// The fixture's keys (tokens) and what each has used of its 5: in the
/// snapshot, then by the journal.
fn fixture_keys() -> [(String, u64, &'static str); 4] {
    let mut names = (0..)
        .map(|n| format!("fx-{n}"))
        .filter(|k| partition_of(k, 16) == PARTITION);
    let mut key = || names.next().unwrap();
    [
        (key(), 4, "3 in the snapshot, 1 in the journal"),
        (key(), 2, "2 in the snapshot"),
        (key(), 2, "one record of cost 2 in the journal"),
        (key(), 0, "5 in the snapshot, then a reset in the journal"),
    ]
}

/// Puts what a previous release left behind when it died holding partition
/// 3 (the fixture) into the server's buckets and journal.
async fn leave_format_1_state(js: &jetstream::Context) {
    let journal = js.get_stream("SLUICE_JOURNAL").await.unwrap();
    let before = journal.clone().info().await.unwrap().state.last_sequence;
    let records = std::fs::read(fixture_dir().join("journal.msgpack")).unwrap();
    js.publish(journal_subject(OLD_WORKER), records.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let snapshots = js.get_key_value(SNAPSHOT_BUCKET).await.unwrap();
    let chunk = std::fs::read(fixture_dir().join("chunk.msgpack")).unwrap();
    snapshots
        .put(chunk_key(PARTITION, GENERATION, 0), chunk.into())
        .await
        .unwrap();
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(fixture_dir().join("manifest.json")).unwrap())
            .unwrap();
    assert!(manifest.get("v").is_none(), "format 1 has no version");
    manifest["journal_seq"] = before.into();
    snapshots
        .put(
            partition_key(PARTITION),
            serde_json::to_vec(&manifest).unwrap().into(),
        )
        .await
        .unwrap();
    let leases = js.get_key_value(LEASE_BUCKET).await.unwrap();
    leases
        .put(partition_key(PARTITION), OLD_WORKER.into())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_takes_over_format_1_state_and_holds_its_limits_under_load() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    let keys = fixture_keys();
    // The first worker made the buckets and the journal; it leaves cleanly.
    stack.stop_workers();
    let client = stack.clients(1).await.remove(0);
    let js = jetstream::new(client.clone());

    leave_format_1_state(&js).await;
    let snapshots = js.get_key_value(SNAPSHOT_BUCKET).await.unwrap();
    let leases = js.get_key_value(LEASE_BUCKET).await.unwrap();
    assert_eq!(
        stack.owners().await.get(&PARTITION).map(String::as_str),
        Some(OLD_WORKER),
        "a bare worker id is read as the owner"
    );

    // A current worker takes it over once the dead worker's lease expires.
    stack.start_workers(1).await;
    for (key, used, how) in &keys {
        let d = ask(&client, key, br#"{"policy":"fixture","cost":0}"#)
            .await
            .unwrap();
        assert_eq!(d.remaining, 5 - used, "{key}: {how}");
    }
    // Under load, each key gets exactly what it has left, no more.
    let clients = stack.clients(2).await;
    let names: Vec<String> = keys.iter().map(|(k, _, _)| k.clone()).collect();
    let load = Load::start(&clients, rounds(&names, 10), 8, br#"{"policy":"fixture"}"#);
    let answered = load.finish().await;
    for (key, used, _) in &keys {
        let allowed = answered
            .iter()
            .filter(|a| &a.key == key && a.allowed)
            .count() as u64;
        assert!(
            answered
                .iter()
                .filter(|a| &a.key == key)
                .all(|a| a.answered),
            "{key}: every ask answered"
        );
        assert_eq!(allowed, 5 - used, "{key}: allowed exactly what was left");
    }

    // What the new owner writes is format 2.
    let entry = snapshots
        .get(partition_key(PARTITION))
        .await
        .unwrap()
        .unwrap();
    let written: Value = serde_json::from_slice(&entry).unwrap();
    assert_eq!(written["v"], 2, "{written}");
    let lease = leases.get(partition_key(PARTITION)).await.unwrap().unwrap();
    let lease: Value = serde_json::from_slice(&lease).unwrap();
    assert_eq!(lease["v"], 2);
    assert_eq!(lease["worker"], stack.worker_ids()[0]);
    // Its journal messages are of numbered turns (format 6): every record
    // it makes carries the number of its turn (an earlier release refuses
    // them rather than replay what a snapshot holds twice); the load names
    // no ask by an id, so none is format 7.
    let journal = js.get_stream("SLUICE_JOURNAL").await.unwrap();
    let last = journal.clone().info().await.unwrap().state.last_sequence;
    let mine = journal_subject(&stack.worker_ids()[0]);
    let newest = sluice_core::format::JOURNAL_TURNS.to_string();
    let mut read = 0;
    for seq in 1..=last {
        let Ok(msg) = journal.get_raw_message(seq).await else {
            continue;
        };
        if msg.subject.as_str() != mine {
            continue;
        }
        let format = msg.headers.get("Sluice-Format").map(|v| v.to_string());
        assert_eq!(format.as_deref(), Some(newest.as_str()), "message {seq}");
        let records =
            sluice_worker::journal::decode(u64::from(sluice_core::format::JOURNAL), &msg.payload)
                .unwrap();
        assert!(
            records.iter().all(|r| r.q > 0),
            "message {seq}: {records:?}"
        );
        read += records.len();
    }
    assert!(read > 0, "the load was journaled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_message_of_a_newer_format_is_refused_and_its_partition_left_to_others() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    stack.stop_workers();
    let client = stack.clients(1).await.remove(0);
    let js = jetstream::new(client.clone());
    leave_format_1_state(&js).await;
    // The dead worker had also written a message of a journal format this
    // release does not know.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        "Sluice-Format",
        (sluice_core::format::JOURNAL + 1).to_string().as_str(),
    );
    let seq = js
        .publish_with_headers(journal_subject(OLD_WORKER), headers, "?".into())
        .await
        .unwrap()
        .await
        .unwrap()
        .sequence;

    let newest = sluice_core::format::JOURNAL;
    let refused = format!(
        "journal message {seq} of {} is in format v{}, newer than this sluice reads (v{newest})",
        journal_subject(OLD_WORKER),
        newest + 1
    );
    a_new_worker_refuses_the_partition(&mut stack, &client, &refused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_a_newer_format_is_refused_and_its_partition_left_to_others() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    stack.stop_workers();
    let client = stack.clients(1).await.remove(0);
    let js = jetstream::new(client.clone());
    let snapshots = js.get_key_value(SNAPSHOT_BUCKET).await.unwrap();
    let newer = r#"{"v":99,"layout":"columnar","gen":"x","chunks":1}"#;
    snapshots
        .put(partition_key(PARTITION), newer.into())
        .await
        .unwrap();

    let refused = format!(
        "the snapshot manifest of partition 3 is in format v99, newer than this sluice reads (v{})",
        sluice_core::format::SNAPSHOT
    );
    a_new_worker_refuses_the_partition(&mut stack, &client, &refused).await;
}

/// Starts a worker and waits until every other partition answers and its
/// log says why partition 3 was `refused`; then partition 3 must not answer.
async fn a_new_worker_refuses_the_partition(
    stack: &mut Stack,
    client: &async_nats::Client,
    refused: &str,
) {
    let id = stack.spawn_worker();
    let other = key_in_partition(PARTITION + 1, 16);
    eventually(Duration::from_secs(20), TICK, || async {
        ask(client, &other, PEEK).await?;
        anyhow::ensure!(stack.worker_log(&id).contains(refused), "not refused yet");
        Ok(())
    })
    .await
    .unwrap();
    let key = key_in_partition(PARTITION, 16);
    assert!(
        ask(client, &key, PEEK).await.is_err(),
        "a partition whose state cannot be read is not answered"
    );
}

/// Writes `tests/fixtures/format-1/` (run by hand:
/// `cargo test -p sluice-cli --test cli -- formats:: --ignored`). Format 1 is
/// what releases before versioned state wrote; its encodings are those of
/// today's types minus the version markers, which is why this generator can
/// still produce it. The committed files are what it wrote at the commit
/// that introduced format 2: do not regenerate them unless format 1 itself
/// was found to be misdescribed.
#[test]
#[ignore]
fn write_the_format_1_fixture() {
    use sluice_core::policy::KeyState;
    use sluice_worker::counters::Entry;
    let log = |units: u64| {
        KeyState::SlidingLog(vec![sluice_core::algorithm::sliding_log::State {
            log: (0..units)
                .map(|i| COUNTED_AT_NS + i * 1_000_000_000)
                .collect(),
        }])
    };
    let keys = fixture_keys();
    let entries = vec![
        Entry {
            key: format!("fixture/{}", keys[0].0),
            state: log(3),
        },
        Entry {
            key: format!("fixture/{}", keys[1].0),
            state: log(2),
        },
        Entry {
            key: format!("fixture/{}", keys[3].0),
            state: log(5),
        },
    ];
    let chunk = rmp_serde::to_vec(&entries).unwrap();
    let record = |key: &str, c: u64, at_s: u64, r: bool| Record {
        n: PARTITION,
        p: "fixture".into(),
        k: key.into(),
        c,
        t: COUNTED_AT_NS + at_s * 1_000_000_000,
        r,
        d: false,
        s: false,
        g: 0,
        u: 0,
        h: None,
        e: 0,
        x: 0,
        v: 0,
        i: None,
        q: 0,
    };
    let records = vec![
        record(&keys[0].0, 1, 10, false),
        record(&keys[2].0, 2, 11, false),
        record(&keys[3].0, 0, 12, true),
    ];
    let journal = sluice_worker::journal::encode(&records).unwrap();
    let manifest = serde_json::json!({
        "gen": GENERATION,
        "chunks": 1,
        "bytes": chunk.len(),
        "entries": entries.len(),
        "lease_rev": 1,
        "journal_seq": 0,
        "journal_writers": [OLD_WORKER],
        "taken_at_ms": COUNTED_AT_NS / 1_000_000 + 9_000,
        "worker": OLD_WORKER,
    });
    let dir = fixture_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("chunk.msgpack"), chunk).unwrap();
    std::fs::write(dir.join("journal.msgpack"), journal).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest).unwrap() + "\n",
    )
    .unwrap();
}
