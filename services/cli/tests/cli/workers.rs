//! The worker fleet as separate `sluice worker` processes against a real
//! nats-server: exactness under concurrency, crashes (`kill -9`), joins,
//! full restarts, and malformed input.
//!
//! Each test starts its own nats-server (free port, own temp dir) and its own
//! workers, and stops them by PID at the end (also on panic, via Drop).
//! Tests in this file run one at a time (a mutex): they measure recovery
//! times, which a second test's load on the same 2 cores would distort.

use sluice_core::nats_config::NatsServerConfig;
use sluice_core::storage::JOURNAL_STREAM;
use sluice_core::subject::Verb;
use sluice_tests::{
    a_key_per_partition, ask, assert_no_key_over, error_of, eventually, key_in_partition, request,
    rounds, serial, worker_command, Answered, ChildGuard, Load, NatsServer, Signal, Stack,
    TestConfig, PEEK, TICK,
};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The binary under test.
const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_under_200_concurrent_requests_from_4_connections_gets_exactly_5() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &TestConfig::new().toml(), 3).await;
    let clients = stack.clients(4).await;
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..50 {
            let client = client.clone();
            tasks.push(tokio::spawn(
                async move { ask(&client, "hot-key", b"").await },
            ));
        }
    }
    let mut allowed = 0;
    for t in tasks {
        let d = t.await.unwrap().expect("every request is answered");
        allowed += d.allowed as usize;
    }
    assert_eq!(allowed, 5, "a sliding log of 5 per 10 s allows exactly 5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_keys_under_concurrent_load_never_exceed_their_limit() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &TestConfig::new().toml(), 3).await;
    let clients = stack.clients(4).await;
    let keys: Vec<String> = (0..1000).map(|i| format!("user-{i}")).collect();
    // 15 asks per key with the 10-per-5-minutes policy, 64 in flight.
    let results = Load::start(&clients, rounds(&keys, 15), 64, br#"{"policy":"tenper"}"#)
        .finish()
        .await;
    let mut allowed: HashMap<&str, usize> = HashMap::new();
    for r in &results {
        assert!(r.answered, "every request is answered: {r:?}");
        if r.allowed {
            *allowed.entry(r.key.as_str()).or_default() += 1;
        }
    }
    for key in &keys {
        assert_eq!(
            allowed.get(key.as_str()).copied().unwrap_or(0),
            10,
            "key {key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_the_documented_error_and_change_no_counter() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &TestConfig::new().toml(), 1).await;
    let client = &stack.clients(1).await[0];
    // Subjects a client could send, built like any other (a key token that
    // is no valid key is still a token of the subject).
    let allow = |token: &str| Verb::Allow.client_subject(token);
    let cases: Vec<(String, Vec<u8>, u16, &str)> = vec![
        (allow("*"), vec![], 400, "bad_request"),
        (allow("a.b.c.d"), vec![], 400, "bad_request"),
        (allow(">"), vec![], 400, "bad_request"),
        (allow(&"k".repeat(257)), vec![], 400, "bad_request"),
        (allow("bob@x"), vec![], 400, "bad_request"),
        (allow("bad%4"), vec![], 400, "bad_request"),
        (allow("bad%zz"), vec![], 400, "bad_request"),
        (allow("non%41canonical"), vec![], 400, "bad_request"),
        (allow("victim"), b"\xc1garbage".to_vec(), 400, "bad_request"),
        (
            allow("victim"),
            br#"{"cost":-1}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            allow("victim"),
            br#"{"polcy":"default"}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            allow("victim"),
            br#"{"cost":1000000000000}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            allow("victim"),
            br#"{"cost":6}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            allow("victim"),
            br#"{"policy":"nope"}"#.to_vec(),
            404,
            "unknown_policy",
        ),
        (allow("victim"), vec![b' '; 4097], 413, "too_large"),
        (
            Verb::Hit.client_subject("victim"),
            br#"{"policy":"nope"}"#.to_vec(),
            404,
            "unknown_policy",
        ),
    ];
    for (subject, body, code, word) in &cases {
        let reply = request(client, subject, body)
            .await
            .unwrap_or_else(|e| panic!("{subject}: {e}"));
        let got = error_of(&reply).unwrap_or_else(|| panic!("{subject}: expected an error reply"));
        assert_eq!(
            (got.code.status(), got.code.word()),
            (*code, *word),
            "{subject} {:?}",
            String::from_utf8_lossy(body)
        );
        assert!(
            !got.message.is_empty(),
            "{subject}: the error says what is wrong"
        );
    }
    // Nothing above counted: the victim still has all 5.
    let peek = ask(client, "victim", PEEK).await.unwrap();
    assert_eq!(peek.remaining, 5);
    for _ in 0..5 {
        assert!(ask(client, "victim", b"").await.unwrap().allowed);
    }
    assert!(!ask(client, "victim", b"").await.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_after_every_worker_is_stopped_and_started_again() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &TestConfig::new().toml(), 3).await;
    let client = stack.clients(1).await.remove(0);
    let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    for key in &keys {
        for _ in 0..10 {
            ask(&client, key, br#"{"policy":"tenper"}"#).await.unwrap();
        }
    }
    stack.stop_workers();
    assert!(
        stack.no_partition_answers(&client).await,
        "all workers are gone"
    );
    stack.start_workers(3).await;
    for key in &keys {
        let d = ask(&client, key, br#"{"policy":"tenper"}"#).await.unwrap();
        assert!(!d.allowed, "{key} was allowed again after a restart");
        assert_eq!(d.remaining, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_worker_joining_under_load_takes_partitions_and_no_key_goes_over() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &TestConfig::new().toml(), 3).await;
    let clients = stack.clients(2).await;
    let keys: Vec<String> = (0..300).map(|i| format!("j{i}")).collect();
    let mut load = Load::start(&clients, rounds(&keys, 20), 32, br#"{"policy":"tenper"}"#);
    load.reached(500).await;
    let before = stack.owners().await;
    stack.start_workers(1).await;
    let results = load.finish().await;
    let after = stack.owners().await;
    let newcomer = stack
        .worker_ids()
        .into_iter()
        .find(|w| !before.values().any(|o| o == w));
    let taken = after
        .values()
        .filter(|o| Some(*o) == newcomer.as_ref())
        .count();
    assert_eq!(
        taken, 4,
        "the newcomer owns its share (16 partitions / 4 workers): {after:?}"
    );
    assert_no_key_over(&results, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_in_journal_mode_loses_no_count_and_its_partitions_come_back() {
    let _serial = serial().await;
    crash_under_load(&journal_crash_config(), |results, _| {
        assert_no_key_over(results, 10)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_in_snapshot_mode_over_admits_at_most_what_came_after_its_last_snapshot() {
    let _serial = serial().await;
    crash_under_load(&crash_config().toml(), |results, restored_at| {
        let mut allowed: HashMap<&str, usize> = HashMap::new();
        let mut since_snapshot: HashMap<&str, usize> = HashMap::new();
        for r in results {
            if r.allowed {
                *allowed.entry(&r.key).or_default() += 1;
                if let Some(t) = restored_at.get(&sluice_core::partition::partition_of(&r.key, 16))
                {
                    if r.answered_at_ms >= *t {
                        *since_snapshot.entry(&r.key).or_default() += 1;
                    }
                }
            }
        }
        let mut over = 0;
        for (key, n) in &allowed {
            let bound = 10 + since_snapshot.get(key).copied().unwrap_or(0);
            assert!(*n <= bound, "{key}: {n} allowed, bound {bound}");
            over += n.saturating_sub(10);
        }
        eprintln!("snapshot mode: {over} requests over-admitted across the crash");
        assert!(
            over > 0,
            "with no snapshot since the start, the crash forgets counts"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_that_wakes_after_losing_its_leases_never_answers_as_a_second_owner() {
    let _serial = serial().await;
    // Journal mode, so the freeze itself loses no count: any excess could
    // only come from two owners answering for one partition.
    let stack = Stack::start(SLUICE, &TestConfig::new().journal().toml(), 3).await;
    let clients = stack.clients(2).await;
    let keys: Vec<String> = (0..300).map(|i| format!("z{i}")).collect();
    let mut results = Load::start(&clients, rounds(&keys, 4), 32, br#"{"policy":"tenper"}"#)
        .finish()
        .await;
    let owners = stack.owners().await;
    let sleeper = stack.worker_ids().remove(0);
    let its: Vec<u32> = owners
        .iter()
        .filter(|(_, o)| **o == sleeper)
        .map(|(p, _)| *p)
        .collect();
    stack.signal_worker(&sleeper, Signal::SIGSTOP);
    // Its partitions move to the others while it sleeps...
    for &p in &its {
        let key = key_in_partition(p, stack.partitions);
        eventually(Duration::from_secs(15), TICK, || {
            ask(&clients[0], &key, PEEK)
        })
        .await
        .unwrap_or_else(|e| panic!("partition {p} was not taken over: {e:#}"));
    }
    let moved = stack.owners().await;
    assert!(
        its.iter().all(|p| moved.get(p) != Some(&sleeper)),
        "{moved:?}"
    );
    // ...and when it wakes up, under load, no key is allowed beyond its limit.
    let mut load = Load::start(&clients, rounds(&keys, 12), 32, br#"{"policy":"tenper"}"#);
    load.reached(300).await;
    stack.signal_worker(&sleeper, Signal::SIGCONT);
    results.extend(load.finish().await);
    assert_no_key_over(&results, 10);
    // Asks lost while partitions move back, and journal records replayed on
    // top of a snapshot that already held them, can only deny early.
    let allowed: usize = results.iter().filter(|r| r.allowed).count();
    assert!(
        allowed >= 300 * 9,
        "nearly every key got its 10: {allowed} of 3000"
    );
}

/// Regression: a new owner that restored counts from the journal and handed
/// the partition over before any snapshot of its own used to advance the
/// manifest's journal position past records its snapshot did not hold, so
/// the third owner skipped them (found by the compose e2e under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_replayed_from_the_journal_survive_an_immediate_second_handover() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &journal_crash_config(), 3).await;
    let client = stack.clients(1).await.remove(0);
    let keys: Vec<String> = (0..64).map(|i| format!("r{i}")).collect();
    for key in &keys {
        let d = ask(&client, key, br#"{"policy":"tenper","cost":10}"#)
            .await
            .unwrap();
        assert!(d.allowed);
    }
    // Crash one worker: its partitions come back from the journal alone.
    let ids = stack.worker_ids();
    stack.kill_worker(&ids[0]);
    for (p, key) in a_key_per_partition(stack.partitions).iter().enumerate() {
        eventually(Duration::from_secs(15), TICK, || ask(&client, key, PEEK))
            .await
            .unwrap_or_else(|e| panic!("partition {p} never answered again: {e:#}"));
    }
    // At once, a clean stop of a second worker hands everything it has to the last one.
    stack.stop_worker(&ids[1]);
    for key in &keys {
        let d = eventually(Duration::from_secs(15), TICK, || {
            ask(&client, key, br#"{"policy":"tenper"}"#)
        })
        .await
        .unwrap();
        assert!(
            !d.allowed,
            "{key} was allowed again after the second handover"
        );
    }
}

/// SPEC §16: asks named by ids are answered, then their owner is killed
/// with `kill -9` in journal mode before the callers retry. Each retry, at
/// the new owner, is a repeat of the first answer, counted once; a new id
/// on the same key counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_its_owner_is_killed_counts_once_in_journal_mode() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &journal_crash_config(), 2).await;
    let client = stack.clients(1).await.remove(0);
    let body = |id: &str| format!(r#"{{"policy":"tenper","cost":3,"id":"{id}"}}"#);
    let keys: Vec<String> = (0..32).map(|i| format!("idem{i}")).collect();
    for key in &keys {
        let d = ask(&client, key, body(key).as_bytes()).await.unwrap();
        assert!(d.allowed && !d.repeat && d.remaining == 7, "{key}: {d:?}");
    }
    let owners = stack.owners().await;
    let victim = stack.worker_ids().remove(0);
    let orphaned = |key: &String| {
        let p = sluice_core::partition::partition_of(key, stack.partitions);
        owners.get(&p) == Some(&victim)
    };
    assert!(keys.iter().any(orphaned), "the victim owns some keys");
    stack.kill_worker(&victim);
    for key in &keys {
        let retry = body(key);
        let d = eventually(Duration::from_secs(15), TICK, || {
            ask(&client, key, retry.as_bytes())
        })
        .await
        .unwrap_or_else(|e| panic!("{key} never answered again: {e:#}"));
        assert!(d.repeat && d.allowed && d.remaining == 7, "{key}: {d:?}");
        let fresh = ask(&client, key, body("another").as_bytes()).await.unwrap();
        assert!(!fresh.repeat && fresh.remaining == 4, "{key}: {fresh:?}");
    }
}

/// SPEC §18: keys blocked by a denial under `block_for` stay blocked
/// after their owner is killed with `kill -9` in journal mode, no snapshot
/// since: the new owner replays the blocked denials' records. Without the
/// block the window alone would deny them, for its 5 minutes, not
/// `blocked` and not within the block's 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_survives_its_owners_kill_in_journal_mode() {
    let _serial = serial().await;
    let config = format!(
        "{}
[policies.strict]
algorithm = \"fixed_window\"
block_for = \"30s\"
\
         limits = [ {{ max = 1, per = \"5m\" }} ]\n",
        journal_crash_config()
    );
    let mut stack = Stack::start(SLUICE, &config, 2).await;
    let client = stack.clients(1).await.remove(0);
    let body = br#"{"policy":"strict"}"#;
    let keys = a_key_per_partition(stack.partitions);
    for key in &keys {
        assert!(ask(&client, key, body).await.unwrap().allowed, "{key}");
        let d = ask(&client, key, body).await.unwrap();
        assert!(
            !d.allowed && d.blocked && d.retry_after_ms <= 30_000,
            "{key}: {d:?}"
        );
    }
    let owners = stack.owners().await;
    let victim = stack.worker_ids().remove(0);
    let orphaned: Vec<&String> = keys
        .iter()
        .filter(|key| {
            let p = sluice_core::partition::partition_of(key, stack.partitions);
            owners.get(&p) == Some(&victim)
        })
        .collect();
    assert!(!orphaned.is_empty(), "the victim owns some keys");
    stack.kill_worker(&victim);
    for key in orphaned {
        let d = eventually(Duration::from_secs(15), TICK, || ask(&client, key, body))
            .await
            .unwrap_or_else(|e| panic!("{key} never answered again: {e:#}"));
        assert!(!d.allowed && d.blocked, "{key} lost its block: {d:?}");
        assert!((1..30_000).contains(&d.retry_after_ms), "{key}: {d:?}");
    }
}

/// Group commit: asks that arrive while a partition's journal append is in
/// flight share the next append, so 400 concurrent counted asks are stored
/// in fewer messages; and every answered count is stored before its answer,
/// so a worker killed right after answering loses none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_asks_in_journal_mode_share_appends_and_survive_a_kill() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &journal_crash_config(), 1).await;
    let clients = stack.clients(4).await;
    let keys: Vec<String> = (0..40).map(|i| format!("g{i}")).collect();
    let mut tasks = Vec::new();
    for (i, key) in keys.iter().cycle().take(400).enumerate() {
        let client = clients[i % clients.len()].clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            ask(&client, &key, br#"{"policy":"tenper"}"#).await
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap().unwrap().allowed, "10 asks per key fit");
    }
    let js = async_nats::jetstream::new(clients[0].clone());
    let stored = js
        .get_stream(JOURNAL_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages;
    eprintln!("400 counted asks were stored in {stored} journal messages");
    assert!(
        (1..400).contains(&stored),
        "{stored} journal messages for 400 concurrent asks"
    );
    // Killed right after answering: the new worker has every answered count.
    let id = stack.worker_ids().remove(0);
    stack.kill_worker(&id);
    stack.start_workers(1).await;
    assert_every_tenper_used_up(&clients[0], &keys, "lost answered counts in the crash").await;
}

/// Journal mode, no snapshot in between: a partition counted by a first
/// owner that is killed, then by the worker that took it over, which is
/// killed too, still has every count at its third owner: its manifest lists
/// both writers' journals, and the third owner replays both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_survive_two_crashes_in_a_row_through_both_workers_journals() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &journal_crash_config(), 3).await;
    let client = stack.clients(1).await.remove(0);
    let keys = a_key_per_partition(stack.partitions);
    let ask_all = |body: &'static [u8]| {
        let client = client.clone();
        let keys = keys.clone();
        async move {
            for key in &keys {
                let d = eventually(Duration::from_secs(15), TICK, || ask(&client, key, body))
                    .await
                    .unwrap_or_else(|e| panic!("{key} never answered: {e:#}"));
                assert!(d.allowed, "{key}: {d:?}");
            }
        }
    };
    let ids = stack.worker_ids();
    ask_all(br#"{"policy":"tenper","cost":5}"#).await;
    let before = stack.owners().await;
    stack.kill_worker(&ids[0]);
    ask_all(br#"{"policy":"tenper","cost":5}"#).await;
    let between = stack.owners().await;
    let chained = (0..stack.partitions)
        .filter(|p| before.get(p) == Some(&ids[0]) && between.get(p) == Some(&ids[1]))
        .count();
    assert!(
        chained > 0,
        "some partition must go from the first victim to the second: {before:?} {between:?}"
    );
    stack.kill_worker(&ids[1]);
    assert_every_tenper_used_up(&client, &keys, "lost counts across two crashes").await;
}

/// Journal records are dropped once every partition's snapshot covers them,
/// also when most partitions are idle (their manifests' journal position is
/// moved on without a snapshot); the counts stay, in the snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_purged_once_snapshots_cover_it_and_counts_stay() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &TestConfig::new().journal().toml(), 1).await;
    let client = stack.clients(1).await.remove(0);
    // Two busy partitions of 16; the other 14 never count anything.
    let keys = [
        key_in_partition(0, stack.partitions),
        key_in_partition(1, stack.partitions),
    ];
    for key in &keys {
        for _ in 0..10 {
            let d = ask(&client, key, br#"{"policy":"tenper"}"#).await.unwrap();
            assert!(d.allowed);
        }
    }
    let js = async_nats::jetstream::new(client.clone());
    let journal = js.get_stream(JOURNAL_STREAM).await.unwrap();
    let written = journal.get_info().await.unwrap().state.last_sequence;
    assert!(written > 0, "the asks were journaled");
    let purged = eventually(Duration::from_secs(20), TICK, || async {
        let state = journal.get_info().await?.state;
        anyhow::ensure!(
            state.messages == 0 && state.first_sequence > written,
            "not purged yet: {state:?}"
        );
        Ok(state)
    })
    .await;
    assert!(purged.is_ok(), "the journal was never purged: {purged:?}");
    // A crash now restores from the snapshots alone.
    let id = stack.worker_ids().remove(0);
    stack.kill_worker(&id);
    stack.start_workers(1).await;
    assert_every_tenper_used_up(&client, &keys, "lost counts with the purge").await;
}

/// Asserts that each key's `tenper` limit is used up (asked at cost 0, once
/// its partition answers again), as all of them were counted.
async fn assert_every_tenper_used_up(client: &async_nats::Client, keys: &[String], what: &str) {
    for key in keys {
        let d = eventually(Duration::from_secs(15), TICK, || {
            ask(client, key, br#"{"policy":"tenper","cost":0}"#)
        })
        .await
        .unwrap_or_else(|e| panic!("{key} never answered again: {e:#}"));
        assert_eq!(d.remaining, 0, "{key} {what}");
    }
}

/// The crash tests snapshot rarely, so that at the kill most counts exist
/// only in the dead worker's memory (and, in journal mode, in the journal).
fn crash_config() -> TestConfig {
    TestConfig::new().snapshot_interval("60s")
}

/// [`crash_config`] in journal mode.
fn journal_crash_config() -> String {
    crash_config().journal().toml()
}

/// Runs load, kills one of 3 workers mid-way, checks that its partitions
/// answer again within lease TTL + 1 s, then hands the results to `check`
/// with, per partition of the dead worker, when the snapshot the new owner
/// restored was taken (ms since the epoch).
async fn crash_under_load(config: &str, check: impl FnOnce(&[Answered], &HashMap<u32, u64>)) {
    let mut stack = Stack::start(SLUICE, config, 3).await;
    let clients = stack.clients(2).await;
    let keys: Vec<String> = (0..300).map(|i| format!("c{i}")).collect();
    // Phase 1: 6 asks per key; the kill lands after about 2 of them.
    let mut load = Load::start(&clients, rounds(&keys, 6), 32, br#"{"policy":"tenper"}"#);
    load.reached(600).await;
    let owners = stack.owners().await;
    let victim = stack.worker_ids().remove(0);
    let orphans: Vec<u32> = owners
        .iter()
        .filter(|(_, o)| **o == victim)
        .map(|(p, _)| *p)
        .collect();
    assert!(!orphans.is_empty());
    let killed_at = Instant::now();
    stack.kill_worker(&victim);
    let mut slowest = Duration::ZERO;
    for &p in &orphans {
        let key = key_in_partition(p, stack.partitions);
        eventually(Duration::from_secs(10), TICK, || {
            ask(&clients[0], &key, PEEK)
        })
        .await
        .unwrap_or_else(|e| panic!("partition {p} never answered again: {e:#}"));
        slowest = slowest.max(killed_at.elapsed());
    }
    eprintln!("partitions of the killed worker answered again after at most {slowest:?}");
    assert!(
        slowest <= Duration::from_secs(2) + Duration::from_secs(1),
        "lease TTL + 1 s"
    );
    let mut results = load.finish().await;
    // Phase 2, after recovery: 10 more asks per key probe what was remembered.
    results.extend(
        Load::start(&clients, rounds(&keys, 10), 32, br#"{"policy":"tenper"}"#)
            .finish()
            .await,
    );
    let restored = stack.restored_snapshot_times(&orphans).await;
    check(&results, &restored);
}

/// Starts `sluice worker` (partitions = 16) against a server with the given
/// config and returns its exit status and log once it stops by itself.
async fn worker_against(server_config: &str) -> (std::process::ExitStatus, String) {
    let nats = NatsServer::start(server_config).expect("nats-server starts");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, TestConfig::new().toml()).unwrap();
    let cmd = worker_command(SLUICE.as_ref(), &nats.url(), &config, None);
    let log = dir.path().join("worker.log");
    let mut worker = ChildGuard::spawn_logged("worker", cmd, &log).unwrap();
    let status = worker
        .wait_within(Duration::from_secs(20))
        .unwrap()
        .expect("the worker refuses to run and exits");
    (status, worker.log_tail(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_to_run_without_the_partition_mapping() {
    let _serial = serial().await;
    let (status, log) = worker_against("jetstream {}\n").await;
    assert!(!status.success());
    assert!(log.contains("no partition mapping"), "{log}");
    assert!(
        log.contains("sluice nats-config"),
        "the message says what to fix: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_a_server_that_maps_onto_another_partition_count() {
    let _serial = serial().await;
    let other = NatsServerConfig::new(32).render();
    let (status, log) = worker_against(&other).await;
    assert!(!status.success());
    assert!(log.contains("different number of partitions"), "{log}");
    assert!(
        log.contains("partitions = 16"),
        "the message names our count: {log}"
    );
}

/// Journal mode when JetStream cannot take the append (here: the journal
/// stream is gone): by default the ask gets a 503 instead of its decision,
/// since the caller asked for durability; with `journal_failure = "answer"`
/// it gets the decision all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_append_that_fails_is_answered_503_unless_configured_to_answer() {
    let _serial = serial().await;
    for answer in [false, true] {
        let mut toml = TestConfig::new().journal().toml();
        if answer {
            toml = format!("journal_failure = \"answer\"\n{toml}");
        }
        let stack = Stack::start(SLUICE, &toml, 1).await;
        let client = stack.clients(1).await.remove(0);
        let key = key_in_partition(2, stack.partitions);
        assert!(ask(&client, &key, b"").await.unwrap().allowed, "stored");
        let js = async_nats::jetstream::new(client.clone());
        js.delete_stream(JOURNAL_STREAM).await.unwrap();
        let after = ask(&client, &key, b"").await;
        if answer {
            assert!(after.unwrap().allowed, "answered as decided");
        } else {
            match after {
                Err(sluice_tests::AskError::Reply(e)) => {
                    assert_eq!(e.code.status(), 503, "{e}");
                    assert!(e.message.contains("journal did not store"), "{e}");
                }
                other => panic!("expected a 503, got {other:?}"),
            }
        }
        // A peek counts nothing, stores nothing, and is answered either way.
        let peek = ask(&client, &key, PEEK).await.unwrap();
        assert_eq!(peek.remaining, 3, "both asks were counted in memory");
    }
}
