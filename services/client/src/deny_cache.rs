//! The deny cache: a denial with a retry time is remembered, and asks for the
//! same key and policy are answered from it until then, with no network.
//!
//! Why this is safe: `retry_after` is the earliest time at which *the same
//! request* can be allowed, and nothing but time makes a key less used (other
//! callers only use it up further). So until then, any ask of that key and
//! policy with at least the denied cost would be denied by the worker too.
//! An ask with a *smaller* cost might fit earlier, so it goes to the worker;
//! a peek (cost 0) asks about one unit, so it counts as cost 1 here.
//!
//! An ask that may wait (SPEC §18) is admitted by the worker when its
//! moment comes within its wait, so the cache answers it only while the
//! retry time is further off than that wait; a closer one goes to the
//! worker. An allowed answer, waiting or not, is never cached.
//!
//! A denial of a key blocked by its policy's `block_for` (SPEC §18,
//! `blocked`) is another matter: until the block ends (its `retry_after`)
//! the worker denies every ask of the key under that policy, whatever its
//! cost, a peek and an ask that may wait included. So such a denial
//! answers all of them until then, and nothing after.
//!
//! What it does not see: a config change that raises the limit, or counters
//! lost in a crash of a worker in snapshot mode. Both can only make the
//! worker allow sooner, so the cache errs on the side of denying, for at most
//! the retry time it was told.
//!
//! A grouped ask (SPEC §17) is cached under its own policy and whole key
//! (`user/acme.alice`), whichever level denied it, and answers only that
//! same ask: its chain is the same levels on the same counters (a change
//! of policies clears the cache), and the denying level, the
//! organisation's say, is freed by nothing but time either, so alice's
//! ask is denied until the retry time. It is not cached under the
//! denying level's key (`org/acme`): asks of the organisation's other
//! users are looked up under their own keys and so go to the worker,
//! which may find room (a reset of the organisation's key, a smaller
//! cost); a denial of alice never answers bob from the cache. The answer
//! carries the denial's `levels` and `denied_by`, their times counted
//! down as the entry's.
//!
//! The retry time is counted from when the reply arrived, which is a little
//! after the worker decided (and `retry_after_ms` is rounded up), so the
//! cache never answers past the real retry time.
//!
//! Storage: sharded `Mutex<HashMap>`s (the lookup runs on every ask, so it
//! must be cheap and rarely contended); expired entries are dropped when a
//! shard grows, and a full cache stops caching rather than evicting.

use crate::answer::{Answer, Source};
use foldhash::fast::RandomState;
use sluice_core::ask::with_counter_key;
use sluice_core::wire::LevelReply;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SHARDS: usize = 16;

#[derive(Clone, Debug)]
struct Denied {
    until: Instant,
    cost: u64,
    limit: u64,
    remaining: u64,
    reset_at: Instant,
    /// The key is blocked until `until` (SPEC §18): every ask is denied.
    blocked: bool,
    /// A grouped denial's levels and the one that denied, as answered
    /// (`reset_ms` counted from `at`).
    levels: Box<[LevelReply]>,
    denied_by: Option<Box<str>>,
    at: Instant,
}

impl Denied {
    /// The levels as at `now`: each `reset_ms` less the time since.
    fn levels_at(&self, now: Instant) -> Vec<LevelReply> {
        let gone = now.saturating_duration_since(self.at).as_millis() as u64;
        self.levels
            .iter()
            .map(|l| LevelReply {
                reset_ms: l.reset_ms.saturating_sub(gone),
                ..l.clone()
            })
            .collect()
    }
}

pub(crate) struct DenyCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    per_shard: usize,
}

