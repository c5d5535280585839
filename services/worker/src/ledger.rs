//! One partition's usage in memory: what was counted in each of the
//! finest tier's buckets ("minutes") since it was last written, and the
//! coarser buckets owed a rollup.
//!
//! The store holds a minute's absolute counts, every key of the partition
//! in one record; memory holds only what was counted since the last write.
//! So a worker's memory grows with the keys counted per flush interval, not
//! per minute: when memory held the whole minute, a million new keys in a
//! minute held a million entries (docs/BENCHMARKS.md, "1M keys"), and a
//! flood of new keys grew without bound.
//!
//! A flush *takes* what each minute counted ([`Ledger::take`]), reads the
//! stored record, adds the taken counts to it
//! ([`sluice_core::usage::add_to_record`]) and writes it back expecting the
//! stream sequence it read: a record written meanwhile (by a worker that
//! lost the partition, finishing a flush) makes the write fail, and the
//! next flush adds to that one instead of overwriting it.
//!
//! Taken counts stay here, visible to queries, until their write is known
//! to have landed. Every write is marked with this ledger's id and the
//! write's number ([`WriteMark`]; numbers increase), and a record holds
//! every count this ledger took under its number or a lower one (a record
//! keeps the marks of every ledger that wrote it, [`WriteMarks`]). Whoever
//! reads the record knows what it holds: a write whose acknowledgement was
//! lost is recognised by the next flush ([`Ledger::lacking`]) instead of
//! being added twice, and a query adds exactly what the record it read
//! lacks ([`MinuteView::lacking`]), however its read interleaves with a
//! flush.
//!
//! In journal mode a new owner adds what the journal holds past the stored
//! minutes after the partition already answers ([`Ledger::replay_pending`]):
//! new counts may come first, as sums do not care about order, but nothing
//! may read or store the ledger's totals before that replay is in, so the
//! flush and the queries wait for it ([`Ledger::replayed`]).
//!
//! Adding takes the partition's ledger lock once per counted request (no
//! await under it; on a worker's one-thread runtime it is contended only
//! while a flush takes the counts or a query copies them). Keys are found
//! by `&str`; a string is allocated only the first time a key is counted
//! since the last take.

use sluice_core::usage::{BucketId, Counts, Tier};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher as _;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

type Keys = HashMap<Box<str>, Counts, foldhash::fast::RandomState>;

/// Counts by policy and key, as a query takes them out of a minute.
pub type KeyCounts = Vec<(String, String, Counts)>;

/// Counts by policy and key.
#[derive(Default)]
pub struct Counted {
    /// By policy: a few, so a short list (no hashing per count).
    by_policy: Vec<(Box<str>, Keys)>,
}

impl Counted {
    fn add(&mut self, policy: &str, key: &str, counts: Counts) {
        let keys = match self.by_policy.iter().position(|(p, _)| &**p == policy) {
            Some(i) => &mut self.by_policy[i].1,
            None => {
                self.by_policy.push((policy.into(), Keys::default()));
                &mut self.by_policy.last_mut().expect("just pushed").1
            }
        };
        match keys.get_mut(key) {
            Some(c) => c.add(counts),
            None => {
                keys.insert(key.into(), counts);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.by_policy.is_empty()
    }

    /// Every `(policy, key, counts)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, Counts)> {
        self.by_policy
            .iter()
            .flat_map(|(p, keys)| keys.iter().map(move |(k, c)| (&**p, &**k, *c)))
    }

    fn copy(&self, wanted: &dyn Fn(&str, &str) -> bool) -> KeyCounts {
        self.iter()
            .filter(|(p, k, _)| wanted(p, k))
            .map(|(p, k, c)| (p.to_string(), k.to_string(), c))
            .collect()
    }
}

/// Which write of which ledger a stored record is (a header on it): the
/// record holds every count that ledger took under this write's number or
/// a lower one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteMark {
    pub ledger: u64,
    pub write: u64,
}

impl WriteMark {
    /// As a header value: `<ledger>.<write>`.
    pub fn to_header(self) -> String {
        format!("{}.{}", self.ledger, self.write)
    }

    /// A header value; `None` when it is not one.
    pub fn parse(value: &str) -> Option<WriteMark> {
        let (ledger, write) = value.split_once('.')?;
        Some(WriteMark {
            ledger: ledger.parse().ok()?,
            write: write.parse().ok()?,
        })
    }
}

