//! Who may do what (SPEC §10): a real nats-server with the
//! config of `sluice nats-config --auth`, workers as `worker`, and checks
//! that the server itself refuses what a `client` may not do, that nothing
//! changed afterwards, that the CLI's admin commands work as `admin`, and
//! that bad credentials and TLS failures end a command with one line.
//!
//! A refused publish or subscription is reported by the server
//! asynchronously (`-ERR 'Permissions Violation for Publish to "..."'`),
//! which async-nats hands to the connection's event callback as
//! `ServerError::Other`; the tests await that event for each subject.

use async_nats::jetstream;
use async_nats::{ConnectOptions, Event, ServerError};
use bytes::Bytes;
use sluice_core::nats_config::Role;
use sluice_core::partition::partition_of;
use sluice_core::storage::{bucket_stream, LEASE_BUCKET, POLICY_BUCKET};
use sluice_core::subject::Verb;
use sluice_tests::{
    ask, error_of, eventually, one_line_error, request, serial, test_password, NatsServer, Stack,
    TestCa, TestConfig, PEEK, TICK,
};
use std::process::{Command, Output};
use std::time::Duration;
use tokio::sync::mpsc;

/// The binary under test.
const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// How long the server may take to report a refusal.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection as `role` whose server errors arrive on the receiver.
async fn connect_watched(
    url: &str,
    role: Role,
) -> (async_nats::Client, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let client = ConnectOptions::with_user_and_password(role.name().into(), test_password(role))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let Event::ServerError(ServerError::Other(e)) = event {
                    let _ = tx.send(e);
                }
            }
        })
        .connect(url)
        .await
        .expect("connects with the role's password");
    (client, rx)
}

/// Waits for the server's permission violation naming `subject`.
async fn refused(errors: &mut mpsc::UnboundedReceiver<String>, what: &str, subject: &str) {
    let deadline = tokio::time::Instant::now() + REFUSAL_TIMEOUT;
    let wanted = format!("Permissions Violation for {what} to \"{subject}\"");
    loop {
        match tokio::time::timeout_at(deadline, errors.recv()).await {
            Ok(Some(e)) if e.contains(&wanted) => return,
            Ok(Some(_)) => continue,
            _ => panic!("the server did not refuse: {wanted}"),
        }
    }
}

