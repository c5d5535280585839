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
//!
//! This file holds the batching's state and rules: the destinations, their
//! turns and queues, what a batch reply teaches about owners. The requests
//! themselves go out from the client's shared state
//! ([`crate::inner::Inner::ask_batched`], its `Turn` guard).

use crate::outcome::{Decoded, NoAnswer};
use sluice_core::wire::batch::{self, Act, ReplyError};
use sluice_core::wire::{ErrorCode, Reply, SLUICE_UNSTORED};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

pub(crate) struct Batcher {
    pub(crate) state: Mutex<State>,
}

pub(crate) struct State {
    /// Per partition: the worker whose batch reply last answered for it.
    pub(crate) owners: Box<[Option<Arc<str>>]>,
    /// The destinations with a request in flight (or being formed), and
    /// the asks waiting for their next one.
    pub(crate) busy: HashMap<Destination, Lane>,
}

/// A busy destination.
#[derive(Default)]
pub(crate) struct Lane {
    /// Turns taken: requests in flight or being formed, at most
    /// [`MAX_IN_FLIGHT`].
    pub(crate) turns: usize,
    pub(crate) queue: VecDeque<Waiter>,
}

/// Requests of one client in flight to one destination at a time.
pub(crate) const MAX_IN_FLIGHT: usize = 2;

/// Where a batch goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Destination {
    /// All asks of the partitions this worker owns: `rl.w.<id>.batch`.
    Worker(Arc<str>),
    /// A partition whose owner is unknown: `rl.p.<n>.batch`.
    Partition(u32),
}

pub(crate) struct Waiter {
    pub(crate) token: String,
    pub(crate) policy: String,
    pub(crate) cost: u64,
    /// The ask's id (SPEC §16), sent again with it when it is asked alone.
    pub(crate) id: Option<String>,
    pub(crate) act: Act,
    pub(crate) partition: u32,
    pub(crate) tx: oneshot::Sender<Outcome>,
}

