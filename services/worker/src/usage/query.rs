//! The usage series, `rl.usage.<key>`, at the key's owner (`rl.top` is
//! [`crate::usage::top`]).
//!
//! It reads the way a top query does: the range is laid out in buckets
//! ([`sluice_core::usage::resolve_series`], [`cover`]), the stored records
//! of those buckets are read, and the minutes still in the owner's memory
//! are laid over them, so an answer holds everything counted up to the
//! moment it was asked (SPEC §9: "within 1 s"). A coarser bucket is
//! read from its own tier only once it is final (ended, rolled up);
//! before that, from its finer buckets.

use super::UsageHistory;
use crate::answering::Answering;
use crate::reply::Reply;
use crate::usage::ledger::{KeyCounts, Ledger, MinuteView, WriteMarks};
use crate::usage::store::StoredRecord;
use anyhow::{Context as _, Result};
use bytes::Bytes;
use sluice_core::key::KeyToken;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::PartitionSubject;
use sluice_core::usage::{cover, resolve_series, visit_record, BucketId, Counts, RecordError};
use sluice_core::wire::usage::{decode_usage_query, Point, UsageReply};
use sluice_core::wire::{Encoding, ErrorReply};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The records a query needs (as stored), and what the owner's memory
/// adds to them.
struct Loaded {
    stored: HashMap<BucketId, Bytes>,
    /// Minutes in memory: the counts their stored records lack.
    memory: HashMap<u64, KeyCounts>,
}

impl Loaded {
    /// Reads `buckets` of `partition` from the store and, for the minutes
    /// in memory, what memory adds to them (that `wanted` keeps). Memory is
    /// copied before its minute's record is read, and the record's write
    /// mark says which of those counts it already holds
    /// ([`crate::usage::ledger::MinuteView::lacking`]), so a flush landing between the two
    /// neither drops nor doubles a count. Right after a takeover it waits
    /// for the ledger to hold the journal's usage ([`Ledger::replayed`]): a
    /// total without it would be short.
    async fn read(
        history: &UsageHistory,
        partition: u32,
        ledger: &Ledger,
        buckets: &[BucketId],
        wanted: &(dyn Fn(&str, &str) -> bool + Sync),
    ) -> Result<Loaded> {
        wait_replayed(partition, ledger).await?;
        let mut in_memory = Vec::new();
        let mut by_tier: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for &(tier, start) in buckets {
            if tier == 0 {
                if let Some(view) = ledger.minute_counts(start, wanted) {
                    in_memory.push((start, Some(view)));
                    continue;
                }
            }
            by_tier.entry(tier).or_default().push(start);
        }
        let mut stored = HashMap::new();
        let mut memory = HashMap::new();
        for (start, lacking, record) in read_minutes(history, partition, in_memory).await? {
            memory.insert(start, lacking);
            if let Some(record) = record {
                stored.insert((0, start), record.payload);
            }
        }
        for (tier, starts) in by_tier {
            for (start, record) in history.store.read(partition, tier, &starts).await? {
                stored.insert((tier, start), record);
            }
        }
        Ok(Loaded { stored, memory })
    }

    /// Every count of `bucket` that `wanted` keeps, handed to `f` with
    /// its policy and key borrowed from what was loaded.
    fn each<'s>(
        &'s self,
        bucket: BucketId,
        wanted: &dyn Fn(&str, &str) -> bool,
        f: &mut dyn FnMut(&'s str, &'s str, Counts),
    ) -> Result<(), RecordError> {
        if bucket.0 == 0 {
            for (policy, key, c) in self.memory.get(&bucket.1).into_iter().flatten() {
                f(policy, key, *c);
            }
        }
        if let Some(record) = self.stored.get(&bucket) {
            visit_record(record, |policy, key, c| {
                if wanted(policy, key) {
                    f(policy, key, c);
                }
            })?;
        }
        Ok(())
    }
}

/// The stored records of the finest tier's `minutes`, each with what the
/// record lacks of the counts memory held of it (copied before the read:
/// the record's write marks say which of them it holds,
/// [`MinuteView::lacking`]; none for a minute not in memory).
pub(super) async fn read_minutes(
    history: &UsageHistory,
    partition: u32,
    minutes: Vec<(u64, Option<MinuteView>)>,
) -> Result<Vec<(u64, KeyCounts, Option<StoredRecord>)>> {
    let gets = minutes
        .iter()
        .map(|(start, _)| history.store.get(partition, (0, *start)));
    let records = futures::future::join_all(gets).await;
    let mut read = Vec::with_capacity(minutes.len());
    for ((start, view), record) in minutes.into_iter().zip(records) {
        let record = record?;
        let unmarked = WriteMarks::default();
        let marks = record.as_ref().map_or(&unmarked, |r| &r.marks);
        let lacking = view.map(|view| view.lacking(marks)).unwrap_or_default();
        read.push((start, lacking, record));
    }
    Ok(read)
}

