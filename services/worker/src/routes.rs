//! The shards answering now, by partition, for worker batches.
//!
//! A worker batch (`rl.w.<worker-id>.batch`) decides its items on the
//! counters of the partitions' shards from its own task
//! ([`crate::worker_batch`]). A shard opens its route once it has restored
//! its partition and closes it (a write lock over all routes) when it stops
//! answering, before its final snapshot, so no worker batch decides for a
//! partition the shard has let go of.

use crate::counters::Counters;
use crate::decide::Owned;
use crate::stats::ShardStats;
use crate::usage::ledger::Ledger;
use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// An answering shard's counters, stats and usage ledger.
struct Route {
    counters: Counters,
    stats: Arc<ShardStats>,
    usage: Option<Arc<Ledger>>,
}

/// The routes of the shards answering now.
#[derive(Default)]
pub struct Routes(RwLock<HashMap<u32, Route>>);

impl Routes {
    pub fn open(
        &self,
        partition: u32,
        counters: Counters,
        stats: Arc<ShardStats>,
        usage: Option<Arc<Ledger>>,
    ) {
        self.write().insert(
            partition,
            Route {
                counters,
                stats,
                usage,
            },
        );
    }

    /// Closes `partition`'s route if it is still this shard's (`stats`; a
    /// newer shard of the same partition may already have opened its own).
    /// Once it returns, no worker batch decides for this shard.
    pub fn close(&self, partition: u32, stats: &Arc<ShardStats>) {
        let mut routes = self.write();
        if routes
            .get(&partition)
            .is_some_and(|r| Arc::ptr_eq(&r.stats, stats))
        {
            routes.remove(&partition);
        }
    }

    /// Runs `f` with a lookup of the answering partitions. No await may
    /// happen inside: a shard that stops waits for the lock.
    pub fn with<T>(&self, f: impl for<'r> FnOnce(&'r dyn Fn(u32) -> Option<Owned<'r>>) -> T) -> T {
        let routes = self.read();
        let lookup = |partition: u32| {
            routes.get(&partition).map(|r| Owned {
                partition,
                counters: &r.counters,
                stats: &r.stats,
                usage: r.usage.as_deref(),
            })
        };
        f(&lookup)
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<u32, Route>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<u32, Route>> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}
