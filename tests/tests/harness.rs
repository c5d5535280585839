//! Tests of the test harness itself: a real nats-server starts, serves,
//! maps subjects, restarts with its data, and is gone after drop.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use sluice_core::nats_config::mapping;
use sluice_core::subject::Verb;
use sluice_tests::{eventually, ChildGuard, NatsCluster, NatsServer, Signal};

/// A config with only the partition mappings of the notes (§1) for
/// `rl.allow.*` (and the grouped keys' `rl.allow.*.*`, `rl.allow.*.*.*`),
/// onto `partitions` partitions.
fn allow_mapping(partitions: u32) -> String {
    let pairs: Vec<String> = mapping(Verb::Allow, partitions)
        .into_iter()
        .map(|(from, to)| format!(r#""{from}": "{to}""#))
        .collect();
    format!("mappings = {{ {} }}", pairs.join(", "))
}

/// What the mapping makes of `rl.allow.<key>`: `rl.p.<n>.allow.<key>`.
fn mapped(partition: u32, key: &str) -> String {
    Verb::Allow.mapped_subject(partition, key)
}

/// Every mapped allow subject, whatever the partition: `rl.p.*.allow.>`.
fn any_mapped() -> String {
    Verb::Allow.any_partition_subject(">")
}

const TIMEOUT: Duration = Duration::from_secs(10);
const ATTEMPT: Duration = Duration::from_millis(500);

fn process_exists(pid: u32) -> bool {
    // Signal 0 checks existence (a zombie still exists).
    kill(Pid::from_raw(pid as i32), None) != Err(Errno::ESRCH)
}

/// Answers every request on `subject` with the subject it arrived on.
async fn subject_echo(client: &async_nats::Client, subject: &str) -> Result<()> {
    let mut sub = client.subscribe(subject.to_string()).await?;
    client.flush().await?;
    let responder = client.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Some(reply) = msg.reply {
                let _ = responder
                    .publish(reply, msg.subject.to_string().into())
                    .await;
            }
        }
    });
    Ok(())
}

async fn request_text(client: &async_nats::Client, subject: &str) -> Result<String> {
    request_within(client, subject, TIMEOUT).await
}

/// One request's reply as text; a request that was in flight while a
/// connection broke is lost, so retries need a timeout well under
/// `eventually`'s.
async fn request_within(
    client: &async_nats::Client,
    subject: &str,
    timeout: Duration,
) -> Result<String> {
    let msg = sluice_tests::request_within(client, subject, b"", timeout).await?;
    Ok(String::from_utf8(msg.payload.to_vec())?)
}

async fn kv_bucket(client: &async_nats::Client, replicas: usize) -> Result<kv::Store> {
    let js = jetstream::new(client.clone());
    Ok(js
        .create_key_value(kv::Config {
            bucket: "harness".into(),
            num_replicas: replicas,
            ..Default::default()
        })
        .await?)
}

#[tokio::test]
async fn server_starts_on_a_free_loopback_port_and_answers_requests() -> Result<()> {
    let server = NatsServer::start("")?;
    assert!(
        server.url().starts_with("nats://127.0.0.1:"),
        "{}",
        server.url()
    );
    assert_ne!(server.port(), 4222, "must not use the default port");
    assert!(server.pid().is_some_and(process_exists));

    let client = server.connect().await?;
    subject_echo(&client, "echo.*").await?;
    assert_eq!(request_text(&client, "echo.hi").await?, "echo.hi");

    // The monitoring port is loopback too and reports what we run.
    let varz = server.monitoring_get("/varz")?;
    assert!(varz.contains("\"version\": \"2.15.1\""), "{varz}");
    Ok(())
}

#[tokio::test]
async fn jetstream_is_enabled_with_its_store_in_the_temp_dir() -> Result<()> {
    let server = NatsServer::start("")?;
    let client = server.connect().await?;
    let kv = kv_bucket(&client, 1).await?;
    kv.put("k", "v".into()).await?;
    assert_eq!(kv.get("k").await?.as_deref(), Some(&b"v"[..]));
    assert!(server.store_dir().starts_with(server.dir()));
    assert!(server.store_dir().join("jetstream").is_dir());
    Ok(())
}

#[tokio::test]
async fn mapping_routes_keys_to_their_partition_subjects() -> Result<()> {
    let server = NatsServer::start(&allow_mapping(16))?;
    let client = server.connect().await?;
    subject_echo(&client, &any_mapped()).await?;
    // The notes' table for N=16, checked there against the server.
    for (key, partition) in [("alice", 7), ("bob", 4), ("carol", 2), ("user-42", 11)] {
        assert_eq!(
            request_text(&client, &Verb::Allow.client_subject(key)).await?,
            mapped(partition, key)
        );
    }
    // A grouped key (SPEC §17) lands where its first token does, whole.
    for key in ["user-42.alice", "user-42.eng.alice"] {
        assert_eq!(
            request_text(&client, &Verb::Allow.client_subject(key)).await?,
            mapped(11, key)
        );
    }
    Ok(())
}

