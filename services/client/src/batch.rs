//! Batching: concurrent asks for one worker share one NATS request.
//!
//! A NATS round trip costs about as much as a worker's decision, so the
//! more asks travel per request, the more decisions a connection carries.
//! Grouping by partition is not enough: with 64 partitions and a few dozen
//! asks in flight, a partition rarely has two. So the unit of batching (a
//! "destination") is the worker that owns the asks' partitions:
//!
//! - Every batch reply names the worker that decided it (header
//!   [`batch::WORKER_HEADER`]), and the client keeps a partition → worker
//!   map from them. Asks of a partition with a known owner go to that
//!   worker, all its partitions together, on `rl.w.<worker-id>.batch`.
//! - Asks of a partition whose owner is unknown go to that partition, on
//!   `rl.p.<n>.batch` (even a lone ask, so that its reply teaches the owner).
//!
//! Each destination has a queue and two "turns" (at most two requests of
//! this client in flight per destination, [`MAX_IN_FLIGHT`]):
//!
//! - An ask that finds its destination idle takes a turn and is sent at
//!   once, alone. So an ask with nothing to batch with waits for nothing.
//! - An ask that finds one request in flight takes the second turn, queues,
//!   and yields once to the scheduler, so that the asks arriving in the same
//!   tick (typically the callers the last reply woke) queue behind it; then
//!   it sends everything queued as one request. So the asks that arrive
//!   during a round trip do not wait for it to end.
//! - Asks that arrive while both turns are taken queue up (FIFO).
//! - When a request returns, whoever held its turn hands it on: if the
//!   queue is empty the turn is free again; otherwise up to
//!   [`batch::MAX_ITEMS`] queued asks leave together as one request, sent by
//!   a task spawned for it, and the same happens when that one returns.
//!
//! Why two: with one turn, an ask that arrived during a round trip waited
//! for it to end and then for its own, about two round trips; with two, a
//! closed loop of N asks per connection keeps two requests of about N/2
//! asks in flight, and each ask waits about one. The batches are as large
//! as with one turn (each holds what arrived during half a round trip, as
//! before), so nats-server and the worker see as many messages per ask;
//! only the waiting goes. Three or four turns measured no faster than two
//! (docs/BENCHMARKS-HISTORY.md, "Changes made").
//!
//! The worker decides a batch's items of one partition in order, as if they
//! had been sent one after the other, and answers all items in one reply;
//! each waiting caller gets its own result, in queue order. Under load, a
//! worker's asks thus travel in as many requests as there are round trips,
//! instead of one each.
//!
//! Failures per item: a 503 in an item's slot (the worker does not own that
//! key's partition: a handover moved it, it is still being restored, or the
//! client's partition count is wrong) makes the client forget that
//! partition's owner, and that caller ask again on its own through the
//! server's mapping. A worker's subject with no responders means the worker
//! is gone: the client forgets every partition it owned and every caller
//! asks again on its own (no quick retries on that subject: they cannot
//! help), so a dead worker costs each ask the same retries as a dead
//! partition. A partition's batch subject with no responders (after the
//! quick retries) means the partition has no owner right now: its callers
//! fall back at once, as a lone ask would. A batch the worker refuses as
//! malformed fails every item with the worker's error, loudly: that is a
//! client bug.
//!
//! Cancellation: a turn is a guard, so a caller that gives up (or is
//! dropped) mid-request, or while it gathers its batch, still hands the
//! turn on; a queued caller that gave up is skipped when the next batch is
//! formed; and a queued caller whose batch task vanished (runtime shutting
//! down) asks on its own.

use crate::client::{Decoded, Inner, NoAnswer};
use bytes::Bytes;
use sluice_core::key::KeyToken;
use sluice_core::subject::{batch_subject, worker_batch_subject};
use sluice_core::wire::batch::{self, Budget, Item, ReplyError};
use sluice_core::wire::{ErrorCode, Reply};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::oneshot;

pub(crate) struct Batcher {
    state: Mutex<State>,
}

struct State {
    /// Per partition: the worker whose batch reply last answered for it.
    owners: Box<[Option<Arc<str>>]>,
    /// The destinations with a request in flight (or being formed), and
    /// the asks waiting for their next one.
    busy: HashMap<Destination, Lane>,
}

/// A busy destination.
#[derive(Default)]
struct Lane {
    /// Turns taken: requests in flight or being formed, at most
    /// [`MAX_IN_FLIGHT`].
    turns: usize,
    queue: VecDeque<Waiter>,
}

/// Requests of one client in flight to one destination at a time.
const MAX_IN_FLIGHT: usize = 2;

/// Where a batch goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Destination {
    /// All asks of the partitions this worker owns: `rl.w.<id>.batch`.
    Worker(Arc<str>),
    /// A partition whose owner is unknown: `rl.p.<n>.batch`.
    Partition(u32),
}

