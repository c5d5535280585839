//! Worker batches: one request carries asks for any of this worker's
//! partitions.
//!
//! A per-partition batch (`rl.p.<n>.batch`) can only group the asks of one
//! partition, so with many partitions and few asks in flight almost every
//! batch has one item, and the NATS round trip, not the worker, sets the
//! pace. The batching client learns from batch replies (the
//! [`batch::WORKER_HEADER`]) which worker owns which partition, and sends
//! all asks for one worker to `rl.w.<worker-id>.batch`.
//!
//! Each such message is answered by its own task (so one slow partition
//! does not hold up the next message): it splits the items by partition,
//! hands each partition's share to that partition's shard task (which
//! decides it exactly like an `rl.p.<n>.batch` request, in journal mode only
//! after the journal append is acknowledged), answers items of partitions
//! this worker does not answer for (not its own, or still restoring) with
//! the per-item 503 of the partition path, and replies once, in item order.

use crate::counters::Counters;
use crate::handler::{self, decide_items, Counted};
use crate::worker::Shared;
use anyhow::Result;
use futures::StreamExt;
use sluice_core::key::KeyToken;
use sluice_core::nats_config::worker_batch_subject;
use sluice_core::time::Nanos;
use sluice_core::wire::{self, batch, Encoding, ErrorReply};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use tokio::sync::{mpsc, oneshot};

/// One partition's share of a worker batch, on its way to the shard task.
pub struct SubBatch {
    items: Vec<OwnedItem>,
    /// The results, in item order; dropped unanswered if the shard stopped.
    reply: oneshot::Sender<Vec<wire::Reply>>,
}

/// A batch item that outlives the request body it came in.
struct OwnedItem {
    key: String,
    policy: String,
    cost: u64,
}

impl SubBatch {
    /// Decides the items for `partition` (the shard task calls this, with
    /// its counters) like an `rl.p.<n>.batch` request.
    pub(crate) fn decide(
        self,
        shared: &Shared,
        partition: u32,
        counters: &Counters,
        now: Nanos,
        counted: &mut Counted,
    ) -> Decided {
        let items = self.items.iter().map(|i| {
            Ok(batch::Item {
                key: KeyToken::parse(&i.key).map_err(ErrorReply::from)?,
                policy: Cow::Borrowed(i.policy.as_str()),
                cost: i.cost,
            })
        });
        let results = decide_items(shared, partition, counters, items, now, counted);
        Decided {
            reply: self.reply,
            results,
        }
    }
}

/// A decided share, to be handed back once its counts are safe.
pub(crate) struct Decided {
    reply: oneshot::Sender<Vec<wire::Reply>>,
    results: Vec<wire::Reply>,
}

impl Decided {
    pub(crate) fn send(self) {
        // The request's task may be gone (its client left); nothing to do.
        let _ = self.reply.send(self.results);
    }
}

/// The shard tasks that answer right now, by partition: a shard opens its
/// route once it has restored its partition and closes it when it stops.
#[derive(Default)]
pub struct Routes(RwLock<HashMap<u32, mpsc::Sender<SubBatch>>>);

impl Routes {
    pub(crate) fn open(&self, partition: u32, to: mpsc::Sender<SubBatch>) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(partition, to);
    }

    /// Closes `partition`'s route if it still leads to `to` (a newer shard
    /// of the same partition may already have opened its own).
    pub(crate) fn close(&self, partition: u32, to: &mpsc::Sender<SubBatch>) {
        let mut routes = self.0.write().unwrap_or_else(|e| e.into_inner());
        if routes.get(&partition).is_some_and(|r| r.same_channel(to)) {
            routes.remove(&partition);
        }
    }

    fn get(&self, partition: u32) -> Option<mpsc::Sender<SubBatch>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&partition)
            .cloned()
    }
}

/// Answers `rl.w.<worker-id>.batch` until the subscription ends.
pub async fn serve(shared: Arc<Shared>) -> Result<()> {
    let mut sub = shared
        .client
        .subscribe(worker_batch_subject(&shared.worker_id))
        .await?;
    while let Some(msg) = sub.next().await {
        tokio::spawn(answer(shared.clone(), msg));
    }
    Ok(())
}

async fn answer(shared: Arc<Shared>, msg: async_nats::Message) {
    let Some(to) = msg.reply.clone() else {
        return;
    };
    let reply = match batch::decode_request(&msg.payload) {
        Err(e) => {
            shared.stats.errors.fetch_add(1, Ordering::Relaxed);
            let mut reply = handler::error_reply(&e, Encoding::MsgPack);
            reply
                .headers
                .insert(batch::WORKER_HEADER, shared.worker_id.as_str());
            reply
        }
        Ok(items) => handler::batch_reply(&shared, &decide(&shared, items).await),
    };
    if let Err(e) = shared
        .client
        .publish_with_headers(to, reply.headers, reply.payload)
        .await
    {
        tracing::warn!("cannot send a reply: {e}");
    }
}

/// Decides a worker batch's items on their shards; results in item order.
async fn decide(shared: &Shared, items: batch::Items<'_>) -> Vec<wire::Reply> {
    let mut results: Vec<Option<wire::Reply>> = (0..items.len()).map(|_| None).collect();
    // Per partition: the items' places in the batch, and the items.
    let mut shares: HashMap<u32, (Vec<usize>, Vec<OwnedItem>)> = HashMap::new();
    for (i, item) in items.into_iter().enumerate() {
        match item {
            Ok(item) => {
                let share = shares
                    .entry(item.key.partition(shared.config.partitions))
                    .or_default();
                share.0.push(i);
                share.1.push(OwnedItem {
                    key: item.key.as_str().to_string(),
                    policy: item.policy.into_owned(),
                    cost: item.cost,
                });
            }
            Err(e) => {
                shared.stats.errors.fetch_add(1, Ordering::Relaxed);
                results[i] = Some(wire::Reply::Error(e));
            }
        }
    }
    let mut pending = Vec::with_capacity(shares.len());
    for (partition, (places, items)) in shares {
        let (tx, rx) = oneshot::channel();
        let sent = match shared.routes.get(partition) {
            Some(route) => route.send(SubBatch { items, reply: tx }).await.is_ok(),
            None => false,
        };
        if sent {
            pending.push((partition, places, rx));
        } else {
            not_answering(shared, partition, &places, &mut results);
        }
    }
    for (partition, places, rx) in pending {
        match rx.await {
            Ok(decided) => {
                for (i, r) in places.into_iter().zip(decided) {
                    results[i] = Some(r);
                }
            }
            // The shard stopped before it decided them: nothing was counted.
            Err(_) => not_answering(shared, partition, &places, &mut results),
        }
    }
    results
        .into_iter()
        .map(|r| r.expect("every item got a result"))
        .collect()
}

/// Answers the items at `places` with the 503 that makes the client ask
/// them again on their own, through the server's mapping.
fn not_answering(
    shared: &Shared,
    partition: u32,
    places: &[usize],
    results: &mut [Option<wire::Reply>],
) {
    let e = ErrorReply::unavailable(format!(
        "worker {} does not answer for partition {partition} (another worker owns it, or it \
         is still being restored); ask these keys on rl.allow.<key>",
        shared.worker_id
    ));
    for &i in places {
        shared.stats.errors.fetch_add(1, Ordering::Relaxed);
        results[i] = Some(wire::Reply::Error(e.clone()));
    }
}
