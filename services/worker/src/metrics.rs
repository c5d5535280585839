//! `sluice worker --metrics-listen ADDR`: Prometheus metrics over HTTP.

use crate::service;
use crate::shared::Shared;
use crate::stats::ShardsView;
use axum::{routing::get, Router};
use sluice_core::metrics::{Exposition, Kind};
use std::sync::Arc;

/// The `/metrics` page of a worker.
pub fn render(shared: &Shared, shards: &ShardsView) -> String {
    let s = service::status(shared, shards);
    let mut e = Exposition::new();
    e.family(
        "sluice_worker_decisions_total",
        Kind::Counter,
        "Requests answered by this worker, by outcome.",
    )
    .sample(
        "sluice_worker_decisions_total",
        &[("outcome", "allowed")],
        s.allowed as f64,
    )
    .sample(
        "sluice_worker_decisions_total",
        &[("outcome", "denied")],
        s.denied as f64,
    )
    .sample(
        "sluice_worker_decisions_total",
        &[("outcome", "hit")],
        s.hits as f64,
    )
    .sample(
        "sluice_worker_decisions_total",
        &[("outcome", "error")],
        s.errors as f64,
    );
    e.single(
        "sluice_worker_journal_errors_total",
        Kind::Counter,
        "Journal appends that failed (their counts lived only in memory until the next snapshot).",
        s.journal_errors as f64,
    );
    e.single(
        "sluice_worker_policy_refusals_total",
        Kind::Counter,
        "Values of the policy bucket refused (the previous version stayed in force).",
        s.policy_refusals as f64,
    );
    e.single(
        "sluice_worker_policy_revision",
        Kind::Gauge,
        "The policy bucket revision this worker has applied.",
        s.policy_revision as f64,
    );
    e.single(
        "sluice_worker_keys",
        Kind::Gauge,
        "Live counters held in all owned partitions.",
        s.keys as f64,
    );
    e.single(
        "sluice_worker_max_keys",
        Kind::Gauge,
        "The bound on live counters (max_keys).",
        s.max_keys as f64,
    );
    e.single(
        "sluice_worker_keys_evicted_total",
        Kind::Counter,
        "Live counters forgotten to stay within max_keys (their limits started over).",
        s.evicted_keys as f64,
    );
    e.single(
        "sluice_worker_partitions",
        Kind::Gauge,
        "Partitions this worker owns.",
        s.partitions.len() as f64,
    );
    e.family(
        "sluice_worker_partition_keys",
        Kind::Gauge,
        "Live counters per owned partition (at the last snapshot).",
    );
    for p in &s.partitions {
        e.sample(
            "sluice_worker_partition_keys",
            &[("partition", &p.partition.to_string())],
            p.keys as f64,
        );
    }
    e.family(
        "sluice_worker_partition_last_snapshot_ms",
        Kind::Gauge,
        "When each owned partition was last snapshotted (ms since the epoch).",
    );
    for p in &s.partitions {
        e.sample(
            "sluice_worker_partition_last_snapshot_ms",
            &[("partition", &p.partition.to_string())],
            p.last_snapshot_ms as f64,
        );
    }
    e.finish()
}

/// Serves `/metrics` on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>, shards: ShardsView) {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let (shared, shards) = (shared.clone(), shards.clone());
            async move { render(&shared, &shards) }
        }),
    );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!("metrics server stopped: {e}");
    }
}