fn sluice_as(role: Role, args: &[&str], url: &str, config: &std::path::Path) -> Output {
    Command::new(SLUICE)
        .args(args)
        .args(["--nats", url])
        .arg("--config")
        .arg(config)
        .env("SLUICE_NATS_USER", role.name())
        .env("SLUICE_NATS_PASSWORD", test_password(role))
        .env("SLUICE_LOG", "error")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    sluice_tests::output_text(o)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_asks_but_the_server_refuses_everything_else_and_nothing_changes() {
    let _serial = serial().await;
    let stack = Stack::start_secured(SLUICE, &TestConfig::new().toml(), 2).await;
    let url = stack.nats.url();
    let partitions = stack.partitions;
    let (client, mut errors) = connect_watched(&url, Role::Client).await;
    let (admin, _) = connect_watched(&url, Role::Admin).await;

    // What a client may do: ask and hit (default: 5 per 10 s).
    let victim = "victim";
    for _ in 0..2 {
        assert!(ask(&client, victim, b"").await.unwrap().allowed);
    }
    client
        .publish(Verb::Hit.client_subject(victim), Bytes::new())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let owners = stack.owners().await;
    assert_eq!(ask(&admin, victim, PEEK).await.unwrap().remaining, 2);
    // ... and read usage (SPEC §9): the workers, as `worker`, keep it
    // in their usage streams and answer a top query together.
    let usage = request(
        &client,
        &Verb::Usage.client_subject(victim),
        br#"{"step":"1m"}"#,
    )
    .await
    .unwrap();
    assert!(error_of(&usage).is_none(), "{:?}", error_of(&usage));
    let usage: serde_json::Value = serde_json::from_slice(&usage.payload).unwrap();
    let used: u64 = usage["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["used"].as_u64().unwrap())
        .sum();
    assert_eq!(used, 3, "{usage}");
    let top = request(&client, sluice_core::subject::TOP, br#"{"n":1}"#)
        .await
        .unwrap();
    assert!(error_of(&top).is_none(), "{:?}", error_of(&top));

    // Publishes the server refuses (checked on the subject after the
    // mapping: rl.inspect.victim arrives as rl.p.<n>.inspect.victim).
    let p = partition_of(victim, partitions);
    let forbidden = [
        (
            Verb::Inspect.client_subject(victim),
            Verb::Inspect.mapped_subject(p, victim),
        ),
        (
            Verb::Reset.client_subject(victim),
            Verb::Reset.mapped_subject(p, victim),
        ),
    ]
    .into_iter()
    .chain(
        [
            Verb::Reset.mapped_subject(p, victim),
            Verb::Inspect.mapped_subject(p, victim),
            "rl.w.t0.reset".to_string(),
            "rl.p.0.other".to_string(),
            "$KV.sluice-leases.p.0".to_string(),
            "$KV.sluice-snapshots.p.0".to_string(),
            "$KV.sluice-policies.default".to_string(),
            "sluice.journal.w.t0".to_string(),
            format!("$JS.API.STREAM.DELETE.{}", bucket_stream(LEASE_BUCKET)),
            "$JS.API.STREAM.PURGE.KV_sluice-snapshots".to_string(),
            format!("$JS.API.STREAM.INFO.{}", bucket_stream(LEASE_BUCKET)),
            "$JS.API.CONSUMER.CREATE.KV_sluice-leases".to_string(),
            "$SRV.PING.sluice-worker".to_string(),
        ]
        .into_iter()
        .map(|s| (s.clone(), s)),
    );
    for (sent, checked) in forbidden {
        client
            .publish(sent.clone(), Bytes::from_static(b"{}"))
            .await
            .unwrap();
        client.flush().await.unwrap();
        refused(&mut errors, "Publish", &checked).await;
    }

    // Subscriptions the server refuses: answering in a worker's place.
    for subject in ["rl.p.>", "rl.p.3.allow.*", "rl.w.t0.batch", "rl.>"] {
        let _sub = client.subscribe(subject).await.unwrap();
        client.flush().await.unwrap();
        refused(&mut errors, "Subscription", subject).await;
    }

    // A reply subject is the client's to choose, and the worker publishes
    // the reply: it must not write into leases, buckets or partitions.
    for reply in [
        "$KV.sluice-leases.p.0".to_string(),
        Verb::Reset.mapped_subject(p, victim),
        format!("$JS.API.STREAM.DELETE.{}", bucket_stream(LEASE_BUCKET)),
    ] {
        client
            .publish_with_reply(
                Verb::Allow.client_subject("other"),
                reply,
                Bytes::from_static(PEEK),
            )
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    // Asked after the injections, on the same subjects: answered after them.
    ask(&client, "other", PEEK).await.unwrap();

    // Nothing changed: the counts, the owners, the policies, the buckets.
    assert_eq!(ask(&admin, victim, PEEK).await.unwrap().remaining, 2);
    assert_eq!(stack.owners().await, owners);
    let js = jetstream::new(admin.clone());
    assert!(js.get_key_value(LEASE_BUCKET).await.is_ok());
    let mut policies = js
        .get_stream(bucket_stream(POLICY_BUCKET))
        .await
        .expect("the policy bucket is there");
    assert_eq!(
        policies.info().await.unwrap().state.messages,
        0,
        "no policy written"
    );
    let all: Vec<u32> = (0..partitions).collect();
    // Every manifest still reads (none was overwritten by a reply).
    stack.restored_snapshot_times(&all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_work_as_admin_and_are_refused_with_one_line_otherwise() {
    let _serial = serial().await;
    let stack = Stack::start_secured(SLUICE, &TestConfig::new().toml(), 1).await;
    let url = stack.nats.url();
    let config = stack.config_path().to_path_buf();

    let check = sluice_as(Role::Client, &["check", "carol", "--json"], &url, &config);
    assert!(check.status.success(), "{}", text(&check));

    for args in [
        &[
            "policy",
            "set",
            "strict",
            "--algorithm",
            "gcra",
            "--limit",
            "3/1m",
        ][..],
        &["policy", "list"],
        &["inspect", "carol"],
        &["reset", "carol"],
        &["status"],
    ] {
        let out = sluice_as(Role::Admin, args, &url, &config);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    let inspected = sluice_as(Role::Admin, &["inspect", "carol"], &url, &config);
    assert!(text(&inspected).contains("carol"), "{}", text(&inspected));

    // Threshold alerts (SPEC §14): workers publish them into their
    // stream as `worker`; clients and admins read them.
    let alerting = [
        "policy",
        "set",
        "alerting",
        "--algorithm",
        "fixed_window",
        "--limit",
        "2/1h",
        "--alert",
        "50",
    ];
    assert!(sluice_as(Role::Admin, &alerting, &url, &config)
        .status
        .success());
    eventually(Duration::from_secs(5), TICK, || async {
        let check = sluice_as(
            Role::Client,
            &["check", "dan", "--policy", "alerting"],
            &url,
            &config,
        );
        anyhow::ensure!(check.status.success(), "{}", text(&check));
        Ok(())
    })
    .await
    .unwrap();
    for role in [Role::Client, Role::Admin] {
        eventually(Duration::from_secs(10), TICK, || async {
            let out = sluice_as(role, &["alerts", "--policy", "alerting"], &url, &config);
            anyhow::ensure!(text(&out).contains("alerting  dan  50%"), "{}", text(&out));
            Ok(())
        })
        .await
        .unwrap();
    }

    let status = sluice_as(Role::Client, &["status"], &url, &config);
    let line = one_line_error(&status);
    assert!(line.contains("Permissions Violation"), "{line}");
    let reset = sluice_as(Role::Client, &["reset", "carol"], &url, &config);
    assert!(one_line_error(&reset).contains("Permissions Violation"));
    let set = sluice_as(
        Role::Client,
        &[
            "policy",
            "set",
            "x",
            "--algorithm",
            "gcra",
            "--limit",
            "1/1m",
        ],
        &url,
        &config,
    );
    assert!(!set.status.success(), "{}", text(&set));

    let wrong = Command::new(SLUICE)
        .args(["status", "--nats", &url, "--nats-user", "client"])
        .args(["--nats-password", "wrong"])
        .env("SLUICE_LOG", "off")
        .output()
        .unwrap();
    let line = one_line_error(&wrong);
    assert!(line.contains("authorization violation"), "{line}");
    let none = Command::new(SLUICE)
        .args(["status", "--nats", &url])
        .env("SLUICE_LOG", "off")
        .output()
        .unwrap();
    assert!(one_line_error(&none).contains("no credentials were given"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_gateways_and_commands_connect_over_mutual_tls_and_a_wrong_ca_is_one_line() {
    let _serial = serial().await;
    let ca = TestCa::new().unwrap();
    let other = TestCa::new().unwrap();
    let config = format!(
        "{}\n{}",
        sluice_core::nats_config::NatsServerConfig::new(8).render(),
        ca.nats_tls_block(true)
    );
    let nats = NatsServer::start(&config).unwrap();
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("sluice.toml");
    std::fs::write(&toml, "partitions = 8\nlease_ttl = \"2s\"\n").unwrap();
    let tls = |ca: &TestCa| {
        vec![
            "--nats-tls-ca".to_string(),
            ca.ca().display().to_string(),
            "--nats-tls-cert".to_string(),
            ca.client_cert().display().to_string(),
            "--nats-tls-key".to_string(),
            ca.client_key().display().to_string(),
        ]
    };
    let mut worker = Command::new(SLUICE);
    worker
        .args(["worker", "--nats", &url, "--config"])
        .arg(&toml)
        .args(tls(&ca));
    let log = dir.path().join("worker.log");
    let _worker = sluice_tests::ChildGuard::spawn_logged("tls-worker", worker, &log).unwrap();

    // `sluice check` over TLS, once the worker answers (it has just started).
    let checked = sluice_tests::eventually(Duration::from_secs(20), sluice_tests::TICK, || {
        let out = Command::new(SLUICE)
            .args(["check", "dave", "--cost", "0", "--nats", &url, "--config"])
            .arg(&toml)
            .args(tls(&ca))
            .env("SLUICE_LOG", "off")
            .output();
        async move {
            let out = out?;
            anyhow::ensure!(out.status.success(), "{}", text(&out));
            Ok(())
        }
    })
    .await;
    checked.unwrap_or_else(|e| {
        panic!(
            "{e:#}; worker log: {}",
            sluice_tests::tail_of_file(&log, 20)
        )
    });

    // The gateway connects over TLS too and answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gateway_config =
        sluice_core::config::Config::from_toml("partitions = 8\n", "gateway.toml").unwrap();
    let mut opts = sluice_gateway::GatewayOptions::new(url.clone(), gateway_config);
    opts.nats_auth = sluice_client::NatsAuth {
        tls_ca: Some(ca.ca().to_path_buf()),
        tls_cert: Some(ca.client_cert().to_path_buf()),
        tls_key: Some(ca.client_key().to_path_buf()),
        ..Default::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let gateway = tokio::spawn(sluice_gateway::serve(listener, opts, async move {
        let _ = stop_rx.await;
    }));
    let resp = reqwest::get(format!("http://{addr}/v1/allow/dave?cost=0"))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.text().await);
    let _ = stop_tx.send(());
    gateway.await.unwrap().expect("the gateway ran cleanly");

    let wrong = Command::new(SLUICE)
        .args(["status", "--nats", &url])
        .args(tls(&other))
        .env("SLUICE_LOG", "off")
        .output()
        .unwrap();
    let line = one_line_error(&wrong);
    assert!(line.contains("TLS"), "{line}");
    let plain = Command::new(SLUICE)
        .args(["status", "--nats", &url])
        .env("SLUICE_LOG", "off")
        .output()
        .unwrap();
    assert!(!plain.status.success(), "{}", text(&plain));
}
