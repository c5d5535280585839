//! Discovery through NATS micro services: `$SRV.PING`, `$SRV.INFO`,
//! `$SRV.STATS` for the `sluice-worker` service.
//!
//! The partition subjects are deliberately *not* service endpoints. Service
//! endpoints are queue subscriptions, which could split one partition's
//! requests between two subscribers, and the service API cannot remove an
//! endpoint from `$SRV.INFO` once added, so INFO would go on listing
//! partitions a worker handed over. Instead each worker registers one
//! endpoint, `sluice.status.<worker>`, and its STATS `data` carries the
//! facts: owned partitions with their decision counts, key counts and
//! snapshot ages. `sluice status` reads those.

use crate::counters::KeyBound;
use crate::decide::Decider;
use crate::region::{LinkStatus, RegionView};
use crate::stats::{PolicyStatus, ShardsView, WorkerStats};
use anyhow::{anyhow, Result};
use async_nats::service::{self, ServiceExt};
use futures::StreamExt;
use serde::Serialize;
use sluice_core::config::PolicyTable;
use sluice_core::policies::Policies;
use sluice_core::subject::{STATUS_GROUP, STATUS_SERVICE};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a worker reports about itself.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Serialize, serde::Deserialize, Clone, PartialEq)]
pub struct WorkerStatus {
    pub worker: String,
    pub allowed: u64,
    pub denied: u64,
    pub hits: u64,
    pub errors: u64,
    pub journal_errors: u64,
    /// Usage flushes that failed, alerts not acknowledged, takeovers
    /// refused for a newer format (docs/METRICS.md); 0 from workers of
    /// earlier releases.
    #[serde(default)]
    pub usage_flush_failures: u64,
    #[serde(default)]
    pub alert_publish_failures: u64,
    #[serde(default)]
    pub format_refusals: u64,
    /// The policy bucket's revision the worker has applied.
    #[serde(default)]
    pub policy_revision: u64,
    /// Values of the policy bucket refused so far.
    #[serde(default)]
    pub policy_refusals: u64,
    /// Keys of the policy bucket whose value is refused now, with why.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub refused_policies: std::collections::BTreeMap<String, String>,
    /// Live counters held in all partitions, and the bound on them.
    #[serde(default)]
    pub keys: u64,
    #[serde(default)]
    pub max_keys: u64,
    /// Live counters forgotten so far to stay within `max_keys`.
    #[serde(default)]
    pub evicted_keys: u64,
    pub partitions: Vec<PartitionStatus>,
    /// The worker's region (SPEC §12); absent without regions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The other regions it has seen over the link, and whether each
    /// answers now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkStatus>,
    /// The policies in force on this worker, by name (`sluice policy
    /// list`); absent from workers of earlier releases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyInForce>,
}

/// A policy in force on a worker, and where it comes from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Serialize, serde::Deserialize, Clone, PartialEq)]
pub struct PolicyInForce {
    pub name: String,
    pub from: PolicySource,
    /// As `sluice policy set` and the policy bucket write it.
    pub policy: PolicyTable,
}

/// Where a policy in force comes from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Serialize, serde::Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PolicySource {
    /// The config file the worker was started with.
    Config,
    /// The policy bucket (`sluice policy set/apply`), over the file's.
    Bucket,
}

impl std::fmt::Display for PolicySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PolicySource::Config => "config",
            PolicySource::Bucket => "bucket",
        })
    }
}

/// The policies `policies` holds in force, by name.
pub fn in_force(policies: &Policies) -> Vec<PolicyInForce> {
    policies
        .iter()
        .map(|p| PolicyInForce {
            name: p.name().to_string(),
            from: if policies.from_bucket(p.name()) {
                PolicySource::Bucket
            } else {
                PolicySource::Config
            },
            policy: PolicyTable::of(p),
        })
        .collect()
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Serialize, serde::Deserialize, Clone, PartialEq)]
pub struct PartitionStatus {
    pub partition: u32,
    pub answering: bool,
    pub decisions: u64,
    pub keys: u64,
    pub last_snapshot_ms: u64,
    /// Live holds, at the last snapshot; 0 from earlier releases.
    #[serde(default)]
    pub holds: u64,
}

/// What a worker's status is read from: for `sluice status` and the
/// `/metrics` page alike.
pub struct StatusSources {
    pub worker_id: String,
    /// The config's partition count (all of them, owned here or not).
    pub partitions: u32,
    pub stats: Arc<WorkerStats>,
    pub policy_status: Arc<PolicyStatus>,
    pub key_bound: Arc<KeyBound>,
    pub shards: ShardsView,
    /// The region's name and what it sees of the others.
    pub region: Option<(String, Arc<RegionView>)>,
    /// The policies in force.
    pub decider: Arc<Decider>,
}

pub fn status(sources: &StatusSources) -> WorkerStatus {
    let s = &sources.stats;
    let partitions = sources
        .shards
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(p, st)| PartitionStatus {
            partition: *p,
            answering: st.answering.load(Ordering::Relaxed),
            decisions: st.decisions.load(Ordering::Relaxed),
            keys: st.keys.load(Ordering::Relaxed),
            last_snapshot_ms: st.last_snapshot_ms.load(Ordering::Relaxed),
            holds: st.holds.load(Ordering::Relaxed),
        })
        .collect();
    WorkerStatus {
        worker: sources.worker_id.clone(),
        allowed: s.allowed.load(Ordering::Relaxed),
        denied: s.denied.load(Ordering::Relaxed),
        hits: s.hits.load(Ordering::Relaxed),
        errors: s.errors.load(Ordering::Relaxed),
        journal_errors: s.journal_errors.load(Ordering::Relaxed),
        usage_flush_failures: s.usage_flush_failures.load(Ordering::Relaxed),
        alert_publish_failures: s.alert_publish_failures.load(Ordering::Relaxed),
        format_refusals: s.format_refusals.load(Ordering::Relaxed),
        policy_revision: sources.policy_status.revision.load(Ordering::Relaxed),
        policy_refusals: sources.policy_status.refusals.load(Ordering::Relaxed),
        refused_policies: sources
            .policy_status
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
        keys: sources.key_bound.held(),
        max_keys: sources.key_bound.max(),
        evicted_keys: sources.key_bound.evicted(),
        partitions,
        region: sources.region.as_ref().map(|(name, _)| name.clone()),
        links: sources
            .region
            .as_ref()
            .map(|(_, view)| view.links())
            .unwrap_or_default(),
        policies: in_force(&sources.decider.policies()),
    }
}

/// Registers the service and answers `sluice.status.<worker>` until stopped.
pub async fn start(
    client: &async_nats::Client,
    sources: Arc<StatusSources>,
) -> Result<service::Service> {
    let for_stats = sources.clone();
    let svc = client
        .service_builder()
        .description("sluice limiter worker")
        .stats_handler(move |_endpoint, _stats| {
            serde_json::to_value(status(&for_stats)).unwrap_or_default()
        })
        .start(STATUS_SERVICE, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow!("cannot register the micro service: {e}"))?;
    let mut endpoint = svc
        .group(STATUS_GROUP)
        .endpoint_builder()
        .name("status")
        .add(sources.worker_id.clone())
        .await
        .map_err(|e| anyhow!("cannot add the status endpoint: {e}"))?;
    tokio::spawn(async move {
        while let Some(req) = endpoint.next().await {
            let body = serde_json::to_vec(&status(&sources)).unwrap_or_default();
            let _ = req.respond(Ok(body.into())).await;
        }
    });
    Ok(svc)
}
