//! `sluice worker --metrics-listen ADDR`: Prometheus metrics over HTTP,
//! through the Prometheus client library ([`sluice_core::metrics`]).
//!
//! What the worker already counts for `sluice status` (decisions by
//! outcome, keys, the policy bucket, partitions) is read once per scrape
//! from the same [`service::status`] and encoded by a collector, so the
//! page and `sluice status` cannot disagree.

use crate::service::{self, WorkerStatus};
use crate::shared::Shared;
use crate::stats::ShardsView;
use axum::http::header;
use axum::{routing::get, Router};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use sluice_core::metrics::{self as page, ConstCounter, ConstGauge, Registry};
use std::fmt;
use std::sync::Arc;

/// The `/metrics` page of a worker.
pub fn render(shared: &Shared, shards: &ShardsView) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StatusValues(service::status(shared, shards))));
    page::render(&registry)
}

/// The worker's status as it was when the page was asked for.
#[derive(Debug)]
struct StatusValues(WorkerStatus);

/// A gauge's value from a count.
fn level(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Collector for StatusValues {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        page::family(
            &mut e,
            "sluice_worker_decisions",
            "Requests answered by this worker, by outcome.",
            [
                ("allowed", s.allowed),
                ("denied", s.denied),
                ("hit", s.hits),
                ("error", s.errors),
            ]
            .map(|(outcome, n)| ([("outcome", outcome)], ConstCounter::new(n))),
        )?;
        page::counter(
            &mut e,
            "sluice_worker_journal_errors",
            "Journal appends that failed (their counts lived only in memory until the next snapshot).",
            s.journal_errors,
        )?;
        page::counter(
            &mut e,
            "sluice_worker_policy_refusals",
            "Values of the policy bucket refused (the previous version stayed in force).",
            s.policy_refusals,
        )?;
        page::gauge(
            &mut e,
            "sluice_worker_policy_revision",
            "The policy bucket revision this worker has applied.",
            level(s.policy_revision),
        )?;
        page::gauge(
            &mut e,
            "sluice_worker_keys",
            "Live counters held in all owned partitions.",
            level(s.keys),
        )?;
        page::gauge(
            &mut e,
            "sluice_worker_max_keys",
            "The bound on live counters (max_keys).",
            level(s.max_keys),
        )?;
        page::counter(
            &mut e,
            "sluice_worker_keys_evicted",
            "Live counters forgotten to stay within max_keys (their limits started over).",
            s.evicted_keys,
        )?;
        page::gauge(
            &mut e,
            "sluice_worker_partitions",
            "Partitions this worker owns.",
            level(s.partitions.len() as u64),
        )?;
        page::family(
            &mut e,
            "sluice_worker_partition_keys",
            "Live counters per owned partition (at the last snapshot).",
            s.partitions
                .iter()
                .map(|p| ([("partition", p.partition)], ConstGauge::new(level(p.keys)))),
        )?;
        page::family(
            &mut e,
            "sluice_worker_partition_last_snapshot_ms",
            "When each owned partition was last snapshotted (ms since the epoch).",
            s.partitions.iter().map(|p| {
                (
                    [("partition", p.partition)],
                    ConstGauge::new(level(p.last_snapshot_ms)),
                )
            }),
        )
    }
}

/// Serves `/metrics` on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>, shards: ShardsView) {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let (shared, shards) = (shared.clone(), shards.clone());
            async move {
                (
                    [(header::CONTENT_TYPE, page::CONTENT_TYPE)],
                    render(&shared, &shards),
                )
            }
        }),
    );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!("metrics server stopped: {e}");
    }
}