/// The marks a stored record carries (its header): for each ledger that
/// wrote it, the highest write of that ledger it holds. A writer keeps the
/// marks it read and puts its own in place of its ledger's, so a worker
/// that lost the partition and rewrote the record after our write landed
/// unheard keeps our mark, and our next flush does not add that write's
/// counts again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteMarks(Vec<WriteMark>);

/// The most marks a record keeps, the newest writers': a minute gets a new
/// writer only when its partition changes owner.
const MAX_MARKS: usize = 8;

impl WriteMarks {
    /// The highest write of `ledger` the record holds, if any.
    pub fn of(&self, ledger: u64) -> Option<u64> {
        self.0.iter().find(|m| m.ledger == ledger).map(|m| m.write)
    }

    /// These marks with `mark` in place of its ledger's, newest first.
    pub fn with(&self, mark: WriteMark) -> WriteMarks {
        let others = self.0.iter().filter(|m| m.ledger != mark.ledger);
        WriteMarks(
            std::iter::once(mark)
                .chain(others.copied())
                .take(MAX_MARKS)
                .collect(),
        )
    }

    /// As a header value: the marks, comma-separated.
    pub fn to_header(&self) -> String {
        let marks: Vec<String> = self.0.iter().map(|m| m.to_header()).collect();
        marks.join(",")
    }

    /// A header value (one mark, as workers before this wrote, is one
    /// too); none when it is not one.
    pub fn parse(value: &str) -> WriteMarks {
        let marks: Option<Vec<WriteMark>> = value.split(',').map(WriteMark::parse).collect();
        WriteMarks(marks.unwrap_or_default())
    }
}

/// One minute of the finest tier.
#[derive(Default)]
struct Minute {
    /// Counted since the last take.
    fresh: Counted,
    /// Taken by writes not known to have landed: by write number, lowest
    /// first. Shared with the flush that writes them.
    taken: Vec<(u64, Arc<Counted>)>,
}

impl Minute {
    fn dirty(&self) -> bool {
        !self.fresh.is_empty() || !self.taken.is_empty()
    }
}

/// What a flush took: the minutes to write, the mark their writes carry,
/// and the journal watermark they hold.
pub struct Take {
    pub minutes: Vec<u64>,
    pub mark: WriteMark,
    pub watermark: u64,
}

/// A minute's counts in memory as a query saw them, by the write number
/// they go (or went) out under.
pub struct MinuteView {
    ledger: u64,
    parts: Vec<(u64, KeyCounts)>,
}

impl MinuteView {
    /// What a stored record marked `stored` (empty: no marks, or no
    /// record) lacks of these counts.
    pub fn lacking(self, stored: &WriteMarks) -> KeyCounts {
        let held = |write: u64| stored.of(self.ledger).is_some_and(|w| w >= write);
        self.parts
            .into_iter()
            .filter(|(write, _)| !held(*write))
            .flat_map(|(_, counts)| counts)
            .collect()
    }
}

struct State {
    minutes: BTreeMap<u64, Minute>,
    /// Coarser buckets whose rollup is owed (tier index ≥ 1).
    pending: BTreeSet<BucketId>,
    /// The number the next take gives its writes.
    next_write: u64,
    /// Journal mode: the highest journal sequence whose records are in
    /// these counts or in the stored records (records replayed at takeover
    /// or stored by our writer).
    watermark: u64,
    /// Journal mode: every record at or below this is in the stored
    /// records (what the last complete flush covered); a snapshot may claim
    /// no journal position past it.
    stored_through: u64,
}

/// One partition's usage not yet final in the store.
pub struct Ledger {
    /// Tells this ledger's writes from any other's (another worker's, or
    /// this worker's in an earlier ownership of the partition).
    id: u64,
    tiers: Vec<Tier>,
    state: Mutex<State>,
    /// Whether every journal record the takeover replays is in the counts.
    replayed: watch::Sender<bool>,
}

