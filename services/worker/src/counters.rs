//! One partition's counters: a moka cache of buckets, each a small table
//! from (policy, key) to the key's state, packed ([`table`]).
//!
//! Why buckets: a moka entry costs 340–385 bytes of its own
//! (docs/BENCHMARKS-HISTORY.md, "1M keys"), several times a key's
//! state, so one entry per key put a million keys at ~560 bytes each. Keys
//! are spread by hash over [`BUCKETS`] buckets per partition; moka holds the
//! buckets (and forgets a bucket once all of its keys have gone idle), and a
//! key costs only its record in its bucket's table: no allocation of its
//! own, 37 bytes for a key of the 1M test, ~100 bytes of RSS in all with the
//! table's index, its share of the bucket and the allocator's slack.
//!
//! A partition's counters are written by its owner task and, while the owner
//! answers, by worker-batch tasks ([`crate::worker_batch`]), and read by the
//! snapshot writer. A bucket is an `Arc` with a mutex: a decision is one
//! read-modify-write of the key's state under it, in place (no clone per
//! request, which `and_compute_with` would make), so each key is decided
//! exactly whichever task asks. On a worker's one-thread runtime the mutex
//! is contended only while a snapshot reads that bucket.
//!
//! A key may be forgotten once idle for as long as it takes its state to
//! become equivalent to a fresh one
//! ([`sluice_core::policy::Policy::idle_expiry`]); each slot remembers that
//! instant. A bucket that is used drops its forgettable slots at most once
//! every [`PRUNE_EVERY`]; a bucket that is not used expires in moka when its
//! longest-needed key could be forgotten, give or take some slack (at most
//! four times that long, so that the bucket need not be re-inserted on every
//! request), and never sooner than [`MIN_IDLE_TTL`]. So idle keys cost
//! nothing for long and expiry never forgets a count that still matters.
//!
//! Expiry alone does not bound memory: a flood of new keys, each counted
//! once, stays live for its window. So a worker's partitions share one
//! [`KeyBound`] (`max_keys`): past it, a new key makes room by forgetting
//! the least valuable live key, which under-counts that key (it may be
//! allowed up to what it had used once more), instead of refusing new keys
//! (which would let a flood lock every new user out) or growing until the
//! process dies (which would forget every key). Least valuable means: keys
//! counted only once before keys asked again (a flood's keys are each asked
//! once; a user's are asked again), then the one that would be forgotten
//! soonest anyway (for one policy, the one counted longest ago). The victim
//! comes from the new key's own bucket, already locked, unless that bucket
//! holds less than its fair share of the bound (a partition being
//! restored, or a bound smaller than the buckets); then from the first
//! bucket found holding more than that share, in any of the worker's
//! partitions (docs/CONFIG.md, `max_keys`).

use moka::sync::Cache;
use moka::Expiry;
use serde::{Deserialize, Serialize};
use sluice_core::ask::Op;
use sluice_core::budget::Outstanding;
use sluice_core::policy::{Decision, KeyState, Policy};
use sluice_core::time::Nanos;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::{Duration, Instant};

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

/// The shortest idle ttl a bucket gets. A token bucket or GCRA key at a
/// rate of 100/s may be forgotten ~10 ms after its last request; a bucket
/// that expired that soon was gone again by the next request for any of its
/// keys, which then paid a new bucket, a moka insert and an eviction (a
/// fifth of a worker's CPU in a GCRA profile). Keeping buckets this long
/// costs at most the 64 × [`BUCKETS`] bucket entries a worker may hold
/// anyway (~1.5 MB), plus forgettable slots until the bucket's next prune.
pub const MIN_IDLE_TTL: Duration = Duration::from_secs(2);

mod table;

use table::{Table, Work};

thread_local! {
    /// The states decisions unpack keys into and the buffer they pack them
    /// into again, one per thread (a decision holds its bucket's lock, not
    /// the thread, while it uses them).
    static WORK: RefCell<Work> = RefCell::default();
}

/// When a slot may be forgotten, and whether its key was asked for again
/// after it was stored, in one word (a flag of its own would cost 8 bytes of
/// padding per key): the top bit is the flag, free because times stay below
/// 2^63 ns since the epoch until the year 2262. Ordered as words, stamps
/// rank slots in the order the key bound forgets them: asked once before
/// asked again, each the earliest forgettable first. A bucket's table keeps
/// it in 4 bytes, to the second (rounded up), with the flag beside it
/// ([`table`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Stamp(u64);

impl Stamp {
    const ASKED_AGAIN: u64 = 1 << 63;
    /// Ranks below every other stamp.
    const ZERO: Stamp = Stamp(0);
    /// Ranks above every other stamp.
    const MAX: Stamp = Stamp(u64::MAX);

    fn new(forgettable_at: Nanos, asked_again: bool) -> Stamp {
        let at = forgettable_at.as_u64().min(Stamp::ASKED_AGAIN - 1);
        Stamp(if asked_again {
            at | Stamp::ASKED_AGAIN
        } else {
            at
        })
    }

    fn forgettable_at(self) -> Nanos {
        Nanos(self.0 & !Stamp::ASKED_AGAIN)
    }

