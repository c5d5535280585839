//! What the tasks that answer requests share: the shards, the worker
//! batches and the usage queries.
//!
//! Built once by [`crate::worker::run`], the one composition root. The
//! other tasks get only what they use: a shard also gets its
//! [`crate::shard::Owning`] (stores, lease, key bound), the status and
//! metrics pages their [`crate::service::StatusSources`], the policy watch
//! the decider and the policy status.

use crate::decide::Decider;
use crate::outbox::Outbox;
use crate::routes::Routes;
use crate::usage::UsageBook;
use sluice_core::time::Clock;
use std::sync::Arc;

pub struct Answering {
    pub client: async_nats::Client,
    pub worker_id: String,
    pub clock: Arc<dyn Clock>,
    /// The partition count the keys are mapped with.
    pub partitions: u32,
    /// Decides every ask.
    pub decider: Arc<Decider>,
    /// The shards answering now, for worker batches.
    pub routes: Routes,
    /// Where answers go (through the journal in journal mode).
    pub outbox: Outbox,
    /// Usage history (SPEC §9); `None` when `[usage] enabled = false`.
    pub usage: Option<Arc<UsageBook>>,
}
