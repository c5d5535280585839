//! The small commands: `check`, `status`, `nats-config` (its link TLS
//! loaded into nats-server), `--help` on every command and `--version`,
//! run as a user would run them.

use sluice_tests::{eventually, serial, Stack, TICK};
use std::process::{Command, Output};
use std::time::Duration;

/// The binary under test.
const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

const CONFIG: &str = r#"
partitions = 8
lease_ttl = "2s"

[policies.default]
algorithm = "fixed_window"
limits = [ { max = 2, per = "1h" } ]
"#;

fn sluice(args: &[&str], nats: &str, config: &std::path::Path) -> Output {
    Command::new(SLUICE)
        .args(args)
        .args(["--nats", nats])
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    sluice_tests::output_text(o)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_status_and_nats_config_work_against_a_running_stack() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 2).await;
    let config = stack.config_path().to_path_buf();
    let url = stack.nats.url();

    let first = sluice(&["check", "bob@example.com", "--json"], &url, &config);
    assert!(first.status.success(), "{}", text(&first));
    let reply: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(reply["allowed"], true);
    assert_eq!(reply["remaining"], 1);
    sluice(&["check", "bob@example.com"], &url, &config);
    let third = sluice(&["check", "bob@example.com"], &url, &config);
    assert!(
        third.status.success(),
        "a denial is a successful check: {}",
        text(&third)
    );
    assert!(
        String::from_utf8_lossy(&third.stdout).starts_with("denied"),
        "{}",
        text(&third)
    );

    let bad = sluice(&["check", "bob", "--policy", "nope"], &url, &config);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("nope"), "{}", text(&bad));

    let status = sluice(&["status", "--json"], &url, &config);
    assert!(status.status.success(), "{}", text(&status));
    let s: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(s["partitions"].as_array().unwrap().len(), 8);
    assert_eq!(s["unowned"].as_array().unwrap().len(), 0);
    assert_eq!(s["workers"].as_array().unwrap().len(), 2, "{s}");
    let decisions: u64 = s["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["allowed"].as_u64().unwrap() + w["denied"].as_u64().unwrap())
        .sum();
    assert!(decisions >= 3, "the three checks were counted: {s}");
    let table = sluice(&["status"], &url, &config);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("PARTITIONS (8, 0 unowned)"),
        "{}",
        text(&table)
    );

    // Transparent huge pages are off only while a worker takes partitions
    // over (worker_cmd.rs says why): every partition answers, so back on
    // once the takeover's bookkeeping is done (`sluice status` no longer
    // waits half a second, so it can ask before that: awaited, not assumed).
    for id in stack.worker_ids() {
        let path = format!("/proc/{}/status", stack.worker_pid(&id));
        eventually(Duration::from_secs(10), TICK, || async {
            let status = std::fs::read_to_string(&path)?;
            anyhow::ensure!(
                status.lines().any(|l| l == "THP_enabled:\t1"),
                "worker {id}: {status}"
            );
            Ok(())
        })
        .await
        .unwrap();
    }

    stack.stop_workers();
    let none = sluice(&["check", "bob"], &url, &config);
    assert!(!none.status.success());
    assert!(
        text(&none).contains("no sluice worker answered"),
        "{}",
        text(&none)
    );
}

#[test]
fn nats_config_prints_a_config_that_nats_server_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(SLUICE).args(["nats-config"]).output().unwrap();
    assert!(out.status.success());
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, &out.stdout).unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("partition(64,1)"));
    let check = Command::new(sluice_tests::nats_server_binary().unwrap())
        .args(["-t", "-c"])
        .arg(&conf)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check));
}

/// `nats-server -t` on the config `sluice nats-config` prints with `args`
/// (it loads the certificate files, so a wrong path fails too).
fn nats_server_accepts(args: &[&str]) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(SLUICE)
        .arg("nats-config")
        .args(args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(text(&out));
    }
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, &out.stdout).unwrap();
    let check = Command::new(sluice_tests::nats_server_binary().unwrap())
        .args(["-t", "-c"])
        .arg(&conf)
        .output()
        .unwrap();
    check
        .status
        .success()
        .then_some(())
        .ok_or_else(|| text(&check))
}