    fn asked_again(self) -> bool {
        self.0 & Stamp::ASKED_AGAIN != 0
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
    max: u64,
    held: AtomicU64,
    evicted: AtomicU64,
    /// The bucket caches of the worker's live partitions, where an eviction
    /// the new key's own bucket cannot make looks for its victim.
    caches: Mutex<Vec<Weak<BucketCache>>>,
    /// How many of those are live.
    partitions: AtomicU64,
    /// Draws the buckets such an eviction looks at.
    sampler: Hasher,
    draws: AtomicU64,
    /// Hashes the counter keys of every partition of the worker, so that a
    /// bucket can find a key's hash again wherever the eviction comes from.
    hasher: Hasher,
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

    fn full(&self) -> bool {
        self.held() >= self.max
    }

    fn over(&self) -> bool {
        self.held() > self.max
    }

    fn release(&self, n: usize) {
        if n > 0 {
            self.held.fetch_sub(n as u64, Ordering::Relaxed);
        }
    }

    fn caches(&self) -> MutexGuard<'_, Vec<Weak<BucketCache>>> {
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&self, cache: &Arc<BucketCache>) {
        let mut caches = self.caches();
        caches.retain(|c| c.strong_count() > 0);
        caches.push(Arc::downgrade(cache));
        self.partitions.fetch_add(1, Ordering::Relaxed);
    }

