//! What the tasks that answer requests share: the shards, the worker
//! batches and the usage queries.
//!
//! Built once by [`crate::worker::run`], the one composition root. The
//! other tasks get only what they use: a shard also gets its
//! [`crate::shard::Owning`] (stores, lease, key bound), the status and
//! metrics pages their [`crate::service::StatusSources`], the policy watch
//! the decider and the policy status.

use crate::decide::Decider;
use crate::global::{Deferred, Link};
use crate::outbox::Outbox;
use crate::routes::Routes;
use crate::usage::UsageHistory;
use sluice_core::region::state::Actions;
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
    pub usage: Option<Arc<UsageHistory>>,
    /// The link between regions (global limits, SPEC §12), when this
    /// worker has a region: it carries the decisions' actions.
    pub link: Option<Link>,
    /// With `--otlp-endpoint`: the tracer of asks that carry a
    /// `traceparent` ([`crate::traced`]).
    pub tracer: Option<sluice_traces::SdkTracer>,
}

impl Answering {
    /// Carries out what a turn of decisions left to cross the link: those
    /// for now at once, the others once `stored` says its records are
    /// (the outbox's `then`).
    pub fn perform(&self, actions: Actions) -> Option<Deferred> {
        let link = self.link.as_ref()?;
        link.perform(actions.now);
        (!actions.stored.is_empty()).then(|| Deferred {
            link: link.clone(),
            actions: actions.stored,
        })
    }
}