#[test]
fn the_link_over_tls_loads_into_nats_server_and_half_given_tls_is_refused() {
    let ca = sluice_tests::TestCa::new().unwrap();
    let path = |p: std::path::PathBuf| p.display().to_string();
    let (ca_file, server, server_key) =
        (path(ca.ca()), path(ca.server_cert()), path(ca.server_key()));
    let (client, client_key) = (path(ca.client_cert()), path(ca.client_key()));
    let east = [
        "--region",
        "east",
        "--link-listen",
        "127.0.0.1:7422",
        "--link-tls-cert",
        &server,
        "--link-tls-key",
        &server_key,
        "--link-tls-ca",
        &ca_file,
    ];
    nats_server_accepts(&east).unwrap();
    let west = [
        "--region",
        "west",
        "--link",
        "east=nats-leaf://127.0.0.1:7422",
        "--link-tls-cert",
        &client,
        "--link-tls-key",
        &client_key,
        "--link-tls-ca",
        &ca_file,
    ];
    nats_server_accepts(&west).unwrap();
    // nats-server reads the files: a certificate that is not there fails.
    let mut missing = west;
    missing[5] = "/nonexistent/west.pem";
    let err = nats_server_accepts(&missing).unwrap_err();
    assert!(err.contains("/nonexistent/west.pem"), "{err}");

    let refused = |args: &[&str], reason: &str| {
        let err = nats_server_accepts(args).unwrap_err();
        assert!(err.contains(reason), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    };
    refused(
        &west[..6],
        "give --link-tls-cert and --link-tls-key together",
    );
    refused(
        &[
            "--region",
            "east",
            "--link-listen",
            "127.0.0.1:7422",
            "--link-tls-ca",
            &ca_file,
        ],
        "--link-listen over TLS needs this server's certificate",
    );
    refused(
        &["--region", "east", "--link-tls-ca", &ca_file],
        "give --link-listen or --link too",
    );
    refused(&["--link-tls-ca", &ca_file], "need a region");
}

#[test]
fn every_command_has_help_and_a_bad_config_is_one_line_with_file_and_field() {
    for cmd in [
        "worker",
        "gateway",
        "dev",
        "check",
        "bench",
        "status",
        "nats-config",
    ] {
        let out = Command::new(SLUICE).args([cmd, "--help"]).output().unwrap();
        assert!(out.status.success(), "sluice {cmd} --help");
        assert!(!out.stdout.is_empty());
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "partitions = 0\n").unwrap();
    let out = Command::new(SLUICE)
        .args(["nats-config", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml") && err.contains("partitions"),
        "{err}"
    );
}

/// `--version` and `-V` name the release, the commit the binary was built
/// from and the stored formats it reads and writes (version.rs says why).
#[test]
fn version_names_the_release_the_commit_and_the_formats() {
    for flag in ["--version", "-V"] {
        let out = Command::new(SLUICE).arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag}: {}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines();
        let first = lines.next().unwrap_or_default();
        let commit = first
            .strip_prefix("sluice 0.2.0 (commit ")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{flag}: {stdout}"));
        assert!(
            commit == "unknown"
                || (commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit())),
            "{flag}: {stdout}"
        );
        let formats = lines
            .next()
            .and_then(|l| l.strip_prefix("formats: "))
            .unwrap_or_else(|| panic!("{flag}: {stdout}"));
        let journal = format!("journal {}", sluice_core::format::JOURNAL);
        assert!(
            formats.split(", ").any(|f| f == journal),
            "{flag}: {stdout}"
        );
    }
}

/// A report piped into a reader that went away (`sluice nats-config |
/// head -1`) ends quietly, as `cat` would: killed by SIGPIPE, not a panic
/// on the failed write.
#[test]
fn a_report_into_a_closed_pipe_ends_without_a_panic() {
    use std::os::unix::process::ExitStatusExt as _;
    let mut child = Command::new(SLUICE)
        .args(["nats-config"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the report is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        out.status.success() || out.status.signal() == Some(13),
        "{:?}: {stderr}",
        out.status
    );
}

/// `--log-format json`: every line a worker logs is one JSON object with
/// the fields its text line has (the message, the worker, its partitions),
/// beside the time, the level and the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_logs_json_lines_with_the_fields_of_its_text_lines() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 1).await;
    stack.start_workers_with(1, &["--log-format", "json"]).await;
    let text = stack.worker_log("t0");
    let started = text
        .lines()
        .find(|l| l.contains("worker started"))
        .unwrap_or_else(|| panic!("the text log says it started:\n{text}"));
    for field in ["worker", "partitions"] {
        assert!(started.contains(field), "{started}");
    }
    let json = stack.worker_log("t1");
    let events: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    assert!(events.len() > 2, "{json}");
    let started = events
        .iter()
        .find(|e| e["message"] == "worker started")
        .unwrap_or_else(|| panic!("the JSON log says it started:\n{json}"));
    assert_eq!(started["worker"], "t1");
    assert_eq!(started["partitions"], 8);
    assert_eq!(started["level"], "INFO");
    assert_eq!(started["target"], "sluice_worker::worker");
    assert!(started["timestamp"].is_string(), "{started}");
}
