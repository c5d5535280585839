//! The ranked lists a top query reads ([`RankedBucket`]), kept between
//! queries: one per partition and bucket whose stored record it was built
//! from, so that a top query over a million keys does not decode and sum
//! them all again each time (docs/USAGE.md, "Top N").
//!
//! What may be reused, and when:
//! - A *final* bucket (a coarser one that is rolled up and owes no rollup,
//!   or a minute that ended the grace period ago and has nothing in the
//!   ledger's memory) never changes while its partition's ledger lives: its
//!   list is used without reading the store at all.
//! - Any other stored record is read (a direct get, which names its stream
//!   sequence) and its list is reused while the sequence is the same: a
//!   minute still being counted but no longer written to costs one read,
//!   not a decode and a sort.
//!
//! A list belongs to the ledger it was built under (a partition taken
//! over again starts with none: another worker may have written its
//! records meanwhile), and is dropped when this worker writes its bucket
//! again (a late count rewrites a minute or a rollup). A write racing a
//! query that read the record before it cannot leave a stale list behind:
//! each partition has a generation, bumped by every such drop, and a list
//! read before the last drop is used for its query but not kept.
//!
//! A minute that becomes final keeps its list: the first query after
//! reads the record once more, and a list of the same sequence is kept as
//! final. A rollup ranks the bucket it writes while top queries run here
//! (one ran in the last [`IN_USE_MS`]), so no query pays for it.
//!
//! Bounded: at most [`BUDGET_BYTES`] of lists per worker; past it the
//! least recently used go first. A list larger than the budget is not
//! kept.

use sluice_core::usage::{BucketId, RankedBucket};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most bytes of lists one worker keeps: a minute of 1M keys spread
/// over two workers is ~30 MiB of lists in each (~60 bytes a key: its
/// bytes, its counts, its places in the two orders and the index).
pub const BUDGET_BYTES: usize = 128 << 20;

/// How long after a top query rollups keep ranking their buckets ahead.
pub const IN_USE_MS: u64 = 15 * 60_000;

/// Which record a list was built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// A final bucket's record: it does not change while the ledger lives.
    Final,
    /// The record at this stream sequence.
    Seq(u64),
}

