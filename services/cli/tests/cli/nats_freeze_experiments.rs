//! Experiments, not checks (both `#[ignore]`d, ~2 min each): what a frozen
//! (SIGSTOP) node of a 3-node NATS cluster does to JetStream, measured on
//! nats-server itself without sluice's workers. They give the bounds behind
//! the takeover path's JetStream timeouts and the nemesis suite's frozen
//! NATS node (`nemesis.rs`, docs/RELIABILITY.md). Each prints what it saw:
//!
//! `scripts/test.sh -p sluice-cli --test cli -- nats_freeze_experiments:: --ignored --nocapture`

use crate::common;

use common::nats::{server_config, signal};
use sluice_tests::{eventually, NatsCluster, Signal};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The partitions of the NATS config, as in the nemesis suite.
const PARTITIONS: u32 = 16;

/// How long nats-server takes to replace the leader of an R3 stream whose
/// node froze (SIGSTOP): the bound behind the takeover path's JetStream
/// timeouts (docs/RELIABILITY.md). An experiment, not a check: it prints
/// one line per trial, from the freeze until a publish through another
/// node is acknowledged (the stream has a working leader again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "an experiment (~2 min): scripts/test.sh -p sluice-cli --test cli -- nats_freeze_experiments::frozen_stream_leader --ignored --nocapture"]
async fn how_long_nats_takes_to_replace_a_frozen_stream_leader() {
    use async_nats::jetstream::{self, stream};
    const TRIALS: usize = 8;
    const STREAM: &str = "EXPERIMENT";
    let _serial = sluice_tests::serial().await;
    let nats =
        NatsCluster::start(3, |_| server_config(PARTITIONS)).expect("the NATS cluster starts");
    let mut js = Vec::new();
    for node in nats.nodes() {
        let client = node.connect().await.expect("a client connects");
        // Short, so that a request to the frozen leader fails fast.
        js.push(
            jetstream::ContextBuilder::new()
                .timeout(Duration::from_millis(250))
                .build(client),
        );
    }
    eventually(Duration::from_secs(10), Duration::from_millis(100), || {
        js[0].get_or_create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["experiment.>".into()],
            num_replicas: 3,
            ..Default::default()
        })
    })
    .await
    .expect("the stream is created");
    let leader_of = |info: &stream::Info| -> Option<usize> {
        let name = info.cluster.as_ref()?.leader.as_ref()?;
        name.strip_prefix('n')?.parse().ok()
    };
    let all_current = |info: &stream::Info| -> bool {
        info.cluster.as_ref().is_some_and(|c| {
            c.leader.is_some() && c.replicas.len() == 2 && c.replicas.iter().all(|r| r.current)
        })
    };
    let mut taken = Vec::new();
    for trial in 0..TRIALS {
        // A stream whose every replica is current, and its leader.
        let info = eventually(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                let info = js[0].get_stream(STREAM).await?.info().await?.clone();
                anyhow::ensure!(all_current(&info), "not every replica is current");
                Ok::<_, anyhow::Error>(info)
            },
        )
        .await
        .expect("the stream is whole again");
        let leader = leader_of(&info).expect("the stream has a leader");
        let other = (leader + 1) % 3;
        let meta = {
            let jsz = nats.node(other).monitoring_get("/jsz").unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&jsz).unwrap_or_default();
            v["meta_cluster"]["leader"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        };
        let pid = nats.node(leader).pid().expect("the node runs");
        signal(pid, Signal::SIGSTOP);
        let frozen = Instant::now();
        let acked = eventually(
            Duration::from_secs(60),
            Duration::from_millis(50),
            || async {
                js[other]
                    .publish(format!("experiment.{trial}"), "x".into())
                    .await?
                    .await?;
                Ok::<_, anyhow::Error>(frozen.elapsed())
            },
        )
        .await;
        let new_leader = match js[other].get_stream(STREAM).await {
            Ok(mut s) => s.info().await.ok().and_then(&leader_of),
            Err(_) => None,
        };
        signal(pid, Signal::SIGCONT);
        let acked = acked.expect("the stream gets a new leader within 60 s");
        println!(
            "trial {trial}: leader n{leader} (meta leader {meta}) frozen; a publish through n{other} \
             acknowledged after {:.2} s; new leader {new_leader:?}",
            acked.as_secs_f64()
        );
        taken.push(acked.as_secs_f64());
    }
    taken.sort_by(f64::total_cmp);
    println!(
        "a frozen stream leader replaced after {:.2} s (median) / {:.2} s (worst) over {TRIALS} trials",
        taken[TRIALS / 2],
        taken[TRIALS - 1]
    );
}