#[tokio::test]
async fn reload_applies_a_new_mapping() -> Result<()> {
    let mut server = NatsServer::start(&allow_mapping(16))?;
    let client = server.connect().await?;
    subject_echo(&client, &any_mapped()).await?;
    let bob = Verb::Allow.client_subject("bob");
    assert_eq!(request_text(&client, &bob).await?, mapped(4, "bob"));

    server.reload(&allow_mapping(32))?;
    // bob: FNV-1a 0x86c6a0d4 % 32 = 20.
    assert_eq!(request_text(&client, &bob).await?, mapped(20, "bob"));
    Ok(())
}

#[tokio::test]
async fn restart_keeps_port_and_jetstream_data() -> Result<()> {
    let mut server = NatsServer::start("")?;
    let url = server.url();
    let first_pid = server.pid().unwrap();
    {
        let client = server.connect().await?;
        let kv = kv_bucket(&client, 1).await?;
        kv.put("stopped", "1".into()).await?;
    }

    // Clean stop, then start.
    server.stop()?;
    assert_eq!(server.pid(), None);
    assert!(!process_exists(first_pid));
    server.restart()?;
    assert_eq!(server.url(), url);
    let second_pid = server.pid().unwrap();
    assert_ne!(second_pid, first_pid);

    let client = server.connect().await?;
    let kv = jetstream::new(client.clone())
        .get_key_value("harness")
        .await?;
    assert_eq!(kv.get("stopped").await?.as_deref(), Some(&b"1"[..]));
    kv.put("killed", "2".into()).await?;
    drop(kv);
    drop(client);

    // Crash (SIGKILL), then start: what the server acknowledged survives a
    // process crash (it is in the OS page cache, not necessarily on disk).
    server.kill()?;
    assert!(!process_exists(second_pid));
    server.restart()?;
    assert_eq!(server.url(), url);
    let client = server.connect().await?;
    let kv = jetstream::new(client).get_key_value("harness").await?;
    assert_eq!(kv.get("stopped").await?.as_deref(), Some(&b"1"[..]));
    assert_eq!(kv.get("killed").await?.as_deref(), Some(&b"2"[..]));
    Ok(())
}

#[tokio::test]
async fn a_client_reconnects_by_itself_after_restart() -> Result<()> {
    let mut server = NatsServer::start("")?;
    let client = server.connect().await?;
    subject_echo(&client, "echo").await?;
    server.restart()?;
    // The client reconnects on its own schedule; no event tells us when.
    let reply = eventually(TIMEOUT, Duration::from_millis(50), || {
        let client = client.clone();
        async move { request_within(&client, "echo", ATTEMPT).await }
    })
    .await?;
    assert_eq!(reply, "echo");
    Ok(())
}

#[test]
fn drop_kills_the_server_and_removes_its_dir() -> Result<()> {
    let server = NatsServer::start("")?;
    let pid = server.pid().unwrap();
    let dir = server.dir().to_path_buf();
    assert!(process_exists(pid));
    drop(server);
    assert!(!process_exists(pid), "pid {pid} still exists after drop");
    assert!(!dir.exists(), "{} still exists", dir.display());
    Ok(())
}

#[test]
fn servers_started_in_parallel_get_different_ports() -> Result<()> {
    let handles: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(|| NatsServer::start("")))
        .collect();
    let servers = handles
        .into_iter()
        .map(|h| h.join().expect("no panic"))
        .collect::<Result<Vec<_>>>()?;
    let mut ports: Vec<u16> = servers
        .iter()
        .flat_map(|s| [s.port(), s.monitoring_port()])
        .collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 6, "ports must all differ: {ports:?}");
    Ok(())
}

#[test]
fn a_bad_config_fails_with_the_server_log_in_the_error() {
    // partition(16,2) refers to a second wildcard that does not exist.
    let err = NatsServer::start(&allow_mapping(16).replace("partition(16,1)", "partition(16,2)"))
        .expect_err("the server must refuse this config");
    let text = format!("{err:#}");
    assert!(text.contains("exited during startup"), "{text}");
    assert!(text.contains("wildcard index out of range"), "{text}");
}