impl Ledger {
    /// The ledger of a partition whose restored state covers the journal
    /// up to `stored_through` (0 in snapshot mode).
    pub fn new(tiers: Vec<Tier>, stored_through: u64) -> Ledger {
        Ledger {
            // Randomly keyed: a different id for every ledger of every worker.
            id: std::hash::RandomState::new().hash_one(stored_through),
            tiers,
            state: Mutex::new(State {
                minutes: BTreeMap::new(),
                pending: BTreeSet::new(),
                next_write: 1,
                watermark: stored_through,
                stored_through,
            }),
            replayed: watch::channel(true).0,
        }
    }

    /// A takeover's journal replay will add to the counts later
    /// ([`Ledger::replay_done`]); until then [`Ledger::replayed`] waits.
    pub fn replay_pending(&self) {
        self.replayed.send_replace(false);
    }

    /// The takeover's journal replay is in the counts.
    pub fn replay_done(&self) {
        self.replayed.send_replace(true);
    }

    pub fn is_replayed(&self) -> bool {
        *self.replayed.borrow()
    }

    /// Waits until the counts hold the takeover's journal replay: before,
    /// a total read or stored would miss what the journal holds.
    pub async fn replayed(&self) {
        let mut done = self.replayed.subscribe();
        // The sender lives as long as `self`: this ends only once done.
        let _ = done.wait_for(|done| *done).await;
    }

    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one request (or a replayed record) of `key` under `policy` at
    /// `t_ms`.
    pub fn add(&self, policy: &str, key: &str, t_ms: u64, counts: Counts) {
        let minute = self.tiers[0].bucket_of(t_ms);
        let mut state = self.lock();
        state
            .minutes
            .entry(minute)
            .or_default()
            .fresh
            .add(policy, key, counts);
    }

    /// Journal mode: records up to journal sequence `seq` are in the counts.
    pub fn advance(&self, seq: u64) {
        let mut state = self.lock();
        state.watermark = state.watermark.max(seq);
    }

    /// Journal mode: a snapshot may claim no journal position past this.
    pub fn stored_through(&self) -> u64 {
        self.lock().stored_through
    }

    /// Takes every minute's fresh counts under the next write number; the
    /// minutes to write are those holding taken counts (this take's, or an
    /// earlier one's whose write is not known to have landed).
    pub fn take(&self) -> Take {
        let mut state = self.lock();
        let write = state.next_write;
        state.next_write += 1;
        let mut minutes = Vec::new();
        for (t, m) in state.minutes.iter_mut() {
            if !m.fresh.is_empty() {
                let fresh = std::mem::take(&mut m.fresh);
                m.taken.push((write, Arc::new(fresh)));
            }
            if !m.taken.is_empty() {
                minutes.push(*t);
            }
        }
        Take {
            minutes,
            mark: WriteMark {
                ledger: self.id,
                write,
            },
            watermark: state.watermark,
        }
    }

    /// What the stored record of `minute`, marked `stored`, lacks of the
    /// counts taken so far; the taken counts it holds are forgotten (an
    /// earlier write landed after all).
    pub fn lacking(&self, minute: u64, stored: &WriteMarks) -> Vec<Arc<Counted>> {
        if let Some(write) = stored.of(self.id) {
            self.written(minute, write);
        }
        let state = self.lock();
        state
            .minutes
            .get(&minute)
            .map(|m| m.taken.iter().map(|(_, c)| c.clone()).collect())
            .unwrap_or_default()
    }

    /// The record of `minute` holding every count taken under `write` or a
    /// lower number is stored: those are forgotten, and the minute's
    /// coarser bucket owes a rollup.
    pub fn written(&self, minute: u64, write: u64) {
        let mut state = self.lock();
        if let Some(m) = state.minutes.get_mut(&minute) {
            m.taken.retain(|(w, _)| *w > write);
        }
        if let Some(coarser) = self.tiers.get(1) {
            state.pending.insert((1, coarser.bucket_of(minute)));
        }
    }

    /// Every minute of a take was written: the journal up to its
    /// `watermark` is in the store.
    pub fn stored_all(&self, watermark: u64) {
        let mut state = self.lock();
        state.stored_through = state.stored_through.max(watermark);
    }

    /// Forgets minutes that hold nothing unwritten and ended `grace_ms`
    /// before `now_ms`.
    pub fn forget_stored(&self, now_ms: u64, grace_ms: u64) {
        let step = self.tiers[0].step_ms();
        let mut state = self.lock();
        state
            .minutes
            .retain(|t, m| m.dirty() || t + step + grace_ms > now_ms);
    }