struct Waiter {
    token: String,
    policy: String,
    cost: u64,
    budget: Budget,
    partition: u32,
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
            state: Mutex::new(State {
                owners: (0..partitions).map(|_| None).collect(),
                busy: HashMap::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Holding one of a destination's turns; dropping it hands the turn on.
struct Turn {
    inner: Arc<Inner>,
    destination: Destination,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let batcher = self.inner.batcher.as_ref().expect("batching is on");
        let mut state = batcher.state();
        let Some(lane) = state.busy.get_mut(&self.destination) else {
            return;
        };
        let next = lane.take_batch();
        if next.is_empty() {
            lane.turns -= 1;
            if lane.turns == 0 {
                state.busy.remove(&self.destination);
            }
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                drop(state);
                let turn = Turn {
                    inner: self.inner.clone(),
                    destination: self.destination.clone(),
                };
                rt.spawn(async move {
                    turn.inner.send_batch(&turn.destination, next).await;
                    drop(turn);
                });
            }
            // No runtime to send from: the callers ask alone (their
            // channels close when `next` is dropped).
            Err(_) => {
                state.busy.remove(&self.destination);
            }
        }
    }
}

impl Lane {
    /// Up to [`batch::MAX_ITEMS`] queued asks, oldest first, skipping
    /// callers that gave up.
    fn take_batch(&mut self) -> Vec<Waiter> {
        let mut next = Vec::new();
        while next.len() < batch::MAX_ITEMS {
            match self.queue.pop_front() {
                Some(w) if w.tx.is_closed() => {}
                Some(w) => next.push(w),
                None => break,
            }
        }
        next
    }
}

impl Inner {
    /// Sends the ask at once if its destination is idle, else joins the
    /// destination's next batch. `budget`: what the item does for a local
    /// budget besides its ask (only a batch can carry it: an ask the
    /// worker sends back to be asked alone is asked without it, and a
    /// refund then fails as unavailable). The flag says whether the reply
    /// answered the item as sent.
    pub(crate) async fn ask_batched(
        self: &Arc<Self>,
        token: &str,
        policy: &str,
        cost: u64,
        budget: Budget,
        partition: u32,
        deadline: Instant,
    ) -> (Result<Reply, NoAnswer>, bool) {
        let batcher = self.batcher.as_ref().expect("batching is on");
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter {
            token: token.to_string(),
            policy: policy.to_string(),
            cost,
            budget,
            partition,
            tx,
        };
        // A turn if one was free; `alone` if the destination was idle.
        let (turn, alone) = {
            let mut state = batcher.state();
            let destination = match &state.owners[partition as usize] {
                Some(worker) => Destination::Worker(worker.clone()),
                None => Destination::Partition(partition),
            };
            let lane = state.busy.entry(destination.clone()).or_default();
            if lane.turns >= MAX_IN_FLIGHT {
                lane.queue.push_back(waiter);
                (None, None)
            } else {
                lane.turns += 1;
                let alone = if lane.turns == 1 {
                    Some(waiter)
                } else {
                    lane.queue.push_back(waiter);
                    None
                };
                let turn = Turn {
                    inner: self.clone(),
                    destination,
                };
                (Some(turn), alone)
            }
        };
        match (turn, alone) {
            // The destination is idle: this ask goes at once, alone.
            (Some(turn), Some(waiter)) => {
                self.send_batch(&turn.destination, vec![waiter]).await;
            }
            // A request is in flight and there is room for another: let the
            // asks that arrive in the same scheduler tick (the callers the
            // last reply woke) queue up, then send them all.
            (Some(turn), None) => {
                tokio::task::yield_now().await;
                let next = {
                    let mut state = batcher.state();
                    match state.busy.get_mut(&turn.destination) {
                        Some(lane) => lane.take_batch(),
                        None => Vec::new(),
                    }
                };
                if !next.is_empty() {
                    self.send_batch(&turn.destination, next).await;
                }
            }
            // Both turns taken: queued for the next batch.
            (None, _) => {}
        }
        match tokio::time::timeout_at(deadline.into(), rx).await {
            Ok(Ok(Outcome::Done(outcome))) => (outcome, true),
            Ok(Ok(Outcome::AskAlone)) | Ok(Err(_)) => {
                if matches!(budget, Budget::Refund(_)) {
                    return (
                        Err(NoAnswer::Unavailable(
                            "a refund travels only in a batch, and the worker it went to no longer owns its partition".into(),
                        )),
                        false,
                    );
                }
                let outcome = self.single(token, policy, cost, partition, deadline).await;
                (outcome, false)
            }
            Err(_) => {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                (Err(NoAnswer::TimedOut), false)
            }
        }
    }

