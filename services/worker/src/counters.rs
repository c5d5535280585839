//! One partition's counters: a moka cache of buckets, each a small table
//! from (policy, key) to the key's state, packed ([`table`]).
//!
//! Why buckets: with one moka entry per key a million keys cost 559 bytes
//! of RSS each (docs/BENCHMARKS-HISTORY.md, "Changes made, before and
//! after"); a moka entry with the bucket it holds is ~370 bytes ("1M
//! keys"), several times a key's state, so it is paid per bucket. Keys
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
//! is the least valuable key of the new key's own bucket, already locked,
//! when that bucket holds at least its fair share of the bound (`max_keys`
//! over the buckets of the worker's live partitions) and that key was asked
//! only once. Otherwise the new key is stored over the bound and, once no
//! lock is held, [`KeyBound::evict_elsewhere`] forgets one key in another
//! bucket, in any of the worker's partitions: of up to 16 buckets drawn at
//! random (skipping any a decision holds, and any under its fair share), the
//! first over its share whose least valuable key was asked once gives that
//! key; else the best sampled (asked once first, then over its share before
//! at it, then the least valuable); if that key was asked again, or no
//! sampled bucket holds its share, a walk over up to 1,024 buckets takes the
//! first key asked once it finds, else the best sampled or the first key
//! found (docs/CONFIG.md, `max_keys`).

use crate::alerting::{PartitionAlerts, Sink};
use moka::sync::Cache;
use moka::Expiry;
use serde::{Deserialize, Serialize};
use sluice_core::alerts;
use sluice_core::ask::Op;
use sluice_core::ask_ids::RememberedIds;
use sluice_core::outstanding::Outstanding;
use sluice_core::policy::{Decision, KeyState, Policy};
use sluice_core::region::state::GlobalState;
use sluice_core::time::Nanos;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasher;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The shortest idle ttl a bucket gets. A token bucket or GCRA key at a
/// rate of 100/s may be forgotten ~10 ms after its last request; a bucket
/// that expired that soon was gone again by the next request for any of its
/// keys, which then paid a new bucket, a moka insert and an eviction (a
/// fifth of a worker's CPU in a GCRA profile). Keeping buckets this long
/// costs at most the 64 × [`BUCKETS`] bucket entries a worker may hold
/// anyway (~1.5 MB), plus forgettable slots until the bucket's next prune.
pub const MIN_IDLE_TTL: Duration = Duration::from_secs(2);

mod bucket;
mod stamp;
mod table;
mod turns;

pub use bucket::{KeyBound, BUCKETS, PRUNE_EVERY};

pub use turns::{Turn, TurnHeld, Turns};

use bucket::{Bucket, BucketCache, Hasher};
use stamp::Stamp;
use table::{Table, Work};

thread_local! {
    /// The states decisions unpack keys into and the buffer they pack them
    /// into again, one per thread (a decision holds its bucket's lock, not
    /// the thread, while it uses them).
    static WORK: RefCell<Work> = RefCell::default();
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
    /// The slices of local budgets and the holds granted from these counters and not
    /// back yet (a refund gives back at most its own slice).
    outstanding: Arc<Mutex<Outstanding>>,
    /// The state of its global keys (SPEC §12), carried as kept state
    /// (`kept/global.rs`): see [`sluice_core::region::state`].
    global: Arc<Mutex<GlobalState>>,
    /// The ids of admitted asks, so that a repeat counts once (SPEC §16).
    ids: Arc<Mutex<RememberedIds>>,
    /// The threshold alerts fired from these counters in windows not over
    /// yet, and where new ones go (SPEC §14).
    alerts: PartitionAlerts,
    /// [`MIN_IDLE_TTL`] in ns (tests lower it to watch buckets expire).
    min_idle_ttl_ns: u64,
    bound: Arc<KeyBound>,
    /// The turns that change these counters, and the copies between them
    /// that snapshots take ([`turns`]).
    turns: Arc<Turns>,
    /// Locks that make a grouped ask's levels one decision where tasks run
    /// on several threads ([`Counters::group`]).
    groups: Arc<[Mutex<()>]>,
}

/// How many locks a partition's groups share ([`Counters::group`]).
const GROUP_LOCKS: usize = 16;

/// A copy of a partition's counters made between two turns
/// ([`Counters::copy_between_turns`]): every turn numbered up to [`TurnCopy::turn`] is in it,
/// none after.
pub struct TurnCopy {
    turn: u64,
    tables: Vec<Table>,
}