/// What a queued caller is told.
pub(crate) enum Outcome {
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

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Lane {
    /// Up to [`batch::MAX_ITEMS`] queued asks, oldest first, skipping
    /// callers that gave up.
    pub(crate) fn take_batch(&mut self) -> Vec<Waiter> {
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

impl State {
    /// Takes in who answered a batch: the replying worker owns the
    /// partitions of the items it decided, and whoever was thought to own
    /// an item answered 503 does not.
    pub(crate) fn learn(
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
    pub(crate) fn forget_worker(&mut self, gone: &Arc<str>) {
        for owner in self.owners.iter_mut() {
            if owner.as_ref() == Some(gone) {
                *owner = None;
            }
        }
    }
}

/// A batch reply to `waiters`: who decided it, and one outcome per item.
pub(crate) fn decode_batch(
    msg: &async_nats::Message,
    waiters: &[Waiter],
) -> Decoded<(Option<Arc<str>>, Vec<Outcome>)> {
    let n = waiters.len();
    let headers = msg.headers.as_ref();
    let worker = headers
        .and_then(|h| h.get(batch::WORKER_HEADER))
        .map(|v| Arc::<str>::from(v.as_str()));
    let is_hold = |w: &Waiter| matches!(w.act, Act::Hold(_));
    // A hold verb without an id cannot be sent twice: a second reserve
    // would keep a second hold. With one, the owner answers a repeat.
    let unnamed_hold = |w: &Waiter| is_hold(w) && w.id.is_none();
    let holds = waiters.iter().any(is_hold);
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
        // The owner did the batch in memory but its journal did not store
        // it: its unnamed hold verbs are answered so, its asks and named
        // hold verbs are asked again alone.
        Err(ReplyError::Rejected(e))
            if e.code == ErrorCode::Unavailable
                && waiters.iter().any(unnamed_hold)
                && headers.is_some_and(|h| h.get(SLUICE_UNSTORED).is_some()) =>
        {
            Decoded::Done((
                worker,
                waiters
                    .iter()
                    .map(|w| match unnamed_hold(w) {
                        true => Outcome::Done(Ok(Reply::Error(e.clone()))),
                        false => Outcome::AskAlone,
                    })
                    .collect(),
            ))
        }
        Err(ReplyError::Rejected(e)) if e.code == ErrorCode::Unavailable => {
            Decoded::Retry(NoAnswer::Unavailable(e.message))
        }
        // A worker of a release before hold items in batches refuses such
        // a batch whole ("unknown field"), which changes nothing: each item
        // is asked again alone, on its own subject.
        Err(ReplyError::Rejected(e)) if holds => {
            tracing::warn!(
                subject = %msg.subject,
                "the worker refused a batch of {n} items with hold verbs (a worker of an earlier release?); each is asked alone: {e}"
            );
            Decoded::Done((worker, waiters.iter().map(|_| Outcome::AskAlone).collect()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::error_message;
    use sluice_core::holds::HoldId;
    use sluice_core::subject::Verb;
    use sluice_core::wire::batch::{Budget, HoldAct};
    use sluice_core::wire::{Encoding, ErrorReply, UNSTORED_YES};

    fn waiter(act: Act) -> Waiter {
        Waiter {
            token: "k".into(),
            policy: "p".into(),
            cost: 1,
            id: None,
            act,
            partition: 0,
            tx: oneshot::channel().0,
        }
    }

    fn settle() -> Act {
        Act::Hold(HoldAct {
            verb: Verb::Settle,
            ttl_ms: None,
            hold: HoldId::parse("0123456789abcdef0123456789abcdef"),
        })
    }

    /// A whole-batch error reply, as a worker sends it.
    fn refused(error: &ErrorReply, unstored: bool) -> async_nats::Message {
        let worker = (batch::WORKER_HEADER, "w1");
        let more = if unstored {
            vec![worker, (SLUICE_UNSTORED, UNSTORED_YES)]
        } else {
            vec![worker]
        };
        error_message(error, Encoding::MsgPack, &more)
    }

    fn kinds(outcomes: &[Outcome]) -> Vec<&'static str> {
        outcomes
            .iter()
            .map(|o| match o {
                Outcome::AskAlone => "alone",
                Outcome::Done(Ok(Reply::Error(e))) if e.code == ErrorCode::Unavailable => "503",
                Outcome::Done(Ok(Reply::Error(_))) => "error",
                Outcome::Done(_) => "done",
            })
            .collect()
    }

    /// An unstored batch: its unnamed hold verbs were done in memory, so
    /// they are answered with the 503 (never sent again); its asks and
    /// named hold verbs are asked again alone. Without an unnamed hold
    /// verb the batch is tried again, as before.
    #[test]
    fn an_unstored_batch_answers_its_unnamed_hold_verbs_and_sends_the_rest_again() {
        let unstored = refused(&ErrorReply::unavailable("not stored"), true);
        let mixed = [waiter(Act::default()), waiter(settle())];
        match decode_batch(&unstored, &mixed) {
            Decoded::Done((worker, outcomes)) => {
                assert_eq!(worker.as_deref(), Some("w1"));
                assert_eq!(kinds(&outcomes), ["alone", "503"]);
            }
            _ => panic!("a batch with a hold verb is answered, not retried"),
        }
        let named = Waiter {
            id: Some("settle-1".into()),
            ..waiter(settle())
        };
        let three = [waiter(Act::default()), named, waiter(settle())];
        let Decoded::Done((_, outcomes)) = decode_batch(&unstored, &three) else {
            panic!("a batch with an unnamed hold verb is answered, not retried")
        };
        assert_eq!(kinds(&outcomes), ["alone", "alone", "503"]);
        let named = Waiter {
            id: Some("settle-1".into()),
            ..waiter(settle())
        };
        let asks = [waiter(Act::Ask(Budget::None)), named];
        assert!(matches!(decode_batch(&unstored, &asks), Decoded::Retry(_)));
        // A 503 that did nothing (no owner) is tried again either way.
        let moved = refused(&ErrorReply::unavailable("restoring"), false);
        assert!(matches!(decode_batch(&moved, &mixed), Decoded::Retry(_)));
    }

    /// A worker of an earlier release refuses a batch with a hold item as
    /// a whole (unknown field "verb"), doing nothing: each item is asked
    /// again alone. A refused batch of asks only is a client bug, as before.
    #[test]
    fn a_batch_with_hold_verbs_refused_whole_is_asked_again_item_by_item() {
        let old = refused(
            &ErrorReply::bad_request("batch item 1: unknown field \"verb\""),
            false,
        );
        let mixed = [waiter(Act::default()), waiter(settle())];
        let Decoded::Done((_, outcomes)) = decode_batch(&old, &mixed) else {
            panic!("answered")
        };
        assert_eq!(kinds(&outcomes), ["alone", "alone"]);
        let asks = [waiter(Act::default())];
        let Decoded::Done((_, outcomes)) = decode_batch(&old, &asks) else {
            panic!("answered")
        };
        assert_eq!(kinds(&outcomes), ["error"]);
    }
}
