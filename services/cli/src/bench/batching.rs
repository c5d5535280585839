//! The batching client target (`--client batching`): `sluice-client` with
//! batching on, one client (one NATS connection) per load connection, the
//! deny cache off unless `--deny-cache` (so every ask reaches a worker),
//! local budgets on unless `--no-budgets`, and fallback `closed` (so an ask
//! nobody answered is an error, not a guess).
//! Every answer a fallback did not make is a decision, wherever it was made
//! (a worker, the deny cache, or a slice of a key's budget); the target
//! counts them by source (`answered_by_<source>` in the client stats).
//! Holds (`--verb hold` / `reserve`) go through the client's `reserve` and
//! `settle`, which travel in the client's batches like asks (a pair is two
//! batch items, one after the other).

use super::spec::{BatchingSpec, LoadVerb, NatsSpec};
use anyhow::{Context as _, Result};
use sluice_bench::admission::Window;
use sluice_bench::{Outcome, Reply};
use sluice_client::{Client, ClientOptions, Error, Fallback, Source};
use std::cell::RefCell;

pub struct BatchingTarget {
    client: Client,
    spec: NatsSpec,
    /// Decisions by `Source::as_str`, in the order first seen.
    sources: RefCell<Vec<(&'static str, u64)>>,
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
        .budgets(spec.budgets)
        .ask_ids(spec.ask_ids)
        .partitions(spec.partitions)
        .auth(target.auth.clone());
    opts.name = format!("sluice-bench-{index}");
    let client = Client::connect_with(&target.url, opts)
        .await
        .with_context(|| format!("cannot connect the batching client to {}", target.url))?;
    Ok(BatchingTarget {
        client,
        spec: target.clone(),
        sources: RefCell::new(Vec::new()),
    })
}

impl BatchingTarget {
    pub async fn ask(&self, key: usize) -> Reply {
        let key = &self.spec.keys[key];
        if self.spec.verb != LoadVerb::Allow {
            return self.hold(key).await;
        }
        match self
            .client
            .ask(key, &self.spec.policy, self.spec.cost)
            .await
        {
            Ok(answer) if matches!(answer.source, Source::Fallback(_)) => {
                Reply::other(format!("decided by {}", answer.source))
            }
            Ok(answer) => {
                self.count_source(answer.source);
                let outcome = if answer.allowed {
                    Outcome::Allowed
                } else {
                    Outcome::Denied
                };
                let window = self.spec.windows.then_some(Window::Reset(answer.reset));
                Reply::from(outcome).in_window(window)
            }
            Err(e) => failed(e),
        }
    }

    /// A reserve and, with `--verb hold`, the settle of its hold with the
    /// same cost.
    async fn hold(&self, key: &str) -> Reply {
        let (policy, cost) = (&self.spec.policy, self.spec.cost);
        let ticket = match self.client.reserve(key, policy, cost, None).await {
            Ok(held) => match held.ticket {
                Some(ticket) => ticket,
                None => return Outcome::Denied.into(),
            },
            Err(e) => return failed(e),
        };
        if self.spec.verb == LoadVerb::Reserve {
            return Outcome::Allowed.into();
        }
        match self.client.settle(key, policy, &ticket.hold, cost).await {
            Ok(_) => Outcome::Allowed.into(),
            Err(e) => failed(e),
        }
    }

    fn count_source(&self, source: Source) {
        let name = source.as_str();
        let mut sources = self.sources.borrow_mut();
        match sources.iter_mut().find(|(s, _)| *s == name) {
            Some((_, n)) => *n += 1,
            None => sources.push((name, 1)),
        }
    }

    pub fn stats(&self) -> serde_json::Value {
        let s = self.client.stats();
        let mut stats = serde_json::json!({
            "asks": s.asks,
            "worker": s.worker,
            "deny_cache": s.deny_cache,
            "budget": s.budget,
            "slices": s.slices,
            "refunds": s.refunds,
            "round_trips": s.round_trips,
            "batches": s.batches,
            "batched_asks": s.batched_asks,
            "worker_batches": s.worker_batches,
            "no_responders": s.no_responders,
            "retries": s.retries,
            "timeouts": s.timeouts,
            "fallbacks": s.fallbacks(),
            "errors": s.errors,
        });
        for (source, n) in self.sources.borrow().iter() {
            stats[format!("answered_by_{source}")] = (*n).into();
        }
        stats
    }
}

/// What a request that got no decision counts as.
fn failed(e: Error) -> Reply {
    match e {
        Error::Unavailable(m) if m.contains("no responders") => Outcome::NoResponders.into(),
        Error::Unavailable(m) if m.contains("timed out") => Outcome::Timeout.into(),
        e => Reply {
            why: Some(e.to_string()),
            ..Outcome::ErrorReply(e.status()).into()
        },
    }
}
