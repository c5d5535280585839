//! Journal mode's answers: each waits until the journal holds what it counted.
//!
//! One writer per worker, for all its partitions. A JetStream append costs
//! about the same whatever it carries, and a partition rarely has more than
//! one ask in flight, so one append per partition (the first design) stored
//! about one record per message and capped a worker near 20k asks/s whatever
//! its CPU could do. Here every shard hands its decided batch (records and
//! replies) to the worker's writer, and a worker batch its records; at most two
//! appends are in flight, and everything decided meanwhile, on any partition,
//! goes out as the next one once an ack frees a place. The more load, the
//! more records per message, with no timer. Two, not one: with one, what was
//! decided during an append waited for that append's ack and then for its
//! own, and with two workers on two cores the journal halved what snapshot
//! mode did (docs/BENCHMARKS-HISTORY.md, "Changes made").
//!
//! A reply is sent only once JetStream acknowledged the append holding its
//! records *and every append before it*, so an answer a client saw always
//! has its count stored, answers keep their order, and `kill -9` loses no
//! counts.
//!
//! [`Writer::acked`] is the highest stream sequence acknowledged: every
//! record handed to the writer was applied to its partition's counters
//! before it was appended, so every record at or below it is in the
//! counters, which is what a snapshot's journal position claims (whatever
//! order two appends in flight got their sequences in).

use crate::journal;
use crate::journal::record::Record;
use crate::reply::{self, Outgoing};
use crate::stats::{secs, WorkerStats};
use futures::future::BoxFuture;
use sluice_core::config::JournalFailure;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How long an append waits for its acknowledgement. Every answer waits
/// for the appends before it, so an ack that never comes holds the whole
/// worker's journal-mode answers: when the NATS node a worker was connected
/// to stopped, the acks of the appends in flight were lost with it, and
/// with the library's default (5 s) every partition of that worker went 5 s
/// without an answer (docs/RELIABILITY.md). An ack takes milliseconds
/// otherwise; an append that times out answers its asks 503 (or as
/// `journal_failure` says), and its counts stay in memory.
pub const APPEND_ACK_TIMEOUT: Duration = Duration::from_secs(1);

/// Decided asks: what they counted, and what waits for it to be stored.
#[derive(Default)]
struct Pending {
    records: Vec<Record>,
    replies: Vec<Outgoing>,
    /// Told once this (and everything sent before it) is answered: whether
    /// its append was stored.
    stored: Vec<oneshot::Sender<bool>>,
    /// When each shard batch among the replies was taken off its
    /// subscription, for the decision latency.
    received: Vec<Instant>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.records.is_empty() && self.replies.is_empty() && self.stored.is_empty()
    }

    fn add(&mut self, mut other: Pending) {
        self.records.append(&mut other.records);
        self.replies.append(&mut other.replies);
        self.stored.append(&mut other.stored);
        self.received.append(&mut other.received);
    }

    async fn deliver(self, stored: bool, send_replies: &mut impl SendReplies, stats: &WorkerStats) {
        send_replies(self.replies).await;
        for received in self.received {
            let latency = &stats.meters.decision_latency;
            latency.observe(secs(received.elapsed()));
        }
        for done in self.stored {
            let _ = done.send(stored);
        }
    }
}