/// Waits for the ledger to hold the journal's usage right after a
/// takeover ([`Ledger::replayed`]), at most [`crate::usage::REPLAY_WAIT`]:
/// a total without it would be short.
pub(super) async fn wait_replayed(partition: u32, ledger: &Ledger) -> Result<()> {
    tokio::time::timeout(crate::usage::REPLAY_WAIT, ledger.replayed())
        .await
        .with_context(|| {
            format!("the usage of partition {partition} is still being restored from the journal")
        })
}

/// Answers one `rl.p.<n>.usage.<key>` request on its own task.
pub async fn answer_usage(answering: Arc<Answering>, msg: async_nats::Message) {
    let Some(to) = msg.reply.clone() else {
        return;
    };
    let encoding = Encoding::of_body(&msg.payload);
    let reply = match series(&answering, &msg).await {
        Ok(reply) => Reply::body(reply.encode(encoding), encoding),
        Err(error) => Reply::error(&error, encoding),
    };
    crate::reply::publish(&answering.client, vec![(to, reply)]).await;
}

async fn series(
    answering: &Answering,
    msg: &async_nats::Message,
) -> Result<UsageReply, ErrorReply> {
    let subject = PartitionSubject::parse(msg.subject.as_str()).ok_or_else(|| {
        ErrorReply::bad_request(format!("{} is not a usage subject", msg.subject))
    })?;
    let key = KeyToken::parse(subject.key_token)?;
    let history = history(answering)?;
    let (query, _) = decode_usage_query(&msg.payload).map_err(|e| e.reply)?;
    let policy = query.policy.unwrap_or_else(|| DEFAULT_POLICY.to_string());
    if answering.decider.policies().get(&policy).is_none() {
        return Err(ErrorReply::unknown_policy(&policy));
    }
    let partition = key.partition(answering.partitions);
    let ledger = match history.ledger(partition) {
        Some(ledger) if partition == subject.partition => ledger,
        _ => {
            return Err(ErrorReply::unavailable(format!(
                "key {key} belongs to partition {partition}, which this worker does not answer for right now; ask it on rl.usage.{key}"
            )))
        }
    };
    let now_ms = answering.clock.now().as_u64() / 1_000_000;
    let tiers = &history.config.tiers;
    let plan = resolve_series(
        &history.config,
        now_ms,
        query.from_ms,
        query.to_ms,
        query.step.as_deref(),
    )
    .map_err(|e| ErrorReply::bad_request(e.0))?;
    let usable = |b: BucketId| ledger.is_final(b, now_ms, history.grace_ms);
    let covers: Vec<Vec<BucketId>> = plan
        .points
        .iter()
        .map(|&(tier, start)| cover(tiers, tier, start, start + tiers[tier].step_ms(), &usable))
        .collect();
    let needed: Vec<BucketId> = covers.iter().flatten().copied().collect();
    let token = key.as_str().to_string();
    // Owned: it picks what memory adds here and the records' counts on a
    // blocking thread.
    let wanted = {
        let (policy, token) = (policy.clone(), token.clone());
        move |p: &str, k: &str| p == policy && k == token
    };
    let loaded = Loaded::read(history, partition, &ledger, &needed, &wanted)
        .await
        .map_err(|e| ErrorReply::unavailable(format!("cannot read usage right now: {e:#}")))?;
    let unreadable = |e: RecordError| ErrorReply::unavailable(format!("cannot read usage: {e}"));
    // Every record read holds all of the partition's keys in its bucket:
    // picked through off the thread that answers requests.
    let starts: Vec<u64> = plan.points.iter().map(|&(_, t_ms)| t_ms).collect();
    let points = crate::blocking::run(move || {
        let mut points = Vec::with_capacity(starts.len());
        for (t_ms, buckets) in starts.into_iter().zip(&covers) {
            let mut sum = Counts::default();
            for bucket in buckets {
                loaded
                    .each(*bucket, &wanted, &mut |_, _, c| sum.add(c))
                    .map_err(unreadable)?;
            }
            points.push(Point {
                t_ms,
                used: sum.used,
                denied: sum.denied,
            });
        }
        Ok::<_, ErrorReply>(points)
    })
    .await
    .map_err(|e| ErrorReply::unavailable(format!("reading usage failed: {e}")))??;
    Ok(UsageReply {
        key: token,
        policy,
        step_ms: plan.step_ms,
        points,
        complete_to_ms: now_ms,
        parts: plan.parts,
    })
}

pub(super) fn history(answering: &Answering) -> Result<&UsageHistory, ErrorReply> {
    answering.usage.as_deref().ok_or_else(|| {
        ErrorReply::unavailable(
            "usage history is turned off on this worker ([usage] enabled = false in its config)",
        )
    })
}
