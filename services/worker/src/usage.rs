//! Usage history at the owner (SPEC §9): every counted request adds to
//! its key's minute in memory ([`crate::usage::ledger`]), each shard stores the minutes
//! it changed on its snapshot tick and rolls ended buckets up into the
//! coarser tiers ([`UsageHistory::flush`]), and queries read the stored
//! records plus what is still only in memory ([`query`], [`top`]; top
//! keeps the buckets it ranked, [`top_cache`]).
//!
//! Where a count enters the ledger decides what survives a crash. In
//! snapshot mode it enters when decided: a `kill -9` loses what was counted
//! since the last flush, at most one snapshot interval, like the counters.
//! In journal mode it enters once the journal holds it
//! ([`UsageHistory::journaled`], from the journal writer), denials included
//! (they are journaled for this). Every stored minute says up to which
//! journal sequence it holds the partition's records (`w`), and a snapshot
//! claims no journal position past what the stored minutes hold
//! ([`Ledger::stored_through`]), so a new owner replays exactly the
//! records that are not in the store yet ([`UsageHistory::replay`]).
//!
//! That replay is not on the takeover's critical path: the partition
//! answers once its counters are restored, and the shard replays the usage
//! right after (a stored minute read per replayed minute, then every
//! replayed record added). It added ~0.2 s to a journal takeover after
//! heavy load when the partition waited for it (docs/BENCHMARKS-HISTORY.md,
//! "Restore after a crash").
//! Meanwhile the ledger takes new counts but nothing reads or stores its
//! totals: flushes and queries wait for the replay ([`Ledger::replayed`]),
//! and a snapshot claims no journal position past what the last flush
//! stored, so a handover or crash before the replay is in leaves the next
//! owner to replay the same records.
//!
//! docs/USAGE.md tells the design, the storage layout and the measured
//! costs; the pure part (tiers, records, which buckets answer a range) is
//! `sluice_core::usage`.

pub mod ledger;
pub mod query;
pub mod store;
pub mod top;
pub mod top_cache;

