//! Where decided answers go, and the one place that knows the durability
//! mode (SPEC §4 `durability`).
//!
//! In snapshot mode an answer is published at once. In journal mode it goes
//! to the worker's journal writer ([`crate::group_commit`]), which publishes
//! it once the records of what it counted are stored, and a new owner
//! replays the journal on top of the snapshot. Shards and worker batches
//! hand their answers here and never ask which mode is on; the snapshot's
//! journal position and the takeover replay are answered here too.

use crate::global::Deferred;
use crate::group_commit;
use crate::journal;
use crate::journal::record::Record;
use crate::reply::{self, Outgoing};
use crate::snapshot::Manifest;
use crate::stats::{secs, WorkerStats};
use crate::store::Stores;
use crate::turn_log::Recording;
use crate::usage::UsageHistory;
use anyhow::Result;
use async_nats::jetstream::stream;
use sluice_core::config::{Config, JournalFailure};
use sluice_core::storage::journal_subject;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The journal side of journal mode.
struct Journal {
    writer: group_commit::Writer,
    on_failure: JournalFailure,
    stream: stream::Stream,
    worker_id: String,
    /// Journal subjects read for takeovers, shared by the partitions.
    tails: journal::Tails,
}

/// Sends answers, through the journal in journal mode.
pub struct Outbox {
    client: async_nats::Client,
    journal: Option<Journal>,
    /// Where the decision latency goes.
    stats: Arc<WorkerStats>,
}

/// The tasks an [`Outbox`] runs (journal mode): abort them once every
/// shard has handed over.
pub struct OutboxTasks(Vec<JoinHandle<()>>);

impl OutboxTasks {
    pub fn abort(self) {
        for task in self.0 {
            task.abort();
        }
    }
}

impl Outbox {
    /// In journal mode (`stores.journal` is open) starts the worker's
    /// journal writer, which tells `usage` what it stored, and the purge of
    /// covered records (every snapshot interval, at least a second: what a
    /// dead writer's journal still holds is what a takeover reads).
    pub fn start(
        client: async_nats::Client,
        stores: &Stores,
        worker_id: &str,
        stats: Arc<WorkerStats>,
        config: &Config,
        usage: Option<Arc<UsageHistory>>,
    ) -> (Outbox, OutboxTasks) {
        let on_failure = config.journal_failure;
        let purge_every = config.snapshot_interval.max(Duration::from_secs(1));
        let Some(stream) = stores.journal.clone() else {
            return (
                Outbox {
                    client,
                    journal: None,
                    stats,
                },
                OutboxTasks(Vec::new()),
            );
        };
        let (writer, writing) = group_commit::Writer::spawn(
            client.clone(),
            stores.js.clone(),
            journal_subject(worker_id),
            stats.clone(),
            on_failure,
            move |records: &[Record], seq: Option<u64>| {
                if let Some(usage) = &usage {
                    usage.journaled(records, seq);
                }
            },
        );
        let purging = tokio::spawn(journal::purge_covered_every(
            purge_every,
            stream.clone(),
            stores.snapshots.clone(),
            config.partitions,
        ));
        let journal = Journal {
            writer,
            on_failure,
            stream,
            worker_id: worker_id.to_string(),
            tails: journal::Tails::default(),
        };
        (
            Outbox {
                client,
                journal: Some(journal),
                stats,
            },
            OutboxTasks(vec![writing, purging]),
        )
    }

    /// Whether answers wait for the journal (decisions must build records).
    pub fn is_journal(&self) -> bool {
        self.journal.is_some()
    }

    /// Whether decisions keep records of what they counted: in journal
    /// mode, for the journal to store before the answers go out.
    pub fn recording(&self) -> Recording {
        if self.is_journal() {
            Recording::Records
        } else {
            Recording::Nothing
        }
    }

    /// Sends a shard's decided batch, whose first message was taken at
    /// `received`: at once, or in journal mode once `records` (and
    /// everything before them) are stored. The time until the replies are
    /// published is the batch's decision latency. Then performs `then` (at
    /// once in snapshot mode; never if the journal could not store the
    /// records): what must not leave the worker before its record is safe,
    /// such as a region's share given back (SPEC §12), which a new
    /// owner would otherwise spend again.
    pub async fn answer(
        &self,
        records: Vec<Record>,
        mut replies: Vec<Outgoing>,
        received: Instant,
        then: Option<Deferred>,
    ) {
        if self.journal.is_some() && !records.is_empty() {
            for (_, reply) in &mut replies {
                if let Some(traced) = &mut reply.traced {
                    traced.waiting_for_journal();
                }
            }
        }
        match (&self.journal, then) {
            (Some(j), None) => j.writer.send(records, replies, received, None).await,
            (Some(j), Some(then)) => {
                let (done, stored) = tokio::sync::oneshot::channel();
                j.writer.send(records, replies, received, Some(done)).await;
                tokio::spawn(async move {
                    if stored.await.unwrap_or(false) {
                        then.perform();
                    }
                });
            }
            (None, then) => {
                if !replies.is_empty() {
                    reply::publish(&self.client, replies).await;
                    self.stats
                        .meters
                        .decision_latency
                        .observe(secs(received.elapsed()));
                }
                if let Some(then) = then {
                    then.perform();
                }
            }
        }
    }