    /// Sends `waiters` as one batch to `destination` and tells each its result.
    async fn send_batch(&self, destination: &Destination, waiters: Vec<Waiter>) {
        let items: Vec<Item<'_>> = waiters
            .iter()
            .map(|w| Item {
                key: KeyToken::parse(&w.token).expect("encode_key makes canonical tokens"),
                policy: Cow::Borrowed(w.policy.as_str()),
                cost: w.cost,
                budget: w.budget,
            })
            .collect();
        let body = Bytes::from(batch::encode_items(&items));
        drop(items);
        let n = waiters.len();
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats
            .batched_asks
            .fetch_add(n as u64, Ordering::Relaxed);
        let deadline = Instant::now() + self.opts.timeout;
        let decode = |msg: &async_nats::Message| decode_batch(msg, n);
        let result = match destination {
            Destination::Worker(id) => {
                self.stats.worker_batches.fetch_add(1, Ordering::Relaxed);
                let subject = worker_batch_subject(id);
                self.round_trip(&subject, &body, None, deadline, decode)
                    .await
            }
            Destination::Partition(p) => {
                let subject = batch_subject(*p);
                self.round_trip(&subject, &body, Some(*p), deadline, decode)
                    .await
            }
        };
        let batcher = self.batcher.as_ref().expect("batching is on");
        match result {
            Ok((worker, results)) => {
                batcher
                    .state()
                    .learn(destination, worker, &waiters, &results);
                for (w, r) in waiters.into_iter().zip(results) {
                    let _ = w.tx.send(r);
                }
            }
            Err(why) => {
                if let (NoAnswer::NoResponders, Destination::Worker(gone)) = (&why, destination) {
                    batcher.state().forget_worker(gone);
                }
                // A worker that is gone, or a reply that is not a batch
                // reply: each caller asks alone, through the mapping, and
                // falls back if that fails too. A partition's batch subject
                // has the same owner as its mapped subjects, so after the
                // quick retries of `round_trip` it is down: fall back now.
                let retry_alone = match (&why, destination) {
                    (NoAnswer::NoResponders, Destination::Worker(_)) => true,
                    (NoAnswer::NoResponders, Destination::Partition(_)) => false,
                    (NoAnswer::Malformed(_), _) => true,
                    _ => false,
                };
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

impl State {
    /// Takes in who answered a batch: the replying worker owns the
    /// partitions of the items it decided, and whoever was thought to own
    /// an item answered 503 does not.
    fn learn(
        &mut self,
        destination: &Destination,
        worker: Option<Arc<str>>,
        waiters: &[Waiter],
        results: &[Outcome],
    ) {
        for (w, r) in waiters.iter().zip(results) {
            let owner = &mut self.owners[w.partition as usize];
            match r {
                Outcome::AskAlone => {
                    let thought = match destination {
                        Destination::Worker(id) => Some(id),
                        Destination::Partition(_) => worker.as_ref(),
                    };
                    if owner.is_some() && owner.as_ref() == thought {
                        *owner = None;
                    }
                }
                Outcome::Done(_) => {
                    if let Some(worker) = &worker {
                        if owner.as_ref() != Some(worker) {
                            *owner = Some(worker.clone());
                        }
                    }
                }
            }
        }
    }

    /// The worker is gone: its partitions' owners are unknown again.
    fn forget_worker(&mut self, gone: &Arc<str>) {
        for owner in self.owners.iter_mut() {
            if owner.as_ref() == Some(gone) {
                *owner = None;
            }
        }
    }
}

/// A batch reply: who decided it, and one outcome per item.
fn decode_batch(msg: &async_nats::Message, n: usize) -> Decoded<(Option<Arc<str>>, Vec<Outcome>)> {
    let worker = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(batch::WORKER_HEADER))
        .map(|v| Arc::<str>::from(v.as_str()));
    match batch::decode_results(&msg.payload, n) {
        Ok(results) => Decoded::Done((
            worker,
            results
                .into_iter()
                .map(|r| match r {
                    Reply::Error(e) if e.code == ErrorCode::Unavailable => Outcome::AskAlone,
                    r => Outcome::Done(Ok(r)),
                })
                .collect(),
        )),
        Err(ReplyError::Rejected(e)) if e.code == ErrorCode::Unavailable => {
            Decoded::Retry(NoAnswer::Unavailable(e.message))
        }
        Err(ReplyError::Rejected(e)) => {
            tracing::error!(
                subject = %msg.subject,
                "the worker refused a batch of {n} asks (a sluice-client bug; please report it): {e}"
            );
            Decoded::Done((
                worker,
                (0..n)
                    .map(|_| Outcome::Done(Ok(Reply::Error(e.clone()))))
                    .collect(),
            ))
        }
        Err(ReplyError::Malformed(e)) => {
            tracing::warn!(subject = %msg.subject, "{e}");
            Decoded::Fail(NoAnswer::Malformed(e.to_string()))
        }
    }
}
