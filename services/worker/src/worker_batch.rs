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
//! does not hold up the next message), which decides the items right there,
//! on the counters of the partitions' shards, in item order per partition,
//! exactly like an `rl.p.<n>.batch` request (in journal mode it replies only
//! once the worker's journal holds what it counted). Items of partitions this
//! worker does not answer for (not its own, or still restoring) get the
//! per-item 503 of the partition path. It replies once, in item order.
//!
//! Why not hand each partition's share to its shard task: that hand-off (a
//! channel to every shard the batch touches, a wake-up of each, a oneshot
//! back and a wake-up of the batch task) was about a quarter of a worker's
//! CPU under the batching client. Deciding here is as exact: every decision
//! on a key is one read-modify-write under its bucket's lock
//! ([`crate::counters`]), and a shard closes its route (a write lock over all
//! routes) before its final snapshot and after it stops answering, so no
//! worker batch decides for a partition the shard has let go of.

use crate::counters::Counters;
use crate::handler::{self, decide_items, Counted};
use crate::shard::ShardStats;
use crate::worker::Shared;
use anyhow::Result;
use futures::StreamExt;
use sluice_core::nats_config::worker_batch_subject;
use sluice_core::wire::{self, batch, Encoding, ErrorReply};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// An answering shard's counters and stats, for worker batches.
pub(crate) struct Route {
    counters: Counters,
    stats: Arc<ShardStats>,
}

/// The shards answering now, by partition: a shard opens its route once it
/// has restored its partition and closes it when it stops.
#[derive(Default)]
pub struct Routes(RwLock<HashMap<u32, Route>>);

impl Routes {
    pub(crate) fn open(&self, partition: u32, counters: Counters, stats: Arc<ShardStats>) {
        self.write().insert(partition, Route { counters, stats });
    }

    /// Closes `partition`'s route if it is still this shard's (`stats`; a
    /// newer shard of the same partition may already have opened its own).
    /// Once it returns, no worker batch decides for this shard.
    pub(crate) fn close(&self, partition: u32, stats: &Arc<ShardStats>) {
        let mut routes = self.write();
        if routes
            .get(&partition)
            .is_some_and(|r| Arc::ptr_eq(&r.stats, stats))
        {
            routes.remove(&partition);
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<u32, Route>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<u32, Route>> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
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
    let reply = match batch::decode_items(&msg.payload) {
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

/// Decides a worker batch's items on their shards' counters; results in
/// item order.
async fn decide(shared: &Shared, items: batch::Items<'_>) -> Vec<wire::Reply> {
    let now = shared.clock.now();
    let mut results: Vec<Option<wire::Reply>> = (0..items.len()).map(|_| None).collect();
    // (partition, place in the batch, item), grouped by partition in item order.
    let mut asks = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        match item {
            Ok(item) => asks.push((item.key.partition(shared.config.partitions), i, item)),
            Err(e) => {
                shared.stats.errors.fetch_add(1, Ordering::Relaxed);
                results[i] = Some(wire::Reply::Error(e));
            }
        }
    }
    asks.sort_by_key(|(partition, _, _)| *partition);
    let mut records = Vec::new();
    {
        // No await while it is held: a shard that stops waits for it.
        let routes = shared.routes.read();
        for share in asks.chunk_by(|a, b| a.0 == b.0) {
            let partition = share[0].0;
            let places = share.iter().map(|(_, i, _)| *i);
            let Some(route) = routes.get(&partition) else {
                not_answering(shared, partition, places, &mut results);
                continue;
            };
            let mut counted = Counted::new(shared, partition);
            let decided = decide_items(
                shared,
                partition,
                &route.counters,
                share.iter().map(|(_, _, item)| Ok(item.clone())),
                now,
                &mut counted,
            );
            route.stats.decisions.fetch_add(1, Ordering::Relaxed);
            route.stats.add_changes(counted.changes);
            records.append(&mut counted.records);
            for (i, result) in places.zip(decided) {
                results[i] = Some(result);
            }
        }
    }
    if let Some(writer) = &shared.journal {
        if !records.is_empty() {
            writer.store(records).await;
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
    places: impl Iterator<Item = usize>,
    results: &mut [Option<wire::Reply>],
) {
    let e = ErrorReply::unavailable(format!(
        "worker {} does not answer for partition {partition} (another worker owns it, or it \
         is still being restored); ask these keys on rl.allow.<key>",
        shared.worker_id
    ));
    for i in places {
        shared.stats.errors.fetch_add(1, Ordering::Relaxed);
        results[i] = Some(wire::Reply::Error(e.clone()));
    }
}
