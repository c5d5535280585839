//! A stack and connected `sluice-client`s with the options these tests
//! use: what `client.rs`, `client_round_trips.rs` and `client_failover.rs`
//! share.

use super::SLUICE;
use sluice_client::{Client, ClientOptions, Error, Fallback};
use sluice_tests::{Stack, TestConfig};
use std::sync::Arc;
use std::time::Duration;

/// A stack of `workers` workers with the [`TestConfig`].
pub async fn stack(workers: usize) -> Stack {
    Stack::start(SLUICE, &TestConfig::new().toml(), workers).await
}

pub fn options(fallback: Fallback) -> ClientOptions {
    ClientOptions::from_config(&TestConfig::new().config())
        .fallback(fallback)
        .timeout(Duration::from_secs(2))
}

pub async fn client(stack: &Stack, fallback: Fallback) -> Client {
    Client::connect_with(&stack.nats.url(), options(fallback))
        .await
        .expect("the client connects")
}

/// Asks `keys` all at once through `client`; the answers in key order.
pub async fn ask_all(
    client: &Client,
    keys: &[String],
) -> Vec<Result<sluice_client::Answer, Error>> {
    let start = Arc::new(tokio::sync::Barrier::new(keys.len()));
    let tasks: Vec<_> = keys
        .iter()
        .map(|key| {
            let (client, key, start) = (client.clone(), key.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                client.allow(&key).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    answers
}
