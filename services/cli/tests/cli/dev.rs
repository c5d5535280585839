//! `sluice dev`: starts everything with the example policies, answers over
//! HTTP, and on SIGINT leaves no process and no temporary directory behind.

use sluice_tests::{eventually, nats_server_binary, serial, ChildGuard, Signal};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A bare HTTP/1.0 GET; returns the status code.
fn http_status(port: u16, path: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    buf.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP reply: {buf:?}")))
}

fn banner_value(log: &str, label: &str) -> Option<String> {
    log.lines()
        .find(|l| l.trim_start().starts_with(label))
        .map(|l| l.trim_start()[label.len()..].trim().to_string())
}

#[tokio::test]
async fn sluice_dev_answers_and_sigint_leaves_nothing_behind() {
    let _serial = serial().await;
    let (nats_port, http_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args([
        "dev",
        "--workers",
        "2",
        "--nats-port",
        &nats_port.to_string(),
    ])
    .args(["--listen", &format!("127.0.0.1:{http_port}")])
    .env("SLUICE_NATS_SERVER", nats_server_binary().unwrap());
    let log = dir.path().join("dev.log");
    let mut dev = ChildGuard::spawn_logged("sluice-dev", cmd, &log).unwrap();

    // The banner comes once the workers answer every partition.
    eventually(
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            match std::fs::read_to_string(&log) {
                Ok(t) if t.contains("Ctrl-C stops everything.") => Ok(()),
                _ => Err(anyhow::anyhow!("no banner yet")),
            }
        },
    )
    .await
    .unwrap();
    // 15 per second by default: 15 × 200, then 429.
    let codes: Vec<u16> = (0..16)
        .map(|_| http_status(http_port, "/v1/allow/alice").unwrap())
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == 200).count(), 15, "{codes:?}");
    assert_eq!(codes[15], 429, "{codes:?}");
    // Without --config, the example policies of config/sluice.toml
    // are there, so the documentation's examples run as written.
    for policy in ["login", "burst"] {
        let path = format!("/v1/allow/alice?policy={policy}");
        assert_eq!(http_status(http_port, &path).unwrap(), 200, "{path}");
    }
    assert_eq!(
        http_status(http_port, "/v1/allow/alice?policy=nope").unwrap(),
        404
    );

    let text = std::fs::read_to_string(&log).unwrap();
    let nats_pid: i32 = banner_value(&text, "nats-server")
        .and_then(|v| {
            v.split("pid ")
                .nth(1)
                .and_then(|p| p.split(',').next())
                .and_then(|p| p.parse().ok())
        })
        .expect("the banner names the nats-server pid");
    let data_dir = banner_value(&text, "data")
        .and_then(|v| v.split_whitespace().next().map(String::from))
        .expect("the banner names the data dir");
    assert!(std::path::Path::new(&data_dir).exists());

    dev.signal(Signal::SIGINT).unwrap();
    let status = dev
        .wait_within(Duration::from_secs(30))
        .unwrap()
        .expect("sluice dev exits on SIGINT");
    assert!(status.success(), "{status:?}\n{}", dev.log_tail(20));
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(nats_pid), None).is_ok();
    assert!(!alive, "nats-server (pid {nats_pid}) is still running");
    assert!(
        !std::path::Path::new(&data_dir).exists(),
        "{data_dir} was left behind"
    );
}
