//! The batching client target (`--client batching`): `sluice-client` with
//! batching on, one client (one NATS connection) per load connection, the
//! deny cache off unless `--deny-cache` (so every ask reaches a worker), and
//! fallback `closed` (so an ask nobody answered is an error, not a guess).

use super::targets::NatsSpec;
use anyhow::{Context as _, Result};
use sluice_bench::Outcome;
use sluice_client::{Client, ClientOptions, Error, Fallback, Source};

#[derive(Clone, Debug)]
pub struct BatchingSpec {
    pub partitions: u32,
    pub deny_cache: bool,
}

pub struct BatchingTarget {
    client: Client,
    spec: NatsSpec,
}

pub async fn connect(
    spec: &BatchingSpec,
    target: &NatsSpec,
    index: usize,
) -> Result<BatchingTarget> {
    let mut opts = ClientOptions::default()
        .timeout(target.timeout)
        .fallback(Fallback::Closed)
        .batching(true)
        .deny_cache(spec.deny_cache)
        .partitions(spec.partitions)
        .auth(target.auth.clone());
    opts.name = format!("sluice-bench-{index}");
    let client = Client::connect_with(&target.url, opts)
        .await
        .with_context(|| format!("cannot connect the batching client to {}", target.url))?;
    Ok(BatchingTarget {
        client,
        spec: target.clone(),
    })
}

impl BatchingTarget {
    pub async fn ask(&self, key: usize) -> (Outcome, Option<String>) {
        let key = &self.spec.keys[key];
        match self
            .client
            .ask(key, &self.spec.policy, self.spec.cost)
            .await
        {
            Ok(answer) if answer.source == Source::Worker || answer.source == Source::DenyCache => {
                if answer.allowed {
                    (Outcome::Allowed, None)
                } else {
                    (Outcome::Denied, None)
                }
            }
            Ok(answer) => (
                Outcome::Other,
                Some(format!("decided by {}", answer.source)),
            ),
            Err(Error::Unavailable(m)) if m.contains("no responders") => {
                (Outcome::NoResponders, None)
            }
            Err(Error::Unavailable(m)) if m.contains("timed out") => (Outcome::Timeout, None),
            Err(e) => (Outcome::ErrorReply(e.status()), Some(e.to_string())),
        }
    }

    pub fn stats(&self) -> serde_json::Value {
        let s = self.client.stats();
        serde_json::json!({
            "asks": s.asks,
            "worker": s.worker,
            "deny_cache": s.deny_cache,
            "round_trips": s.round_trips,
            "batches": s.batches,
            "batched_asks": s.batched_asks,
            "worker_batches": s.worker_batches,
            "no_responders": s.no_responders,
            "retries": s.retries,
            "timeouts": s.timeouts,
            "fallbacks": s.fallbacks(),
            "errors": s.errors,
        })
    }
}