    /// The keys a bucket holds when the bound is evenly spread over the
    /// buckets of the live partitions (at least 1).
    fn fair_share(&self) -> usize {
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
    fn evict_elsewhere(&self, except: &Arc<Bucket>) {
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

/// The hasher of the bucket maps and of the choice of bucket: foldhash, the
/// one hashbrown uses, several times cheaper than std's SipHash on short keys
/// and seeded per process, so keys cannot be made to collide in advance.
type Hasher = foldhash::fast::RandomState;

/// A bucket's keys: for each, its state and the instant from which that
/// equals a fresh one, packed into a [`Table`].
#[derive(Debug)]
struct Slots {
    table: Table,
    /// No prune before this: none is due (no slot is forgettable yet, as
    /// far as inserts tell) or the last one was less than PRUNE_EVERY ago.
    next_prune: Nanos,
    /// Counts the slots above.
    bound: Arc<KeyBound>,
}

impl Drop for Slots {
    fn drop(&mut self) {
        self.bound.release(self.table.len());
    }
}

impl Slots {
    fn new(bound: Arc<KeyBound>) -> Slots {
        Slots {
            table: Table::default(),
            next_prune: Nanos::ZERO,
            bound,
        }
    }

    /// Drops the slots that may be forgotten at `now`, if a prune is due,
    /// and returns how long the remaining slots are needed at most.
    fn prune(&mut self, now: Nanos) -> Option<u64> {
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

    /// Stores a new key (`hash` is its hash, `rehash` hashes the keys
    /// stored) with its state and stamp, within the key bound when this
    /// bucket holds at least its fair share and a key asked only once: then
    /// the least valuable of those makes room. A sliding log is moved out
    /// of `state`; `bytes` is a buffer to pack it in.
    /// Returns true when the key was stored over the bound, so that the
    /// caller, once it holds no lock, has [`KeyBound::evict_elsewhere`]
    /// make room.
    #[allow(clippy::too_many_arguments)]
    fn remember(
        &mut self,
        hash: u64,
        key: &str,
        state: &mut KeyState,
        stamp: Stamp,
        now: Nanos,
        bytes: &mut Vec<u8>,
        rehash: impl Fn(&[u8]) -> u64,
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
        self.table.insert(hash, key, stamp, state, bytes, rehash);
        full && self.bound.over()
    }

    /// The least valuable key (see the module doc), found without a scan
    /// of the bucket most of the time ([`table`]).
    fn victim(&mut self) -> Option<Victim> {
        let hasher = &self.bound.hasher;
        let (at, stamp, hash) = self.table.least(|k| hasher.hash_one(k))?;
        Some(Victim { at, stamp, hash })
    }

    /// Forgets `victim`, just found by [`Slots::victim`].
    fn evict(&mut self, victim: Victim) {
        self.table.remove_at(victim.hash, victim.at);
        self.bound.release(1);
        self.bound.evicted.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets the least valuable key, if any.
    fn evict_one(&mut self) {
        if let Some(victim) = self.victim() {
            self.evict(victim);
        }
    }

    fn remove(&mut self, hash: u64, key: &str) -> bool {
        let removed = self.table.remove(hash, key);
        if removed {
            self.bound.release(1);
        }
        removed
    }
}

/// A bucket's least valuable key: where its record is, its stamp and hash.
#[derive(Clone, Copy, Debug)]
struct Victim {
    at: u32,
    stamp: Stamp,
    hash: u64,
}

/// Some keys' slots plus how long the bucket may stay unused before all of
/// them can be forgotten.
#[derive(Debug)]
pub struct Bucket {
    slots: Mutex<Slots>,
    idle_ttl_ns: AtomicU64,
}

impl Bucket {
    fn new(bound: Arc<KeyBound>) -> Bucket {
        Bucket {
            slots: Mutex::new(Slots::new(bound)),
            idle_ttl_ns: AtomicU64::new(0),
        }
    }

    fn idle_ttl_ns(&self) -> u64 {
        self.idle_ttl_ns.load(Ordering::Relaxed)
    }

    fn set_idle_ttl_ns(&self, ns: u64) {
        self.idle_ttl_ns.store(ns, Ordering::Relaxed);
    }

    fn idle_ttl(&self) -> Duration {
        Duration::from_nanos(self.idle_ttl_ns())
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A snapshot entry: the counter key and its state.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    pub key: String,
    pub state: KeyState,
}

struct IdleExpiry;

impl Expiry<u64, Arc<Bucket>> for IdleExpiry {
    fn expire_after_create(&self, _k: &u64, v: &Arc<Bucket>, _now: Instant) -> Option<Duration> {
        Some(v.idle_ttl())
    }
    fn expire_after_read(
        &self,
        _k: &u64,
        v: &Arc<Bucket>,
        _now: Instant,
        _current: Option<Duration>,
        _last_modified: Instant,
    ) -> Option<Duration> {
        Some(v.idle_ttl())
    }
    fn expire_after_update(
        &self,
        _k: &u64,
        v: &Arc<Bucket>,
        _now: Instant,
        _current: Option<Duration>,
    ) -> Option<Duration> {
        Some(v.idle_ttl())
    }
}

/// A bucket used lately, and until when moka keeps it at least: its expiry
/// as of our last `get` or `insert`, computed from a clock read before that
/// call, so never later than moka's own.
struct Recent {
    bucket: Arc<Bucket>,
    kept_until: Instant,
}

/// How close to `kept_until` a decision stops trusting [`Recent`] and asks
/// moka again (moka's clock is read a little after ours).
const KEPT_MARGIN: Duration = Duration::from_millis(5);

fn deadline(from: Instant, ttl_ns: u64) -> Instant {
    // A ttl too long for `Instant` is cut to a year: earlier is always safe.
    from.checked_add(Duration::from_nanos(ttl_ns))
        .unwrap_or(from + Duration::from_secs(365 * 24 * 3600))
}

/// The counters of one partition.
///
/// `recent` is a look-aside, one lock per bucket: moka's `get` was the
/// largest single cost of a decision (a hash probe, read recording and
/// expiry housekeeping, ~20 % of the worker's CPU), and a bucket in use is
/// found again long before its moka expiry is near. So each bucket used is
/// kept with the moka deadline it then had, and moka is skipped while that
/// deadline is safely ahead and covers the key's new need, judged by a clock
/// read after the write (a thread may stall between its lookup and its
/// write); otherwise a decision reads (or re-inserts) as without the
/// look-aside, which moves the deadline. moka evicts only by expiry here (no size bound, no
/// invalidation), so a bucket is in moka until its deadline: the snapshot
/// sees every write.
#[derive(Clone)]
pub struct Counters {
    buckets: Arc<BucketCache>,
    hasher: Hasher,
    recent: Arc<[Mutex<Option<Recent>>]>,
    /// The slices of local budgets granted from these counters and not
    /// back yet (a refund gives back at most its own slice).
    slices: Arc<Mutex<Outstanding>>,
    /// [`MIN_IDLE_TTL`] in ns (tests lower it to watch buckets expire).
    min_idle_ttl_ns: u64,
    bound: Arc<KeyBound>,
}

/// One partition's buckets, registered with the worker's [`KeyBound`].
struct BucketCache {
    buckets: Cache<u64, Arc<Bucket>, Hasher>,
    bound: Arc<KeyBound>,
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

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

impl Counters {
    /// Counters of their own, bounded only by the default `max_keys`.
    pub fn new() -> Counters {
        Counters::within(KeyBound::new(sluice_core::config::DEFAULT_MAX_KEYS))
    }

    /// A partition's counters within the worker's `bound`.
    pub fn within(bound: Arc<KeyBound>) -> Counters {
        Counters::with(bound, MIN_IDLE_TTL)
    }

    /// Counters whose buckets may expire after `min` idle (see [`MIN_IDLE_TTL`]).
    pub fn with_min_idle_ttl(min: Duration) -> Counters {
        Counters::with(KeyBound::new(sluice_core::config::DEFAULT_MAX_KEYS), min)
    }

    fn with(bound: Arc<KeyBound>, min_idle_ttl: Duration) -> Counters {
        let buckets = Arc::new(BucketCache {
            buckets: Cache::builder()
                .expire_after(IdleExpiry)
                .build_with_hasher(Hasher::default()),
            bound: bound.clone(),
        });
        bound.register(&buckets);
        Counters {
            hasher: bound.hasher.clone(),
            bound,
            buckets,
            recent: (0..BUCKETS).map(|_| Mutex::new(None)).collect(),
            slices: Arc::default(),
            min_idle_ttl_ns: u64::try_from(min_idle_ttl.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// The idle ttl stored for a need: a quarter more, so that a need that
    /// grows a little (a sliding window's, at every window change) stays
    /// covered, and at least the minimum.
    fn ttl_for(&self, needed: u64) -> u64 {
        needed.saturating_add(needed / 4).max(self.min_idle_ttl_ns)
    }

    /// The hash of a counter key: its bucket is drawn from bits 32 and up,
    /// and its bucket's index uses the rest (hashbrown takes the low bits
    /// for the slot and the top 7 for the tag).
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn bucket_of_hash(hash: u64) -> u64 {
        (hash >> 32) % BUCKETS
    }

    #[cfg(test)]
    fn bucket_of(&self, key: &str) -> u64 {
        Counters::bucket_of_hash(self.hash(key.as_bytes()))
    }

    fn recent(&self, id: u64) -> MutexGuard<'_, Option<Recent>> {
        self.recent[id as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `op` to the counter `key` (built with [`sluice_core::ask::counter_key`]) under
    /// `policy` at `now`. The caller has validated the cost.
    pub fn apply(&self, policy: &Policy, key: &str, now: Nanos, op: Op) -> Decision {
        self.update(policy, key, now, |state| op.apply(policy, state, now))
    }

    /// Runs `f` on the state of the counter `key` under `policy` at `now`
    /// and stores what it leaves (one read-modify-write under the bucket's
    /// lock): [`Counters::apply`], and the grants and refunds of local
    /// budgets ([`sluice_core::budget`]).
    pub fn update<R>(
        &self,
        policy: &Policy,
        key: &str,
        now: Nanos,
        f: impl FnOnce(&mut KeyState) -> R,
    ) -> R {
        let hash = self.hash(key.as_bytes());
        let id = Counters::bucket_of_hash(hash);
        let t = Instant::now();
        let mut recent = self.recent(id);
        let (bucket, fresh, mut kept_until) = match recent.as_ref() {
            Some(r) if t + KEPT_MARGIN < r.kept_until => (r.bucket.clone(), false, r.kept_until),
            _ => match self.buckets.get(&id) {
                Some(bucket) => {
                    let kept_until = deadline(t, bucket.idle_ttl_ns());
                    (bucket, false, kept_until)
                }
                None => (Arc::new(Bucket::new(self.bound.clone())), true, t),
            },
        };
        #[cfg(test)]
        std::thread::sleep(tests::STALL_AFTER_LOOKUP.with(|s| s.get()));
        let mut slots = bucket.lock();
        let pruned = slots.prune(now);
        let run = |state: &mut KeyState| {
            let out = f(state);
            (out, policy.idle_expiry(state, now))
        };
        let mut over_bound = false;
        let (decision, needed) = WORK.with_borrow_mut(|work| match slots.table.find(hash, key) {
            Some(at) => {
                let ((decision, needed), at) = slots.table.update(hash, at, work, run);
                if needed == Nanos::ZERO {
                    slots.table.remove_at(hash, at);
                    slots.bound.release(1);
                } else {
                    let stamp = Stamp::new(now.saturating_add(needed), true);
                    slots.table.set_stamp(hash, at, stamp);
                }
                (decision, needed.as_u64())
            }
            None => {
                let Work { states, bytes } = work;
                let state = states.fresh(policy);
                let (decision, needed) = run(state);
                // A fresh key that took nothing (a peek or a denial) is not
                // stored at all.
                if needed > Nanos::ZERO {
                    let stamp = Stamp::new(now.saturating_add(needed), false);
                    let rehash = |k: &[u8]| self.hash(k);
                    over_bound = slots.remember(hash, key, state, stamp, now, bytes, rehash);
                }
                (decision, needed.as_u64())
            }
        });
        let empty = slots.table.is_empty();
        drop(slots);
        // moka fixed this bucket's expiry when we read it, from the stored
        // ttl; only a re-insert makes it longer. So a ttl that must grow is
        // stored with a quarter of slack, and is lowered (when a prune shows
        // every slot needs less than a quarter of it) but not raised while
        // the need stays under it: a bucket in use is re-inserted a few
        // times, not on every request.
        let stored = bucket.idle_ttl_ns();
        if (fresh || needed > stored) && !empty {
            let ttl = self.ttl_for(needed);
            bucket.set_idle_ttl_ns(ttl);
            self.buckets.insert(id, bucket.clone());
            kept_until = deadline(t, ttl);
        } else {
            if let Some(longest) = pruned {
                // Lowering is always safe: the stored ttl then still covers
                // the longest need of the bucket's slots, from the next read
                // on, and until then the deadline set by the last one holds.
                let longest = longest.max(needed);
                let lowered = self.ttl_for(longest);
                if longest.saturating_mul(4) < stored && lowered < stored {
                    bucket.set_idle_ttl_ns(lowered);
                }
            }
            // The bucket's deadline may not cover this key's new need, or may
            // have passed while this thread was not running (the clock read
            // at the start is stale then, and moka may have expired the
            // bucket this decision just wrote to): judged by the clock now, a
            // read moves the deadline as it would have, and a bucket moka let
            // go of is inserted again. No other decision on this bucket ran
            // meanwhile (the look-aside slot is locked), so it holds every
            // count.
            let written = Instant::now();
            if !fresh && !empty && deadline(written, needed) + KEPT_MARGIN > kept_until {
                let ttl = bucket.idle_ttl_ns();
                if self.buckets.get(&id).is_none() {
                    self.buckets.insert(id, bucket.clone());
                }
                kept_until = deadline(written, ttl);
            }
        }
        if over_bound {
            // With no lock held: the victim's bucket may be any.
            drop(recent);
            self.bound.evict_elsewhere(&bucket);
            *self.recent(id) = Some(Recent { bucket, kept_until });
        } else {
            *recent = (!fresh || !empty).then_some(Recent { bucket, kept_until });
        }
        decision
    }

    /// The bucket of `id` as decisions see it: the one in the look-aside,
    /// else moka's. `recent` is the look-aside slot, locked by the caller.
    fn bucket(&self, id: u64, recent: &Option<Recent>) -> Option<Arc<Bucket>> {
        match recent {
            Some(r) => Some(r.bucket.clone()),
            None => self.buckets.get(&id),
        }
    }

    /// A copy of the counter `key`'s state, if it has one (`rl.inspect`).
    pub fn state(&self, key: &str) -> Option<KeyState> {
        let hash = self.hash(key.as_bytes());
        let id = Counters::bucket_of_hash(hash);
        let recent = self.recent(id);
        let bucket = self.bucket(id, &recent)?;
        let slots = bucket.lock();
        let at = slots.table.find(hash, key)?;
        let mut work = Work::default();
        Some(slots.table.read(at, &mut work, KeyState::clone))
    }

    /// Forgets the counter `key` (`rl.reset`), and the slices granted
    /// from it; whether it had state.
    pub fn forget(&self, key: &str) -> bool {
        self.slices().forget(key);
        let hash = self.hash(key.as_bytes());
        let id = Counters::bucket_of_hash(hash);
        let recent = self.recent(id);
        let Some(bucket) = self.bucket(id, &recent) else {
            return false;
        };
        let mut slots = bucket.lock();
        slots.remove(hash, key)
    }

    /// The slices granted from these counters and not back yet.
    pub fn slices(&self) -> MutexGuard<'_, Outstanding> {
        self.slices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of live counters (approximate while requests are running).
    pub fn len(&self) -> u64 {
        let mut keys = 0;
        for (_, bucket) in self.buckets.iter() {
            keys += bucket.lock().table.len() as u64;
        }
        keys
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with every counter, for a snapshot, unpacking each state
    /// into one reused working state (no allocation per key).
    /// Not a point-in-time view: a counter changed meanwhile may be seen
    /// before or after the change. Each bucket is locked only while `f` runs
    /// over its keys.
    pub fn for_each(&self, mut f: impl FnMut(&str, &KeyState)) {
        let mut work = Work::default();
        for (_, bucket) in self.buckets.iter() {
            let slots = bucket.lock();
            for at in slots.table.records() {
                slots
                    .table
                    .read(at, &mut work, |state| f(slots.table.key(at), state));
            }
        }
    }

    /// Loads restored counters (before the partition answers anything).
    /// Entries that went idle meanwhile, or whose policy no longer exists,
    /// are dropped. Returns how many were kept.
    pub fn import<'p>(
        &self,
        entries: Vec<Entry>,
        now: Nanos,
        policy_of: impl Fn(&str) -> Option<&'p Policy>,
    ) -> usize {
        // Grouped by bucket first, so that each bucket is looked up, locked
        // and inserted into moka once, not once per key.
        // Per bucket: its entries (with their hash and stamp) and the
        // longest need among them.
        type Group = (Vec<(u64, Entry, Stamp)>, u64);
        let mut grouped: HashMap<u64, Group> = HashMap::new();
        let mut kept = 0;
        for Entry { key, mut state } in entries {
            let Some((policy_name, _)) = key.split_once('/') else {
                continue;
            };
            let Some(policy) = policy_of(policy_name) else {
                continue;
            };
            let needed = policy.idle_expiry(&mut state, now);
            if needed == Nanos::ZERO {
                continue;
            }
            let hash = self.hash(key.as_bytes());
            let (slots, longest) = grouped.entry(Counters::bucket_of_hash(hash)).or_default();
            *longest = (*longest).max(needed.as_u64());
            let stamp = Stamp::new(now.saturating_add(needed), false);
            slots.push((hash, Entry { key, state }, stamp));
            kept += 1;
        }
        for (id, (new_slots, longest)) in grouped {
            *self.recent(id) = None;
            let bucket = self
                .buckets
                .get(&id)
                .unwrap_or_else(|| Arc::new(Bucket::new(self.bound.clone())));
            let mut slots = bucket.lock();
            let rehash = |k: &[u8]| self.hash(k);
            slots.table.reserve(new_slots.len(), rehash);
            let mut over_bound = 0;
            let mut bytes = Vec::new();
            for (hash, mut entry, stamp) in new_slots {
                let (key, state) = (&entry.key, &mut entry.state);
                over_bound +=
                    usize::from(slots.remember(hash, key, state, stamp, now, &mut bytes, rehash));
            }
            drop(slots);
            bucket.set_idle_ttl_ns(self.ttl_for(longest).max(bucket.idle_ttl_ns()));
            self.buckets.insert(id, bucket.clone());
            for _ in 0..over_bound {
                self.bound.evict_elsewhere(&bucket);
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::ask::counter_key;
    use sluice_core::policy::{Algorithm, Limit};
    use std::cell::Cell;

    thread_local! {
        /// How long `apply` stalls between finding the bucket and writing to
        /// it: a thread the OS did not run for a while.
        pub(super) static STALL_AFTER_LOOKUP: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    /// A decision whose thread stalls after taking its bucket from the
    /// look-aside, past the bucket's moka deadline, must still leave its
    /// count where the next decision finds it. (Seen under a load average
    /// of 6 on 2 cores in `decisions_match_a_map_that_never_forgets_...`:
    /// the end-of-decision check used the clock read before the stall, so
    /// the bucket moka had expired was not inserted again and the next
    /// decision started the key afresh.)
    #[test]
    fn a_stall_past_the_bucket_deadline_loses_no_count() {
        let policy = Policy::new(
            "default",
            Algorithm::FixedWindow,
            vec![Limit::new(2, Duration::from_millis(100), None).unwrap()],
        )
        .unwrap();
        let counters = Counters::with_min_idle_ttl(Duration::from_millis(1));
        let now = Nanos::from_secs(1_000);
        let key = "default/stalled";
        assert!(counters.apply(&policy, key, now, Op::Allow(1)).allowed);
        // The bucket's moka ttl is at most 125 ms (the window and a
        // quarter); the second decision takes it from the look-aside and
        // then stalls past that, in the same window of logical time.
        STALL_AFTER_LOOKUP.with(|s| s.set(Duration::from_millis(300)));
        assert!(counters.apply(&policy, key, now, Op::Allow(1)).allowed);
        STALL_AFTER_LOOKUP.with(|s| s.set(Duration::ZERO));
        let third = counters.apply(&policy, key, now, Op::Allow(1));
        assert!(
            !third.allowed,
            "two were counted in this window of 2; the stalled one was lost: {third:?}"
        );
    }

    const SEC: u64 = 1_000_000_000;

    /// The stored idle ttl of the bucket holding `key`, if the cache holds
    /// it (read without `get`, which would restart the bucket's expiry).
    fn stored_ttl(counters: &Counters, key: &str) -> Option<u64> {
        let id = counters.bucket_of(key);
        counters
            .buckets
            .iter()
            .find(|(k, _)| **k == id)
            .map(|(_, bucket)| bucket.idle_ttl_ns())
    }

    /// `n` keys of the builtin policy that share `key`'s bucket.
    fn neighbours(counters: &Counters, key: &str, n: usize) -> Vec<String> {
        let bucket = counters.bucket_of(key);
        let mut buf = String::new();
        (0..)
            .map(|i| {
                counter_key(&mut buf, "default", &format!("n-{i}"));
                buf.clone()
            })
            .filter(|k| counters.bucket_of(k) == bucket)
            .take(n)
            .collect()
    }

    #[test]
    fn a_peek_or_a_denial_on_a_fresh_key_stores_nothing() {
        let policy = Policy::builtin_default();
        let counters = Counters::new();
        counters.apply(&policy, "default/a", Nanos::from_secs(100), Op::Allow(0));
        assert_eq!(stored_ttl(&counters, "default/a"), None);
        assert_eq!(counters.len(), 0);
    }

    #[test]
    fn the_stored_ttl_covers_the_need_and_only_grows_when_the_need_outgrows_it() {
        // 15 per second, sliding window: a counted key matters until the end
        // of the window after its own.
        let policy = Policy::builtin_default();
        let counters = Counters::with_min_idle_ttl(Duration::ZERO);
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
        // covered, so the ttl stays and the bucket is not re-inserted.
        counters.apply(&policy, key, Nanos(101 * SEC + SEC / 2), Op::Allow(1));
        assert_eq!(stored_ttl(&counters, key), Some(grown));
        counters.apply(&policy, key, Nanos(102 * SEC + SEC / 10), Op::Allow(1));
        assert_eq!(stored_ttl(&counters, key), Some(grown));
    }

    #[test]
    fn a_bucket_of_short_lived_keys_is_kept_for_the_minimum_idle_ttl() {
        // GCRA at 100/s: a key that took one may be forgotten ~10 ms later.
        use sluice_core::policy::{Algorithm, Limit};
        let limits = vec![Limit::new(100, Duration::from_secs(1), None).unwrap()];
        let policy = Policy::new("fast", Algorithm::Gcra, limits).unwrap();
        let now = Nanos::from_secs(100);
        let unfloored = Counters::with_min_idle_ttl(Duration::ZERO);
        unfloored.apply(&policy, "fast/a", now, Op::Allow(1));
        let need = stored_ttl(&unfloored, "fast/a").unwrap();
        assert!(need < SEC / 10, "the key's own need is short: {need} ns");
        // By default its bucket stays for the minimum, so that the next
        // request for any of its keys finds it instead of building it anew.
        let counters = Counters::new();
        counters.apply(&policy, "fast/a", now, Op::Allow(1));
        assert_eq!(
            stored_ttl(&counters, "fast/a"),
            Some(MIN_IDLE_TTL.as_nanos() as u64)
        );
    }

    #[test]
    fn keys_sharing_a_bucket_keep_their_own_counts() {
        // 15 per second: each of the neighbours takes 15, then is denied,
        // whatever the others did.
        let policy = Policy::builtin_default();
        let counters = Counters::new();
        let keys = neighbours(&counters, "default/a", 20);
        let now = Nanos::from_secs(100);
        for round in 0..16 {
            for key in &keys {
                let decision = counters.apply(&policy, key, now, Op::Allow(1));
                assert_eq!(decision.allowed, round < 15, "{key} in round {round}");
            }
        }
        assert_eq!(counters.len(), 20);
        // The bucket's ttl covers the need of every key in it (until 102 s).
        assert!(stored_ttl(&counters, &keys[0]).unwrap() >= 2 * SEC);
    }

    #[test]
    fn a_bucket_in_use_forgets_its_idle_keys_and_lowers_its_ttl() {
        let policy = Policy::builtin_default();
        let counters = Counters::with_min_idle_ttl(Duration::ZERO);
        let keys = neighbours(&counters, "default/a", 3);
        // Counted at 100 s: each needed until 102 s.
        for key in &keys {
            counters.apply(&policy, key, Nanos::from_secs(100), Op::Allow(1));
        }
        assert_eq!(counters.len(), 3);
        let before = stored_ttl(&counters, &keys[0]).unwrap();

        assert_eq!(before, 2 * SEC + SEC / 2);

        // At 200 s the first is peeked at: all three have been forgettable
        // for long, so the bucket drops them, and its ttl falls to zero.
        counters.apply(&policy, &keys[0], Nanos::from_secs(200), Op::Allow(0));
        assert_eq!(counters.len(), 0, "a peek on a stale key leaves no need");
        assert_eq!(stored_ttl(&counters, &keys[0]), Some(0));

        // Counted again, the key is stored again and the ttl covers it.
        counters.apply(&policy, &keys[1], Nanos::from_secs(300), Op::Allow(1));
        let mut left = Vec::new();
        counters.for_each(|key, _| left.push(key.to_string()));
        assert_eq!(left, vec![keys[1].clone()]);
        assert_eq!(stored_ttl(&counters, &keys[1]), Some(before));
    }

    #[test]
    fn a_prune_keeps_the_keys_that_still_matter() {
        // Prunes drop only slots whose state equals a fresh one.
        let policy = Policy::builtin_default();
        let counters = Counters::new();
        let keys = neighbours(&counters, "default/a", 2);
        // keys[1] counted at 100 s: needed until 102 s. keys[0] takes all 15
        // at 101.9 s: needed until 103 s.
        counters.apply(&policy, &keys[1], Nanos::from_secs(100), Op::Allow(1));
        let late = Nanos(101 * SEC + 9 * SEC / 10);
        for _ in 0..15 {
            assert!(
                counters
                    .apply(&policy, &keys[0], late, Op::Allow(1))
                    .allowed
            );
        }
        // At 102.05 s a peek at keys[1] prunes the bucket: keys[1] goes,
        // keys[0] stays and still weighs 95 % of its 15.
        let t = Nanos(102 * SEC + SEC / 20);
        counters.apply(&policy, &keys[1], t, Op::Allow(0));
        let mut left = Vec::new();
        counters.for_each(|key, _| left.push(key.to_string()));
        assert_eq!(left, vec![keys[0].clone()]);
        let fresh = counters.apply(&policy, &keys[1], t, Op::Allow(0));
        let kept = counters.apply(&policy, &keys[0], t, Op::Allow(0));
        assert_eq!(fresh.remaining, 15);
        assert!(kept.remaining <= 1, "remaining {}", kept.remaining);
    }

    #[test]
    fn decisions_match_a_map_that_never_forgets_while_moka_expires_buckets() {
        // Limits of a few milliseconds, so that while this runs real time
        // crosses bucket deadlines: moka expires idle buckets, the
        // look-aside goes stale, buckets are read again, refreshed and
        // re-inserted, slots are pruned. Policy time is real time, as in the
        // worker. Forgetting may only drop a state that equals a fresh one,
        // so every decision must equal that of a map that forgets nothing.
        use sluice_core::policy::{Algorithm, Limit};
        let algorithms = [
            Algorithm::FixedWindow,
            Algorithm::SlidingLog,
            Algorithm::SlidingWindow,
            Algorithm::TokenBucket,
            Algorithm::Gcra,
        ];
        for algorithm in algorithms {
            let limits = vec![
                Limit::new(3, Duration::from_millis(4), None).unwrap(),
                Limit::new(5, Duration::from_millis(15), None).unwrap(),
            ];
            let policy = Policy::new("default", algorithm, limits).unwrap();
            let counters = Counters::with_min_idle_ttl(Duration::ZERO);
            // Three groups of keys, two of them sharing one bucket each,
            // asked in turn: 7 ms each (a bucket comes back 14 ms later,
            // inside its moka ttl of ~20 ms but maybe past the deadline the
            // look-aside knows), then, every other 200 ms, 40 ms each (idle
            // long enough for moka to expire the bucket).
            let mut keys = neighbours(&counters, "default/a", 3);
            keys.extend(neighbours(&counters, "default/b", 3));
            keys.extend(["default/c1", "default/c2", "default/c3"].map(String::from));
            let mut reference: HashMap<String, KeyState> = HashMap::new();
            let start = Instant::now();
            let base = Nanos::from_secs(1_000_000);
            let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut ops = 0u64;
            while ops < 1_000_000 && (ops < 5_000 || start.elapsed() < Duration::from_millis(600)) {
                ops += 1;
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let r = seed >> 33;
                let ms = start.elapsed().as_millis();
                let turn = if (ms / 200).is_multiple_of(2) { 7 } else { 40 };
                let group = (ms / turn % 3) as usize;
                let key = &keys[group * 3 + (r % 3) as usize];
                let op = match r % 10 {
                    0 => Op::Allow(0),
                    1 => Op::Record(2),
                    _ => Op::Allow(1),
                };
                let now = base.saturating_add(Nanos::from(start.elapsed()));
                let got = counters.apply(&policy, key, now, op);
                let state = reference
                    .entry(key.clone())
                    .or_insert_with(|| policy.new_state());
                let want = op.apply(&policy, state, now);
                assert_eq!(got, want, "{algorithm:?}, op {ops} {op:?} on {key}");
                // What still matters is in moka, where a snapshot reads it
                // (`iter` does not move moka's expiry, as `get` would): if
                // the key is live after the look, the look must have found it.
                let hash = counters.hash(key.as_bytes());
                let id = Counters::bucket_of_hash(hash);
                let in_moka = counters
                    .buckets
                    .iter()
                    .any(|(k, bucket)| *k == id && bucket.lock().table.find(hash, key).is_some());
                let after = base.saturating_add(Nanos::from(start.elapsed()));
                if !in_moka && policy.idle_expiry(state, after) > Nanos::ZERO {
                    panic!("{algorithm:?}, op {ops}: {key} is live but not in moka");
                }
            }
        }
    }

    /// `n` distinct counter keys of the builtin policy named `prefix-<i>`.
    fn keys(prefix: &str, n: usize) -> Vec<String> {
        let mut buf = String::new();
        (0..n)
            .map(|i| {
                counter_key(&mut buf, "default", &format!("{prefix}-{i}"));
                buf.clone()
            })
            .collect()
    }

    #[test]
    fn a_flood_of_new_keys_stays_within_the_bound_and_spares_keys_asked_again() {
        // One partition; a bound of 32 keys per bucket on average, room
        // for the 500 users. Buckets are kept for an hour: policy time
        // stands still here while real time passes, and moka expires
        // buckets in real time.
        let max = 32 * BUCKETS;
        let bound = KeyBound::new(max);
        let counters = Counters::with(bound.clone(), Duration::from_secs(3600));
        let policy = Policy::builtin_default();
        let now = Nanos::from_secs(100);
        let users = keys("user", 500);
        for user in &users {
            for _ in 0..2 {
                assert!(counters.apply(&policy, user, now, Op::Allow(1)).allowed);
            }
        }
        // Twenty times the bound in new keys, each counted once.
        let flood = keys("flood", 20 * max as usize);
        for (i, key) in flood.iter().enumerate() {
            counters.apply(&policy, key, now, Op::Allow(1));
            assert!(
                bound.held() <= max + 1,
                "{} held after {i} flood keys, bound {max}",
                bound.held()
            );
        }
        assert_eq!(bound.held(), counters.len(), "held counts what is stored");
        assert!(
            bound.held() >= max - 1,
            "the bound is used: {}",
            bound.held()
        );
        assert_eq!(bound.evicted(), 500 + flood.len() as u64 - bound.held());
        // Every user kept the two it took: 13 of 15 left.
        let lost: Vec<&String> = users
            .iter()
            .filter(|user| counters.apply(&policy, user, now, Op::Allow(0)).remaining != 13)
            .collect();
        assert!(lost.is_empty(), "{} users forgotten: {lost:?}", lost.len());
        drop(counters);
        assert_eq!(bound.held(), 0, "dropped counters release their keys");
    }

    #[test]
    fn a_bound_far_below_the_buckets_still_holds_and_spares_keys_asked_again() {
        // 50 keys over 2 × 64 buckets: most buckets are empty.
        let bound = KeyBound::new(50);
        let long = Duration::from_secs(3600);
        let partitions = [
            Counters::with(bound.clone(), long),
            Counters::with(bound.clone(), long),
        ];
        let policy = Policy::builtin_default();
        let now = Nanos::from_secs(100);
        let users = keys("user", 10);
        for (i, user) in users.iter().enumerate() {
            for _ in 0..2 {
                partitions[i % 2].apply(&policy, user, now, Op::Allow(1));
            }
        }
        for (i, key) in keys("flood", 2_000).iter().enumerate() {
            partitions[i % 2].apply(&policy, key, now, Op::Allow(1));
            assert!(bound.held() <= 51, "{} held", bound.held());
        }
        for (i, user) in users.iter().enumerate() {
            let peek = partitions[i % 2].apply(&policy, user, now, Op::Allow(0));
            assert_eq!(peek.remaining, 13, "{user} was forgotten");
        }
    }

    #[test]
    fn the_least_valuable_slot_goes_first() {
        // A bucket of keys asked once and again, at different times: the
        // first to go is asked once and counted earliest, then the other
        // asked once, then the one asked again counted earliest. A token
        // bucket of 100 an hour: a key that took one is needed for 36 s from
        // when it took it, so keys counted a second apart rank apart.
        let limits = vec![Limit::new(100, Duration::from_secs(3600), None).unwrap()];
        let policy = Policy::new("default", Algorithm::TokenBucket, limits).unwrap();
        let bound = KeyBound::new(4);
        let counters = Counters::within(bound.clone());
        let keys = neighbours(&counters, "default/a", 7);
        let at = |s: u64| Nanos::from_secs(100 + s);
        counters.apply(&policy, &keys[0], at(0), Op::Allow(1)); // again, early
        counters.apply(&policy, &keys[0], at(0), Op::Allow(1));
        counters.apply(&policy, &keys[1], at(1), Op::Allow(1)); // once, early
        counters.apply(&policy, &keys[2], at(2), Op::Allow(1)); // once, later
        counters.apply(&policy, &keys[3], at(3), Op::Allow(1)); // again, later
        counters.apply(&policy, &keys[3], at(3), Op::Allow(1));
        // The keys (by index) that are live after `key` is counted at `t`.
        let count_then_live = |key: usize, t: u64| {
            counters.apply(&policy, &keys[key], at(t), Op::Allow(1));
            let mut live: Vec<usize> = Vec::new();
            counters.for_each(|k, _| live.extend(keys.iter().position(|key| key == k)));
            live.sort();
            live
        };
        assert_eq!(count_then_live(4, 4), [0, 2, 3, 4]);
        assert_eq!(count_then_live(5, 5), [0, 3, 4, 5]);
        // keys[4] and [5] are asked once: they go before the ones asked again.
        assert_eq!(count_then_live(6, 6), [0, 3, 5, 6]);
        assert_eq!((bound.held(), bound.evicted()), (4, 3));
    }

    #[test]
    fn a_partition_restored_at_the_bound_gets_its_share() {
        let max = 4 * BUCKETS;
        let bound = KeyBound::new(max);
        let policy = Policy::builtin_default();
        let now = Nanos::from_secs(100);
        let old = Counters::with(bound.clone(), Duration::from_secs(3600));
        for key in keys("old", 2 * max as usize) {
            old.apply(&policy, &key, now, Op::Allow(1));
        }
        assert!(bound.held() <= max + 1);
        let entries: Vec<Entry> = keys("restored", max as usize)
            .into_iter()
            .map(|key| {
                let mut state = policy.new_state();
                Op::Allow(1).apply(&policy, &mut state, now);
                Entry { key, state }
            })
            .collect();
        let restored = Counters::with(bound.clone(), Duration::from_secs(3600));
        restored.import(entries, now, |_| Some(&policy));
        // Two partitions share the bound: each ends near half of it.
        let (a, b) = (old.len(), restored.len());
        assert!(bound.held() <= max + 1, "{} held", bound.held());
        assert_eq!(a + b, bound.held());
        assert!(b >= max * 2 / 5, "the restored partition kept {b} of {max}");
        assert!(a >= max * 2 / 5, "the old partition kept {a} of {max}");
    }

    #[test]
    fn import_restores_live_entries_and_drops_stale_ones() {
        let policy = Policy::builtin_default();
        let source = Counters::new();
        let now = Nanos::from_secs(100);
        let mut buf = String::new();
        for i in 0..500 {
            counter_key(&mut buf, "default", &format!("user-{i}"));
            for _ in 0..15 {
                source.apply(&policy, &buf, now, Op::Allow(1));
            }
        }
        let mut entries = Vec::new();
        source.for_each(|key, state| {
            entries.push(Entry {
                key: key.to_string(),
                state: state.clone(),
            })
        });
        entries.push(Entry {
            key: "gone-policy/user-1".to_string(),
            state: policy.new_state(),
        });

        let restored = Counters::new();
        let kept = restored.import(entries, now, |name| {
            (name == policy.name()).then_some(&policy)
        });
        assert_eq!((kept, restored.len()), (500, 500));
        counter_key(&mut buf, "default", "user-7");
        assert!(!restored.apply(&policy, &buf, now, Op::Allow(1)).allowed);

        // Much later, everything restored is stale.
        let mut entries = Vec::new();
        source.for_each(|key, state| {
            entries.push(Entry {
                key: key.to_string(),
                state: state.clone(),
            })
        });
        let late = Counters::new();
        let kept = late.import(entries, Nanos::from_secs(1_000), |_| Some(&policy));
        assert_eq!((kept, late.len()), (0, 0));
    }
}
