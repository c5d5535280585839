//! What every task of a worker shares: its NATS connection and JetStream
//! stores, its identity, its clock, and the pieces built once at start-up
//! (the decision core, the routes of its answering shards, its outbox).
//!
//! It lives apart from the controller ([`crate::worker`]) that builds it so
//! that the shards, worker batches, status and metrics depend on it without
//! depending on each other or on the controller.

use crate::counters::KeyBound;
use crate::decide::Decider;
use crate::outbox::Outbox;
use crate::routes::Routes;
use crate::stats::{PolicyStatus, WorkerStats};
use crate::store::Stores;
use crate::usage::UsageBook;
use sluice_core::config::Config;
use sluice_core::time::Clock;
use std::sync::Arc;
use std::time::Duration;

pub struct Shared {
    pub client: async_nats::Client,
    pub stores: Stores,
    pub config: Arc<Config>,
    pub worker_id: String,
    pub clock: Arc<dyn Clock>,
    pub lease_ttl: Duration,
    pub stats: Arc<WorkerStats>,
    /// Decides every ask.
    pub decider: Decider,
    /// The shards answering now, for worker batches.
    pub routes: Routes,
    /// Where answers go (through the journal in journal mode).
    pub outbox: Outbox,
    /// What the worker made of the policy bucket.
    pub policy_status: PolicyStatus,
    /// The bound on the live counters of all its partitions (`max_keys`).
    pub key_bound: Arc<KeyBound>,
    /// Usage history (CONTRACT §9); `None` when `[usage] enabled = false`.
    pub usage: Option<Arc<UsageBook>>,
}
