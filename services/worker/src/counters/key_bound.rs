//! The bound on the live counters of one worker (`max_keys`), shared by
//! the counters of all its partitions, and the eviction that keeps it: a
//! new key past the bound forgets a key asked once, first in its own
//! bucket and else in a bucket drawn from any partition of the worker.

use super::*;

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
    pub(super) held: AtomicU64,
    pub(super) evicted: AtomicU64,
    /// The bucket caches of the worker's live partitions, where an eviction
    /// the new key's own bucket cannot make looks for its victim.
    caches: Mutex<Vec<Weak<BucketCache>>>,
    /// How many of those are live.
    pub(super) partitions: AtomicU64,
    /// Draws the buckets such an eviction looks at.
    sampler: Hasher,
    draws: AtomicU64,
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

    fn caches(&self) -> MutexGuard<'_, Vec<Weak<BucketCache>>> {
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
