//! The journal (`durability = "journal"`): what was counted since the last
//! snapshot, so a new owner can replay it after a crash.
//!
//! A partition's owner decides a batch of requests, appends one journal
//! message holding every counted request of the batch (group commit), and
//! answers the batch only once JetStream acknowledged that message. So an
//! answer a client saw always has its count stored, and `kill -9` loses no
//! counts. Acks are awaited in order by a separate task, so the next batch is
//! decided while the previous one is being stored.
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

pub fn encode(records: &[Record]) -> Result<Vec<u8>> {
    Ok(rmp_serde::to_vec(records)?)
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
