//! Live policies (SPEC §7) against real workers: `sluice policy` writes
//! the `sluice-policies` bucket, every worker puts a change in force within
//! a second, counts are kept, and a value that is not valid is refused.

use sluice_core::storage::{bucket_stream, POLICY_BUCKET, POLICY_HISTORY};
use sluice_tests::{ask, eventually, serial, AskError, Stack, TestConfig};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// Well above the 1 s a change takes (measured and printed below), so a
/// loaded CI machine does not make the test flaky.
const IN_FORCE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(10);

/// `sluice policy set gate` as a fixed window of `limit` (`MAX/PER`).
fn set_gate(stack: &Stack, limit: &str) {
    stack.set_policy("gate", "fixed_window", limit);
}

/// Waits until every key peeks as `want` says; returns how long it took.
async fn until_every_key(
    client: &async_nats::Client,
    keys: &[String],
    body: &[u8],
    want: impl Fn(&Result<sluice_core::wire::DecisionReply, AskError>) -> bool,
) -> Duration {
    let started = Instant::now();
    for key in keys {
        eventually(IN_FORCE, POLL, || async {
            let got = ask(client, key, body).await;
            anyhow::ensure!(want(&got), "not yet: {got:?}");
            Ok(())
        })
        .await
        .unwrap_or_else(|e| panic!("{key}: {e:#}"));
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_set_lowered_raised_refused_and_removed_is_in_force_on_every_worker() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &TestConfig::new().toml(), 2).await;
    let client = stack.clients(1).await.remove(0);
    let keys = stack.a_key_per_worker().await;
    assert_eq!(keys.len(), 2, "one key on each worker");
    let gate = br#"{"policy":"gate"}"#;
    let peek = br#"{"policy":"gate","cost":0}"#;

    // A new policy: unknown (404) until the workers have it.
    set_gate(&stack, "100/1m");
    let took = until_every_key(&client, &keys, peek, |d| {
        d.as_ref().is_ok_and(|d| d.limit == 100)
    })
    .await;
    println!("a new policy was in force on both workers after {took:?}");
    for key in &keys {
        for _ in 0..5 {
            assert!(ask(&client, key, gate).await.unwrap().allowed);
        }
    }

    // Lowered below what was counted: the counts stay, so it denies.
    set_gate(&stack, "3/1m");
    let took = until_every_key(&client, &keys, peek, |d| {
        d.as_ref().is_ok_and(|d| d.limit == 3 && !d.allowed)
    })
    .await;
    println!("lowered: in force on both workers after {took:?}");
    // Raised again: what was counted is still there.
    set_gate(&stack, "100/1m");
    until_every_key(&client, &keys, peek, |d| {
        d.as_ref()
            .is_ok_and(|d| d.limit == 100 && d.remaining == 95)
    })
    .await;

    // Invalid values written by another NATS client are refused: the
    // previous version stays in force and `sluice status` says why.
    let js = async_nats::jetstream::new(client.clone());
    let bucket = js.get_key_value(POLICY_BUCKET).await.unwrap();
    bucket.put("gate", "{not json".into()).await.unwrap();
    eventually(IN_FORCE, POLL, || async {
        let status = stack.run(&["status", "--json"]);
        anyhow::ensure!(
            status.matches("invalid JSON").count() >= 2,
            "not refused by both workers yet: {status}"
        );
        Ok(())
    })
    .await
    .unwrap();
    for key in &keys {
        let d = ask(&client, key, peek).await.unwrap();
        assert_eq!((d.limit, d.remaining), (100, 95), "the previous version");
    }
    // The command refuses it before writing anything.
    let out = stack.command(&[
        "policy",
        "set",
        "gate",
        "--algorithm",
        "gcra",
        "--limit",
        "0/1m",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("limits[0].max"));
    let out = stack.command(&["policy", "rm", "default"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be removed"));

    // Removed: unknown again.
    stack.run(&["policy", "rm", "gate"]);
    until_every_key(
        &client,
        &keys,
        peek,
        |d| matches!(d, Err(AskError::Reply(e)) if e.code.status() == 404),
    )
    .await;
    let listed = stack.run(&["policy", "list"]);
    assert!(
        listed.contains("default") && !listed.contains("gate"),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_changes_one_key_blocks_it_at_zero_and_unoverride_restores_it() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &TestConfig::new().toml(), 2).await;
    let client = stack.clients(1).await.remove(0);
    set_gate(&stack, "100/1m");
    // bob@x.io as the key token clients send; carol is not overridden.
    let bob = vec!["bob%40x%2Eio".to_string()];
    let carol = vec!["carol".to_string()];
    let peek = br#"{"policy":"gate","cost":0}"#;
    let gate = br#"{"policy":"gate"}"#;
    until_every_key(&client, &carol, peek, |d| {
        d.as_ref().is_ok_and(|d| d.limit == 100)
    })
    .await;

    stack.run(&["policy", "override", "gate", "bob@x.io", "--limit", "2/1m"]);
    until_every_key(&client, &bob, peek, |d| {
        d.as_ref().is_ok_and(|d| d.limit == 2)
    })
    .await;
    assert!(ask(&client, &bob[0], gate).await.unwrap().allowed);
    assert!(ask(&client, &bob[0], gate).await.unwrap().allowed);
    assert!(!ask(&client, &bob[0], gate).await.unwrap().allowed);
    let d = ask(&client, &carol[0], gate).await.unwrap();
    assert!(
        d.allowed && d.limit == 100,
        "carol is not overridden: {d:?}"
    );

    // max = 0 blocks the key; inspect shows the override.
    stack.run(&["policy", "override", "gate", "bob@x.io", "--limit", "0/1m"]);
    until_every_key(&client, &bob, peek, |d| {
        d.as_ref().is_ok_and(|d| d.limit == 0 && !d.allowed)
    })
    .await;
    let shown = stack.run(&["inspect", "bob@x.io", "--policy", "gate", "--json"]);
    assert!(shown.contains(r#""override":{"blocked":true}"#), "{shown}");

    // Removed: the policy's limits again, with what bob used.
    stack.run(&["policy", "unoverride", "gate", "bob@x.io"]);
    until_every_key(&client, &bob, peek, |d| {
        d.as_ref()
            .is_ok_and(|d| d.limit == 100 && d.remaining == 98)
    })
    .await;
    // An override of a policy that is not in force is refused.
    let out = stack.command(&["policy", "override", "nope", "bob", "--limit", "1/1m"]);
    assert!(!out.status.success());
}

/// A reader that starts after an invalid value was written has no
/// previous version of its own; it finds the newest valid one in the key's
/// history, as every reader that saw it has in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_and_a_client_started_after_an_invalid_value_use_the_valid_one_before_it() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &TestConfig::new().toml(), 1).await;
    let nats = stack.clients(1).await.remove(0);
    let peek = br#"{"policy":"hlive","cost":0}"#;
    stack.set_policy("hlive", "fixed_window", "5/1h");
    let key = vec!["cold".to_string()];
    until_every_key(&nats, &key, peek, |d| {
        d.as_ref().is_ok_and(|d| d.limit == 5)
    })
    .await;
    let bucket = async_nats::jetstream::new(nats.clone())
        .get_key_value(POLICY_BUCKET)
        .await
        .unwrap();
    let invalid = r#"{"algorithm":"no_such_algorithm","limits":[{"max":1000,"per":"1h"}]}"#;
    bucket.put("hlive", invalid.into()).await.unwrap();
    stack.stop_workers();
    // As an older worker made the bucket: 5 values per key.
    let js = async_nats::jetstream::new(nats.clone());
    let mut stream = js.get_stream(bucket_stream(POLICY_BUCKET)).await.unwrap();
    let mut config = stream.info().await.unwrap().config.clone();
    config.max_messages_per_subject = 5;
    js.update_stream(&config).await.unwrap();

    // A client following the bucket, with no worker: its `local` fallback.
    let mut opts = sluice_client::ClientOptions::from_config(&TestConfig::new().config())
        .fallback(sluice_client::Fallback::Local)
        .timeout(Duration::from_secs(2));
    opts.follow_policies = true;
    let client = sluice_client::Client::connect_with(&stack.nats.url(), opts)
        .await
        .unwrap();
    eventually(IN_FORCE, POLL, || async {
        let d = client.ask("cold", "hlive", 0).await?;
        anyhow::ensure!(d.limit == 5, "not the previous version: {d:?}");
        Ok(())
    })
    .await
    .expect("the client's fallback decides under the valid value before the invalid one");

    // A worker started now: it answers under that value and says why.
    stack.start_workers(1).await;
    let d = ask(&nats, "cold", peek).await.expect("hlive is in force");
    assert_eq!(d.limit, 5, "the previous valid version");
    let status = stack.run(&["status"]);
    assert!(
        status.contains("refused policy value \"hlive\"") && status.contains("no_such_algorithm"),
        "{status}"
    );
    let kept = stream.info().await.unwrap().config.max_messages_per_subject;
    assert_eq!(
        kept, POLICY_HISTORY,
        "the worker raised the bucket's history"
    );
}

/// `sluice policy list` and `get` show what the workers hold in force, with
/// where each policy comes from: the command runs without the workers'
/// config file (`Stack::command` passes none), yet lists the file's
/// policy, and a policy set in the bucket shows as soon as it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_list_shows_what_the_workers_hold_in_force_and_where_it_comes_from() {
    let _serial = serial().await;
    let config = format!(
        "{}\n[policies.filed]\nalgorithm = \"sliding_log\"\nlimits = [ {{ max = 7, per = \"1m\" }} ]\n",
        TestConfig::new().toml()
    );
    let stack = Stack::start(SLUICE, &config, 2).await;
    set_gate(&stack, "40/1m");
    // Right after the write: the command waits for the workers to apply it.
    let listed = stack.run(&["policy", "list"]);
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} is listed: {listed}"))
            .to_string()
    };
    assert_eq!(line("filed").split_whitespace().nth(1), Some("config"));
    assert_eq!(line("gate").split_whitespace().nth(1), Some("bucket"));
    assert_eq!(line("default").split_whitespace().nth(1), Some("config"));
    assert!(line("gate").contains(r#""max":40"#), "{listed}");
    let out = stack.command(&["policy", "get", "filed"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(r#""max":7"#), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("from the config"));
    let out = stack.command(&["policy", "get", "nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no policy named \"nope\""));
}

/// The bucket's keys that hold a value, with it.
async fn bucket_values(stack: &Stack) -> std::collections::BTreeMap<String, String> {
    use futures::StreamExt;
    let client = stack.clients(1).await.remove(0);
    let bucket = async_nats::jetstream::new(client)
        .get_key_value(POLICY_BUCKET)
        .await
        .unwrap();
    let mut values = std::collections::BTreeMap::new();
    let mut keys = bucket.keys().await.unwrap();
    while let Some(key) = keys.next().await {
        let key = key.unwrap();
        if let Some(v) = bucket.get(&key).await.unwrap() {
            values.insert(key, String::from_utf8_lossy(&v).into_owned());
        }
    }
    values
}

/// `sluice policy export` prints the bucket's live policies and overrides
/// as TOML that `sluice policy apply` takes back unchanged: emptied, then
/// given the file, the bucket holds the same keys, the workers the same
/// policies, and a second export is the same text (docs/CONFIG.md, "Export
/// and apply").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_export_prints_what_policy_apply_takes_back_unchanged() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &TestConfig::new().toml(), 1).await;
    for args in [
        &[
            "login",
            "--algorithm",
            "sliding_log",
            "--limit",
            "10/1m",
            "--limit",
            "500/1h",
        ][..],
        &[
            "monthly",
            "--algorithm",
            "fixed_window",
            "--limit",
            "100000/month",
            "--tz",
            "Europe/Paris",
            "--alert",
            "80",
            "--alert",
            "100",
        ],
        &[
            "hot",
            "--algorithm",
            "token_bucket",
            "--limit",
            "100/1s:200",
            "--local-budget",
        ],
        &[
            "quiet",
            "--algorithm",
            "gcra",
            "--limit",
            "5/1s",
            "--mode",
            "shadow",
        ],
    ] {
        stack.run(&[&["policy", "set"][..], args].concat());
    }
    stack.run(&[
        "policy", "override", "login", "bob@x.io", "--limit", "100/1m",
    ]);
    stack.run(&["policy", "override", "login", "mallory", "--limit", "0/1m"]);
    let exported = stack.run(&["policy", "export"]);
    for part in [
        "[policies.login]",
        "[policies.monthly]",
        "tz = \"Europe/Paris\"",
        "[overrides.login",
        "bob%40x%2Eio",
    ] {
        assert!(exported.contains(part), "{part} is exported:\n{exported}");
    }
    let listed = stack.run(&["policy", "list"]);
    let keys: Vec<String> = bucket_values(&stack).await.into_keys().collect();
    assert_eq!(keys.len(), 6, "{keys:?}");

    for policy in ["login", "monthly", "hot", "quiet"] {
        stack.run(&["policy", "rm", policy]);
    }
    for key in ["bob@x.io", "mallory"] {
        stack.run(&["policy", "unoverride", "login", key]);
    }
    assert!(bucket_values(&stack).await.is_empty());
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &exported).unwrap();
    stack.run(&["policy", "apply", file.path().to_str().unwrap()]);

    let again: Vec<String> = bucket_values(&stack).await.into_keys().collect();
    assert_eq!(again, keys, "the bucket holds the same keys again");
    assert_eq!(stack.run(&["policy", "export"]), exported);
    assert_eq!(stack.run(&["policy", "list"]), listed);
}