#[derive(Default)]
struct Shard {
    map: HashMap<String, Denied, RandomState>,
    /// Prune expired entries when the map reaches this size.
    prune_at: usize,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> DenyCache {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        DenyCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::default(),
                        prune_at: 64.min(per_shard),
                    })
                })
                .collect(),
            hasher: RandomState::default(),
            per_shard,
        }
    }

    /// Forgets every denial (the policies changed: a raised limit must not
    /// keep serving old denials).
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            shard.lock().unwrap_or_else(|e| e.into_inner()).map.clear();
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        let i = self.hasher.hash_one(key) as usize % SHARDS;
        &self.shards[i]
    }

    /// The cached denial for `policy`/`token` that covers `cost`, if any.
    #[cfg(test)]
    pub(crate) fn get(&self, policy: &str, token: &str, cost: u64) -> Option<Answer> {
        self.get_waiting(policy, token, cost, Duration::ZERO)
    }

    /// The cached denial for `policy`/`token` that covers `cost` asked
    /// with up to `wait` for its start (zero: not waiting), if any.
    pub(crate) fn get_waiting(
        &self,
        policy: &str,
        token: &str,
        cost: u64,
        wait: Duration,
    ) -> Option<Answer> {
        with_counter_key(policy, token, |key| self.get_key(key, policy, cost, wait))
    }

    fn get_key(&self, key: &str, policy: &str, cost: u64, wait: Duration) -> Option<Answer> {
        let now = Instant::now();
        let shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let d = shard.map.get(key)?;
        let left = d.until.saturating_duration_since(now);
        let covered = match d.blocked {
            // Blocked: any cost, any wait, until the block ends.
            true => !left.is_zero(),
            false => left > wait && cost.max(1) >= d.cost,
        };
        if !covered {
            return None;
        }
        Some(Answer {
            allowed: false,
            shadow_denied: false,
            limit: d.limit,
            remaining: d.remaining,
            reset: d.reset_at.saturating_duration_since(now),
            retry_after: d.until - now,
            policy: policy.to_string(),
            repeat: false,
            wait: Default::default(),
            levels: d.levels_at(now),
            denied_by: d.denied_by.as_deref().map(str::to_string),
            blocked: d.blocked,
            source: Source::DenyCache,
        })
    }

    /// Remembers a worker's denial of `cost` (a peek counts as 1).
    pub(crate) fn insert(&self, token: &str, cost: u64, answer: &Answer) {
        if answer.allowed || answer.retry_after.is_zero() {
            return;
        }
        let mut key = String::new();
        sluice_core::ask::counter_key(&mut key, &answer.policy, token);
        let now = Instant::now();
        let denied = Denied {
            until: now + answer.retry_after,
            // A block denies every cost: it covers them all.
            cost: if answer.blocked { 0 } else { cost.max(1) },
            limit: answer.limit,
            remaining: answer.remaining,
            reset_at: now + answer.reset,
            levels: answer.levels.clone().into(),
            denied_by: answer.denied_by.as_deref().map(Box::from),
            at: now,
            blocked: answer.blocked,
        };
        let mut shard = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
        if shard.map.len() >= shard.prune_at && !shard.map.contains_key(&key) {
            shard.map.retain(|_, d| d.until > now);
            shard.prune_at = (shard.map.len() * 2).clamp(64.min(self.per_shard), self.per_shard);
            if shard.map.len() >= self.per_shard {
                return;
            }
        }
        // A smaller denied cost covers more asks; keep the smallest one that
        // is still in force, or the later one for equal costs (a block's
        // covers every cost).
        match shard.map.get_mut(&key) {
            Some(old) if old.until > now && old.cost < denied.cost => {}
            Some(old) if old.blocked && old.until > denied.until => {}
            Some(old) => *old = denied,
            None => {
                shard.map.insert(key, denied);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap().map.len())
            .sum()
    }
}