/// A ranked list kept between top queries: the ledger and record it was
/// built from, its size, and when it was last used.
struct CachedList {
    ledger: u64,
    version: Version,
    list: Arc<RankedBucket>,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Inner {
    lists: HashMap<(u32, BucketId), CachedList>,
    /// When a top query last ran here (ms): rollups rank their buckets
    /// ahead only while the lists are in use ([`TopCache::in_use`]).
    asked_ms: u64,
    bytes: usize,
    /// Bumped on every use, for the least recently used.
    tick: u64,
    /// Per partition: bumped by every [`TopCache::drop_bucket`].
    generations: HashMap<u32, u64>,
}

/// A worker's ranked lists, by partition and bucket.
pub struct TopCache {
    inner: Mutex<Inner>,
    budget: usize,
}

impl Default for TopCache {
    fn default() -> Self {
        TopCache::new(BUDGET_BYTES)
    }
}

impl TopCache {
    pub fn new(budget: usize) -> TopCache {
        TopCache {
            inner: Mutex::default(),
            budget,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The partition's generation: read it before reading records, pass it
    /// to [`TopCache::keep`].
    pub fn generation(&self, partition: u32) -> u64 {
        self.lock()
            .generations
            .get(&partition)
            .copied()
            .unwrap_or(0)
    }

    /// A top query runs at `now_ms`.
    pub fn asked(&self, now_ms: u64) {
        let mut inner = self.lock();
        inner.asked_ms = inner.asked_ms.max(now_ms);
    }

    /// Whether a top query ran in the [`IN_USE_MS`] before `now_ms`: a
    /// rollup then ranks its bucket as it writes it, so that no query
    /// pays for it.
    pub fn in_use(&self, now_ms: u64) -> bool {
        let asked = self.lock().asked_ms;
        asked != 0 && asked + IN_USE_MS >= now_ms
    }

    /// Whether `bucket` has a list built under `ledger` from some stored
    /// record (not known to be final).
    pub fn has_unsettled(&self, partition: u32, ledger: u64, bucket: BucketId) -> bool {
        self.lock()
            .lists
            .get(&(partition, bucket))
            .is_some_and(|k| k.ledger == ledger && matches!(k.version, Version::Seq(_)))
    }

    /// The list of `bucket` built under `ledger` from the record `version`
    /// names, if kept.
    pub fn get(
        &self,
        partition: u32,
        ledger: u64,
        bucket: BucketId,
        version: Version,
    ) -> Option<Arc<RankedBucket>> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let kept = inner.lists.get_mut(&(partition, bucket))?;
        if kept.ledger != ledger || kept.version != version {
            return None;
        }
        kept.last_used = tick;
        Some(kept.list.clone())
    }

    /// Keeps `list`, built under `ledger` from the record `version` names
    /// of `bucket`, read at `generation` ([`TopCache::generation`]). A
    /// final one is not kept when a bucket of the partition was dropped
    /// since (one named by its sequence cannot be stale).
    pub fn keep(
        &self,
        partition: u32,
        ledger: u64,
        bucket: BucketId,
        version: Version,
        list: Arc<RankedBucket>,
        generation: u64,
    ) {
        let bytes = list.heap_bytes() + 128;
        if bytes > self.budget {
            return;
        }
        let mut inner = self.lock();
        let current = inner.generations.get(&partition).copied().unwrap_or(0);
        if version == Version::Final && current != generation {
            return;
        }
        inner.tick += 1;
        let kept = CachedList {
            ledger,
            version,
            list,
            bytes,
            last_used: inner.tick,
        };
        if let Some(old) = inner.lists.insert((partition, bucket), kept) {
            inner.bytes -= old.bytes;
        }
        inner.bytes += bytes;
        while inner.bytes > self.budget {
            let oldest = inner
                .lists
                .iter()
                .min_by_key(|(_, k)| k.last_used)
                .map(|(at, _)| *at)
                .expect("lists are kept while over budget");
            let gone = inner.lists.remove(&oldest).expect("just found");
            inner.bytes -= gone.bytes;
        }
    }

    /// This worker writes `bucket` of `partition` again: its list is
    /// dropped, and one read before now is not kept.
    pub fn drop_bucket(&self, partition: u32, bucket: BucketId) {
        let mut inner = self.lock();
        *inner.generations.entry(partition).or_default() += 1;
        if let Some(gone) = inner.lists.remove(&(partition, bucket)) {
            inner.bytes -= gone.bytes;
        }
    }

    /// The partition is taken over, or no longer answered here: its lists
    /// go.
    pub fn drop_partition(&self, partition: u32) {
        let mut inner = self.lock();
        let mut freed = 0;
        inner.lists.retain(|(p, _), kept| {
            let keep = *p != partition;
            if !keep {
                freed += kept.bytes;
            }
            keep
        });
        inner.bytes -= freed;
    }

    /// Bytes of lists kept now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::usage::Counts;

    fn list(keys: usize) -> Arc<RankedBucket> {
        let names: Vec<String> = (0..keys).map(|k| format!("k{k}")).collect();
        let c = Counts { used: 1, denied: 0 };
        Arc::new(RankedBucket::from_counts(
            names.iter().map(|k| ("default", k.as_str(), c)),
        ))
    }

    #[test]
    fn a_list_is_found_only_for_its_ledger_and_record() {
        let cache = TopCache::default();
        let g = cache.generation(3);
        cache.keep(3, 7, (0, 60_000), Version::Seq(11), list(5), g);
        assert!(cache.get(3, 7, (0, 60_000), Version::Seq(11)).is_some());
        assert!(cache.get(3, 7, (0, 60_000), Version::Seq(12)).is_none());
        assert!(cache.get(3, 7, (0, 60_000), Version::Final).is_none());
        assert!(cache.get(3, 8, (0, 60_000), Version::Seq(11)).is_none());
        assert!(cache.get(4, 7, (0, 60_000), Version::Seq(11)).is_none());
        cache.drop_partition(3);
        assert!(cache.get(3, 7, (0, 60_000), Version::Seq(11)).is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn a_list_read_before_its_bucket_was_written_again_is_not_kept() {
        let cache = TopCache::default();
        let before = cache.generation(1);
        cache.keep(1, 7, (1, 0), Version::Final, list(5), before);
        cache.drop_bucket(1, (1, 0));
        assert!(cache.get(1, 7, (1, 0), Version::Final).is_none());
        // A query that read the old record before the drop keeps nothing.
        cache.keep(1, 7, (1, 0), Version::Final, list(5), before);
        assert!(cache.get(1, 7, (1, 0), Version::Final).is_none());
        let after = cache.generation(1);
        cache.keep(1, 7, (1, 0), Version::Final, list(5), after);
        assert!(cache.get(1, 7, (1, 0), Version::Final).is_some());
    }

    #[test]
    fn rollups_rank_ahead_only_while_top_queries_run() {
        let cache = TopCache::default();
        assert!(!cache.in_use(1_000));
        cache.asked(1_000);
        assert!(cache.in_use(1_000 + IN_USE_MS));
        assert!(!cache.in_use(1_001 + IN_USE_MS));
        cache.keep(2, 7, (0, 0), Version::Seq(4), list(3), 0);
        assert!(cache.has_unsettled(2, 7, (0, 0)));
        assert!(!cache.has_unsettled(2, 8, (0, 0)));
        cache.keep(2, 7, (0, 0), Version::Final, list(3), 0);
        assert!(!cache.has_unsettled(2, 7, (0, 0)));
    }

    #[test]
    fn past_the_budget_the_least_recently_used_go_first() {
        let one = list(1000).heap_bytes() + 128;
        let cache = TopCache::new(3 * one);
        for minute in 0..3 {
            cache.keep(0, 1, (0, minute), Version::Final, list(1000), 0);
        }
        // Minute 0 used last: minute 1 is the oldest when a fourth comes.
        assert!(cache.get(0, 1, (0, 0), Version::Final).is_some());
        cache.keep(0, 1, (0, 3), Version::Final, list(1000), 0);
        assert!(cache.bytes() <= 3 * one);
        assert!(cache.get(0, 1, (0, 1), Version::Final).is_none());
        for minute in [0, 2, 3] {
            assert!(cache.get(0, 1, (0, minute), Version::Final).is_some());
        }
        // Larger than the whole budget: not kept.
        cache.keep(0, 1, (0, 4), Version::Final, list(5000), 0);
        assert!(cache.get(0, 1, (0, 4), Version::Final).is_none());
    }
}