use crate::journal;
use crate::journal::record::{Kind, Record};
use crate::usage::ledger::{Ledger, Take, WriteMarks};
use anyhow::{Context as _, Result};
use sluice_core::config::Config;
use sluice_core::usage::{
    add_to_record, visit_record, BucketId, Counts, RankedBucket, RecordSum, UsageConfig,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use store::{PutError, UsageStore};
use top_cache::{TopCache, Version};

/// How long a flush or a query waits for a takeover's usage replay
/// ([`Ledger::replayed`]) before it gives up (the flush is tried again on
/// the next tick; the query answers 503).
pub const REPLAY_WAIT: Duration = Duration::from_secs(2);

/// A worker's usage: the store and the ledgers of the partitions it answers.
pub struct UsageHistory {
    pub store: UsageStore,
    pub config: UsageConfig,
    ledgers: RwLock<HashMap<u32, Arc<Ledger>>>,
    /// Journal mode: every record at or below this journal sequence that
    /// the writer stored is in its partition's ledger.
    delivered: AtomicU64,
    /// How long after a bucket ends it may still be counted in (a
    /// journal ack, a flush in flight), so before it may be rolled up.
    pub grace_ms: u64,
    /// At takeover, the coarser buckets that ended this recently are
    /// rolled up again (the previous owner may have died before it did).
    lookback_ms: u64,
    /// Records being read and summed at once, off the answering thread:
    /// every partition flushes on the same tick, and 64 busy minutes
    /// summed together held a few MiB each at the same time.
    summing: tokio::sync::Semaphore,
    /// The ranked lists top queries read, kept between them.
    pub top_cache: Arc<TopCache>,
}

impl UsageHistory {
    pub fn new(store: UsageStore, config: &Config) -> UsageHistory {
        let grace_ms = 2 * config.snapshot_interval.as_millis() as u64 + 1_000;
        UsageHistory {
            store,
            config: config.usage.clone(),
            ledgers: RwLock::default(),
            delivered: AtomicU64::new(0),
            grace_ms,
            lookback_ms: 2 * config.lease_ttl.as_millis() as u64 + 10_000 + grace_ms,
            summing: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            ),
            top_cache: Arc::default(),
        }
    }

    /// The ledger of a partition taken over at `now_ms`, whose restored
    /// state covers the journal up to `stored_through`; it owes the recent
    /// rollups, and (with `replays`) the usage of the journal's records
    /// past that ([`UsageHistory::replay`]). Registered for the journal writer
    /// and the top query.
    pub fn open_ledger(
        &self,
        partition: u32,
        now_ms: u64,
        stored_through: u64,
        replays: bool,
    ) -> Arc<Ledger> {
        let ledger = Arc::new(Ledger::new(self.config.tiers.clone(), stored_through));
        self.top_cache.drop_partition(partition);
        ledger.owe_recent_rollups(now_ms, self.lookback_ms);
        if replays {
            ledger.replay_pending();
        }
        self.ledgers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(partition, ledger.clone());
        ledger
    }

    /// Unregisters `ledger` (if a newer one of the partition has not
    /// replaced it).
    pub fn close_ledger(&self, partition: u32, ledger: &Arc<Ledger>) {
        let mut ledgers = self.ledgers.write().unwrap_or_else(|e| e.into_inner());
        if ledgers
            .get(&partition)
            .is_some_and(|l| Arc::ptr_eq(l, ledger))
        {
            ledgers.remove(&partition);
            self.top_cache.drop_partition(partition);
        }
    }

    pub fn ledger(&self, partition: u32) -> Option<Arc<Ledger>> {
        self.ledgers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&partition)
            .cloned()
    }

    /// The partitions whose ledgers are open here, with them.
    pub fn ledgers(&self) -> BTreeMap<u32, Arc<Ledger>> {
        let ledgers = self.ledgers.read().unwrap_or_else(|e| e.into_inner());
        ledgers.iter().map(|(p, l)| (*p, l.clone())).collect()
    }

    /// Journal mode: `records` were stored in the journal (up to sequence
    /// `seq`), or their append failed (`None`: they were counted anyway
    /// and are in memory only, like their counters).
    pub fn journaled(&self, records: &[Record], seq: Option<u64>) {
        if records.is_empty() {
            return;
        }
        {
            let ledgers = self.ledgers.read().unwrap_or_else(|e| e.into_inner());
            for record in records {
                let Some(counts) = counts_of(record) else {
                    continue;
                };
                match ledgers.get(&record.partition()) {
                    Some(ledger) => ledger.add(
                        record.policy(),
                        record.key(),
                        record.at().as_u64() / 1_000_000,
                        counts,
                    ),
                    None => tracing::debug!(
                        partition = record.partition(),
                        "usage of a record whose partition is no longer answered here is left out"
                    ),
                }
            }
        }
        if let Some(seq) = seq {
            self.delivered.fetch_max(seq, Ordering::Release);
        }
    }

    /// Stores what `partition` counted since its last flush, then (with
    /// `rollups`) the rollups that are due, at `now_ms`, while `owner()`
    /// says the partition is still ours. A failure leaves what was not
    /// stored to the next flush. A handover stores the minutes only: the
    /// next owner owes itself the recent rollups anyway, and a handover
    /// should be short. Waits for a takeover's usage replay first (up to
    /// [`REPLAY_WAIT`]): a flush before it would store totals without it.
    pub async fn flush(
        &self,
        partition: u32,
        ledger: &Ledger,
        now_ms: u64,
        rollups: bool,
        owner: impl Fn() -> bool,
    ) -> Result<()> {
        tokio::time::timeout(REPLAY_WAIT, ledger.replayed())
            .await
            .context("the usage the journal holds is not restored yet")?;
        ledger.advance(self.delivered.load(Ordering::Acquire));
        let take = ledger.take();
        let minute_ms = self.config.tiers[0].step_ms();
        let writes = take.minutes.iter().map(|&minute| {
            // A late count (a journal ack slower than the grace period)
            // rewrites a minute a top query may hold as final.
            let late = minute + minute_ms + self.grace_ms <= now_ms;
            self.store_minute(partition, ledger, minute, &take, late, &owner)
        });
        let failure = futures::future::join_all(writes)
            .await
            .into_iter()
            .find_map(Result::err);
        if let Some(e) = failure {
            return Err(e);
        }
        ledger.stored_all(take.watermark);
        let due = if rollups {
            ledger.due_rollups(now_ms, self.grace_ms)
        } else {
            Vec::new()
        };
        for bucket in due {
            if !owner() {
                anyhow::bail!(
                    "the partition's lease ended; its rollups are left to the next owner"
                );
            }
            self.roll_up(partition, ledger, bucket, now_ms).await?;
        }
        ledger.forget_stored(now_ms, self.grace_ms);
        Ok(())
    }

    /// Adds what `take` took of `minute` (and whatever earlier takes'
    /// writes did not land) to its stored record and writes it back,
    /// expecting the record it read: a record written meanwhile (by a
    /// worker that lost the partition, finishing its flush) fails the
    /// write, and the next flush adds to that record instead.
    async fn store_minute(
        &self,
        partition: u32,
        ledger: &Ledger,
        minute: u64,
        take: &Take,
        late: bool,
        owner: &impl Fn() -> bool,
    ) -> Result<()> {
        let bucket = (0, minute);
        if !owner() {
            anyhow::bail!("the partition's lease ended; its usage is left to the next owner");
        }
        // Summed per key first, whatever the store does next: a take whose
        // write fails stays in memory, and should cost its keys, not every
        // request it counted.
        let logs = ledger.unfolded(minute);
        if !logs.is_empty() {
            let folded = crate::blocking::run(move || {
                logs.into_iter()
                    .filter_map(|log| log.folded().map(|sums| (log, sums)))
                    .collect()
            })
            .await
            .context("summing counted usage panicked")?;
            ledger.folded(minute, folded);
        }
        // Held from the read to the write: the records in memory at once
        // are bounded too, not only the sums.
        let _permit = self.summing.acquire().await?;
        let (payload, expected, marks) = match self.store.get(partition, bucket).await? {
            Some(stored) => (Some(stored.payload), stored.seq, stored.marks),
            None => (None, 0, WriteMarks::default()),
        };
        let lacking = ledger.lacking(minute, &marks);
        if lacking.is_empty() {
            // An earlier write landed after all and holds everything.
            return Ok(());
        }
        // A busy minute's record holds tens of thousands of keys: added to
        // off the thread that answers requests, a core's worth at a time.
        let watermark = take.watermark;
        let (record, replaced) = crate::blocking::run(move || {
            let more = || lacking.iter().flat_map(|counted| counted.iter());
            record_to_write(payload.as_deref(), watermark, more)
        })
        .await
        .context("adding to a usage record panicked")?
        .with_context(|| format!("cannot add to the stored usage record of minute {minute}"))?;
        // A replaced record held nothing of what its marks claim.
        let marks = if replaced {
            WriteMarks::default()
        } else {
            marks
        };
        if !owner() {
            anyhow::bail!("the partition's lease ended; its usage is left to the next owner");
        }
        match self
            .store
            .put(partition, bucket, record, expected, Some(&marks.with(take.mark)))
            .await
        {
            Ok(_) => {
                if late {
                    self.top_cache.drop_bucket(partition, bucket);
                }
                ledger.written(minute, take.mark.write);
                Ok(())
            }
            Err(PutError::Moved) => Err(anyhow::anyhow!(
                "the usage record of minute {minute} was written by another writer meanwhile; the next flush adds to it"
            )),
            Err(PutError::Failed(e)) => Err(e),
        }
    }

    /// Stores `bucket` as the sum of the finer tier's stored records in it.
    async fn roll_up(
        &self,
        partition: u32,
        ledger: &Ledger,
        bucket: BucketId,
        now_ms: u64,
    ) -> Result<()> {
        let (tier, start) = bucket;
        let tiers = &self.config.tiers;
        let finer = tiers[tier - 1].step_ms();
        let parts: Vec<u64> = (start..start + tiers[tier].step_ms())
            .step_by(finer as usize)
            .collect();
        let _permit = self.summing.acquire().await?;
        let records = self.store.read(partition, tier - 1, &parts).await?;
        // Off the thread that answers requests, like a minute's flush.
        let sum = crate::blocking::run(move || -> Result<Option<Vec<u8>>> {
            let mut sum = RecordSum::new(0);
            for record in records.values() {
                sum.add_encoded(record)?;
            }
            Ok((!sum.is_empty()).then(|| sum.encode()))
        })
        .await
        .context("summing a rollup panicked")??;
        let rank_ahead = self.top_cache.in_use(now_ms);
        let stored = sum.as_ref().filter(|_| rank_ahead).cloned();
        if let Some(sum) = sum {
            self.store
                .replace(partition, bucket, sum)
                .await
                .context("cannot store a rollup")?;
        }
        // Rolled up again after a late count, it may be held as final.
        self.top_cache.drop_bucket(partition, bucket);
        ledger.rolled_up(bucket);
        if let Some(stored) = stored {
            self.rank_ahead(partition, ledger, bucket, stored);
        }
        Ok(())
    }

    /// Ranks a bucket just rolled up (`record`: what was stored) and keeps
    /// its list as final, on a task of its own: top
    /// queries run here, and the first to read the bucket would otherwise
    /// rank all of it while the dashboard waits.
    fn rank_ahead(&self, partition: u32, ledger: &Ledger, bucket: BucketId, record: Vec<u8>) {
        let cache = self.top_cache.clone();
        let (ledger, generation) = (ledger.id(), cache.generation(partition));
        tokio::spawn(async move {
            let ranked = crate::blocking::run(move || RankedBucket::from_record(&record)).await;
            match ranked {
                Ok(Ok(list)) => {
                    let list = Arc::new(list);
                    cache.keep(partition, ledger, bucket, Version::Final, list, generation);
                }
                Ok(Err(e)) => tracing::warn!(partition, "cannot rank a rollup: {e}"),
                Err(e) => tracing::warn!(partition, "ranking a rollup failed: {e}"),
            }
        });
    }

    /// [`UsageHistory::replay`], tried again every `pause` while `owner()`
    /// says the lease is held (a stream without a leader answers again
    /// within seconds); given up once it is not.
    pub async fn replay_while_owner(
        &self,
        partition: u32,
        ledger: &Ledger,
        since: &journal::Since,
        owner: impl Fn() -> bool,
        pause: Duration,
    ) {
        loop {
            match self.replay(partition, ledger, since).await {
                Ok(()) => return,
                Err(e) if owner() => {
                    tracing::warn!(
                        partition,
                        "cannot restore the usage the journal holds yet, trying again: {e:#}"
                    );
                    tokio::time::sleep(pause).await;
                }
                Err(e) => {
                    tracing::error!(
                        partition,
                        "cannot restore the usage the journal holds, and the lease ended: {e:#}"
                    );
                    return;
                }
            }
        }
    }

    /// Journal mode, after a takeover: adds the usage of the records of
    /// `partition` that `since` replays and the stored minutes do not hold
    /// yet, then marks the ledger replayed. Reads the stored minutes they
    /// fall in first, together; nothing is added until every read
    /// succeeded, so a failed replay can be tried again. The records are
    /// walked twice where they lie in the journal's tails (no copy).
    pub async fn replay(
        &self,
        partition: u32,
        ledger: &Ledger,
        since: &journal::Since,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        let step = &self.config.tiers[0];
        let mut minutes = BTreeSet::new();
        since.replay(partition, |_, record| {
            minutes.insert(step.bucket_of(record.at().as_u64() / 1_000_000));
            false
        });
        let reads = minutes.iter().map(|&m| self.store.get(partition, (0, m)));
        let found = futures::future::join_all(reads)
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let mut stored = HashMap::new();
        for (&minute, found) in minutes.iter().zip(found) {
            let w = match found {
                Some(record) => visit_record(&record.payload, |_, _, _| {})
                    .context("cannot read a stored usage record")?,
                None => 0,
            };
            stored.insert(minute, w);
        }
        // From here on nothing awaits: the replay is in all at once.
        if let Some(&w) = stored.values().max() {
            ledger.advance(w);
        }
        let added = since.replay(partition, |seq, record| {
            let mut added = false;
            if let Some(counts) = counts_of(record) {
                let minute = step.bucket_of(record.at().as_u64() / 1_000_000);
                if seq > stored.get(&minute).copied().unwrap_or(0) {
                    ledger.add(
                        record.policy(),
                        record.key(),
                        record.at().as_u64() / 1_000_000,
                        counts,
                    );
                    added = true;
                }
            }
            ledger.advance(seq);
            added
        });
        ledger.replay_done();
        tracing::debug!(
            partition,
            minutes = minutes.len(),
            added,
            took_ms = started.elapsed().as_millis() as u64,
            "usage replayed"
        );
        Ok(())
    }
}

