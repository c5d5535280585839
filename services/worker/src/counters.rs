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
//! give or take some slack (at most four times that long, so that the entry
//! need not be re-inserted on every request), so idle keys cost nothing for
//! long and expiry never forgets a count that still matters. The cache has
//! no size bound: evicting a live counter would under-count
//! (docs/ARCHITECTURE.md, "memory").

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
        let needed = policy.idle_expiry(&mut state, now).as_u64();
        drop(state);
        // moka fixed this entry's expiry when we read it, from the stored
        // ttl; only a re-insert makes it longer. So a ttl that must grow is
        // stored with a quarter of slack, and is not lowered while the need
        // stays above a quarter of it: a key asked for again and again is
        // re-inserted a few times, not on every request (the ttl of a
        // sliding window grows at every window change). A fresh key that
        // took nothing (a peek or a denial) is not stored at all.
        let stored = cell.idle_ttl_ns.load(Ordering::Relaxed);
        let with_slack = needed.saturating_add(needed / 4);
        if fresh || needed > stored {
            cell.idle_ttl_ns.store(with_slack, Ordering::Relaxed);
            if needed > 0 {
                self.cache.insert(key.to_string(), cell);
            }
        } else if needed.saturating_mul(4) < stored {
            // Lowering is always safe; it keeps an idle key from staying
            // much longer than it matters (after a debt is paid, say).
            cell.idle_ttl_ns.store(with_slack, Ordering::Relaxed);
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

    /// Calls `f` with every counter, for a snapshot, without copying any.
    /// Not a point-in-time view: a counter changed meanwhile may be seen
    /// before or after the change. Each state is locked only while `f` runs.
    pub fn for_each(&self, mut f: impl FnMut(&str, &KeyState)) {
        for (key, cell) in self.cache.iter() {
            let state = cell.state.lock().unwrap_or_else(|e| e.into_inner());
            f(key.as_str(), &state);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    /// The stored idle ttl of `key`, if the cache holds it.
    fn stored_ttl(counters: &Counters, key: &str) -> Option<u64> {
        counters
            .cache
            .get(key)
            .map(|cell| cell.idle_ttl_ns.load(Ordering::Relaxed))
    }

    #[test]
    fn a_peek_or_a_denial_on_a_fresh_key_stores_nothing() {
        let policy = Policy::builtin_default();
        let counters = Counters::new();
        counters.apply(&policy, "default/a", Nanos::from_secs(100), Op::Allow(0));
        assert_eq!(stored_ttl(&counters, "default/a"), None);
    }

    #[test]
    fn the_stored_ttl_covers_the_need_and_only_grows_when_the_need_outgrows_it() {
        // 15 per second, sliding window: a counted key matters until the end
        // of the window after its own.
        let policy = Policy::builtin_default();
        let counters = Counters::new();
        let key = "default/a";
        // Counted late in the window [100 s, 101 s): needed until 102 s.
        counters.apply(&policy, key, Nanos(100 * SEC + 9 * SEC / 10), Op::Allow(1));
        let first = stored_ttl(&counters, key).expect("a counted key is stored");
        assert_eq!(
            first,
            (11 * SEC / 10) * 5 / 4,
            "1.1 s needed, plus a quarter"
        );

        // Counted at the start of the next window: needed until 103 s, 2 s,
        // more than stored, so the ttl grows, with slack.
        counters.apply(&policy, key, Nanos(101 * SEC), Op::Allow(1));
        let grown = stored_ttl(&counters, key).unwrap();
        assert_eq!(grown, 2 * SEC + SEC / 2);

        // Later the need shrinks (1.5 s, then 1.9 s in the window after):
        // covered, so the ttl stays and the entry is not re-inserted.
        counters.apply(&policy, key, Nanos(101 * SEC + SEC / 2), Op::Allow(1));
        assert_eq!(stored_ttl(&counters, key), Some(grown));
        counters.apply(&policy, key, Nanos(102 * SEC + SEC / 10), Op::Allow(1));
        assert_eq!(stored_ttl(&counters, key), Some(grown));
    }
}
