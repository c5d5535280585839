//! One partition's counters: a moka cache from (policy, key) to the key's state.
//!
//! Each partition has one owner task, so all counting for a key happens in one
//! place and in order; the cache is shared only with the snapshot writer,
//! which reads. Values are `Arc<Cell>` so a decision mutates the state in
//! place (no clone per request, which `and_compute_with` would make), and the
//! per-cell mutex is uncontended except while a snapshot copies that cell.
//!
//! Entries expire once idle for as long as it takes the state to become
//! equivalent to a fresh one ([`sluice_core::policy::Policy::idle_expiry`]),
//! so idle keys cost nothing and expiry never forgets a count that still
//! matters. The cache has no size bound: evicting a live counter would
//! under-count (docs/ARCHITECTURE.md, "memory").

use moka::sync::Cache;
use moka::Expiry;
use serde::{Deserialize, Serialize};
use sluice_core::policy::{Decision, KeyState, Policy};
use sluice_core::time::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A key's state plus how long it may stay idle before it can be forgotten.
#[derive(Debug)]
pub struct Cell {
    state: Mutex<KeyState>,
    idle_ttl_ns: AtomicU64,
}

impl Cell {
    fn idle_ttl(&self) -> Duration {
        Duration::from_nanos(self.idle_ttl_ns.load(Ordering::Relaxed))
    }
}

/// What a request does to a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `rl.allow`: take `cost` if every limit has room (0 = peek).
    Allow(u64),
    /// `rl.hit`: record `cost` whether or not it fits.
    Record(u64),
}

/// The cache key joins the policy and the key token with `/`, which neither
/// may contain, so the pair is unambiguous.
pub fn counter_key(buf: &mut String, policy: &str, token: &str) {
    buf.clear();
    buf.push_str(policy);
    buf.push('/');
    buf.push_str(token);
}

/// A snapshot entry: the counter key and its state.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    pub key: String,
    pub state: KeyState,
}

struct IdleExpiry;

impl Expiry<String, Arc<Cell>> for IdleExpiry {
    fn expire_after_create(&self, _k: &String, v: &Arc<Cell>, _now: Instant) -> Option<Duration> {
        Some(v.idle_ttl())
    }
    fn expire_after_read(
        &self,
        _k: &String,
        v: &Arc<Cell>,
        _now: Instant,
        _current: Option<Duration>,
        _last_modified: Instant,
    ) -> Option<Duration> {
        Some(v.idle_ttl())
    }
    fn expire_after_update(
        &self,
        _k: &String,
        v: &Arc<Cell>,
        _now: Instant,
        _current: Option<Duration>,
    ) -> Option<Duration> {
        Some(v.idle_ttl())
    }
}

/// The counters of one partition.
#[derive(Clone)]
pub struct Counters {
    cache: Cache<String, Arc<Cell>>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

impl Counters {
    pub fn new() -> Counters {
        Counters {
            cache: Cache::builder().expire_after(IdleExpiry).build(),
        }
    }

    /// Applies `op` to the counter `key` (built with [`counter_key`]) under
    /// `policy` at `now`. The caller has validated the cost.
    pub fn apply(&self, policy: &Policy, key: &str, now: Nanos, op: Op) -> Decision {
        let (cell, fresh) = match self.cache.get(key) {
            Some(cell) => (cell, false),
            None => (
                Arc::new(Cell {
                    state: Mutex::new(policy.new_state()),
                    idle_ttl_ns: AtomicU64::new(0),
                }),
                true,
            ),
        };
        let mut state = cell.state.lock().unwrap_or_else(|e| e.into_inner());
        let decision = match op {
            Op::Allow(cost) => policy.decide(&mut state, now, cost),
            Op::Record(cost) => policy.record(&mut state, now, cost),
        };
        let ttl = policy.idle_expiry(&mut state, now).as_u64();
        drop(state);
        let old_ttl = cell.idle_ttl_ns.swap(ttl, Ordering::Relaxed);
        // moka fixed this entry's expiry when we read it, from the old ttl.
        // Re-insert when the state now needs longer (or is new), so a key in
        // debt is not forgotten early; a fresh key that took nothing
        // (a peek or a denial) is not stored at all.
        if (fresh && ttl > 0) || (!fresh && ttl > old_ttl) {
            self.cache.insert(key.to_string(), cell);
        }
        decision
    }

    /// The number of live counters (approximate while requests are running).
    pub fn len(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies every counter out, for a snapshot. Not a point-in-time view:
    /// a counter changed during the copy may be seen before or after.
    pub fn export(&self) -> Vec<Entry> {
        self.cache
            .iter()
            .map(|(key, cell)| Entry {
                key: key.as_str().to_string(),
                state: cell.state.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            })
            .collect()
    }

    /// Loads restored counters (before the partition answers anything).
    /// Entries that went idle meanwhile, or whose policy no longer exists,
    /// are dropped.
    pub fn import<'p>(
        &self,
        entries: Vec<Entry>,
        now: Nanos,
        policy_of: impl Fn(&str) -> Option<&'p Policy>,
    ) -> usize {
        let mut kept = 0;
        for Entry { key, mut state } in entries {
            let Some((policy_name, _)) = key.split_once('/') else {
                continue;
            };
            let Some(policy) = policy_of(policy_name) else {
                continue;
            };
            let ttl = policy.idle_expiry(&mut state, now).as_u64();
            if ttl == 0 {
                continue;
            }
            self.cache.insert(
                key,
                Arc::new(Cell {
                    state: Mutex::new(state),
                    idle_ttl_ns: AtomicU64::new(ttl),
                }),
            );
            kept += 1;
        }
        kept
    }
}