#[tokio::test]
async fn cluster_of_three_replicates_and_maps_on_every_node() -> Result<()> {
    let mut cluster = NatsCluster::start(3, |_| allow_mapping(16))?;
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);

    // R3 needs the JetStream meta group, which `start` waited for.
    let client = cluster.node(0).connect().await?;
    let kv = kv_bucket(&client, 3).await?;
    // The new stream may not take writes on this node yet ("no stream found
    // for given subject" was seen once on a loaded machine): its assignment
    // reaches the nodes asynchronously, and nothing announces it.
    eventually(TIMEOUT, Duration::from_millis(20), || {
        let kv = kv.clone();
        async move { kv.put("k", "v".into()).await }
    })
    .await?;

    // A responder on one node is reached through the mapping on every node.
    subject_echo(&client, &any_mapped()).await?;
    let alice = Verb::Allow.client_subject("alice");
    for node in cluster.nodes() {
        let requester = node.connect().await?;
        // Interest propagates between routes asynchronously.
        let reply = eventually(TIMEOUT, Duration::from_millis(20), || {
            let (requester, alice) = (requester.clone(), alice.clone());
            async move { request_within(&requester, &alice, ATTEMPT).await }
        })
        .await?;
        assert_eq!(reply, mapped(7, "alice"));
    }

    // A node that crashed and came back has the replicated value. The
    // crash may have taken the meta or the stream leader with it; JetStream
    // answers again once a new one is elected, which no event announces.
    cluster.node_mut(2).kill()?;
    cluster.node_mut(2).restart()?;
    let js2 = jetstream::ContextBuilder::new()
        .timeout(ATTEMPT)
        .build(cluster.node(2).connect().await?);
    let value = eventually(TIMEOUT, Duration::from_millis(50), || {
        let js2 = js2.clone();
        async move {
            let kv2 = js2.get_key_value("harness").await?;
            kv2.get("k")
                .await?
                .ok_or_else(|| anyhow::anyhow!("not there yet"))
        }
    })
    .await?;
    assert_eq!(&value[..], b"v");
    Ok(())
}

#[test]
fn child_guard_terminate_kill_and_exit() -> Result<()> {
    use std::os::unix::process::ExitStatusExt;
    let no_env: [(&str, &str); 0] = [];

    let mut sleeper = ChildGuard::start("sleep", ["30"], no_env)?;
    assert!(sleeper.is_running());
    let status = sleeper.terminate()?;
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
    assert!(!process_exists(sleeper.pid()));

    let mut sleeper = ChildGuard::start("sleep", ["30"], no_env)?;
    assert_eq!(sleeper.kill()?.signal(), Some(Signal::SIGKILL as i32));

    // Ignores SIGTERM: terminate falls back to SIGKILL after the grace.
    let mut stubborn = ChildGuard::start("sh", ["-c", "trap '' TERM; exec sleep 30"], no_env)?;
    // Wait until the trap is set: the shell has exec'd into sleep.
    let pid = stubborn.pid();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while std::fs::read_to_string(format!("/proc/{pid}/comm"))?.trim() != "sleep" {
        assert!(
            std::time::Instant::now() < deadline,
            "sh never exec'd sleep"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = stubborn.terminate_within(Duration::from_millis(200))?;
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32));

    // Exits by itself, with output captured in its log; env is passed.
    let mut echo = ChildGuard::start(
        "sh",
        ["-c", "echo out $GREETING; echo err >&2"],
        [("GREETING", "hi")],
    )?;
    let status = echo.wait_within(TIMEOUT)?.expect("exits by itself");
    assert!(status.success());
    assert_eq!(echo.log_tail(10), "out hi\nerr");
    assert!(echo.log_path().is_some_and(Path::exists));

    // Drop kills.
    let sleeper = ChildGuard::start("sleep", ["30"], no_env)?;
    let pid = sleeper.pid();
    drop(sleeper);
    assert!(!process_exists(pid));
    Ok(())
}

#[tokio::test]
async fn polling_with_eventually_returns_the_value_or_the_last_error() -> Result<()> {
    let mut n = 0;
    let got = eventually(TIMEOUT, Duration::from_millis(1), || {
        n += 1;
        let attempt = n;
        async move {
            if attempt < 3 {
                anyhow::bail!("attempt {attempt}")
            }
            Ok(attempt)
        }
    })
    .await?;
    assert_eq!(got, 3);

    let mut n = 0;
    let err = eventually(Duration::from_millis(50), Duration::from_millis(5), || {
        n += 1;
        let attempt = n;
        async move { Err::<(), _>(anyhow::anyhow!("attempt {attempt} failed")) }
    })
    .await
    .expect_err("never holds");
    let text = format!("{err:#}");
    assert!(text.contains("condition not met within 50ms"), "{text}");
    assert!(text.contains(&format!("attempt {n} failed")), "{text}");
    Ok(())
}

#[test]
fn the_test_config_parses_in_every_form_and_probe_keys_land_in_their_partition() {
    use sluice_core::config::Durability;
    use sluice_core::partition::partition_of;
    use sluice_tests::{a_key_per_partition, TestConfig};

    let plain = TestConfig::new().config();
    assert_eq!(plain.partitions, 16);
    assert_eq!(plain.durability, Durability::Snapshot);
    assert!(plain.policy("tenper").is_some());
    let journal = TestConfig::new()
        .journal()
        .snapshot_interval("60s")
        .config();
    assert_eq!(journal.durability, Durability::Journal);
    assert_eq!(journal.snapshot_interval, Duration::from_secs(60));

    for (p, key) in a_key_per_partition(16).iter().enumerate() {
        assert_eq!(partition_of(key, 16), p as u32, "{key}");
    }
}
