//! Worker batches: one request carries asks for any of this worker's
//! partitions.
//!
//! A per-partition batch (`rl.p.<n>.batch`) can only group the asks of one
//! partition, so with many partitions and few asks in flight almost every
//! batch has one item, and the NATS round trip, not the worker, sets the
//! pace. The batching client learns from batch replies (the
//! [`WORKER_HEADER`](sluice_core::wire::batch::WORKER_HEADER)) which worker owns which partition, and sends
//! all asks for one worker to `rl.w.<worker-id>.batch`.
//!
//! Each such message is answered by its own task (so one slow partition
//! does not hold up the next message), which decides the items right there
//! with [`Decider::batch`](crate::decide::Decider::batch), the entry point of
//! `rl.p.<n>.batch` requests too, on the counters of the partitions' shards
//! as [`crate::routes::Routes`] finds them (in journal mode it replies only
//! once the worker's journal holds what it counted). Items of partitions this
//! worker does not answer for (not its own, or still restoring) get the
//! per-item 503 of the partition check. It replies once, in item order.
//!
//! Why not hand each partition's share to its shard task: that hand-off (a
//! channel to every shard the batch touches, a wake-up of each, a oneshot
//! back and a wake-up of the batch task) was about a quarter of a worker's
//! CPU under the batching client. Deciding here is as exact: every decision
//! on a key is one read-modify-write under its bucket's lock
//! ([`crate::counters`]), and a shard closes its route before its final
//! snapshot and after it stops answering ([`crate::routes`]).

use crate::answering::Answering;
use crate::reply::Reply;
use anyhow::Result;
use futures::StreamExt;
use sluice_core::subject::worker_batch_subject;
use std::sync::Arc;
use std::time::Instant;

/// Answers `rl.w.<worker-id>.batch` until the subscription ends.
pub async fn serve(answering: Arc<Answering>) -> Result<()> {
    let mut sub = answering
        .client
        .subscribe(worker_batch_subject(&answering.worker_id))
        .await?;
    while let Some(msg) = sub.next().await {
        tokio::spawn(answer(answering.clone(), msg, Instant::now()));
    }
    Ok(())
}

/// Decides one worker batch, taken off the subscription at `received`,
/// and replies, in journal mode once what it counted is stored. A batch
/// nobody waits for is not decided.
async fn answer(answering: Arc<Answering>, msg: async_nats::Message, received: Instant) {
    let Some(to) = msg.reply else {
        return;
    };
    let now = answering.clock.now();
    // No await while the routes are held: a shard that stops waits for them.
    let policies = answering.decider.policies();
    let (reply, records, actions) = answering.routes.with(|answered| {
        let (answer, records, actions) =
            answering
                .decider
                .batch(&policies, &msg.payload, now, answered);
        (Reply::of(&answer, &answering.worker_id), records, actions)
    });
    let then = answering.perform(actions);
    let stored = answering
        .outbox
        .answer_one(records, to, reply, received)
        .await;
    if let Some(then) = then.filter(|_| stored) {
        then.perform();
    }
}
