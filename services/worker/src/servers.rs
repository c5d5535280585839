//! The tasks that answer besides the shards: asks of partitions nobody
//! maps (malformed key subjects), worker batches and top queries. Apart
//! from `worker.rs` because they live as long as the worker, not as long
//! as any partition, and need only what every shard shares.

use crate::answering::Answering;
use crate::reply::{self, Reply};
use anyhow::Result;
use futures::StreamExt;
use sluice_core::subject::Verb;
use sluice_core::wire::{Encoding, ErrorReply};
use std::sync::Arc;

/// The tasks that answer besides the shards: asks of partitions nobody
/// maps, worker batches, and top queries (with usage). A failure is
/// logged in its task; the worker goes on without it.
pub(crate) struct Servers {
    strays: tokio::task::JoinHandle<()>,
    worker_batches: tokio::task::JoinHandle<()>,
    top: Option<tokio::task::JoinHandle<()>>,
}

impl Servers {
    pub(crate) fn spawn(client: &async_nats::Client, answering: &Arc<Answering>) -> Servers {
        let strays = tokio::spawn({
            let client = client.clone();
            async move {
                if let Err(e) = answer_unmapped(client).await {
                    tracing::warn!("cannot answer unmapped requests: {e:#}");
                }
            }
        });
        let worker_batches = tokio::spawn({
            let answering = answering.clone();
            async move {
                if let Err(e) = crate::worker_batch::serve(answering).await {
                    tracing::warn!("cannot answer worker batches: {e:#}");
                }
            }
        });
        let top = answering.usage.is_some().then(|| {
            let answering = answering.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::usage::top::serve_top(answering).await {
                    tracing::warn!("cannot answer top queries: {e:#}");
                }
            })
        });
        Servers {
            strays,
            worker_batches,
            top,
        }
    }

    /// Stops them, the worker's partitions handed over.
    pub(crate) fn abort(self) {
        self.strays.abort();
        if let Some(top) = self.top {
            top.abort();
        }
        self.worker_batches.abort();
    }
}

/// Answers requests the partition mapping could not map: a key of more
/// tokens than a grouped key has (`rl.allow.a.b.c.d`) or the literal `>`. Mapped requests never reach
/// `rl.allow.>` subscribers (the server rewrites them before routing), so this
/// only sees the malformed ones. One worker of the queue group answers each.
async fn answer_unmapped(client: async_nats::Client) -> Result<()> {
    let mut subs = Vec::new();
    for verb in Verb::ANSWERED {
        subs.push(
            client
                .queue_subscribe(verb.unmapped_wildcard(), "sluice-unmapped".into())
                .await?,
        );
    }
    let mut subs = futures::stream::select_all(subs);
    while let Some(msg) = subs.next().await {
        let Some(to) = msg.reply else { continue };
        let error = ErrorReply::bad_request(format!(
            "{} is not a valid key subject: a key is one subject token, or up to three for a \
             grouped key ({}, SPEC §17); percent-encode '.', '*' and '>' inside a key (e.g. %2E)",
            msg.subject,
            Verb::Allow.client_subject("<org>.<team>.<key>")
        ));
        let reply = Reply::error(&error, Encoding::of_body(&msg.payload));
        reply::publish(&client, vec![(to, reply)]).await;
    }
    Ok(())
}
