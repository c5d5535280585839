//! A partition's buckets of keys, and the worker's bound on the keys all
//! its buckets hold ([`KeyBound`], `max_keys`).
//!
//! The two are one job: a bucket counts every key it stores or drops in
//! the bound, and the bound, once full, makes room by forgetting a key of
//! some bucket: the new key's own when it holds its fair share, else one
//! drawn from any partition of the worker (see [`super`] for which key).

use super::stamp::Stamp;
use super::table::Table;
use moka::sync::Cache;
use sluice_core::policy::KeyState;
use sluice_core::time::Nanos;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::Duration;

/// Buckets per partition. With the default 64 partitions a worker holding
/// all of them has at most 4 096 buckets (~1.5 MB with their moka entries),
/// and a million keys are ~240 to a bucket (~490 at the default `max_keys`):
/// more keys to a bucket cost no more to find (its table is a hash table), a
/// snapshot holds a bucket's lock longer (~240 keys encoded), and an
/// eviction at the key bound takes its victim from the few least valuable
/// keys its bucket keeps, not from a scan of the bucket (which cost a flood
/// at the default bound 40 % of its speed: docs/BENCHMARKS-HISTORY.md). More
/// buckets cost memory (at 1024, the buckets were a quarter of what a
/// million keys cost) and decisions: at 512 a worker of 10,000 keys held
/// ~32,000 buckets of one key or none, each decision missed the cache on
/// its bucket's own look-aside slot, `Arc`, table and arena, and the worker
/// spent 18 % more CPU per decision (docs/BENCHMARKS-HISTORY.md, "Hot keys with
/// local budgets").
pub const BUCKETS: u64 = 64;

/// How often a bucket in use looks for slots it may forget.
pub const PRUNE_EVERY: Nanos = Nanos(1_000_000_000);

/// The hasher of the bucket maps and of the choice of bucket: foldhash, the
/// one hashbrown uses, several times cheaper than std's SipHash on short keys
/// and seeded per process, so keys cannot be made to collide in advance.
pub(super) type Hasher = foldhash::fast::RandomState;

/// A bucket's keys: for each, its state and the instant from which that
/// equals a fresh one, packed into a [`Table`].
#[derive(Debug)]
pub(super) struct Slots {
    pub(super) table: Table,
    /// No prune before this: none is due (no slot is forgettable yet, as
    /// far as inserts tell) or the last one was less than PRUNE_EVERY ago.
    pub(super) next_prune: Nanos,
    /// Counts the slots above.
    pub(super) bound: Arc<KeyBound>,
}

impl Drop for Slots {
    fn drop(&mut self) {
        self.bound.release(self.table.len());
    }
}

impl Slots {
    pub(super) fn new(bound: Arc<KeyBound>) -> Slots {
        Slots {
            table: Table::default(),
            next_prune: Nanos::ZERO,
            bound,
        }
    }

    /// Drops the slots that may be forgotten at `now`, if a prune is due,
    /// and returns how long the remaining slots are needed at most.
    pub(super) fn prune(&mut self, now: Nanos) -> Option<u64> {
        if now < self.next_prune {
            return None;
        }
        let mut earliest = u64::MAX;
        let mut latest = now.as_u64();
        let before = self.table.len();
        self.table.retain(|stamp| {
            let at = stamp.forgettable_at().as_u64();
            earliest = earliest.min(at);
            latest = latest.max(at);
            at > now.as_u64()
        });
        self.bound.release(before - self.table.len());
        self.next_prune = Nanos(earliest).max(now.saturating_add(PRUNE_EVERY));
        Some(latest - now.as_u64())
    }

    /// Stores a new key (`hash` is its hash) with its state and stamp, within the key bound when this
    /// bucket holds at least its fair share and a key asked only once: then
    /// the least valuable of those makes room. A sliding log is moved out
    /// of `state`; `bytes` is a buffer to pack it in.
    /// Returns true when the key was stored over the bound, so that the
    /// caller, once it holds no lock, has [`KeyBound::evict_elsewhere`]
    /// make room.
    pub(super) fn remember(
        &mut self,
        hash: u64,
        key: &str,
        state: &mut KeyState,
        stamp: Stamp,
        now: Nanos,
        bytes: &mut Vec<u8>,
    ) -> bool {
        let first_prune = stamp.forgettable_at().max(now.saturating_add(PRUNE_EVERY));
        self.next_prune = if self.table.is_empty() {
            first_prune
        } else {
            self.next_prune.min(first_prune)
        };
        let full = self.bound.full();
        if full && self.table.len() >= self.bound.fair_share() {
            if let Some(victim) = self.victim().filter(|v| !v.stamp.asked_again()) {
                self.evict(victim);
            }
        }
        if let Some(at) = self.table.find(hash, key) {
            // A restored snapshot may name a key twice: the last one counts.
            self.table.remove_at(hash, at);
            self.bound.release(1);
        }
        self.bound.held.fetch_add(1, Ordering::Relaxed);
        // The bucket's keys are hashed as every partition of the worker
        // hashes them ([`KeyBound`]'s hasher).
        let hasher = &self.bound.hasher;
        let rehash = |k: &[u8]| hasher.hash_one(k);
        self.table.insert(hash, key, stamp, state, bytes, rehash);
        full && self.bound.over()
    }

