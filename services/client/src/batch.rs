//! Batching: concurrent asks of one partition share one NATS request.
//!
//! Each partition has a queue and a "turn" (at most one request of this
//! client in flight per partition):
//!
//! - An ask that finds its partition idle takes the turn and is sent at once,
//!   alone, on `rl.allow.<key>` like any other client's ask. So an ask with
//!   nothing to batch with waits for nothing.
//! - Asks that arrive while the turn is taken queue up (FIFO).
//! - When the request in flight returns, whoever held the turn hands it on:
//!   if the queue is empty the partition is idle again; otherwise up to
//!   [`batch::MAX_ITEMS`] queued asks leave together as one request to
//!   `rl.p.<n>.batch`, sent by a task spawned for it, and the same happens
//!   when that one returns.
//!
//! The worker decides a batch's items in order, as if they had been sent one
//! after the other, and answers them in one reply; each waiting caller gets
//! its own result, in queue order. Under load, a partition's asks thus travel
//! in as many requests as there are round trips, instead of one each.
//!
//! Failures per item: a 503 in an item's slot (the worker does not own that
//! key's partition, e.g. with a wrong partition count) makes that caller ask
//! again on its own through the server's mapping; a batch that got no
//! responders (after the quick retries) makes every caller ask on its own
//! (which also covers workers without batch support), then fall back. A batch the worker refuses as malformed fails
//! every item with the worker's error, loudly: that is a client bug.
//!
//! Cancellation: the turn is a guard, so a caller that gives up (or is
//! dropped) mid-request still hands the turn on; a queued caller that gave
//! up is skipped when the next batch is formed; and a queued caller whose
//! batch task vanished (runtime shutting down) asks on its own.

use crate::client::{Decoded, Inner, NoAnswer};
use bytes::Bytes;
use sluice_core::key::KeyToken;
use sluice_core::nats_config::batch_subject;
use sluice_core::wire::batch::{self, Item, ReplyError};
use sluice_core::wire::{ErrorCode, Reply};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;

pub(crate) struct Batcher {
    queues: Box<[Mutex<Queue>]>,
}

#[derive(Default)]
struct Queue {
    /// A request of this partition is in flight (or being formed).
    busy: bool,
    waiting: VecDeque<Waiter>,
}

struct Waiter {
    token: String,
    policy: String,
    cost: u64,
    tx: oneshot::Sender<Outcome>,
}

/// What a queued caller is told.
enum Outcome {
    Done(Result<Reply, NoAnswer>),
    /// Ask again alone, through the server's mapping.
    AskAlone,
}

impl Batcher {
    pub(crate) fn new(partitions: u32) -> Batcher {
        Batcher {
            queues: (0..partitions).map(|_| Mutex::default()).collect(),
        }
    }

    fn queue(&self, partition: u32) -> std::sync::MutexGuard<'_, Queue> {
        self.queues[partition as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// Holding the turn of a partition; dropping it hands the turn on.
struct Turn {
    inner: Arc<Inner>,
    partition: u32,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let batcher = self.inner.batcher.as_ref().expect("batching is on");
        let mut queue = batcher.queue(self.partition);
        let mut next = Vec::new();
        while next.len() < batch::MAX_ITEMS {
            match queue.waiting.pop_front() {
                // A caller that gave up is not asked for.
                Some(w) if w.tx.is_closed() => {}
                Some(w) => next.push(w),
                None => break,
            }
        }
        if next.is_empty() {
            queue.busy = false;
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                drop(queue);
                let turn = Turn {
                    inner: self.inner.clone(),
                    partition: self.partition,
                };
                rt.spawn(async move {
                    turn.inner.send_batch(turn.partition, next).await;
                    drop(turn);
                });
            }
            // No runtime to send from: the callers ask alone (their
            // channels close when `next` is dropped).
            Err(_) => queue.busy = false,
        }
    }
}

