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
use sluice_core::subject::probe;
use std::time::Duration;

pub async fn check_mapping(client: &async_nats::Client, partitions: u32) -> Result<()> {
    let nonce = format!(
        "{:x}",
        std::process::id() as u64
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos() as u64)
    );
    let keys = probe::keys("_sluice-probe", &nonce);
    let mut mapped = futures::stream::select_all(Vec::new());
    let mut unmapped = futures::stream::select_all(Vec::new());
    for key in &keys {
        mapped.push(client.subscribe(probe::arrival_subject(key)).await?);
        unmapped.push(client.subscribe(probe::send_subject(key)).await?);
    }
    client.flush().await?;
    for key in &keys {
        client
            .publish(probe::send_subject(key), bytes::Bytes::new())
            .await?;
    }
    client.flush().await?;

    let deadline = tokio::time::sleep(Duration::from_secs(2));
    tokio::pin!(deadline);
    let mut seen = 0;
    while seen < keys.len() {
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
                if let Err(m) = probe::check(msg.subject.as_str(), partitions) {
                    bail!(
                        "the NATS server maps keys onto a different number of partitions than this worker \
                         (partitions = {partitions}): key {} arrived on partition {} but belongs to {}; \
                         make `partitions` in the sluice config match the server, or regenerate the server config \
                         with `sluice nats-config` and reload it",
                        m.key,
                        m.arrived.map_or_else(|| "?".to_string(), |p| p.to_string()),
                        m.expected
                    );
                }
                seen += 1;
            }
        }
    }
    Ok(())
}