impl TurnCopy {
    /// The number of the last turn the copy holds.
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// Calls `f` with every counter of the copy, unpacking each state into
    /// one reused working state (no allocation per key).
    pub fn for_each(&self, mut f: impl FnMut(&str, &KeyState)) {
        let mut work = Work::default();
        for table in &self.tables {
            for at in table.records() {
                table.read(at, &mut work, |state| f(table.key(at), state));
            }
        }
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
            outstanding: Arc::default(),
            global: Arc::default(),
            ids: Arc::default(),
            alerts: PartitionAlerts::default(),
            min_idle_ttl_ns: u64::try_from(min_idle_ttl.as_nanos()).unwrap_or(u64::MAX),
            turns: Arc::default(),
            groups: (0..GROUP_LOCKS).map(|_| Mutex::new(())).collect(),
        }
    }

    /// The lock of the group whose keys start with `first_token` (SPEC
    /// §17), held while a grouped ask checks and then takes at its levels,
    /// so that no other grouped ask of the group comes between the two. A
    /// worker runs its tasks on one thread, where nothing comes between
    /// them anyway; `sluice dev` and in-process tests do not.
    pub fn group(&self, first_token: &str) -> MutexGuard<'_, ()> {
        let at = self.hash(first_token.as_bytes()) as usize % GROUP_LOCKS;
        self.groups[at].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The turns that change these counters ([`turns`]).
    pub fn turns(&self) -> &Arc<Turns> {
        &self.turns
    }

    /// Begins a turn of changes to these counters: the records it makes
    /// carry its number. Never held across an `.await`.
    pub fn begin_turn(&self) -> Turn {
        self.turns.begin()
    }

    /// Copies the counters between two turns, and reads `also` (the state
    /// kept beside them) at the same point: a snapshot's consistent view.
    pub fn copy_between_turns<R>(
        &self,
        also: impl FnOnce(&Counters) -> R,
    ) -> Result<(TurnCopy, R), TurnHeld> {
        self.turns.between(|turn| {
            let tables = self
                .buckets
                .iter()
                .map(|(_, bucket)| bucket.lock().table.copy())
                .collect();
            (TurnCopy { turn, tables }, also(self))
        })
    }

    /// The same counters, remembering at most `most` ask ids (`max_ids`).
    pub fn remembering(mut self, most: usize) -> Counters {
        self.ids = Arc::new(Mutex::new(RememberedIds::new(most)));
        self
    }

    /// The ids of the asks admitted here (SPEC §16). Taken alone, never
    /// inside [`Counters::update`]'s closure.
    pub fn ids(&self) -> MutexGuard<'_, RememberedIds> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The same counters, sending the alerts they fire to `sink`.
    pub fn alerting(mut self, sink: Sink) -> Counters {
        self.alerts = self.alerts.sending_to(sink);
        self
    }

    /// The threshold alerts fired from these counters.
    pub fn alerts(&self) -> &PartitionAlerts {
        &self.alerts
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
            // A policy with alerts notes the thresholds this update reached
            // (under the bucket's lock, so a snapshot that holds the count
            // also carries the alert).
            let (out, crossed) = alerts::watch(policy, state, f);
            if !crossed.is_empty() {
                self.alerts.fire(policy, key, &crossed, now);
            }
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

    /// Forgets the counter `key` (`rl.reset`), and the slices and holds granted
    /// from it; whether it had state.
    pub fn forget(&self, key: &str) -> bool {
        self.outstanding().forget(key);
        self.global().forget(key);
        if let Some((policy, token)) = key.split_once('/') {
            // A repeat after a reset counts again: what it repeated is gone.
            self.ids().forget_key(token, policy);
        }
        let hash = self.hash(key.as_bytes());
        let id = Counters::bucket_of_hash(hash);
        let recent = self.recent(id);
        let Some(bucket) = self.bucket(id, &recent) else {
            return false;
        };
        let mut slots = bucket.lock();
        slots.remove(hash, key)
    }

    /// What was granted from these counters and is not back yet: budget
    /// slices and holds. Taken inside [`Counters::update`]'s closure when
    /// needed (a bucket's lock, then this one; never the other way).
    pub fn outstanding(&self) -> MutexGuard<'_, Outstanding> {
        self.outstanding.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state of this partition's global keys. Taken inside
    /// [`Counters::update`]'s closure when needed (a bucket's lock, then
    /// this one), or alone.
    pub fn global(&self) -> MutexGuard<'_, GlobalState> {
        self.global.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Calls `f` with every counter, unpacking each state into one reused
    /// working state (no allocation per key). Not a point-in-time view: a
    /// counter changed meanwhile may be seen before or after the change
    /// (a snapshot copies a [`TurnCopy`] instead). Each bucket is locked only
    /// while `f` runs over its keys.
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
    /// Entries idle by `now` (for a takeover that replays records: the
    /// snapshot's time, [`crate::snapshot::Manifest::idle_judged_at`]), or
    /// whose policy no longer exists, are dropped: `kept_under` names the limits an entry's counter is
    /// kept under, given its policy's name and its key token (an
    /// override's, a global bucket's part: judged by its policy's own
    /// limits, a counter of a longer window would go idle too soon). Returns
    /// how many were kept.
    pub fn import<'p>(
        &self,
        entries: Vec<Entry>,
        now: Nanos,
        kept_under: impl Fn(&str, &str) -> Option<&'p Policy>,
    ) -> usize {
        // Grouped by bucket first, so that each bucket is looked up, locked
        // and inserted into moka once, not once per key.
        // Per bucket: its entries (with their hash and stamp) and the
        // longest need among them.
        type Group = (Vec<(u64, Entry, Stamp)>, u64);
        let mut grouped: HashMap<u64, Group> = HashMap::new();
        let mut kept = 0;
        for Entry { key, mut state } in entries {
            let Some((policy_name, token)) = key.split_once('/') else {
                continue;
            };
            let Some(policy) = kept_under(policy_name, token) else {
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
