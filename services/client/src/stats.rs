//! What a client did, counted.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) asks: AtomicU64,
    pub(crate) hits: AtomicU64,
    pub(crate) worker: AtomicU64,
    pub(crate) deny_cache: AtomicU64,
    pub(crate) budget: AtomicU64,
    pub(crate) slices: AtomicU64,
    pub(crate) refunds: AtomicU64,
    pub(crate) fallback_open: AtomicU64,
    pub(crate) fallback_local: AtomicU64,
    pub(crate) fallback_closed: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) round_trips: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) batched_asks: AtomicU64,
    pub(crate) worker_batches: AtomicU64,
    pub(crate) no_responders: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) timeouts: AtomicU64,
}

/// A snapshot of a client's counters (all clones of a client share them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Asks made ([`allow`](crate::Client::allow), [`ask`](crate::Client::ask),
    /// [`peek`](crate::Client::peek)) that passed the client's own checks.
    pub asks: u64,
    /// Hits sent ([`hit`](crate::Client::hit), [`hit_and_peek`](crate::Client::hit_and_peek)).
    pub hits: u64,
    /// Decisions made by a worker.
    pub worker: u64,
    /// Denials answered from the deny cache, with no network.
    pub deny_cache: u64,
    /// Asks allowed from a slice of a key's budget, with no network
    /// (local budgets).
    pub budget: u64,
    /// Slices granted to this client.
    pub slices: u64,
    /// Slices given back (their unspent units and what was spent).
    pub refunds: u64,
    /// Asks the `open` fallback allowed.
    pub fallback_open: u64,
    /// Asks the `local` fallback decided.
    pub fallback_local: u64,
    /// Asks refused with 503 because no worker answered and the fallback is `closed`.
    pub fallback_closed: u64,
    /// Error replies from workers (400, 404, 413).
    pub errors: u64,
    /// NATS requests sent (single asks, batches and retries).
    pub round_trips: u64,
    /// Batches sent (each also counts as a round trip).
    pub batches: u64,
    /// Asks that travelled in a batch.
    pub batched_asks: u64,
    /// Batches sent to a worker's subject (asks of all its partitions
    /// together); the others went to a partition whose owner was unknown.
    pub worker_batches: u64,
    /// "No responders" answers from NATS.
    pub no_responders: u64,
    /// Requests re-sent after "no responders" or a 503.
    pub retries: u64,
    /// Asks that ran out of time.
    pub timeouts: u64,
}

impl ClientStats {
    /// Asks answered by any fallback (`open`, `local` or `closed`).
    pub fn fallbacks(&self) -> u64 {
        self.fallback_open + self.fallback_local + self.fallback_closed
    }
}

impl Counters {
    pub(crate) fn snapshot(&self) -> ClientStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ClientStats {
            asks: get(&self.asks),
            hits: get(&self.hits),
            worker: get(&self.worker),
            deny_cache: get(&self.deny_cache),
            budget: get(&self.budget),
            slices: get(&self.slices),
            refunds: get(&self.refunds),
            fallback_open: get(&self.fallback_open),
            fallback_local: get(&self.fallback_local),
            fallback_closed: get(&self.fallback_closed),
            errors: get(&self.errors),
            round_trips: get(&self.round_trips),
            batches: get(&self.batches),
            batched_asks: get(&self.batched_asks),
            worker_batches: get(&self.worker_batches),
            no_responders: get(&self.no_responders),
            retries: get(&self.retries),
            timeouts: get(&self.timeouts),
        }
    }
}
