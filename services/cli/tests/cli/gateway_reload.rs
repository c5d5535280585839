//! `sluice gateway --api-tokens FILE` reloaded on SIGHUP (docs/GATEWAY.md,
//! "API tokens"): a real gateway process and a connection opened before
//! the reload, kept open across it. The new token works after the
//! reload, the removed one gets 401, the old connection still answers,
//! and a file that is not valid leaves the tokens in force.

use crate::common;

use common::gateway::gateway_process;
use common::SLUICE;
use sluice_tests::{eventually, serial, ChildGuard, Signal, Stack, TestConfig};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn tokens(full: &str) -> String {
    format!(
        "[[token]]\nname = \"ops\"\nrole = \"full\"\ntoken = \"{full}\"\n\n\
         [[token]]\nname = \"viewers\"\nrole = \"read\"\ntoken = \"viewer\"\n"
    )
}

/// One `GET path` on an open HTTP/1.1 connection, which stays open; the status.
async fn get(conn: &mut BufReader<TcpStream>, path: &str, token: &str) -> u16 {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {token}\r\n\r\n");
    conn.get_mut().write_all(request.as_bytes()).await.unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).await.unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).await.unwrap();
    status.split(' ').nth(1).unwrap().parse().unwrap()
}

async fn status_of(url: &str, token: &str) -> u16 {
    let response = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await;
    response.map(|r| r.status().as_u16()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_puts_the_new_token_file_in_force_and_keeps_open_connections() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &TestConfig::new().toml(), 1).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.toml");
    std::fs::write(&file, tokens("old-full")).unwrap();
    let (mut cmd, listen) = gateway_process(&stack);
    cmd.arg("--api-tokens").arg(&file).env("SLUICE_LOG", "info");
    let log = dir.path().join("gateway.log");
    let mut gateway = ChildGuard::spawn_logged("gateway", cmd, &log).unwrap();
    let url = format!("http://{listen}/v1/policies");
    eventually(Duration::from_secs(10), Duration::from_millis(50), || {
        let url = url.clone();
        async move {
            match status_of(&url, "old-full").await {
                200 => Ok(()),
                s => Err(anyhow::anyhow!("status {s}")),
            }
        }
    })
    .await
    .expect("the gateway answers with the file's token");
    let mut open = BufReader::new(TcpStream::connect(&listen).await.unwrap());
    assert_eq!(get(&mut open, "/v1/policies", "old-full").await, 200);
    assert_eq!(status_of(&url, "viewer").await, 200, "a read token reads");
    assert_eq!(
        status_of(&format!("http://{listen}/v1/allow/alice"), "viewer").await,
        403,
        "a read token does not ask"
    );

    std::fs::write(&file, tokens("new-full")).unwrap();
    gateway.signal(Signal::SIGHUP).unwrap();
    eventually(Duration::from_secs(10), Duration::from_millis(20), || {
        let url = url.clone();
        async move {
            match status_of(&url, "new-full").await {
                200 => Ok(()),
                s => Err(anyhow::anyhow!("status {s}")),
            }
        }
    })
    .await
    .expect("the new token works after SIGHUP");
    assert_eq!(
        status_of(&url, "old-full").await,
        401,
        "the removed token is refused"
    );
    assert_eq!(
        get(&mut open, "/v1/policies", "new-full").await,
        200,
        "the open connection goes on"
    );
    assert_eq!(get(&mut open, "/v1/policies", "old-full").await, 401);

    std::fs::write(
        &file,
        "[[token]]\nname = \"x\"\nrole = \"admin\"\ntoken = \"y\"\n",
    )
    .unwrap();
    gateway.signal(Signal::SIGHUP).unwrap();
    eventually(Duration::from_secs(10), Duration::from_millis(20), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        async move {
            match text.contains("kept the API tokens in force") {
                true => Ok(()),
                false => Err(anyhow::anyhow!("no refusal logged yet")),
            }
        }
    })
    .await
    .expect("a bad file is refused with the reason");
    assert!(gateway.is_running(), "a bad file does not end the gateway");
    assert_eq!(
        status_of(&url, "new-full").await,
        200,
        "the tokens in force stay"
    );
    assert_eq!(get(&mut open, "/v1/policies", "new-full").await, 200);
    gateway.terminate().unwrap();
}