impl Inner {
    /// Asks alone if the partition is idle, else joins its next batch.
    pub(crate) async fn ask_batched(
        self: &Arc<Self>,
        token: &str,
        policy: &str,
        cost: u64,
        partition: u32,
        deadline: Instant,
    ) -> Result<Reply, NoAnswer> {
        let batcher = self.batcher.as_ref().expect("batching is on");
        let rx = {
            let mut queue = batcher.queue(partition);
            if queue.busy {
                let (tx, rx) = oneshot::channel();
                queue.waiting.push_back(Waiter {
                    token: token.to_string(),
                    policy: policy.to_string(),
                    cost,
                    tx,
                });
                Some(rx)
            } else {
                queue.busy = true;
                None
            }
        };
        let Some(rx) = rx else {
            let _turn = Turn {
                inner: self.clone(),
                partition,
            };
            return self.single(token, policy, cost, partition, deadline).await;
        };
        match tokio::time::timeout_at(deadline.into(), rx).await {
            Ok(Ok(Outcome::Done(outcome))) => outcome,
            Ok(Ok(Outcome::AskAlone)) | Ok(Err(_)) => {
                self.single(token, policy, cost, partition, deadline).await
            }
            Err(_) => {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(NoAnswer::TimedOut)
            }
        }
    }

    /// Sends `waiters` as one batch and tells each its result.
    async fn send_batch(&self, partition: u32, waiters: Vec<Waiter>) {
        let items: Vec<Item<'_>> = waiters
            .iter()
            .map(|w| Item {
                key: KeyToken::parse(&w.token).expect("encode_key makes canonical tokens"),
                policy: Cow::Borrowed(w.policy.as_str()),
                cost: w.cost,
            })
            .collect();
        let body = Bytes::from(batch::encode_request(&items));
        drop(items);
        let n = waiters.len();
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats
            .batched_asks
            .fetch_add(n as u64, Ordering::Relaxed);
        let deadline = Instant::now() + self.opts.timeout;
        let subject = batch_subject(partition);
        let result = self
            .round_trip(&subject, &body, partition, deadline, |msg| {
                decode_batch(msg, n)
            })
            .await;
        match result {
            Ok(results) => {
                for (w, r) in waiters.into_iter().zip(results) {
                    let _ = w.tx.send(r);
                }
            }
            Err(why) => {
                // No responders (or a reply that is not a batch reply): each
                // caller asks alone, through the mapping, and falls back if
                // that fails too.
                let retry_alone = matches!(why, NoAnswer::NoResponders | NoAnswer::Malformed(_));
                for w in waiters {
                    let _ = w.tx.send(if retry_alone {
                        Outcome::AskAlone
                    } else {
                        Outcome::Done(Err(why.clone()))
                    });
                }
            }
        }
    }
}

/// A batch reply: one outcome per item.
fn decode_batch(msg: &async_nats::Message, n: usize) -> Decoded<Vec<Outcome>> {
    match batch::decode_reply(&msg.payload, n) {
        Ok(results) => Decoded::Done(
            results
                .into_iter()
                .map(|r| match r {
                    Reply::Error(e) if e.code == ErrorCode::Unavailable => Outcome::AskAlone,
                    r => Outcome::Done(Ok(r)),
                })
                .collect(),
        ),
        Err(ReplyError::Rejected(e)) if e.code == ErrorCode::Unavailable => {
            Decoded::Retry(NoAnswer::Unavailable(e.message))
        }
        Err(ReplyError::Rejected(e)) => {
            tracing::error!(
                subject = %msg.subject,
                "the worker refused a batch of {n} asks (a sluice-client bug; please report it): {e}"
            );
            Decoded::Done(
                (0..n)
                    .map(|_| Outcome::Done(Ok(Reply::Error(e.clone()))))
                    .collect(),
            )
        }
        Err(ReplyError::Malformed(e)) => {
            tracing::warn!(subject = %msg.subject, "{e}");
            Decoded::Fail(NoAnswer::Malformed(e.to_string()))
        }
    }
}
