//! One partition's usage in memory: the finest tier's buckets ("minutes")
//! that are not yet stored as they stand, and the coarser buckets owed a
//! rollup.
//!
//! A minute holds absolute counts: what the stored record holds (once it
//! was read, or written by us) plus what was counted since. A minute this
//! owner did not start (it began before the takeover) may already have a
//! stored record from the previous owner; until that record is merged in
//! ([`Ledger::merge_stored`]) the minute holds only what we counted, and is
//! marked so (`merged == false`): the flush and the queries add the stored
//! record to it. Minutes that began after the takeover are ours alone.
//!
//! In journal mode a new owner adds what the journal holds past the stored
//! minutes after the partition already answers ([`Ledger::replay_pending`]):
//! new counts may come first, as sums do not care about order, but nothing
//! may read or store the ledger's totals before that replay is in, so the
//! flush and the queries wait for it ([`Ledger::replayed`]).
//!
//! Adding takes the partition's ledger lock once per counted request (no
//! await under it; on a worker's one-thread runtime it is contended only
//! while a flush copies a minute). Keys are found by `&str`; a string is
//! allocated only the first time a key is counted in a minute.

use sluice_core::usage::{BucketId, BucketRecord, Counts, Tier};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::watch;

type Keys = HashMap<Box<str>, Counts, foldhash::fast::RandomState>;

/// Counts by policy and key, as a query takes them out of a minute.
pub type KeyCounts = Vec<(String, String, Counts)>;

/// One minute of the finest tier.
#[derive(Default)]
struct Minute {
    /// By policy: a few, so a short list (no hashing per count).
    by_policy: Vec<(Box<str>, Keys)>,
    /// Counted requests added since the minute was created: bumped by every
    /// add, so a flush knows whether the minute changed while it was stored.
    changes: u64,
    /// `changes` when the record last stored was copied.
    stored_changes: u64,
    /// The stored record (if any) is in the counts.
    merged: bool,
    /// The stream sequence of the minute's record as we last read or wrote
    /// it (0: none), which our next write expects: a write by a worker
    /// that lost the partition meanwhile then fails instead of replacing
    /// the owner's counts with older ones.
    seq: u64,
}

impl Minute {
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
        self.changes += 1;
    }

    fn dirty(&self) -> bool {
        self.changes != self.stored_changes
    }

    fn record(&self, w: u64) -> BucketRecord {
        let mut record = BucketRecord {
            v: sluice_core::format::CURRENT,
            w,
            ..Default::default()
        };
        for (policy, keys) in &self.by_policy {
            record.keys.insert(
                policy.to_string(),
                keys.iter().map(|(k, c)| (k.to_string(), *c)).collect(),
            );
        }
        record
    }
}

/// A minute to store: its start, its record, what it had counted, and the
/// stream sequence its stored record has now (0: none).
pub struct ToStore {
    pub minute: u64,
    pub record: BucketRecord,
    pub changes: u64,
    pub expected_seq: u64,
}

/// A minute stored: its start, what it had counted, its new sequence.
pub struct Stored {
    pub minute: u64,
    pub changes: u64,
    pub seq: u64,
}

struct State {
    minutes: BTreeMap<u64, Minute>,
    /// Coarser buckets whose rollup is owed (tier index ≥ 1).
    pending: BTreeSet<BucketId>,
    /// Journal mode: the highest journal sequence whose records are in
    /// these counts (records replayed at takeover or stored by our writer).
    watermark: u64,
    /// Journal mode: every record at or below this is in the stored
    /// records (what the last complete flush covered); a snapshot may claim
    /// no journal position past it.
    stored_through: u64,
}

/// One partition's usage not yet final in the store.
pub struct Ledger {
    tiers: Vec<Tier>,
    /// Minutes starting at or before this began before the takeover.
    first_own_minute: u64,
    state: Mutex<State>,
    /// Whether every journal record the takeover replays is in the counts.
    replayed: watch::Sender<bool>,
}