    /// Owes the rollup of every coarser bucket that ended less than
    /// `lookback_ms` before `now_ms` or has not ended (at takeover: the
    /// previous owner may have died before it rolled them up).
    pub fn owe_recent_rollups(&self, now_ms: u64, lookback_ms: u64) {
        let mut state = self.lock();
        for (i, tier) in self.tiers.iter().enumerate().skip(1) {
            let step = tier.step_ms();
            let mut b = tier.bucket_of(now_ms.saturating_sub(lookback_ms.max(step)));
            while b <= now_ms {
                state.pending.insert((i, b));
                b += step;
            }
        }
    }

    /// The rollups that can be done at `now_ms`: buckets that ended
    /// `grace_ms` ago and hold nothing still owed (no unwritten minute, no
    /// finer rollup owed), finest tier first.
    pub fn due_rollups(&self, now_ms: u64, grace_ms: u64) -> Vec<BucketId> {
        let state = self.lock();
        state
            .pending
            .iter()
            .filter(|(tier, b)| {
                let step = self.tiers[*tier].step_ms();
                let end = b + step;
                end + grace_ms <= now_ms
                    && !state.minutes.range(*b..end).any(|(_, m)| m.dirty())
                    && !state
                        .pending
                        .iter()
                        .any(|(t, c)| *t < *tier && *c >= *b && *c < end)
            })
            .copied()
            .collect()
    }

    /// The rollup of `bucket` is stored: the next coarser bucket owes one.
    pub fn rolled_up(&self, bucket: BucketId) {
        let mut state = self.lock();
        state.pending.remove(&bucket);
        if let Some(coarser) = self.tiers.get(bucket.0 + 1) {
            state
                .pending
                .insert((bucket.0 + 1, coarser.bucket_of(bucket.1)));
        }
    }

    /// Whether the stored record of a coarser bucket is final at `now_ms`:
    /// it ended `grace_ms` ago and owes no rollup. (Finest-tier minutes are
    /// read through [`Ledger::minute_counts`] instead.)
    pub fn is_final(&self, bucket: BucketId, now_ms: u64, grace_ms: u64) -> bool {
        let step = self.tiers[bucket.0].step_ms();
        bucket.1 + step + grace_ms <= now_ms && !self.lock().pending.contains(&bucket)
    }

    /// The counts of `minute` in memory that `wanted` keeps, for a query to
    /// add to the stored record it reads next ([`MinuteView::lacking`]).
    /// `None` when the minute is not in memory.
    pub fn minute_counts(
        &self,
        minute: u64,
        wanted: &dyn Fn(&str, &str) -> bool,
    ) -> Option<MinuteView> {
        let state = self.lock();
        let m = state.minutes.get(&minute)?;
        let mut parts: Vec<(u64, KeyCounts)> = m
            .taken
            .iter()
            .map(|(write, counts)| (*write, counts.copy(wanted)))
            .collect();
        parts.push((state.next_write, m.fresh.copy(wanted)));
        Some(MinuteView {
            ledger: self.id,
            parts,
        })
    }

