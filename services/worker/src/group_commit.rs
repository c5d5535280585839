//! Journal mode's answers: each waits until the journal holds what it counted.
//!
//! One writer per worker, for all its partitions. A JetStream append costs
//! about the same whatever it carries, and a partition rarely has more than
//! one ask in flight, so one append per partition (the first design) stored
//! about one record per message and capped a worker near 20k asks/s whatever
//! its CPU could do. Here every shard hands its decided batch (records and
//! replies) to the worker's writer, and a worker batch its records; at most one
//! append is in flight, and everything decided meanwhile, on any partition,
//! goes out as the next one once the ack arrives. The more load, the more
//! records per message, with no timer. A reply is sent only once JetStream
//! acknowledged the append holding its records, so an answer a client saw
//! always has its count stored, and `kill -9` loses no counts.
//!
//! [`Writer::acked`] is the stream sequence of the last acknowledged append:
//! every record at or below it was applied to its partition's counters before
//! it was appended, which is what a snapshot's journal position claims.

use crate::journal::{self, Record};
use crate::worker::WorkerStats;
use async_nats::{HeaderMap, Subject};
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// A reply to publish: subject, headers, payload.
pub type OutgoingReply = (Subject, HeaderMap, Bytes);

/// Decided asks: what they counted, and what waits for it to be stored.
#[derive(Default)]
struct Pending {
    records: Vec<Record>,
    replies: Vec<OutgoingReply>,
    /// Told once this (and everything sent before it) is stored and answered.
    stored: Vec<oneshot::Sender<()>>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.records.is_empty() && self.replies.is_empty() && self.stored.is_empty()
    }

    fn add(&mut self, mut other: Pending) {
        self.records.append(&mut other.records);
        self.replies.append(&mut other.replies);
        self.stored.append(&mut other.stored);
    }

    async fn deliver(self, client: &async_nats::Client) {
        deliver(client, self.replies).await;
        for done in self.stored {
            let _ = done.send(());
        }
    }
}

/// The worker's journal writer; shards hold it through `Shared`.
pub struct Writer {
    tx: mpsc::Sender<Pending>,
    acked: Arc<AtomicU64>,
}

impl Writer {
    /// Starts the writer task, appending to `subject`. It ends when the
    /// `Writer` is dropped and everything sent to it is stored and answered.
    pub fn spawn(
        client: async_nats::Client,
        js: async_nats::jetstream::Context,
        subject: String,
        stats: Arc<WorkerStats>,
    ) -> (Writer, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(1024);
        let acked = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(rx, acked.clone(), client, js, subject, stats));
        (Writer { tx, acked }, task)
    }

    /// Queues a shard's decided batch: its replies go out once its records
    /// are stored.
    pub(crate) async fn send(&self, records: Vec<Record>, replies: Vec<OutgoingReply>) {
        self.queue(Pending {
            records,
            replies,
            stored: Vec::new(),
        })
        .await;
    }

    /// Returns once `records` (and everything sent before them) are stored,
    /// or their append failed.
    pub(crate) async fn store(&self, records: Vec<Record>) {
        let (done, stored) = oneshot::channel();
        self.queue(Pending {
            records,
            replies: Vec::new(),
            stored: vec![done],
        })
        .await;
        let _ = stored.await;
    }

    /// Waits until everything sent before is stored and answered.
    pub async fn flush(&self) {
        self.store(Vec::new()).await;
    }

    async fn queue(&self, pending: Pending) {
        // Fails only once the writer task is gone (worker shutting down):
        // then nothing would be answered anyway.
        let _ = self.tx.send(pending).await;
    }

    /// The stream sequence of the last acknowledged append (0: none yet).
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }
}

/// Sends the replies.
pub(crate) async fn deliver(client: &async_nats::Client, replies: Vec<OutgoingReply>) {
    for (to, headers, payload) in replies {
        if let Err(e) = client.publish_with_headers(to, headers, payload).await {
            tracing::warn!("cannot send a reply: {e}");
        }
    }
}

/// One group's append: the stream sequence of its last message.
type Append = Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>;

/// At most one append in flight; what arrives meanwhile waits and goes out
/// as the next one. A group that counted nothing is answered at once when no
/// append is in flight, else after it, so answers keep their order.
async fn run(
    mut rx: mpsc::Receiver<Pending>,
    acked: Arc<AtomicU64>,
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    subject: String,
    stats: Arc<WorkerStats>,
) {
    let mut waiting = Pending::default();
    let mut in_flight: Option<(Append, usize, Pending)> = None;
    let mut open = true;
    loop {
        tokio::select! {
            biased;
            stored = async { in_flight.as_mut().expect("guarded").0.as_mut().await }, if in_flight.is_some() => {
                let (_, records, answers) = in_flight.take().expect("guarded");
                match stored {
                    Ok(seq) => {
                        acked.fetch_max(seq, Ordering::SeqCst);
                    }
                    Err(e) => {
                        // The counts are in memory and will be in their
                        // partitions' next snapshots, but a crash before
                        // then would lose them.
                        stats.journal_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(records, "journal append failed; these counts are only in memory until their partitions' next snapshots: {e}");
                    }
                }
                answers.deliver(&client).await;
            }
            batch = rx.recv(), if open => match batch {
                Some(batch) => waiting.add(batch),
                // Every shard and the worker are done: drain, then stop.
                None => open = false,
            },
        }
        if in_flight.is_none() && !waiting.is_empty() {
            let mut group = std::mem::take(&mut waiting);
            if group.records.is_empty() {
                group.deliver(&client).await;
            } else {
                let records = std::mem::take(&mut group.records);
                let count = records.len();
                let append = journal::append(js.clone(), subject.clone(), records);
                in_flight = Some((Box::pin(append), count, group));
            }
        }
        if !open && in_flight.is_none() && waiting.is_empty() {
            break;
        }
    }
}