    /// The least valuable key (see the module doc), found without a scan
    /// of the bucket most of the time ([`table`]).
    pub(super) fn victim(&mut self) -> Option<Victim> {
        let hasher = &self.bound.hasher;
        let (at, stamp, hash) = self.table.least(|k| hasher.hash_one(k))?;
        Some(Victim { at, stamp, hash })
    }

    /// Forgets `victim`, just found by [`Slots::victim`].
    pub(super) fn evict(&mut self, victim: Victim) {
        self.table.remove_at(victim.hash, victim.at);
        self.bound.release(1);
        self.bound.evicted.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets the least valuable key, if any.
    pub(super) fn evict_one(&mut self) {
        if let Some(victim) = self.victim() {
            self.evict(victim);
        }
    }

    pub(super) fn remove(&mut self, hash: u64, key: &str) -> bool {
        let removed = self.table.remove(hash, key);
        if removed {
            self.bound.release(1);
        }
        removed
    }
}

/// A bucket's least valuable key: where its record is, its stamp and hash.
#[derive(Clone, Copy, Debug)]
pub(super) struct Victim {
    pub(super) at: u32,
    pub(super) stamp: Stamp,
    pub(super) hash: u64,
}

/// Some keys' slots plus how long the bucket may stay unused before all of
/// them can be forgotten.
#[derive(Debug)]
pub struct Bucket {
    pub(super) slots: Mutex<Slots>,
    pub(super) idle_ttl_ns: AtomicU64,
}

impl Bucket {
    pub(super) fn new(bound: Arc<KeyBound>) -> Bucket {
        Bucket {
            slots: Mutex::new(Slots::new(bound)),
            idle_ttl_ns: AtomicU64::new(0),
        }
    }

    pub(super) fn idle_ttl_ns(&self) -> u64 {
        self.idle_ttl_ns.load(Ordering::Relaxed)
    }

    pub(super) fn set_idle_ttl_ns(&self, ns: u64) {
        self.idle_ttl_ns.store(ns, Ordering::Relaxed);
    }