    /// Sends one reply after `records` are stored (a worker batch, decided
    /// on its own task); if they could not be, the reply is a 503 unless
    /// `journal_failure = "answer"`. Whether they were (always in snapshot
    /// mode).
    pub async fn answer_one(
        &self,
        records: Vec<Record>,
        to: async_nats::Subject,
        mut reply: reply::Reply,
        received: Instant,
    ) -> bool {
        let mut stored = true;
        if let Some(j) = &self.journal {
            if !records.is_empty() && !j.writer.store(records).await {
                stored = false;
                if j.on_failure == JournalFailure::Unavailable {
                    reply = reply.unstored();
                }
            }
        }
        reply::publish(&self.client, vec![(to, reply)]).await;
        self.stats
            .meters
            .decision_latency
            .observe(secs(received.elapsed()));
        stored
    }

    /// Returns once everything handed over before is stored and answered.
    pub async fn flush(&self) {
        if let Some(j) = &self.journal {
            j.writer.flush().await;
        }
    }

    /// The journal position and writers a snapshot taken now may claim,
    /// given the position `claimed` by the last one. Every record at or
    /// below the writer's acknowledged sequence was applied before it was
    /// appended, so the copy about to be made holds it; records appended
    /// later may or may not make it into the copy (replay then counts them
    /// twice: the safe side). Records of earlier owners were replayed at
    /// takeover, so only this worker is left as a writer. Snapshot mode:
    /// `(0, [])`.
    pub fn position(&self, claimed: u64) -> (u64, Vec<String>) {
        match &self.journal {
            Some(j) => (claimed.max(j.writer.acked()), vec![j.worker_id.clone()]),
            None => (0, Vec::new()),
        }
    }

    /// Journal mode: whether this worker's journal moved past `claimed`.
    pub fn moved_past(&self, claimed: u64) -> bool {
        self.journal
            .as_ref()
            .is_some_and(|j| j.writer.acked() > claimed)
    }

    /// Drops journal tails kept from a takeover that is over.
    pub fn forget_unused_tails(&self) {
        if let Some(j) = &self.journal {
            j.tails.forget_unused();
        }
    }

    /// At takeover: what the journal holds of `partition` that the snapshot
    /// in `manifest` does not (read while the snapshot is restored);
    /// nothing in snapshot mode.
    pub async fn journal_since(
        &self,
        partition: u32,
        manifest: &Manifest,
    ) -> Result<journal::Since> {
        match &self.journal {
            Some(j) => {
                journal::read_since(
                    &j.stream,
                    &j.tails,
                    partition,
                    &manifest.journal_writers,
                    manifest.journal_seq,
                )
                .await
            }
            None => Ok(journal::Since::default()),
        }
    }

    /// At takeover, after the snapshot is restored: replays the records of
    /// `partition` in `since`, handing each to `apply`, and lists this
    /// worker among the manifest's writers. Returns how many records were
    /// applied (always 0 in snapshot mode).
    ///
    /// The manifest keeps claiming only what its chunks hold, and the
    /// previous writers stay listed, so a next owner replays their records
    /// again until a snapshot of ours covers them; our own records from now
    /// on are on our subject.
    pub fn replay(
        &self,
        partition: u32,
        manifest: &mut Manifest,
        since: &journal::Since,
        mut apply: impl FnMut(&Record) -> bool,
    ) -> usize {
        let Some(j) = &self.journal else {
            return 0;
        };
        let applied = since.replay(partition, |_, record| apply(record));
        manifest.lists_writer(&j.worker_id);
        applied
    }
}

impl crate::owner::Journal for Outbox {
    fn is_journal(&self) -> bool {
        Outbox::is_journal(self)
    }

    fn position(&self, claimed: u64) -> (u64, Vec<String>) {
        Outbox::position(self, claimed)
    }

    fn moved_past(&self, claimed: u64) -> bool {
        Outbox::moved_past(self, claimed)
    }

    fn replay(
        &self,
        partition: u32,
        manifest: &mut Manifest,
        since: &journal::Since,
        apply: &mut dyn FnMut(&Record) -> bool,
    ) -> usize {
        Outbox::replay(self, partition, manifest, since, apply)
    }
}
