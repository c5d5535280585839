//! Waiting until every partition answers: before a load (so a run does not
//! measure a stack that is still starting), and to time a restore after a
//! crash (`--requests 0`).

use anyhow::{bail, Result};
use async_nats::client::RequestErrorKind;
use futures::future::join_all;
use sluice_core::partition::partition_of;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::Verb;
use sluice_core::wire::hold::{encode_hold_request, HoldAsk};
use sluice_core::wire::{self, Encoding, ErrorCode, Reply, SERVICE_ERROR, SERVICE_ERROR_CODE};
use std::time::{Duration, Instant};

/// A key token of each partition (`ready-<i>`), by partition; with more
/// than one level, the same token once per level (`ready-<i>.ready-<i>`,
/// a grouped key of the partition of its first token, SPEC §17).
pub fn probe_keys(partitions: u32, levels: usize) -> Vec<String> {
    let mut keys = vec![None; partitions as usize];
    let mut left = partitions;
    let mut i = 0u64;
    while left > 0 {
        let k = format!("ready-{i}");
        let p = partition_of(&k, partitions) as usize;
        if keys[p].is_none() {
            keys[p] = Some(k);
            left -= 1;
        }
        i += 1;
    }
    keys.into_iter()
        .map(|k| vec![k.expect("filled"); levels.max(1)].join("."))
        .collect()
}

/// A hold nobody holds: settling it is a 404 `unknown_hold` from the
/// key's owner, and changes nothing.
const NO_HOLD: &str = "00000000000000000000000000000000";

/// Asks every partition (cost 0, so nothing is consumed) until each has
/// given a decision; returns how long that took. A 503 or no responders
/// means "not yet"; any other error reply (say, an unknown policy) is fatal.
/// With `holds` (a policy that may refuse `rl.allow`, e.g. one of only
/// `concurrency`) each is asked to settle a hold it does not have instead,
/// and its `unknown_hold` is the answer awaited.
pub async fn wait_ready(
    url: &str,
    auth: &sluice_client::NatsAuth,
    (partitions, levels): (u32, usize),
    policy: &str,
    holds: bool,
    timeout: Duration,
) -> Result<Duration> {
    let started = Instant::now();
    let client = auth.connect_named(url, "sluice-bench-ready").await?;
    let (verb, body) = if holds {
        let ask = HoldAsk {
            policy: Some(policy),
            cost: Some(0),
            ttl_ms: None,
            hold: Some(NO_HOLD),
            id: None,
            wait_ms: None,
        };
        (Verb::Settle, encode_hold_request(&ask, Encoding::MsgPack))
    } else {
        let body = wire::encode_request(
            (policy != DEFAULT_POLICY).then_some(policy),
            Some(0),
            Encoding::MsgPack,
        );
        (Verb::Allow, body)
    };
    let body = bytes::Bytes::from(body);
    let mut pending: Vec<(u32, String)> = probe_keys(partitions, levels)
        .into_iter()
        .enumerate()
        .map(|(p, k)| (p as u32, k))
        .collect();
    let mut last_problem = String::new();
    loop {
        let asks = pending.iter().map(|(_, key)| {
            let req = async_nats::Request::new()
                .payload(body.clone())
                .timeout(Some(Duration::from_millis(500)));
            client.send_request(verb.client_subject(key), req)
        });
        let results = join_all(asks).await;
        let mut still = Vec::new();
        for ((p, key), result) in pending.into_iter().zip(results) {
            match result {
                Ok(msg) => {
                    let headers = msg.headers.as_ref();
                    match headers.and_then(|h| h.get(SERVICE_ERROR_CODE)) {
                        None => {}
                        Some(_) if holds && is_unknown_hold(&msg.payload) => {}
                        Some(code) if code.as_str() == "503" => {
                            last_problem = format!("partition {p} answers 503");
                            still.push((p, key));
                        }
                        Some(code) => {
                            let why = headers
                                .and_then(|h| h.get(SERVICE_ERROR))
                                .map(|v| v.as_str().to_string())
                                .unwrap_or_default();
                            bail!("partition {p} answered error {}: {why}", code.as_str());
                        }
                    }
                }
                Err(e) => {
                    last_problem = match e.kind() {
                        RequestErrorKind::NoResponders => {
                            format!("no responders for partition {p}")
                        }
                        RequestErrorKind::TimedOut => format!("partition {p} timed out"),
                        _ => format!("partition {p}: {e}"),
                    };
                    still.push((p, key));
                }
            }
        }
        pending = still;
        if pending.is_empty() {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= timeout {
            bail!(
                "{} of {partitions} partitions still do not answer after {:.1} s ({last_problem}); are the workers running with the same config?",
                pending.len(),
                timeout.as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn is_unknown_hold(body: &[u8]) -> bool {
    matches!(wire::decode_reply(body), Ok(Reply::Error(e)) if e.code == ErrorCode::UnknownHold)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_probe_key_per_partition() {
        let keys = probe_keys(64, 1);
        assert_eq!(keys.len(), 64);
        for (p, k) in keys.iter().enumerate() {
            assert_eq!(partition_of(k, 64) as usize, p);
        }
    }
}
