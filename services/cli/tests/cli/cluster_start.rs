//! A worker started before its JetStream cluster can place R3 streams
//! (docs/RELIABILITY.md): it waits for the cluster instead of exiting with `no
//! suitable peers for placement (10005)`, and answers once it can. The
//! same for one started while a running cluster has lost its quorum: no
//! meta leader, no stream leaders, every request unanswered (a worker
//! started while the meta leader moved gave up on its policies).

use crate::common;

use common::nats::server_config;
use common::SLUICE;
use sluice_tests::{ask, eventually, serial, worker_command, ChildGuard, NatsCluster, TestConfig};
use std::time::{Duration, Instant};

/// How soon a worker starts waiting: it tries at once, and says so after
/// its first request went unanswered (5 s); on a loaded machine (CI, 2
/// cores) a start took longer than 15 s to get there.
const WAITING: Duration = Duration::from_secs(45);
/// How soon it answers once the third node is back: a node rejoins and
/// the streams are placed within seconds, well inside the worker's 30 s.
const ANSWERS: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_its_cluster_cannot_place_r3_streams_waits_and_then_answers() {
    let _serial = serial().await;
    let config = TestConfig::new();
    let partitions = config.config().partitions;
    // Two nodes of three, the third never seen yet: a meta leader, but no
    // third peer to place R3 streams on.
    let mut nats =
        NatsCluster::start_some(3, 2, |_| server_config(partitions)).expect("two NATS nodes start");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, config.toml()).unwrap();
    let urls = [nats.node(0).url(), nats.node(1).url()].join(",");
    let mut cmd = worker_command(SLUICE.as_ref(), &urls, &path, Some("early"));
    cmd.args(["--replicas", "3"]).env("SLUICE_LOG", "info");
    let mut worker = ChildGuard::spawn_logged("early", cmd, &dir.path().join("early.log")).unwrap();
    waits_for_jetstream(&mut worker).await;

    nats.node_mut(2).restart().expect("node 2 comes back");
    let client = nats.connect().await.unwrap();
    let back = Instant::now();
    eventually(ANSWERS, Duration::from_millis(100), || {
        ask(&client, "cold-start", br#"{"policy":"default","cost":0}"#)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", worker.log_tail(30)));
    println!(
        "answered {:?} after the third node was back",
        back.elapsed()
    );
    worker.terminate().expect("the worker stops");
}

/// Waits until `worker` logs that it waits for JetStream, and checks that
/// it still runs.
async fn waits_for_jetstream(worker: &mut ChildGuard) {
    eventually(WAITING, Duration::from_millis(50), || {
        let log = worker.log_tail(60);
        async move {
            anyhow::ensure!(
                log.contains("waiting for JetStream"),
                "not waiting yet: {log}"
            );
            Ok(())
        }
    })
    .await
    .expect("the worker waits for the cluster");
    assert!(
        worker.is_running(),
        "the worker waits, it does not exit: {}",
        worker.log_tail(20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_its_cluster_has_no_quorum_waits_and_then_answers() {
    let _serial = serial().await;
    let config = TestConfig::new();
    let partitions = config.config().partitions;
    let mut nats =
        NatsCluster::start(3, |_| server_config(partitions)).expect("three NATS nodes start");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, config.toml()).unwrap();
    let urls = nats.urls().join(",");
    let start = |id: &str| {
        let mut cmd = worker_command(SLUICE.as_ref(), &urls, &path, Some(id));
        cmd.args(["--replicas", "3"]).env("SLUICE_LOG", "info");
        ChildGuard::spawn_logged(id, cmd, &dir.path().join(format!("{id}.log"))).unwrap()
    };
    // A first worker makes the streams and buckets, and answers.
    let mut first = start("first");
    let client = nats.node(0).connect().await.unwrap();
    let peek = br#"{"policy":"default","cost":0}"#;
    eventually(ANSWERS, Duration::from_millis(100), || {
        ask(&client, "quorum", peek)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", first.log_tail(30)));
    first.terminate().expect("the first worker stops");

    // Two nodes of three stopped: node 0 runs alone, without a quorum.
    nats.node_mut(1).stop().unwrap();
    nats.node_mut(2).stop().unwrap();
    let mut worker = start("late");
    waits_for_jetstream(&mut worker).await;

    nats.node_mut(1).restart().expect("node 1 comes back");
    nats.node_mut(2).restart().expect("node 2 comes back");
    let back = Instant::now();
    eventually(ANSWERS, Duration::from_millis(100), || {
        ask(&client, "quorum", peek)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", worker.log_tail(30)));
    println!("answered {:?} after the quorum was back", back.elapsed());
    assert!(worker.is_running(), "{}", worker.log_tail(20));
    worker.terminate().expect("the worker stops");
}

/// How long a worker may take to make its buckets and answer on a cluster.
const STARTS: Duration = Duration::from_secs(60);

/// Replication matches the cluster (docs/OPERATIONS.md, "Durability and
/// replicas"): a worker given `--replicas 1` on a 3-node cluster keeps
/// everything on one node, and `sluice status` warns of each bucket and
/// stream; a worker given nothing, on the same cluster with the state
/// gone, keeps every bucket and stream (journal and usage included) at R3,
/// says so at start, and `sluice status` warns of nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_replicas_keeps_its_state_at_r3_on_a_three_node_cluster() {
    let _serial = serial().await;
    let config = TestConfig::new().journal();
    let partitions = config.config().partitions;
    let nats =
        NatsCluster::start(3, |_| server_config(partitions)).expect("three NATS nodes start");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, config.toml()).unwrap();
    let urls = nats.urls().join(",");
    let client = nats.connect().await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let status = || {
        let out = std::process::Command::new(SLUICE)
            .args(["status", "--nats", &urls, "--config"])
            .arg(&path)
            .output()
            .expect("sluice status runs");
        assert!(out.status.success(), "{}", sluice_tests::output_text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let start = |id: &str, replicas: Option<&str>| {
        let mut cmd = worker_command(SLUICE.as_ref(), &urls, &path, Some(id));
        cmd.env("SLUICE_LOG", "info").env_remove("SLUICE_REPLICAS");
        if let Some(n) = replicas {
            cmd.args(["--replicas", n]);
        }
        ChildGuard::spawn_logged(id, cmd, &dir.path().join(format!("{id}.log"))).unwrap()
    };
    let answers = |worker: &ChildGuard| {
        let log = worker.log_tail(30);
        let client = &client;
        async move {
            eventually(STARTS, Duration::from_millis(100), || {
                ask(client, "replicas", br#"{"policy":"default","cost":0}"#)
            })
            .await
            .unwrap_or_else(|e| panic!("{e:#}\n{log}"));
        }
    };

    let mut one = start("one", Some("1"));
    answers(&one).await;
    let replicas = kept_replicas(&js).await;
    assert!(replicas.iter().all(|(_, r)| *r == 1), "{replicas:?}");
    let warned = status();
    for (stream, _) in &replicas {
        assert!(
            warned.contains(&format!(
                "WARNING: {stream} is kept with 1 replica(s) but the NATS cluster could give 3"
            )),
            "no warning of {stream}:\n{warned}"
        );
    }
    one.terminate().expect("the first worker stops");
    for (stream, _) in &replicas {
        js.delete_stream(stream)
            .await
            .expect("the stream is deleted");
    }

    let mut three = start("three", None);
    answers(&three).await;
    let replicas = kept_replicas(&js).await;
    assert_eq!(replicas.len(), 9, "every bucket and stream: {replicas:?}");
    assert!(replicas.iter().all(|(_, r)| *r == 3), "{replicas:?}");
    let log = three.log_tail(200);
    assert!(
        log.contains("state kept with 3 replicas: the NATS cluster has 3 servers"),
        "the worker says why at start:\n{log}"
    );
    let quiet = status();
    assert!(!quiet.contains("WARNING"), "{quiet}");
    assert!(quiet.contains("WORKERS (1)"), "{quiet}");
    three.terminate().expect("the second worker stops");
}

/// sluice's streams that exist, with their replicas: the three buckets',
/// the journal, alerts and the usage tiers.
async fn kept_replicas(js: &async_nats::jetstream::Context) -> Vec<(String, usize)> {
    let tiers = sluice_core::config::Config::default().usage.tiers;
    let steps: Vec<String> = tiers.iter().map(|t| t.name()).collect();
    let mut kept = Vec::new();
    for name in sluice_core::replication::sluice_streams(&steps) {
        if let Ok(stream) = js.get_stream(&name).await {
            kept.push((name, stream.cached_info().config.num_replicas));
        }
    }
    kept
}