    pub(super) fn idle_ttl(&self) -> Duration {
        Duration::from_nanos(self.idle_ttl_ns())
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One partition's buckets, registered with the worker's [`KeyBound`].
pub(super) struct BucketCache {
    pub(super) buckets: Cache<u64, Arc<Bucket>, Hasher>,
    pub(super) bound: Arc<KeyBound>,
}

impl Drop for BucketCache {
    fn drop(&mut self) {
        self.bound.partitions.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::ops::Deref for BucketCache {
    type Target = Cache<u64, Arc<Bucket>, Hasher>;
    fn deref(&self) -> &Self::Target {
        &self.buckets
    }
}

/// The bound on the live counters of one worker, shared by the [`Counters`]
/// of all its partitions: how many it may hold, how many it holds, and how
/// many it forgot to stay within the bound.
///
/// `held` is kept by the bucket tables themselves (every insert and removal,
/// and a dropped bucket releases its slots), so it matches what is in
/// memory. Two decisions may both see room for one key, so the bound can be
/// passed by a few keys, as many as decisions run at once, and by one key per
/// partition whose own buckets hold nothing to forget.
#[derive(Debug)]
pub struct KeyBound {
    pub(super) max: u64,
    pub(super) held: AtomicU64,
    pub(super) evicted: AtomicU64,
    /// The bucket caches of the worker's live partitions, where an eviction
    /// the new key's own bucket cannot make looks for its victim.
    pub(super) caches: Mutex<Vec<Weak<BucketCache>>>,
    /// How many of those are live.
    pub(super) partitions: AtomicU64,
    /// Draws the buckets such an eviction looks at.
    pub(super) sampler: Hasher,
    pub(super) draws: AtomicU64,
    /// Hashes the counter keys of every partition of the worker, so that a
    /// bucket can find a key's hash again wherever the eviction comes from.
    pub(super) hasher: Hasher,
}

impl KeyBound {
    /// A bound of `max` live counters (at least 1).
    pub fn new(max: u64) -> Arc<KeyBound> {
        Arc::new(KeyBound {
            max: max.max(1),
            held: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            caches: Mutex::new(Vec::new()),
            partitions: AtomicU64::new(0),
            sampler: Hasher::default(),
            draws: AtomicU64::new(0),
            hasher: Hasher::default(),
        })
    }

    /// The most live counters the worker holds.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The live counters held now, in all partitions.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Live counters forgotten so far to stay within the bound.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    pub(super) fn full(&self) -> bool {
        self.held() >= self.max
    }

    pub(super) fn over(&self) -> bool {
        self.held() > self.max
    }

    pub(super) fn release(&self, n: usize) {
        if n > 0 {
            self.held.fetch_sub(n as u64, Ordering::Relaxed);
        }
    }

    pub(super) fn caches(&self) -> MutexGuard<'_, Vec<Weak<BucketCache>>> {
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn register(&self, cache: &Arc<BucketCache>) {
        let mut caches = self.caches();
        caches.retain(|c| c.strong_count() > 0);
        caches.push(Arc::downgrade(cache));
        self.partitions.fetch_add(1, Ordering::Relaxed);
    }

    /// The keys a bucket holds when the bound is evenly spread over the
    /// buckets of the live partitions (at least 1).
    pub(super) fn fair_share(&self) -> usize {
        let partitions = self.partitions.load(Ordering::Relaxed);
        let buckets = partitions.max(1) * BUCKETS;
        usize::try_from(self.max / buckets)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// Forgets one live counter outside `except` (a bucket that was just
    /// given a key over the bound), from a bucket holding at least its fair
    /// share, sampled at random (always starting the search at the same
    /// place would drain the buckets found first). The first bucket over
    /// its share whose least valuable key was asked once gives that key at
    /// once; otherwise the best of [`EVICTION_SAMPLE`] buckets: a key asked
    /// once before a key asked again, from a bucket over its share before
    /// one at it, then the least valuable. When that key was asked again
    /// (or no sampled bucket holds its share: a bound far smaller than the
    /// buckets, most of them empty), a walk over the buckets takes the first
    /// key asked once it finds, if any.
    pub(super) fn evict_elsewhere(&self, except: &Arc<Bucket>) {
        let caches: Vec<Arc<BucketCache>> =
            self.caches().iter().filter_map(Weak::upgrade).collect();
        if caches.is_empty() {
            return;
        }
        let fair = self.fair_share();
        // (asked again, at most its share, stamp): lowest goes first.
        let mut best: Option<((bool, bool, Stamp), Arc<Bucket>)> = None;
        for _ in 0..EVICTION_SAMPLE {
            let draw = self
                .sampler
                .hash_one(self.draws.fetch_add(1, Ordering::Relaxed));
            let cache = &caches[(draw % caches.len() as u64) as usize];
            let Some(bucket) = cache.buckets.get(&((draw >> 32) % BUCKETS)) else {
                continue;
            };
            if Arc::ptr_eq(&bucket, except) {
                continue;
            }
            // Never wait on a bucket a decision holds: another serves.
            let mut slots = match bucket.slots.try_lock() {
                Ok(slots) => slots,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            let len = slots.table.len();
            if len < fair {
                continue;
            }
            let Some(victim) = slots.victim() else {
                continue;
            };
            let stamp = victim.stamp;
            let rank = (stamp.asked_again(), len <= fair, stamp);
            if !rank.0 && !rank.1 {
                slots.evict(victim);
                return;
            }
            drop(slots);
            if best.as_ref().is_none_or(|(b, _)| rank < *b) {
                best = Some((rank, bucket));
            }
        }
        if let Some((_, bucket)) = best.as_ref().filter(|((again, _, _), _)| !again) {
            bucket.lock().evict_one();
            return;
        }
        // Every key sampled was asked again, or most buckets are empty:
        // walk the buckets from a partition drawn at random for a key asked
        // once, else take the best sampled, else the first key found.
        let first = (self.draws.fetch_add(1, Ordering::Relaxed) % caches.len() as u64) as usize;
        let mut any = None;
        let buckets = caches[first..]
            .iter()
            .chain(&caches[..first])
            .flat_map(|cache| cache.buckets.iter())
            .filter(|(_, bucket)| !Arc::ptr_eq(bucket, except))
            .take(EVICTION_WALK);
        for (_, bucket) in buckets {
            let mut slots = bucket.lock();
            match slots.victim() {
                Some(victim) if !victim.stamp.asked_again() => {
                    slots.evict(victim);
                    return;
                }
                Some(_) if any.is_none() => {
                    drop(slots);
                    any = Some(bucket);
                }
                _ => {}
            }
        }
        if let Some(bucket) = best.map(|(_, bucket)| bucket).or(any) {
            bucket.lock().evict_one();
        }
    }
}

/// How many buckets, drawn at random, an eviction elsewhere looks at when
/// none offers a key asked once in a bucket over its share.
const EVICTION_SAMPLE: usize = 16;

/// How many buckets an eviction elsewhere walks, at most, when the sample
/// found none holding its fair share.
const EVICTION_WALK: usize = 1024;