/// The worker's journal writer; shards and worker batches reach it through
/// the [`crate::outbox::Outbox`].
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
        on_failure: JournalFailure,
        on_stored: impl OnStored,
    ) -> (Writer, JoinHandle<()>) {
        let meters = stats.clone();
        let mut js = js;
        js.set_timeout(APPEND_ACK_TIMEOUT);
        let append = move |records: Vec<Record>| {
            let (js, subject, meters) = (js.clone(), subject.clone(), meters.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let appended = journal::append(js, subject, &records).await;
                let took = secs(started.elapsed());
                meters.meters.journal_append_duration.observe(took);
                (appended, records)
            })
        };
        let send_replies = move |replies| -> BoxFuture<'static, ()> {
            let client = client.clone();
            Box::pin(async move { reply::publish(&client, replies).await })
        };
        Writer::start(append, send_replies, on_stored, stats, on_failure)
    }

    /// [`Writer::spawn`] with the journal and NATS replaced by `append` and
    /// `send_replies`.
    fn start(
        append: impl StartAppend,
        send_replies: impl SendReplies,
        on_stored: impl OnStored,
        stats: Arc<WorkerStats>,
        on_failure: JournalFailure,
    ) -> (Writer, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(1024);
        let acked = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(
            rx,
            acked.clone(),
            append,
            send_replies,
            on_stored,
            stats,
            on_failure,
        ));
        (Writer { tx, acked }, task)
    }

    /// Queues a shard's decided batch, whose first message was taken at
    /// `received`: its replies go out once its records are stored, and
    /// then `stored` (if any) is told whether they were.
    pub(crate) async fn send(
        &self,
        records: Vec<Record>,
        replies: Vec<Outgoing>,
        received: Instant,
        stored: Option<oneshot::Sender<bool>>,
    ) {
        let received = if replies.is_empty() {
            Vec::new()
        } else {
            vec![received]
        };
        self.queue(Pending {
            records,
            replies,
            stored: stored.into_iter().collect(),
            received,
        })
        .await;
    }

    /// Returns once `records` (and everything sent before them) are stored,
    /// or their append failed: whether they were stored.
    pub(crate) async fn store(&self, records: Vec<Record>) -> bool {
        let (done, stored) = oneshot::channel();
        self.queue(Pending {
            records,
            replies: Vec::new(),
            stored: vec![done],
            received: Vec::new(),
        })
        .await;
        stored.await.unwrap_or(false)
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

/// Appends of one worker in flight at a time.
const APPENDS_IN_FLIGHT: usize = 2;

/// One group's append, running on its own task (so that a second one is
/// published while the first waits for its ack): the stream sequence of its
/// last message, and the records it held.
type Append = JoinHandle<(Result<u64, String>, Vec<Record>)>;

/// Told of each group's records once its append is done, in append order,
/// before its answers go out: with the stream sequence of its last
/// message, or `None` when the append failed (usage, SPEC §9).
pub trait OnStored: FnMut(&[Record], Option<u64>) + Send + 'static {}
impl<F: FnMut(&[Record], Option<u64>) + Send + 'static> OnStored for F {}

/// Starts appending records to the journal.
trait StartAppend: FnMut(Vec<Record>) -> Append + Send + 'static {}
impl<F: FnMut(Vec<Record>) -> Append + Send + 'static> StartAppend for F {}

/// Sends replies.
trait SendReplies: FnMut(Vec<Outgoing>) -> BoxFuture<'static, ()> + Send + 'static {}
impl<F: FnMut(Vec<Outgoing>) -> BoxFuture<'static, ()> + Send + 'static> SendReplies for F {}

/// At most [`APPENDS_IN_FLIGHT`] appends in flight; what arrives meanwhile
/// waits and goes out as the next one. Acks are taken in append order, so
/// answers keep their order. A group that counted nothing is answered at
/// once when no append is in flight, else once those in flight are
/// acknowledged.
async fn run(
    mut rx: mpsc::Receiver<Pending>,
    acked: Arc<AtomicU64>,
    mut append: impl StartAppend,
    mut send_replies: impl SendReplies,
    mut on_stored: impl OnStored,
    stats: Arc<WorkerStats>,
    on_failure: JournalFailure,
) {
    let mut waiting = Pending::default();
    let mut in_flight: VecDeque<(Append, usize, Pending)> = VecDeque::new();
    let mut open = true;
    loop {
        tokio::select! {
            biased;
            stored = async { (&mut in_flight.front_mut().expect("guarded").0).await }, if !in_flight.is_empty() => {
                let (_, records, mut answers) = in_flight.pop_front().expect("guarded");
                let (stored, held) = stored.unwrap_or_else(|e| (Err(format!("the append task failed: {e}")), Vec::new()));
                on_stored(&held, stored.as_ref().ok().copied());
                let ok = match stored {
                    Ok(seq) => {
                        acked.fetch_max(seq, Ordering::SeqCst);
                        true
                    }
                    Err(e) => {
                        // The counts are in memory and will be in their
                        // partitions' next snapshots, but a crash before
                        // then would lose them.
                        stats.journal_errors.fetch_add(1, Ordering::Relaxed);
                        match on_failure {
                            JournalFailure::Unavailable => {
                                tracing::error!(records, replies = answers.replies.len(), "journal append failed, its asks answered 503 (their counts stay in memory until their partitions' next snapshots): {e}");
                                answers.replies = answers
                                    .replies
                                    .into_iter()
                                    .map(|(to, reply)| (to, reply.unstored()))
                                    .collect();
                            }
                            JournalFailure::Answer => tracing::error!(records, "journal append failed, its asks answered as decided (journal_failure = \"answer\"); these counts are only in memory until their partitions' next snapshots: {e}"),
                        }
                        false
                    }
                };
                answers.deliver(ok, &mut send_replies, &stats).await;
            }
            batch = rx.recv(), if open => match batch {
                Some(batch) => {
                    waiting.add(batch);
                    // Everything already queued joins the same group.
                    while let Ok(more) = rx.try_recv() {
                        waiting.add(more);
                    }
                }
                // Every shard and the worker are done: drain, then stop.
                None => open = false,
            },
        }
        if in_flight.len() < APPENDS_IN_FLIGHT && !waiting.is_empty() {
            let mut group = std::mem::take(&mut waiting);
            if group.records.is_empty() {
                if let Some((_, _, last)) = in_flight.back_mut() {
                    // Answered after what was counted before it.
                    last.add(group);
                } else {
                    group.deliver(true, &mut send_replies, &stats).await;
                }
            } else {
                let records = std::mem::take(&mut group.records);
                let count = records.len();
                in_flight.push_back((append(records), count, group));
            }
        }
        if !open && in_flight.is_empty() && waiting.is_empty() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::Subject;

    fn group(n: u64) -> (Vec<Record>, Vec<Outgoing>) {
        let record = Record {
            n: 0,
            p: "default".into(),
            k: format!("key-{n}"),
            c: 1,
            t: n,
            r: false,
            d: false,
            s: false,
            g: 0,
            u: 0,
            h: None,
            e: 0,
            x: 0,
            v: 0,
            i: None,
            q: 0,
        };
        let reply = (
            async_nats::Subject::from(format!("reply.{n}")),
            crate::reply::Reply::error(
                &sluice_core::wire::ErrorReply::bad_request("a stand-in"),
                sluice_core::wire::Encoding::MsgPack,
            ),
        );
        (vec![record], vec![reply])
    }

    /// Lets the writer and the append tasks run (a current-thread runtime
    /// runs them when the test task yields).
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    /// The journal and NATS replaced by channels: the test sees each append
    /// (its record count) and completes it when it chooses, and sees each
    /// reply's subject as it is sent.
    #[tokio::test]
    async fn two_appends_are_in_flight_and_answers_wait_for_every_earlier_ack() {
        type Ack = oneshot::Sender<Result<u64, String>>;
        let (appends_tx, mut appends) = mpsc::unbounded_channel::<(usize, Ack)>();
        let append = move |records: Vec<Record>| {
            let (ack, acked) = oneshot::channel();
            appends_tx.send((records.len(), ack)).unwrap();
            tokio::spawn(async move { (acked.await.unwrap_or(Err("no ack".into())), records) })
        };
        // What usage is told: each group's keys and sequence, in append order.
        let told = Arc::new(std::sync::Mutex::new(Vec::new()));
        let on_stored = {
            let told = told.clone();
            move |records: &[Record], seq: Option<u64>| {
                let keys: Vec<String> = records.iter().map(|r| r.k.clone()).collect();
                told.lock().unwrap().push((keys, seq));
            }
        };
        let (replies_tx, mut replies) = mpsc::unbounded_channel::<String>();
        let send_replies = move |sent: Vec<Outgoing>| -> BoxFuture<'static, ()> {
            for (to, _) in sent {
                replies_tx.send(to.to_string()).unwrap();
            }
            Box::pin(async {})
        };
        let (writer, task) = Writer::start(
            append,
            send_replies,
            on_stored,
            Arc::new(WorkerStats::default()),
            JournalFailure::Unavailable,
        );
        let (records, answers) = group(1);
        writer.send(records, answers, Instant::now(), None).await;
        settle().await;
        let (n, first) = appends
            .try_recv()
            .expect("the first group is appended at once");
        assert_eq!(n, 1);
        // While the first waits for its ack, the next group goes out too.
        let (records, answers) = group(2);
        writer.send(records, answers, Instant::now(), None).await;
        settle().await;
        let (_, second) = appends
            .try_recv()
            .expect("a second append starts while the first waits for its ack");
        // Two in flight: what comes now waits, as one group.
        for n in [3, 4] {
            let (records, answers) = group(n);
            writer.send(records, answers, Instant::now(), None).await;
        }
        settle().await;
        assert!(
            appends.try_recv().is_err(),
            "no third append while two are in flight"
        );

        // The second is acknowledged first: nothing is answered before the
        // first is stored too.
        second.send(Ok(20)).unwrap();
        settle().await;
        assert!(
            replies.try_recv().is_err(),
            "the second's answers wait for the first's ack"
        );
        assert_eq!(writer.acked(), 0);
        first.send(Ok(10)).unwrap();
        settle().await;
        assert_eq!(replies.try_recv().unwrap(), "reply.1");
        assert_eq!(replies.try_recv().unwrap(), "reply.2");
        assert_eq!(writer.acked(), 20);

        // The waiting groups went out together once a turn was free.
        let (n, third) = appends.try_recv().expect("the waiting groups are appended");
        assert_eq!(n, 2, "groups 3 and 4 share one append");
        // A flush returns once everything before it is stored and answered.
        let flushed = tokio::spawn(async move {
            writer.flush().await;
            writer
        });
        settle().await;
        assert!(
            !flushed.is_finished(),
            "the flush waits for the third append"
        );
        third.send(Ok(30)).unwrap();
        let writer = tokio::time::timeout(Duration::from_secs(10), flushed)
            .await
            .expect("the flush returns once the third append is stored")
            .unwrap();
        assert_eq!(replies.try_recv().unwrap(), "reply.3");
        assert_eq!(replies.try_recv().unwrap(), "reply.4");
        assert_eq!(writer.acked(), 30);
        drop(writer);
        task.await.unwrap();
        let key = |n: u64| format!("key-{n}");
        assert_eq!(
            *told.lock().unwrap(),
            vec![
                (vec![key(1)], Some(10)),
                (vec![key(2)], Some(20)),
                (vec![key(3), key(4)], Some(30))
            ]
        );
    }

    /// An append JetStream refuses: by default its asks get a 503 in their
    /// own encoding instead of their decisions, and a worker batch waiting
    /// in `store` learns it was not stored; with `journal_failure =
    /// "answer"` they go out as decided.
    #[tokio::test]
    async fn a_failed_append_answers_503_unless_told_to_answer() {
        for on_failure in [JournalFailure::Unavailable, JournalFailure::Answer] {
            let append = |records: Vec<Record>| {
                tokio::spawn(async { (Err::<u64, String>("no stream found".into()), records) })
            };
            let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
            let on_stored = {
                let failed = failed.clone();
                move |records: &[Record], seq: Option<u64>| {
                    failed.lock().unwrap().push((records.len(), seq));
                }
            };
            let (replies_tx, mut replies) = mpsc::unbounded_channel::<Outgoing>();
            let send_replies = move |sent: Vec<Outgoing>| -> BoxFuture<'static, ()> {
                for reply in sent {
                    replies_tx.send(reply).unwrap();
                }
                Box::pin(async {})
            };
            let stats = Arc::new(WorkerStats::default());
            let (writer, task) =
                Writer::start(append, send_replies, on_stored, stats.clone(), on_failure);
            let decided = crate::reply::Reply::decision(
                &sluice_core::policy::Decision {
                    allowed: true,
                    limit: 15,
                    remaining: 14,
                    reset: sluice_core::time::Nanos(1),
                    retry_after: sluice_core::time::Nanos::ZERO,
                    shadow_denied: false,
                    wait: sluice_core::time::Nanos::ZERO,
                    blocked: false,
                },
                "default",
                sluice_core::wire::Encoding::Json,
            );
            let (records, _) = group(1);
            writer
                .send(
                    records,
                    vec![(Subject::from("reply.1"), decided)],
                    Instant::now(),
                    None,
                )
                .await;
            let (_, sent) = tokio::time::timeout(Duration::from_secs(10), replies.recv())
                .await
                .unwrap()
                .unwrap();
            let body = String::from_utf8(sent.payload.to_vec()).unwrap();
            let code = sent
                .headers
                .get(sluice_core::wire::SERVICE_ERROR_CODE)
                .map(|v| v.to_string());
            let unstored = sent
                .headers
                .get(sluice_core::wire::SLUICE_UNSTORED)
                .map(|v| v.to_string());
            match on_failure {
                JournalFailure::Unavailable => {
                    assert_eq!(code.as_deref(), Some("503"), "{body}");
                    assert!(body.contains("unavailable"), "a JSON error body: {body}");
                    // Unlike other 503s, done in memory: not to be sent again.
                    assert_eq!(unstored.as_deref(), Some("1"), "{body}");
                }
                JournalFailure::Answer => {
                    assert_eq!(code, None, "{body}");
                    assert_eq!(unstored, None, "{body}");
                    assert!(body.contains(r#""allowed":true"#), "{body}");
                }
            }
            let (records, _) = group(2);
            assert!(!writer.store(records).await, "store says it was not stored");
            assert_eq!(stats.journal_errors.load(Ordering::Relaxed), 2);
            drop(writer);
            task.await.unwrap();
            // Usage still hears of both groups, as not stored.
            assert_eq!(*failed.lock().unwrap(), vec![(1, None), (1, None)]);
        }
    }

    /// What waits for a batch's records (a region's share given back) is
    /// told only once the append is acknowledged, and told `false` when
    /// it failed: never before.
    #[tokio::test]
    async fn what_waits_for_the_records_hears_only_after_the_ack() {
        type Ack = oneshot::Sender<Result<u64, String>>;
        let (appends_tx, mut appends) = mpsc::unbounded_channel::<Ack>();
        let append = move |records: Vec<Record>| {
            let (ack, acked) = oneshot::channel();
            appends_tx.send(ack).unwrap();
            tokio::spawn(async move { (acked.await.unwrap_or(Err("no ack".into())), records) })
        };
        let send_replies = |_: Vec<Outgoing>| -> BoxFuture<'static, ()> { Box::pin(async {}) };
        let (writer, task) = Writer::start(
            append,
            send_replies,
            |_: &[Record], _: Option<u64>| {},
            Arc::new(WorkerStats::default()),
            JournalFailure::Answer,
        );
        for (ack, expected) in [(Ok(7), true), (Err("no stream found".to_string()), false)] {
            let (done, mut stored) = oneshot::channel();
            let (records, answers) = group(1);
            writer
                .send(records, answers, Instant::now(), Some(done))
                .await;
            settle().await;
            let acked = appends.try_recv().expect("the group is appended");
            assert!(stored.try_recv().is_err(), "nothing heard before the ack");
            acked.send(ack).unwrap();
            let heard = tokio::time::timeout(Duration::from_secs(10), stored)
                .await
                .expect("heard once the append ends");
            assert_eq!(heard, Ok(expected));
        }
        drop(writer);
        task.await.unwrap();
    }
}
