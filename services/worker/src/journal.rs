//! The journal (`durability = "journal"`): what was counted since the last
//! snapshot, so a new owner can replay it after a crash.
//!
//! Each worker appends to its own subject, `sluice.journal.w.<worker-id>`,
//! for all its partitions ([`crate::group_commit`] batches the appends);
//! every record names its partition. A partition's manifest says where
//! replay starts (a stream sequence: every record of the partition at or
//! below it is in the snapshot) and which workers may have appended records
//! of the partition since (`journal_writers`): the owners since that
//! snapshot. A new owner reads those subjects from that sequence and applies
//! the records of its partition.
//!
//! A replayed record is applied with `record` at its original time: it was
//! counted, so it is counted again regardless of the limit. Records that a
//! snapshot may already contain (those appended while the snapshot was
//! copying) can be counted twice: replay errs on the side of denying.
//!
//! Records are dropped once every partition's snapshot covers them
//! ([`purge_covered`]); the stream's `max_age` is only the backstop.

use crate::decide::Record;
use crate::snapshot;
use anyhow::{Context as _, Result};
use async_nats::jetstream::{consumer, stream};
use futures::StreamExt;
use sluice_core::storage::journal_subject;
use std::time::Duration;

/// The most record bytes one journal message carries. A group commit under
/// heavy load can hold thousands of records; nats-server refuses messages
/// over its `max_payload` (1 MiB by default), so a bigger group is split
/// into several messages of at most about this size.
pub const MAX_APPEND: usize = 512 * 1024;

pub fn encode(records: &[Record]) -> Result<Vec<u8>> {
    Ok(rmp_serde::to_vec(records)?)
}

/// A record's encoded size, at most: five fields of at most 9 bytes plus a
/// 5-byte string header each, and the strings.
fn encoded_len_bound(r: &Record) -> usize {
    1 + 5 * 9 + 2 * 5 + r.p.len() + r.k.len()
}

/// Appends `records` to `subject` as messages of at most [`MAX_APPEND`]
/// bytes each, all published before any ack is awaited. Returns the stream
/// sequence of the last one once every one is acknowledged.
pub async fn append(
    js: async_nats::jetstream::Context,
    subject: String,
    records: Vec<Record>,
) -> Result<u64, String> {
    let mut acks = Vec::new();
    let mut start = 0;
    while start < records.len() {
        let mut end = start;
        let mut size = 5;
        while end < records.len()
            && (end == start || size + encoded_len_bound(&records[end]) <= MAX_APPEND)
        {
            size += encoded_len_bound(&records[end]);
            end += 1;
        }
        let payload = encode(&records[start..end]).map_err(|e| e.to_string())?;
        let ack = js
            .publish(subject.clone(), payload.into())
            .await
            .map_err(|e| e.to_string())?;
        acks.push(ack);
        start = end;
    }
    let mut last = 0;
    for ack in acks {
        last = ack.await.map_err(|e| e.to_string())?.sequence;
    }
    Ok(last)
}

/// Replays every record of `partition` after `after_seq` that the workers
/// `writers` appended, handing each to `apply` (which says whether it was
/// applied). Returns how many were applied.
pub async fn replay(
    journal: &stream::Stream,
    partition: u32,
    writers: &[String],
    after_seq: u64,
    mut apply: impl FnMut(&Record) -> bool,
) -> Result<usize> {
    let subjects: Vec<String> = writers.iter().map(|w| journal_subject(w)).collect();
    let mut last = after_seq;
    for subject in &subjects {
        match journal.get_last_raw_message_by_subject(subject).await {
            Ok(m) => last = last.max(m.sequence),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {}
            Err(e) => return Err(e).context("cannot read the journal"),
        }
    }
    if last <= after_seq {
        return Ok(0);
    }
    let consumer = journal
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subjects: subjects,
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: after_seq + 1,
            },
            ..Default::default()
        })
        .await
        .context("cannot read the journal")?;
    let mut messages = consumer
        .messages()
        .await
        .context("cannot read the journal")?;
    let mut applied = 0;
    let mut seq = after_seq;
    while seq < last {
        let msg = messages
            .next()
            .await
            .context("the journal ended early")?
            .context("cannot read the journal")?;
        seq = msg
            .info()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .stream_sequence;
        let records: Vec<Record> = match rmp_serde::from_slice(&msg.payload) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(
                    partition,
                    seq,
                    "skipping an unreadable journal message: {e}"
                );
                continue;
            }
        };
        for r in records.iter().filter(|r| r.n == partition) {
            if apply(r) {
                applied += 1;
            }
        }
    }
    Ok(applied)
}

/// Runs [`purge_covered`] every `every`, for ever (the worker aborts it).
pub async fn purge_covered_every(
    every: Duration,
    journal: stream::Stream,
    snapshots: async_nats::jetstream::kv::Store,
    partitions: u32,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = purge_covered(&journal, &snapshots, partitions).await {
            tracing::warn!("{e:#}; will retry");
        }
    }
}

/// Drops the records every partition's snapshot covers: those at or below
/// the lowest journal position of the manifests. A partition with no
/// manifest has no records (an owner writes the manifest before it
/// answers). Any worker may run it; running it twice is harmless.
pub async fn purge_covered(
    journal: &stream::Stream,
    snapshots: &async_nats::jetstream::kv::Store,
    partitions: u32,
) -> Result<()> {
    let mut covered = None::<u64>;
    for partition in 0..partitions {
        if let (Some(m), _) = snapshot::read_manifest(snapshots, partition).await? {
            covered = Some(covered.map_or(m.journal_seq, |c| c.min(m.journal_seq)));
        }
    }
    match covered {
        Some(seq) if seq > 0 => {
            // Purges every message below `seq + 1`.
            journal
                .purge()
                .sequence(seq + 1)
                .await
                .context("cannot purge the journal")?;
            Ok(())
        }
        _ => Ok(()),
    }
}
