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

mod key_bound;
mod table;

pub use key_bound::KeyBound;

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

    /// Stores a new key (`hash` is its hash) with its state and stamp, within the key bound when this
    /// bucket holds at least its fair share and a key asked only once: then
    /// the least valuable of those makes room. A sliding log is moved out
    /// of `state`; `bytes` is a buffer to pack it in.
    /// Returns true when the key was stored over the bound, so that the
    /// caller, once it holds no lock, has [`KeyBound::evict_elsewhere`]
    /// make room.
    fn remember(
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
                    over_bound = slots.remember(hash, key, state, stamp, now, bytes);
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
                over_bound += usize::from(slots.remember(hash, key, state, stamp, now, &mut bytes));
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
mod tests;
