//! The HTTP gateway served from the test process, and the `reqwest` calls
//! made to it: what `gateway.rs`, `gateway_proxy.rs` and
//! `gateway_security.rs` share; and the gateway as a process of its own,
//! for the tests that signal or trace it (`gateway_reload.rs`, `traces.rs`).

use super::SLUICE;
use axum::http::StatusCode;
use serde_json::Value;
use sluice_core::config::{Config, Fallback};
use sluice_gateway::{GatewayOptions, Url};
use sluice_tests::{Stack, TestConfig};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// `sluice gateway` as its own process on `stack`, without its dashboard,
/// listening on a free loopback port; the command (to add flags to) and
/// the address.
pub fn gateway_process(stack: &Stack) -> (std::process::Command, String) {
    let port = sluice_tests::free_ports(1).expect("a free port")[0];
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = std::process::Command::new(SLUICE);
    cmd.args([
        "gateway",
        "--nats",
        &stack.nats.url(),
        "--listen",
        &listen,
        "--no-ui",
    ])
    .arg("--config")
    .arg(stack.config_path());
    (cmd, listen)
}

/// A stack of two workers with the [`TestConfig`].
pub async fn stack() -> Stack {
    Stack::start(SLUICE, &TestConfig::new().toml(), 2).await
}

pub fn config(fallback: Fallback) -> Config {
    let mut c = TestConfig::new().config();
    c.fallback = fallback;
    c
}

/// A gateway served from this process; stopped (gracefully) on drop.
pub struct Gateway {
    pub addr: SocketAddr,
    base: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Gateway {
    pub async fn start(nats_url: &str, config: Config, upstream: Option<Url>) -> Gateway {
        let mut opts = GatewayOptions::new(nats_url, config);
        opts.upstream = upstream;
        Gateway::start_with(opts).await
    }

    pub async fn start_with(mut opts: GatewayOptions) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        opts.timeout = Duration::from_secs(2);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice_gateway::serve(listener, opts, async move {
            let _ = rx.await;
        }));
        Gateway {
            addr,
            base: format!("http://{addr}"),
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the gateway stops")
            .unwrap()
            .expect("the gateway ran cleanly");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Status, headers and JSON body.
pub async fn call(req: reqwest::RequestBuilder) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let resp = req.send().await.expect("the gateway answers");
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.unwrap();
    let json = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("a JSON body ({e}): {}", String::from_utf8_lossy(&body)));
    (status, headers, json)
}

pub fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}