/// Policy names have no `/` (SPEC §1: `[A-Za-z0-9_-]`), so this is unambiguous.
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn denial(retry_ms: u64) -> Answer {
        Answer {
            allowed: false,
            limit: 5,
            remaining: 0,
            reset: Duration::from_millis(retry_ms * 2),
            retry_after: Duration::from_millis(retry_ms),
            policy: "default".into(),
            shadow_denied: false,
            repeat: false,
            wait: Duration::ZERO,
            levels: Vec::new(),
            denied_by: None,
            blocked: false,
            source: Source::Worker,
        }
    }

    /// Alice (`acme.alice` under `user`, parent `org`) denied by her
    /// organisation's pool while she had room of her own.
    fn denied_by_org() -> Answer {
        let level = |policy: &str, remaining| LevelReply {
            policy: policy.into(),
            remaining,
            reset_ms: 60_000,
        };
        Answer {
            policy: "user".into(),
            levels: vec![level("org", 0), level("user", 3)],
            denied_by: Some("org".into()),
            ..denial(60_000)
        }
    }

    /// A denial by an outer level answers the same ask of the same key
    /// (its levels and `denied_by` with it), and nothing else: not the
    /// organisation's other users, not the organisation's own key.
    #[test]
    fn a_grouped_denial_answers_only_the_same_grouped_key() {
        let cache = DenyCache::new(100);
        cache.insert("acme.alice", 1, &denied_by_org());
        let again = cache.get("user", "acme.alice", 1).expect("cached");
        assert_eq!(again.denied_by.as_deref(), Some("org"));
        let levels: Vec<_> = again
            .levels
            .iter()
            .map(|l| (&*l.policy, l.remaining))
            .collect();
        assert_eq!(levels, [("org", 0), ("user", 3)]);
        assert!(again.levels.iter().all(|l| l.reset_ms <= 60_000));
        assert_eq!(cache.get("user", "acme.bob", 1), None, "another user");
        assert_eq!(cache.get("org", "acme", 1), None, "the org's own key");
        assert_eq!(cache.get("user", "acme", 1), None);
    }

    /// A shadow policy never denies a caller (SPEC §14): its answer to
    /// an ask enforcement would deny is allowed, and the cache keeps none.
    #[test]
    fn a_shadow_denial_is_not_cached() {
        let cache = DenyCache::new(16);
        let shadow = Answer {
            allowed: true,
            shadow_denied: true,
            retry_after: Duration::ZERO,
            repeat: false,
            ..denial(500)
        };
        cache.insert("k", 1, &shadow);
        assert_eq!(cache.get("default", "k", 1), None);
    }

    #[test]
    fn a_denial_answers_the_same_or_a_larger_cost_until_its_retry_time() {
        let cache = DenyCache::new(100);
        cache.insert("alice", 2, &denial(60_000));
        let a = cache.get("default", "alice", 2).expect("cached");
        assert_eq!(a.source, Source::DenyCache);
        assert!(!a.allowed);
        assert!(a.retry_after <= Duration::from_millis(60_000));
        assert!(a.retry_after > Duration::from_millis(59_000));
        assert!(cache.get("default", "alice", 5).is_some());
        assert!(
            cache.get("default", "alice", 1).is_none(),
            "a smaller cost may fit"
        );
        assert!(cache.get("other", "alice", 2).is_none(), "another policy");
        assert!(cache.get("default", "bob", 2).is_none(), "another key");
    }

    /// A waiting ask fits once its moment comes within its wait: only a
    /// retry time further off than that is certain to be denied.
    #[test]
    fn a_waiting_ask_is_answered_only_while_the_retry_is_past_its_wait() {
        let cache = DenyCache::new(100);
        cache.insert("alice", 1, &denial(2_000));
        let get =
            |wait_ms| cache.get_waiting("default", "alice", 1, Duration::from_millis(wait_ms));
        assert!(get(500).is_some(), "2 s away, more than a 500 ms wait");
        assert!(
            get(2_000).is_none(),
            "within a 2 s wait: the worker admits it"
        );
        assert!(get(10_000).is_none());
    }

    /// A block (SPEC §18) denies every ask of the key under its policy
    /// until it ends: the cached denial answers any cost, a peek and any
    /// wait, says `blocked`, and answers nothing once the block is over.
    #[test]
    fn a_blocked_denial_answers_every_ask_until_the_block_ends_and_nothing_after() {
        let cache = DenyCache::new(100);
        let blocked = Answer {
            blocked: true,
            ..denial(60_000)
        };
        cache.insert("mallory", 3, &blocked);
        for (cost, wait_s) in [(3, 0), (1, 0), (0, 0), (1, 120)] {
            let wait = Duration::from_secs(wait_s);
            let a = cache.get_waiting("default", "mallory", cost, wait);
            let a = a.unwrap_or_else(|| panic!("cost {cost}, wait {wait_s} s: cached"));
            assert!(a.blocked && !a.allowed, "{a:?}");
            assert!(a.retry_after <= Duration::from_secs(60));
        }
        assert!(cache.get("other", "mallory", 1).is_none(), "another policy");
        // A denial without a block does not shorten one.
        cache.insert("mallory", 1, &denial(1_000));
        let a = cache.get("default", "mallory", 0).expect("still blocked");
        assert!(a.blocked && a.retry_after > Duration::from_secs(59));

        let mut short = blocked.clone();
        short.retry_after = Duration::from_nanos(1);
        cache.insert("eve", 1, &short);
        std::thread::sleep(Duration::from_millis(1));
        assert!(
            cache.get("default", "eve", 1).is_none(),
            "the block is over"
        );
    }

    #[test]
    fn a_peek_counts_as_one_unit() {
        let cache = DenyCache::new(100);
        cache.insert("alice", 0, &denial(60_000));
        assert!(cache.get("default", "alice", 0).is_some());
        assert!(cache.get("default", "alice", 1).is_some());
    }

    #[test]
    fn expired_denials_answer_nothing() {
        let cache = DenyCache::new(100);
        cache.insert("alice", 1, &denial(0));
        assert!(
            cache.get("default", "alice", 1).is_none(),
            "no retry time, not cached"
        );
        let mut short = denial(1);
        short.retry_after = Duration::from_nanos(1);
        cache.insert("alice", 1, &short);
        std::thread::sleep(Duration::from_millis(1));
        assert!(cache.get("default", "alice", 1).is_none());
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_stops_caching() {
        let cache = DenyCache::new(SHARDS * 4);
        for i in 0..1000 {
            cache.insert(&format!("k{i}"), 1, &denial(60_000));
        }
        assert!(cache.len() <= SHARDS * 4, "bounded: {}", cache.len());
    }
}
