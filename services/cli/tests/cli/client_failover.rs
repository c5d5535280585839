//! The Rust client (`sluice-client`) while workers come and go, against a
//! real nats-server and real `sluice worker` processes: a handover and a
//! kill under load lose no answer and the client learns the new owners;
//! with every worker stopped, each fallback (`open`, `closed`, `local`)
//! answers well before the timeout.

use crate::common;

use common::client::{ask_all, client, options, stack};
use common::SLUICE;
use futures::StreamExt;
use sluice_client::{Client, Error, Fallback, Source};
use sluice_tests::{a_key_per_partition, eventually, serial, Stack, TestConfig, TICK};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// "Well under the timeout" (2 s in these tests): the fallback must not wait for it.
const FAST: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_and_a_kill_under_load_lose_no_answer_and_the_client_learns_the_new_owners() {
    let _serial = serial().await;
    // Journal mode: a kill loses no count, so limits hold exactly.
    let mut stack = Stack::start(SLUICE, &TestConfig::new().journal().toml(), 1).await;
    let opts = options(Fallback::Closed).deny_cache(false);
    let client = Client::connect_with(&stack.nats.url(), opts).await.unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("move-{i}")).collect();

    // Bounded load: 64 asks in flight, each key asked 12 times of "tenper"
    // (10 per 5 m), while a second worker joins and then the first is killed.
    let (done, progress) = tokio::sync::watch::channel(0usize);
    let done = Arc::new(done);
    let load = {
        let (client, keys, done) = (client.clone(), keys.clone(), done.clone());
        tokio::spawn(async move {
            let asks: Vec<String> = (0..12).flat_map(|_| keys.iter().cloned()).collect();
            futures::stream::iter(asks)
                .map(|key| {
                    let (client, done) = (client.clone(), done.clone());
                    async move {
                        let started = Instant::now();
                        let answer = client.ask(&key, "tenper", 1).await;
                        done.send_modify(|n| *n += 1);
                        (key, answer, started.elapsed())
                    }
                })
                .buffer_unordered(64)
                .collect::<Vec<_>>()
                .await
        })
    };
    let reached = |n: usize| {
        let mut progress = progress.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(60), progress.wait_for(|d| *d >= n))
                .await
                .expect("the load goes on")
                .expect("the load counts its asks");
        }
    };
    reached(600).await;
    let first = stack.worker_ids().remove(0);
    stack.start_workers(1).await;
    reached(1800).await;
    stack.kill_worker(&first);
    let results = load.await.unwrap();

    assert_eq!(results.len(), 3600);
    let mut allowed: std::collections::HashMap<&str, usize> = Default::default();
    for (key, answer, took) in &results {
        // Every caller got an answer: a decision, or the documented
        // fallback ("closed": 503) while the killed worker's partitions
        // had no owner, never later than the timeout.
        match answer {
            Ok(a) => *allowed.entry(key).or_default() += a.allowed as usize,
            Err(e) => assert_eq!(e.status(), 503, "{key}: {e}"),
        }
        assert!(*took <= Duration::from_secs(3), "{key} took {took:?}");
    }
    let decided = results.iter().filter(|r| r.1.is_ok()).count();
    assert!(decided > 1800, "most asks were decided: {decided} of 3600");
    for (key, n) in allowed {
        assert!(n <= 10, "{key} was allowed {n} times, limit 10");
    }

    // The client now knows the survivor owns everything: a burst goes to it.
    let survivor = stack.worker_ids().remove(0);
    eventually(Duration::from_secs(10), TICK, || async {
        let owners = stack.owners().await;
        anyhow::ensure!(
            owners.values().all(|o| *o == survivor),
            "owners: {owners:?}"
        );
        Ok(())
    })
    .await
    .expect("the survivor takes every partition");
    // Owning is not answering yet (a lease is taken before the partition is
    // restored, journal replay included): each probe waits until its
    // partition answers, which also teaches the client who owns it.
    for key in &a_key_per_partition(stack.partitions) {
        eventually(Duration::from_secs(10), TICK, || {
            client.ask(key, "tenper", 0)
        })
        .await
        .unwrap_or_else(|e| panic!("{key}'s partition never answered after the kill: {e:#}"));
    }
    let before = client.stats();
    let burst: Vec<String> = (0..200).map(|i| format!("after-{i}")).collect();
    for answer in ask_all(&client, &burst).await {
        assert_eq!(answer.expect("decided").source, Source::Worker);
    }
    let stats = client.stats();
    assert!(
        stats.round_trips - before.round_trips <= 10,
        "200 asks for one worker travel together: {stats:?}"
    );
    assert_eq!(
        stats.worker_batches - before.worker_batches,
        stats.round_trips - before.round_trips,
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_worker_stopped_each_fallback_answers_well_before_the_timeout() {
    let _serial = serial().await;
    let mut stack = stack(2).await;
    let open = client(&stack, Fallback::Open).await;
    let closed = client(&stack, Fallback::Closed).await;
    let local = client(&stack, Fallback::Local).await;
    assert_eq!(open.allow("before").await.unwrap().source, Source::Worker);
    stack.stop_workers();

    let started = Instant::now();
    let a = open.allow("henry").await.unwrap();
    assert!(
        started.elapsed() < FAST,
        "open took {:?}",
        started.elapsed()
    );
    assert!(a.allowed);
    assert_eq!(a.source, Source::Fallback(Fallback::Open));
    assert_eq!(
        (a.limit, a.remaining),
        (5, 4),
        "the numbers a fresh key gets"
    );
    // Retried first (4 times within ~30 ms, fewer only if this box stalls
    // past `down_after`), then the fallback.
    let stats = open.stats();
    assert!((1..=4).contains(&stats.retries), "{stats:?}");
    assert_eq!(stats.round_trips - 1, stats.retries + 1, "{stats:?}");
    assert_eq!(stats.no_responders, stats.retries + 1, "{stats:?}");
    assert_eq!(
        (stats.round_trips - 1, stats.retries, stats.no_responders),
        (5, 4, 5),
        "a partition between owners is retried 4 times (within ~30 ms) first"
    );

    // A partition silent for longer than `down_after` is down: one try each.
    let mut opts = options(Fallback::Open);
    opts.down_after = Duration::ZERO;
    let down = Client::connect_with(&stack.nats.url(), opts).await.unwrap();
    for _ in 0..10 {
        assert!(down.allow("henry").await.unwrap().allowed);
    }
    assert_eq!((down.stats().round_trips, down.stats().retries), (10, 0));

    let started = Instant::now();
    let e = closed.allow("henry").await.unwrap_err();
    assert!(
        started.elapsed() < FAST,
        "closed took {:?}",
        started.elapsed()
    );
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    assert_eq!(e.status(), 503);
    assert!(e.message().contains("closed"), "{e}");

    let mut allowed = 0;
    for i in 0..8 {
        let started = Instant::now();
        let a = local.allow("henry").await.unwrap();
        assert!(
            started.elapsed() < FAST,
            "local #{i} took {:?}",
            started.elapsed()
        );
        assert_eq!(a.source, Source::Fallback(Fallback::Local));
        if a.allowed {
            allowed += 1;
        } else {
            assert!(a.retry_after > Duration::ZERO);
        }
    }
    assert_eq!(allowed, 5, "the local limiter applies the policy");
    let e = local.ask("henry", "nope", 1).await.unwrap_err();
    assert_eq!(
        e.status(),
        404,
        "the local limiter knows the configured policies"
    );

    // A batch of concurrent asks falls back too.
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let open = open.clone();
            tokio::spawn(async move { open.allow("ivy").await })
        })
        .collect();
    for t in tasks {
        assert_eq!(
            t.await.unwrap().unwrap().source,
            Source::Fallback(Fallback::Open)
        );
    }
}