    /// Minutes in memory (for status and tests).
    pub fn minutes(&self) -> usize {
        self.lock().minutes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::usage::{add_to_record, BucketRecord, UsageConfig};

    const M: u64 = 60_000;

    fn counts(used: u64, denied: u64) -> Counts {
        Counts { used, denied }
    }

    fn ledger(stored_through: u64) -> Ledger {
        Ledger::new(UsageConfig::default().tiers, stored_through)
    }

    /// A minute's store: its record and the marks of the writes that made it.
    #[derive(Default)]
    struct Store {
        record: Option<Vec<u8>>,
        marks: WriteMarks,
    }

    impl Store {
        /// What a flush of `minute` writes for `take` (not stored yet).
        fn flush(&self, ledger: &Ledger, minute: u64, take: &Take) -> Option<Vec<u8>> {
            let lacking = ledger.lacking(minute, &self.marks);
            if lacking.is_empty() {
                return None;
            }
            let more = lacking.iter().flat_map(|c| c.iter());
            Some(add_to_record(self.record.as_deref(), take.watermark, more).unwrap())
        }

        fn land(&mut self, record: Vec<u8>, take: &Take) {
            self.record = Some(record);
            self.marks = self.marks.with(take.mark);
        }

        /// A flush of `minute` for `take` whose write lands (whether the
        /// ledger hears so is the caller's: [`Ledger::written`]).
        fn flush_and_land(&mut self, ledger: &Ledger, minute: u64, take: &Take) {
            let record = self
                .flush(ledger, minute, take)
                .expect("something to write");
            self.land(record, take);
        }

        fn counts(&self, key: &str) -> Counts {
            self.record.as_deref().map_or(Counts::default(), |r| {
                BucketRecord::decode(r).unwrap().counts("default", key)
            })
        }

        /// What a query sees: memory copied first, then the record read.
        fn query(&self, ledger: &Ledger, minute: u64, key: &str) -> Counts {
            let mut total = self.counts(key);
            if let Some(view) = ledger.minute_counts(minute, &|_, k| k == key) {
                for (_, _, c) in view.lacking(&self.marks) {
                    total.add(c);
                }
            }
            total
        }
    }

    #[test]
    fn memory_holds_only_what_was_counted_since_the_last_write() {
        let ledger = ledger(0);
        let minute = 1000 * M;
        let mut store = Store::default();
        ledger.add("default", "alice", minute + 1, counts(2, 1));
        ledger.add("default", "bob", minute + 2, counts(1, 0));
        let take = ledger.take();
        assert_eq!(take.minutes, vec![minute]);
        store.flush_and_land(&ledger, minute, &take);
        ledger.written(minute, take.mark.write);
        assert_eq!(store.counts("alice"), counts(2, 1));
        // Nothing in memory any more; new counts add to the record.
        assert!(ledger
            .minute_counts(minute, &|_, _| true)
            .unwrap()
            .lacking(&WriteMarks::default())
            .is_empty());
        ledger.add("default", "alice", minute + 3, counts(1, 0));
        assert_eq!(store.query(&ledger, minute, "alice"), counts(3, 1));
        let take = ledger.take();
        store.flush_and_land(&ledger, minute, &take);
        ledger.written(minute, take.mark.write);
        assert_eq!(store.counts("alice"), counts(3, 1));
        assert_eq!(store.counts("bob"), counts(1, 0));
        // Nothing new: nothing to write.
        assert!(ledger.take().minutes.is_empty());
    }

    #[test]
    fn a_write_whose_acknowledgement_was_lost_is_not_added_twice() {
        let ledger = ledger(0);
        let minute = 1000 * M;
        let mut store = Store::default();
        ledger.add("default", "k", minute, counts(5, 0));
        let first = ledger.take();
        // It lands, but the flush never hears so.
        store.flush_and_land(&ledger, minute, &first);
        ledger.add("default", "k", minute, counts(1, 0));
        // A query meanwhile: the record holds the first take, memory adds
        // only what came after.
        assert_eq!(store.query(&ledger, minute, "k"), counts(6, 0));
        let second = ledger.take();
        store.flush_and_land(&ledger, minute, &second);
        ledger.written(minute, second.mark.write);
        assert_eq!(store.counts("k"), counts(6, 0));
        assert_eq!(store.query(&ledger, minute, "k"), counts(6, 0));
    }

    #[test]
    fn a_write_that_failed_is_added_by_the_next_one() {
        let ledger = ledger(0);
        let minute = 1000 * M;
        let mut store = Store::default();
        ledger.add("default", "k", minute, counts(5, 0));
        let first = ledger.take();
        let _lost = store.flush(&ledger, minute, &first).unwrap();
        // Not landed: the query still sees it in memory.
        assert_eq!(store.query(&ledger, minute, "k"), counts(5, 0));
        ledger.add("default", "k", minute, counts(1, 2));
        let second = ledger.take();
        assert_eq!(second.minutes, vec![minute]);
        store.flush_and_land(&ledger, minute, &second);
        ledger.written(minute, second.mark.write);
        assert_eq!(store.counts("k"), counts(6, 2));
        // A minute holding only a failed take is written again too.
        let other = minute + M;
        ledger.add("default", "k", other, counts(1, 0));
        let third = ledger.take();
        let _lost = store.flush(&ledger, other, &third).unwrap();
        assert_eq!(ledger.take().minutes, vec![other]);
    }

    #[test]
    fn a_query_counts_everything_once_however_a_flush_interleaves() {
        // Two flushes, each taking, landing its write, and only then
        // hearing so, with counts added in between. A query copies memory
        // before step `copy` and reads the record before step `read`: it
        // must hold at least what was added before its copy (nothing lost)
        // and at most what was added before its read (nothing twice).
        enum Step {
            Add(u64),
            Take,
            Land,
            Hear,
        }
        use Step::*;
        let steps = [
            Take,
            Land,
            Add(4),
            Hear,
            Add(1),
            Take,
            Add(2),
            Land,
            Hear,
            Add(8),
        ];
        let minute = 1000 * M;
        for copy in 0..=steps.len() {
            for read in copy..=steps.len() {
                let ledger = ledger(0);
                let mut store = Store::default();
                ledger.add("default", "k", minute, counts(3, 0));
                let (mut added, mut added_at_copy) = (3, 0);
                let (mut take, mut record) = (None, None);
                let mut view = None;
                let mut total = None;
                for i in 0..=steps.len() {
                    if i == copy {
                        view = ledger.minute_counts(minute, &|_, _| true);
                        added_at_copy = added;
                    }
                    if i == read {
                        let mut sum = store.counts("k");
                        for (_, _, c) in view.take().unwrap().lacking(&store.marks) {
                            sum.add(c);
                        }
                        total = Some((sum.used, added));
                    }
                    match steps.get(i) {
                        Some(Add(n)) => {
                            ledger.add("default", "k", minute, counts(*n, 0));
                            added += n;
                        }
                        Some(Take) => {
                            let t = ledger.take();
                            record = store.flush(&ledger, minute, &t);
                            take = Some(t);
                        }
                        Some(Land) => store.land(record.take().unwrap(), take.as_ref().unwrap()),
                        Some(Hear) => ledger.written(minute, take.as_ref().unwrap().mark.write),
                        None => {}
                    }
                }
                let (total, added_at_read) = total.unwrap();
                assert!(
                    (added_at_copy..=added_at_read).contains(&total),
                    "copy before step {copy}, read before step {read}: {total} not in {added_at_copy}..={added_at_read}"
                );
            }
        }
    }

    #[test]
    fn a_record_of_another_ledger_lacks_everything_taken_here() {
        let minute = 1000 * M;
        let previous = ledger(0);
        let mut store = Store::default();
        previous.add("default", "k", minute, counts(9, 0));
        let take = previous.take();
        store.flush_and_land(&previous, minute, &take);
        // A new owner of the partition, with the same write numbers.
        let next = ledger(0);
        next.add("default", "k", minute, counts(1, 0));
        assert_eq!(store.query(&next, minute, "k"), counts(10, 0));
        let take = next.take();
        assert_eq!(take.mark.write, 1);
        store.flush_and_land(&next, minute, &take);
        next.written(minute, take.mark.write);
        assert_eq!(store.counts("k"), counts(10, 0));
    }

    #[test]
    fn rollups_wait_for_their_minutes_and_finer_rollups() {
        let start = 1000 * M; // a multiple of 5 minutes
        let ledger = ledger(0);
        for i in 0..5 {
            ledger.add("default", "k", start + i * M, counts(1, 0));
        }
        let grace = 5_000;
        let after = start + 5 * M + grace;
        let write_all = |ledger: &Ledger| {
            let take = ledger.take();
            for minute in &take.minutes {
                ledger.written(*minute, take.mark.write);
            }
            ledger.stored_all(take.watermark);
        };
        // Nothing stored yet: nothing owed.
        assert_eq!(ledger.due_rollups(after, grace), vec![]);
        write_all(&ledger);
        assert_eq!(ledger.due_rollups(after - 1, grace), vec![]);
        assert_eq!(ledger.due_rollups(after, grace), vec![(1, start)]);
        assert!(!ledger.is_final((1, start), after, grace));
        // Counted again (a late replay): owed again only once stored again.
        ledger.add("default", "k", start + M, counts(1, 0));
        assert_eq!(ledger.due_rollups(after, grace), vec![]);
        write_all(&ledger);
        assert_eq!(ledger.due_rollups(after, grace), vec![(1, start)]);
        ledger.rolled_up((1, start));
        assert!(ledger.is_final((1, start), after, grace));
        // The hour owes its rollup, due once it ended.
        let hour = (2, start - start % (60 * M));
        assert_eq!(ledger.due_rollups(after, grace), vec![]);
        assert_eq!(
            ledger.due_rollups(hour.1 + 60 * M + grace, grace),
            vec![hour]
        );
        // Written minutes are forgotten once past the grace.
        ledger.forget_stored(after, grace);
        assert_eq!(ledger.minutes(), 0);
    }

    #[test]
    fn a_pending_replay_holds_readers_back_until_it_is_in() {
        use futures::FutureExt as _;
        let ledger = ledger(0);
        assert!(ledger.is_replayed());
        assert!(ledger.replayed().now_or_never().is_some());
        ledger.replay_pending();
        // New counts go in meanwhile; readers wait for the replay.
        ledger.add("default", "k", 1000 * M, counts(1, 0));
        assert!(!ledger.is_replayed());
        let mut waiting = Box::pin(ledger.replayed());
        assert!(waiting.as_mut().now_or_never().is_none());
        ledger.add("default", "k", 1000 * M, counts(2, 0));
        ledger.replay_done();
        assert!(waiting.now_or_never().is_some());
        assert!(ledger.is_replayed());
    }

    #[test]
    fn stored_through_moves_only_when_every_minute_was_stored() {
        let ledger = ledger(40);
        assert_eq!(ledger.stored_through(), 40);
        ledger.add("default", "k", 1001 * M, counts(1, 0));
        ledger.advance(50);
        let take = ledger.take();
        assert_eq!(take.watermark, 50);
        assert_eq!(ledger.stored_through(), 40);
        ledger.stored_all(take.watermark);
        assert_eq!(ledger.stored_through(), 50);
    }

    #[test]
    fn a_record_another_ledger_rewrote_after_our_write_landed_unheard_still_holds_it() {
        let ours = ledger(0);
        let theirs = ledger(0);
        let minute = 1000 * M;
        let mut store = Store::default();
        ours.add("default", "k", minute, counts(5, 0));
        let first = ours.take();
        // It lands, but our flush never hears so.
        store.flush_and_land(&ours, minute, &first);
        // A worker that lost the partition adds what it counted to the
        // record it read (ours) and writes it under its own mark.
        theirs.add("default", "k", minute, counts(2, 0));
        let late = theirs.take();
        store.flush_and_land(&theirs, minute, &late);
        assert_eq!(store.counts("k"), counts(7, 0));
        // Our next flush and our queries know the record holds our write.
        assert_eq!(store.query(&ours, minute, "k"), counts(7, 0));
        ours.add("default", "k", minute, counts(1, 0));
        let second = ours.take();
        store.flush_and_land(&ours, minute, &second);
        assert_eq!(store.counts("k"), counts(8, 0));
    }

    #[test]
    fn write_marks_keep_one_mark_per_ledger_and_read_back() {
        let mark = |ledger, write| WriteMark { ledger, write };
        let marks = WriteMarks::default().with(mark(1, 3)).with(mark(2, 9));
        let marks = marks.with(mark(1, 4));
        assert_eq!(
            (marks.of(1), marks.of(2), marks.of(3)),
            (Some(4), Some(9), None)
        );
        assert_eq!(marks.to_header(), "1.4,2.9");
        assert_eq!(WriteMarks::parse(&marks.to_header()), marks);
        // One mark, as workers before wrote it.
        assert_eq!(WriteMarks::parse("7.2").of(7), Some(2));
        // Junk anywhere: no marks.
        for junk in ["", "7", "1.2,x", "1.2,,3.4"] {
            assert_eq!(WriteMarks::parse(junk), WriteMarks::default(), "{junk:?}");
        }
        // At most MAX_MARKS, the newest writers'.
        let many = (0..20).fold(WriteMarks::default(), |m, l| m.with(mark(l, 1)));
        assert_eq!(many.0.len(), MAX_MARKS);
        assert_eq!((many.of(19), many.of(0)), (Some(1), None));
    }

    #[test]
    fn a_write_mark_reads_back_and_junk_is_no_mark() {
        let mark = WriteMark {
            ledger: u64::MAX,
            write: 7,
        };
        assert_eq!(WriteMark::parse(&mark.to_header()), Some(mark));
        for junk in ["", "7", "a.b", "1.2.3", "-1.2"] {
            assert_eq!(WriteMark::parse(junk), None, "{junk:?}");
        }
    }
}