impl Ledger {
    /// The ledger of a partition taken over at `now_ms`, whose restored
    /// state covers the journal up to `stored_through` (0 in snapshot mode).
    pub fn new(tiers: Vec<Tier>, now_ms: u64, stored_through: u64) -> Ledger {
        let first_own_minute = tiers[0].bucket_of(now_ms) + tiers[0].step_ms();
        Ledger {
            tiers,
            first_own_minute,
            state: Mutex::new(State {
                minutes: BTreeMap::new(),
                pending: BTreeSet::new(),
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
            .or_insert_with(|| Minute {
                merged: minute >= self.first_own_minute,
                ..Default::default()
            })
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

    /// Minutes that began before the takeover and were never merged with
    /// their stored record (the flush reads those first).
    pub fn unmerged(&self) -> Vec<u64> {
        let state = self.lock();
        state
            .minutes
            .iter()
            .filter(|(_, m)| !m.merged && m.dirty())
            .map(|(t, _)| *t)
            .collect()
    }

    /// Adds the stored record of `minute` (read by the flush or at
    /// takeover, with its stream sequence) into it, once.
    pub fn merge_stored(&self, minute: u64, stored: Option<(&BucketRecord, u64)>) {
        let mut state = self.lock();
        let m = state.minutes.entry(minute).or_default();
        if m.merged {
            return;
        }
        m.merged = true;
        if let Some((stored, seq)) = stored {
            for (policy, keys) in &stored.keys {
                for (key, counts) in keys {
                    m.add(policy, key, *counts);
                }
            }
            m.seq = seq;
            state.watermark = state.watermark.max(stored.w);
        }
    }

    /// Copies every changed, merged minute to store, with the watermark
    /// they cover, which [`Ledger::stored`] makes `stored_through` once all
    /// of them are stored.
    pub fn to_store(&self) -> (Vec<ToStore>, u64) {
        let state = self.lock();
        let w = state.watermark;
        let minutes = state
            .minutes
            .iter()
            .filter(|(_, m)| m.merged && m.dirty())
            .map(|(t, m)| ToStore {
                minute: *t,
                record: m.record(w),
                changes: m.changes,
                expected_seq: m.seq,
            })
            .collect();
        (minutes, w)
    }

    /// The copies of [`Ledger::to_store`] are stored: their minutes are
    /// clean unless counted again meanwhile, their coarser buckets owe a
    /// rollup, and (when every copy was stored) the journal up to
    /// `watermark` is in the store.
    pub fn stored(&self, stored: &[Stored], watermark: u64, all: bool) {
        let mut state = self.lock();
        for s in stored {
            if let Some(m) = state.minutes.get_mut(&s.minute) {
                m.stored_changes = m.stored_changes.max(s.changes);
                m.seq = m.seq.max(s.seq);
            }
            if let Some(coarser) = self.tiers.get(1) {
                state.pending.insert((1, coarser.bucket_of(s.minute)));
            }
        }
        if all {
            state.stored_through = state.stored_through.max(watermark);
        }
    }

    /// Forgets minutes that are stored as they stand and ended `grace_ms`
    /// before `now_ms` (nothing more is counted in them but a takeover's
    /// replay, which reads them again).
    pub fn forget_stored(&self, now_ms: u64, grace_ms: u64) {
        let step = self.tiers[0].step_ms();
        let mut state = self.lock();
        state
            .minutes
            .retain(|t, m| m.dirty() || !m.merged || t + step + grace_ms > now_ms);
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
    /// `grace_ms` ago and hold nothing still owed (no changed minute, no
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
                    && !state
                        .minutes
                        .range(*b..end)
                        .any(|(_, m)| m.dirty() || !m.merged)
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

    /// What memory adds to the stored record of `minute`, for a query: the
    /// counts and whether they replace the stored record (merged) or add to
    /// it. `None` when the minute is not in memory.
    pub fn minute_counts(
        &self,
        minute: u64,
        wanted: &dyn Fn(&str, &str) -> bool,
    ) -> Option<(KeyCounts, bool)> {
        let state = self.lock();
        let m = state.minutes.get(&minute)?;
        let mut out = Vec::new();
        for (policy, keys) in &m.by_policy {
            for (key, counts) in keys {
                if wanted(policy, key) {
                    out.push((policy.to_string(), key.to_string(), *counts));
                }
            }
        }
        Some((out, m.merged))
    }

    /// Minutes in memory (for status and tests).
    pub fn minutes(&self) -> usize {
        self.lock().minutes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::usage::UsageConfig;

    const M: u64 = 60_000;

    fn counts(used: u64, denied: u64) -> Counts {
        Counts { used, denied }
    }

    fn stored_all(to_store: &[ToStore]) -> Vec<Stored> {
        to_store
            .iter()
            .map(|s| Stored {
                minute: s.minute,
                changes: s.changes,
                seq: s.expected_seq + 1,
            })
            .collect()
    }

    #[test]
    fn a_minute_begun_before_the_takeover_is_stored_only_once_merged() {
        let now = 1000 * M + 30_000;
        let ledger = Ledger::new(UsageConfig::default().tiers, now, 0);
        ledger.add("default", "alice", now, counts(2, 1));
        ledger.add("default", "alice", now + M, counts(1, 0));
        // The minute of the takeover waits for its stored record.
        assert_eq!(ledger.unmerged(), vec![1000 * M]);
        let (to_store, _) = ledger.to_store();
        assert_eq!(
            to_store.iter().map(|s| s.minute).collect::<Vec<_>>(),
            vec![1001 * M]
        );
        let mut previous = BucketRecord::default();
        previous
            .keys
            .entry("default".into())
            .or_default()
            .insert("alice".into(), counts(5, 0));
        ledger.merge_stored(1000 * M, Some((&previous, 9)));
        ledger.merge_stored(1000 * M, Some((&previous, 9)));
        let (to_store, _) = ledger.to_store();
        assert_eq!(to_store.len(), 2);
        assert_eq!(to_store[0].record.counts("default", "alice"), counts(7, 1));
        // Its next write expects the record it read; the new minute none.
        assert_eq!(to_store[0].expected_seq, 9);
        assert_eq!(to_store[1].expected_seq, 0);
    }

    #[test]
    fn rollups_wait_for_their_minutes_and_finer_rollups() {
        let start = 1000 * M; // a multiple of 5 minutes
        let ledger = Ledger::new(UsageConfig::default().tiers, start - M, 0);
        for i in 0..5 {
            ledger.add("default", "k", start + i * M, counts(1, 0));
        }
        let grace = 5_000;
        let after = start + 5 * M + grace;
        // Nothing stored yet: nothing owed.
        assert_eq!(ledger.due_rollups(after, grace), vec![]);
        let (to_store, w) = ledger.to_store();
        let stored = stored_all(&to_store);
        ledger.stored(&stored, w, true);
        assert_eq!(ledger.due_rollups(after - 1, grace), vec![]);
        assert_eq!(ledger.due_rollups(after, grace), vec![(1, start)]);
        assert!(!ledger.is_final((1, start), after, grace));
        // Counted again (a late replay): owed again only once stored again.
        ledger.add("default", "k", start + M, counts(1, 0));
        assert_eq!(ledger.due_rollups(after, grace), vec![]);
        let (to_store, w) = ledger.to_store();
        let stored = stored_all(&to_store);
        ledger.stored(&stored, w, true);
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
        // Stored minutes are forgotten once past the grace.
        ledger.forget_stored(after, grace);
        assert_eq!(ledger.minutes(), 0);
    }

    #[test]
    fn a_pending_replay_holds_readers_back_until_it_is_in() {
        use futures::FutureExt as _;
        let ledger = Ledger::new(UsageConfig::default().tiers, 1000 * M, 0);
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
        let ledger = Ledger::new(UsageConfig::default().tiers, 1000 * M, 40);
        assert_eq!(ledger.stored_through(), 40);
        ledger.add("default", "k", 1001 * M, counts(1, 0));
        ledger.advance(50);
        let (to_store, w) = ledger.to_store();
        assert_eq!(w, 50);
        ledger.stored(&stored_all(&to_store), w, false);
        assert_eq!(ledger.stored_through(), 40);
        ledger.stored(&[], w, true);
        assert_eq!(ledger.stored_through(), 50);
    }
}
