//! Start-up check that the NATS server partitions keys the way this worker
//! expects.
//!
//! Workers subscribe to per-partition subjects (`rl.p.<n>.allow.*`); the
//! server's subject mapping decides which partition a key lands in. If the
//! mapping is missing, requests never reach a worker; if the server uses
//! another partition count, keys land in partitions whose owner counts them
//! apart from their other requests, and limits silently stop holding. So the
//! worker publishes a few probe keys through the mapping, sees where they
//! arrive, and refuses to run unless every one lands where
//! [`sluice_core::partition`] says it must.
//!
//! Probes are published without a reply subject, which workers ignore on
//! `rl.allow`, so they never count.

use anyhow::{bail, Result};
use futures::StreamExt;
use sluice_core::partition::partition_of;
use std::time::Duration;

const PROBES: usize = 8;

pub async fn check_mapping(client: &async_nats::Client, partitions: u32) -> Result<()> {
    let nonce = format!(
        "{:x}",
        std::process::id() as u64
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos() as u64)
    );
    let keys: Vec<String> = (0..PROBES)
        .map(|i| format!("_sluice-probe-{nonce}-{i}"))
        .collect();
    let mut mapped = futures::stream::select_all(Vec::new());
    let mut unmapped = futures::stream::select_all(Vec::new());
    for key in &keys {
        mapped.push(client.subscribe(format!("rl.p.*.allow.{key}")).await?);
        unmapped.push(client.subscribe(format!("rl.allow.{key}")).await?);
    }
    client.flush().await?;
    for key in &keys {
        client
            .publish(format!("rl.allow.{key}"), bytes::Bytes::new())
            .await?;
    }
    client.flush().await?;

    let deadline = tokio::time::sleep(Duration::from_secs(2));
    tokio::pin!(deadline);
    let mut seen = 0;
    while seen < PROBES {
        tokio::select! {
            _ = &mut deadline => bail!(
                "no answer to the partition mapping probe from the NATS server within 2 s; \
                 start nats-server with the config printed by `sluice nats-config`"
            ),
            Some(_) = unmapped.next() => bail!(
                "the NATS server has no partition mapping for rl.allow.*: requests would never reach a worker; \
                 start nats-server with the config printed by `sluice nats-config` (partitions = {partitions})"
            ),
            Some(msg) = mapped.next() => {
                let mut tokens = msg.subject.split('.');
                let got = tokens.nth(2).and_then(|p| p.parse::<u32>().ok());
                let key = msg.subject.rsplit('.').next().unwrap_or_default();
                let want = partition_of(key, partitions);
                if got != Some(want) {
                    bail!(
                        "the NATS server maps keys onto a different number of partitions than this worker \
                         (partitions = {partitions}): key {key} arrived on partition {} but belongs to {want}; \
                         make `partitions` in the sluice config match the server, or regenerate the server config \
                         with `sluice nats-config` and reload it",
                        got.map(|g| g.to_string()).unwrap_or_else(|| "?".into())
                    );
                }
                seen += 1;
            }
        }
    }
    Ok(())
}
