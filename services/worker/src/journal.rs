//! The journal (`durability = "journal"`): what was counted since the last
//! snapshot, so a new owner can replay it after a crash.
//!
//! Group commit: a partition has at most one append in flight. While it is,
//! the owner keeps deciding, and the records and replies of every batch
//! decided meanwhile wait; when the ack arrives they all go out as the next
//! append (one message, or several of at most [`MAX_APPEND`] bytes), so the
//! more load, the more records per stored message, with no timer. A reply
//! is sent only once JetStream acknowledged the append holding its records,
//! so an answer a client saw always has its count stored, and `kill -9`
//! loses no counts. (`shard::replier_loop` runs this, beside the shard task.)
//!
//! A replayed record is applied with `record` at its original time: it was
//! counted, so it is counted again regardless of the limit. Records that a
//! snapshot may already contain (those appended while the snapshot was
//! copying) can be counted twice: replay errs on the side of denying.

use crate::counters::{counter_key, Counters, Op};
use crate::store::journal_subject;
use anyhow::{Context as _, Result};
use async_nats::jetstream::{consumer, stream};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sluice_core::config::Config;
use sluice_core::time::Nanos;

/// One counted request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Policy name.
    pub p: String,
    /// Key token.
    pub k: String,
    /// Units counted.
    pub c: u64,
    /// When (ns since the epoch, the owner's clock).
    pub t: u64,
}

/// The most record bytes one journal message carries. A group commit under
/// heavy load can hold thousands of records; nats-server refuses messages
/// over its `max_payload` (1 MiB by default), so a bigger group is split
/// into several messages of at most about this size.
pub const MAX_APPEND: usize = 512 * 1024;

pub fn encode(records: &[Record]) -> Result<Vec<u8>> {
    Ok(rmp_serde::to_vec(records)?)
}

/// A record's encoded size, at most: four fields of at most 9 bytes plus a
/// 5-byte string header each, and the strings.
fn encoded_len_bound(r: &Record) -> usize {
    1 + 4 * 9 + 2 * 5 + r.p.len() + r.k.len()
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

/// Replays every record of `partition` after `after_seq` into `counters`.
/// Returns the last sequence applied (or `after_seq` when there was none).
pub async fn replay(
    journal: &stream::Stream,
    partition: u32,
    after_seq: u64,
    counters: &Counters,
    config: &Config,
) -> Result<(u64, usize)> {
    let subject = journal_subject(partition);
    let last = match journal.get_last_raw_message_by_subject(&subject).await {
        Ok(m) => m.sequence,
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
            return Ok((after_seq, 0))
        }
        Err(e) => return Err(e).context("cannot read the journal"),
    };
    if last <= after_seq {
        return Ok((after_seq, 0));
    }
    let consumer = journal
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject,
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
    let mut key = String::new();
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
        for r in records {
            if let Some(policy) = config.policy(&r.p) {
                counter_key(&mut key, &r.p, &r.k);
                counters.apply(policy, &key, Nanos(r.t), Op::Record(r.c));
                applied += 1;
            }
        }
    }
    Ok((seq, applied))
}

/// Drops the records a snapshot now covers.
pub async fn truncate(journal: &stream::Stream, partition: u32, up_to_seq: u64) {
    if up_to_seq == 0 {
        return;
    }
    if let Err(e) = journal
        .purge()
        .filter(journal_subject(partition))
        .sequence(up_to_seq + 1)
        .await
    {
        tracing::warn!(partition, "cannot truncate the journal: {e}");
    }
}
