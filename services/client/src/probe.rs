//! The startup check that the client's partition count matches the server's.
//!
//! Batches go straight to `rl.p.<n>.batch` with `n` computed by the client,
//! bypassing the server's mapping. If the client's `partitions` differed from
//! the server's `partition(N,1)`, batches would reach workers that do not own
//! their keys (the workers answer those items 503 and the client re-asks
//! them alone, so limits still hold, but batching would be wasted).
//!
//! The check asks the server itself: it subscribes to `rl.p.*.allow.<probe>`
//! for a few fixed probe keys (the only partition subjects the `client` role
//! may subscribe to), publishes `rl.allow.<probe>` *without* a reply
//! subject (workers ignore such messages, so nothing is counted), and
//! compares the partition each one arrived on with its own computation. Eight
//! probes catch a wrong count with probability at least 1 - 2^-8; the check
//! costs about one round trip.

use crate::error::ConnectError;
use bytes::Bytes;
use futures::StreamExt;
use sluice_core::subject::probe;
use std::time::Duration;

const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) async fn check_partitions(
    nats: &async_nats::Client,
    partitions: u32,
) -> Result<(), ConnectError> {
    let fail = |m: String| ConnectError::Partitions(m);
    // Fixed keys: the `client` role may subscribe to their arrival
    // subjects only (see `probe::client_keys`).
    let keys = probe::client_keys();
    let mut subs = Vec::with_capacity(keys.len());
    for key in &keys {
        let sub = nats
            .subscribe(probe::arrival_subject(key))
            .await
            .map_err(|e| fail(format!("partition check: cannot subscribe: {e}")))?;
        subs.push(sub);
    }
    nats.flush()
        .await
        .map_err(|e| fail(format!("partition check: cannot flush: {e}")))?;
    for key in &keys {
        nats.publish(probe::send_subject(key), Bytes::new())
            .await
            .map_err(|e| fail(format!("partition check: cannot publish: {e}")))?;
    }
    let mut arrivals = futures::stream::select_all(subs);
    let deadline = tokio::time::Instant::now() + PROBE_TIMEOUT;
    for _ in 0..keys.len() {
        let msg = match tokio::time::timeout_at(deadline, arrivals.next()).await {
            Ok(Some(msg)) => msg,
            Ok(None) | Err(_) => {
                return Err(fail(format!(
                    "partition check: a probe published on rl.allow.<key> did not arrive on any \
                     rl.p.*.allow.<key> subject within {PROBE_TIMEOUT:?}: the NATS server lacks \
                     sluice's partition mapping (run it with the config `sluice nats-config` prints), \
                     or turn ClientOptions::check_partitions off"
                )))
            }
        };
        if let Err(m) = probe::check(msg.subject.as_str(), partitions) {
            return Err(fail(format!(
                "partition check: the NATS server maps key {} to partition {}, but with \
                 partitions = {partitions} the client computes {}; set \
                 ClientOptions::partitions to the workers' `partitions` (the N of the server's \
                 partition(N,1) mapping)",
                m.key,
                m.arrived.map_or_else(|| "?".to_string(), |p| p.to_string()),
                m.expected
            )));
        }
    }
    Ok(())
}