/// What a NATS node's freeze does to KV requests through the other nodes,
/// while messages are routed to the frozen one (as to the workers
/// connected there): puts, async-nats's reads (direct gets, which any
/// replica answers) and sluice's reads from the stream's leader
/// (`sluice_worker::store::entry`). One character per request every
/// 0.25 s: `+` answered within 0.6 s, `.` not. An experiment, not a check
/// (docs/RELIABILITY.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "an experiment (~2 min): scripts/test.sh -p sluice-cli --test cli -- nats_freeze_experiments::kv_requests_while --ignored --nocapture"]
async fn kv_requests_while_a_nats_node_is_frozen() {
    use async_nats::jetstream::{self, kv};
    const WITHIN: Duration = Duration::from_millis(600);
    let _serial = sluice_tests::serial().await;
    let nats =
        NatsCluster::start(3, |_| server_config(PARTITIONS)).expect("the NATS cluster starts");
    let mut clients = Vec::new();
    for node in nats.nodes() {
        clients.push(node.connect().await.expect("a client connects"));
    }
    let js: Vec<_> = clients.iter().map(|c| jetstream::new(c.clone())).collect();
    eventually(Duration::from_secs(10), Duration::from_millis(100), || {
        js[0].create_key_value(kv::Config {
            bucket: "experiment".into(),
            num_replicas: 3,
            ..Default::default()
        })
    })
    .await
    .expect("the bucket is created");
    for frozen in 0..3 {
        let other = (frozen + 1) % 3;
        // Traffic from the other nodes to a subscriber on the frozen one.
        let _sub = clients[frozen].subscribe("load.>").await.unwrap();
        clients[frozen].flush().await.unwrap();
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut load = Vec::new();
        for c in [other, (frozen + 2) % 3] {
            let (client, stop) = (clients[c].clone(), stop_rx.clone());
            load.push(tokio::spawn(async move {
                for i in 0..1_000_000u64 {
                    if *stop.borrow() {
                        break;
                    }
                    let _ = client
                        .publish(format!("load.{i}"), vec![0u8; 200].into())
                        .await;
                    if i % 50 == 0 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let store = js[other].get_key_value("experiment").await.unwrap();
        store.put("k", "v".into()).await.unwrap();
        let mut stream = js[other].get_stream("KV_experiment").await.unwrap();
        let info = stream.info().await.unwrap();
        let leader = info
            .cluster
            .clone()
            .and_then(|c| c.leader)
            .unwrap_or_default();
        let pid = nats.node(frozen).pid().expect("the node runs");
        signal(pid, Signal::SIGSTOP);
        let t0 = Instant::now();
        let (mut puts, mut gets, mut leader_reads) = (String::new(), String::new(), String::new());
        let mark = |ok: bool| if ok { '+' } else { '.' };
        while t0.elapsed() < Duration::from_secs(20) {
            let started = Instant::now();
            let put = tokio::time::timeout(WITHIN, store.put("k", "v".into())).await;
            puts.push(mark(put.is_ok_and(|r| r.is_ok())));
            let get = tokio::time::timeout(WITHIN, store.get("k")).await;
            gets.push(mark(get.is_ok_and(|r| r.is_ok())));
            let read = tokio::time::timeout(WITHIN, sluice_worker::store::entry(&store, "k")).await;
            leader_reads.push(mark(read.is_ok_and(|r| r.is_ok())));
            tokio::time::sleep_until((started + Duration::from_millis(250)).into()).await;
        }
        signal(pid, Signal::SIGCONT);
        let _ = stop_tx.send(true);
        for task in load {
            let _ = task.await;
        }
        println!(
            "n{frozen} frozen (the bucket's leader: {leader}); requests through n{other}:\n  \
             puts         {puts}\n  direct gets  {gets}\n  leader reads {leader_reads}"
        );
        // The stream whole again before the next node freezes.
        eventually(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                let info = js[0]
                    .get_stream("KV_experiment")
                    .await?
                    .info()
                    .await?
                    .clone();
                let whole = info
                    .cluster
                    .is_some_and(|c| c.leader.is_some() && c.replicas.iter().all(|r| r.current));
                anyhow::ensure!(whole, "not every replica is current");
                Ok::<_, anyhow::Error>(())
            },
        )
        .await
        .expect("the stream is whole again");
    }
}