/// The record to write for a minute: the stored one (`stored`, encoded)
/// plus `more`, and whether the stored one was replaced instead. A stored
/// record of a newer format is not touched (a newer worker wrote it; the
/// error says so and the counts stay in memory). One that cannot be read at
/// all is replaced by `more` alone, loudly: it can be neither queried nor
/// added to, and keeping the counts in memory for ever would help no one.
fn record_to_write<'a, I>(
    stored: Option<&'a [u8]>,
    w: u64,
    more: impl Fn() -> I,
) -> Result<(Vec<u8>, bool), sluice_core::usage::RecordError>
where
    I: Iterator<Item = (&'a str, &'a str, Counts)>,
{
    match add_to_record(stored, w, more()) {
        Err(sluice_core::usage::RecordError::Malformed(why)) => {
            tracing::error!(
                "a stored usage record cannot be read ({why}); replacing it with what this worker counted"
            );
            Ok((add_to_record(None, w, more())?, true))
        }
        result => Ok((result?, false)),
    }
}

/// What a journal record adds to usage: units used, or (a denial) denied;
/// nothing for a reset, a slice, a hold's reserve or extend, or a record
/// that is not usage; a slice's or a hold's spent units when it comes back.
pub fn counts_of(record: &Record) -> Option<Counts> {
    let typed = record.typed();
    if !typed.is_usage {
        return None;
    }
    let used = |used| Some(Counts { used, denied: 0 });
    match typed.kind {
        Kind::Counted { units } | Kind::UsedOnly { units } => used(units),
        Kind::Denied { units, .. } => Some(Counts {
            used: 0,
            denied: units,
        }),
        // A slice's units are usage once they come back spent.
        Kind::Refunded(back) | Kind::HoldEnded { back, .. } => used(back.spent),
        Kind::Reset
        | Kind::Sliced { .. }
        | Kind::HoldReserved { .. }
        | Kind::HoldExtended { .. }
        | Kind::IdRemembered { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::usage::{BucketRecord, RecordError};

    #[test]
    fn an_unreadable_record_is_replaced_and_a_newer_one_left_alone() {
        let counts = Counts { used: 2, denied: 1 };
        let more = || [("default", "k", counts)].into_iter();
        let (written, replaced) = record_to_write(Some(b"\xc1"), 5, more).unwrap();
        assert!(replaced);
        let record = BucketRecord::decode(&written).unwrap();
        assert_eq!((record.w, record.counts("default", "k")), (5, counts));
        let newer = BucketRecord {
            v: sluice_core::format::USAGE + 1,
            ..Default::default()
        }
        .encode();
        assert!(matches!(
            record_to_write(Some(&newer), 5, more),
            Err(RecordError::Newer(_))
        ));
        let (stored, _) = record_to_write(None, 3, more).unwrap();
        let (sum, replaced) = record_to_write(Some(&stored), 5, more).unwrap();
        assert!(!replaced);
        let sum = BucketRecord::decode(&sum).unwrap();
        assert_eq!(sum.counts("default", "k"), Counts { used: 4, denied: 2 });
    }
}
