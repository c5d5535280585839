//! Counts of what a worker and each of its shards did, for `sluice status`
//! and `/metrics`.
//!
//! Plain atomics, written by the decision core ([`crate::decide`]) once per
//! batch (a [`crate::decide::Tally`] gathers a batch's counts first) and read
//! by the status endpoint and the metrics page. They sit apart from the
//! tasks that write them so that the decision core needs none of the
//! worker's NATS state.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters across the worker's partitions.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub allowed: AtomicU64,
    pub denied: AtomicU64,
    pub errors: AtomicU64,
    pub hits: AtomicU64,
    pub journal_errors: AtomicU64,
}

/// What the worker made of the policy bucket, for `sluice status`.
#[derive(Debug, Default)]
pub struct PolicyStatus {
    /// The bucket revision last applied (0: none yet).
    pub revision: AtomicU64,
    /// Values refused so far (each kept the previous version in force).
    pub refusals: AtomicU64,
    /// Keys whose value in the bucket is refused now, with why.
    pub refused: Mutex<BTreeMap<String, String>>,
}

/// Facts about one owned partition.
#[derive(Debug, Default)]
pub struct ShardStats {
    pub decisions: AtomicU64,
    pub changes: AtomicU64,
    pub last_snapshot_ms: AtomicU64,
    pub keys: AtomicU64,
    pub answering: AtomicBool,
}

impl ShardStats {
    /// Adds `n` counter changes, made by the shard's task or a worker
    /// batch's. Release, paired with [`ShardStats::changes`]: a snapshot that
    /// sees these changes counted also sees the counters they wrote.
    pub fn add_changes(&self, n: u64) {
        if n > 0 {
            self.changes.fetch_add(n, Ordering::Release);
        }
    }

    /// The counter changes so far.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }
}

/// The stats of this worker's shards by partition, shared with the status
/// endpoint and the metrics page (read-only there).
pub type ShardsView = Arc<Mutex<BTreeMap<u32, Arc<ShardStats>>>>;
