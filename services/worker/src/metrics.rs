//! `sluice worker --metrics-listen ADDR`: Prometheus metrics over HTTP,
//! through the Prometheus client library ([`sluice_core::metrics`]), and
//! on the same listener `/livez` and `/readyz` ([`serve`]).
//! docs/METRICS.md lists them all, with what to alert on.
//!
//! Two sources, one page: what only the page shows is measured where it
//! happens with the library's counters and histograms
//! ([`crate::stats::Meters`]: decisions by policy, latencies, leases,
//! handovers, snapshots, journal appends) and registered here; what the
//! worker already keeps for `sluice status` (keys, the key bound, the
//! policy bucket, partitions, journal errors) is read once per scrape from
//! the same [`service::status`] and encoded by a collector, so the page and
//! `sluice status` cannot disagree.

use crate::service::{self, StatusSources, WorkerStatus};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::{routing::get, Router};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use sluice_core::metrics::{self as page, ConstGauge, Registry};
use sluice_core::readiness;
use std::fmt;
use std::sync::Arc;

/// The content type of `/livez` and `/readyz`.
const JSON: [(header::HeaderName, &str); 1] = [(header::CONTENT_TYPE, "application/json")];

/// The `/metrics` page of a worker.
pub fn render(sources: &StatusSources) -> Result<String, fmt::Error> {
    let m = &sources.stats.meters;
    let mut registry = Registry::default();
    registry.register(
        "sluice_worker_decisions",
        "Requests answered by this worker, by outcome and policy (errors have an empty policy).",
        m.decisions.clone(),
    );
    for (name, help, histogram) in [
        (
            "sluice_worker_decision_duration_seconds",
            "Per batch of asks answered together: from taking its first message off the subscription to publishing its last reply (journal mode: after the journal stored it).",
            &m.decision_latency,
        ),
        (
            "sluice_worker_takeover_duration_seconds",
            "Per partition taken over: from its lease acquired to answering (snapshot restored, journal replayed).",
            &m.takeover_duration,
        ),
        (
            "sluice_worker_handover_duration_seconds",
            "Per partition handed over: from the stop to its lease released (answering what was delivered, final snapshot).",
            &m.handover_duration,
        ),
        (
            "sluice_worker_snapshot_duration_seconds",
            "Per snapshot written: encoding the counters and writing chunks and manifest.",
            &m.snapshot_duration,
        ),
        (
            "sluice_worker_snapshot_bytes",
            "Per snapshot written: its encoded size in bytes.",
            &m.snapshot_bytes,
        ),
        (
            "sluice_worker_journal_append_duration_seconds",
            "Per journal append (journal mode): from publishing to JetStream's ack.",
            &m.journal_append_duration,
        ),
    ] {
        registry.register(name, help, histogram.clone());
    }
    registry.register(
        "sluice_worker_lease_events",
        "Partition lease events: acquired, renewed, renew_failed (retried), lost (taken or expired), released (handover).",
        m.lease_events.clone(),
    );
    registry.register(
        "sluice_worker_snapshot_failures",
        "Snapshots that could not be written (retried at the next interval; a final one leaves the previous snapshot to the next owner).",
        m.snapshot_failures.clone(),
    );
    for (name, help, counter) in [
        (
            "sluice_worker_budget_slices",
            "Local budgets: slices of a hot key's budget granted to clients (of at least one unit).",
            &m.budget_slices,
        ),
        (
            "sluice_worker_budget_sliced_units",
            "Local budgets: units taken from keys' states for slices (counted as used at once).",
            &m.budget_sliced_units,
        ),
        (
            "sluice_worker_budget_returned_units",
            "Local budgets: units of slices that clients gave back unspent.",
            &m.budget_returned_units,
        ),
        (
            "sluice_worker_budget_unmatched_units",
            "Local budgets: unspent units of refunds that no slice granted by this owner explained (granted before it took the partition over, or never): not given back.",
            &m.budget_unmatched_units,
        ),
        (
            "sluice_worker_ask_repeats",
            "Asks that repeated the id of an ask already admitted (SPEC §16): answered with the first decision, nothing counted.",
            &m.ask_repeats,
        ),
        (
            "sluice_worker_ids_forgotten_early",
            "Ask ids forgotten before their ask stopped counting, to keep a partition within max_ids: a repeat of one counts again.",
            &m.ids_forgotten_early,
        ),
    ] {
        registry.register(name, help, counter.clone());
    }
    registry.register(
        "sluice_worker_configured_partitions",
        "The config's partition count: every partition, owned here or not.",
        ConstGauge::new(i64::from(sources.partitions)),
    );
    registry.register_collector(Box::new(StatusValues(service::status(sources))));
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
            "sluice_worker_policies_refused",
            "Keys of the policy bucket whose value is refused now (sluice status lists them, with why).",
            level(s.refused_policies.len() as u64),
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
            "sluice_worker_holds",
            "Live holds in all owned partitions, as of each partition's last snapshot.",
            level(s.partitions.iter().map(|p| p.holds).sum()),
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
        )?;
        failures_and_links(s, &mut e)
    }
}

/// What went wrong off the decision path (usage flushes, alerts, formats)
/// and the link to each other region, with whether a home of a global
/// policy in force here is cut off.
fn failures_and_links(s: &WorkerStatus, e: &mut DescriptorEncoder) -> fmt::Result {
    for (name, help, value) in [
        (
            "sluice_worker_usage_flush_failures",
            "Usage flushes that could not store what a partition counted (tried again at the next tick; a failed final one is missing from usage).",
            s.usage_flush_failures,
        ),
        (
            "sluice_worker_alert_publish_failures",
            "Threshold alerts the alerts stream did not acknowledge (published again until it does).",
            s.alert_publish_failures,
        ),
        (
            "sluice_worker_format_refusals",
            "Takeovers refused because a snapshot or journal message is of a newer format than this worker reads (upgrade it).",
            s.format_refusals,
        ),
    ] {
        page::counter(e, name, help, value)?;
    }
    page::family(
        e,
        "sluice_worker_link_up",
        "1 while another region's workers answer over the link, per region this worker has seen (regions only).",
        s.links
            .iter()
            .map(|l| ([("region", l.region.clone())], ConstGauge::new(i64::from(l.up)))),
    )?;
    page::family(
        e,
        "sluice_worker_home_cut_off",
        "1 while the link to a region that is the home of a global policy in force here is down (on_cut decides meanwhile).",
        homes_cut_off(s)
            .into_iter()
            .map(|(region, cut)| ([("region", region)], ConstGauge::new(i64::from(cut)))),
    )
}

/// Each region seen over the link that is the home of a global policy in
/// force on the worker of `s`, and whether its link is down.
fn homes_cut_off(s: &WorkerStatus) -> Vec<(String, bool)> {
    let homes: std::collections::BTreeSet<&str> = s
        .policies
        .iter()
        .filter(|p| p.policy.scope.as_deref() == Some("global"))
        .filter_map(|p| p.policy.home.as_deref())
        .collect();
    s.links
        .iter()
        .filter(|l| homes.contains(l.region.as_str()))
        .map(|l| (l.region.clone(), !l.up))
        .collect()
}

/// Serves `/metrics`, `/livez` and `/readyz` ([`sluice_core::readiness`])
/// on `listener` until the task is dropped; `client` is the worker's NATS
/// connection, whose state `/readyz` reads.
pub async fn serve(
    listener: tokio::net::TcpListener,
    sources: Arc<StatusSources>,
    client: async_nats::Client,
) {
    let ready = {
        let sources = sources.clone();
        move || {
            let connected = client.connection_state() == async_nats::connection::State::Connected;
            let verdict = readiness::worker(&sources.stats.readiness.state(connected));
            let status = StatusCode::from_u16(verdict.http_status())
                .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            async move { (status, JSON, verdict.body()).into_response() }
        }
    };
    let app = Router::new()
        .route("/livez", get(|| async { (JSON, readiness::LIVE_BODY) }))
        .route("/readyz", get(ready))
        .route(
            "/metrics",
            get(move || {
                let sources = sources.clone();
                async move {
                    match render(&sources) {
                        Ok(text) => {
                            ([(header::CONTENT_TYPE, page::CONTENT_TYPE)], text).into_response()
                        }
                        Err(e) => {
                            tracing::error!("cannot render /metrics: {e}");
                            StatusCode::INTERNAL_SERVER_ERROR.into_response()
                        }
                    }
                }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!("metrics server stopped: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_is_cut_off_while_its_link_is_down_and_other_regions_are_not_homes() {
        let s: WorkerStatus = serde_json::from_value(serde_json::json!({
            "worker": "w", "allowed": 0, "denied": 0, "hits": 0, "errors": 0,
            "journal_errors": 0, "partitions": [], "region": "west",
            "links": [
                {"region": "east", "up": false, "last_seen_ms": 1},
                {"region": "north", "up": false, "last_seen_ms": 1},
                {"region": "south", "up": true, "last_seen_ms": 1}
            ],
            "policies": [
                {"name": "g", "from": "bucket", "policy": {"algorithm": "fixed_window",
                 "limits": [{"max": 10, "per": "1m"}], "scope": "global", "home": "east",
                 "regions": ["east", "west", "south"]}},
                {"name": "s", "from": "bucket", "policy": {"algorithm": "fixed_window",
                 "limits": [{"max": 10, "per": "1m"}], "scope": "global", "home": "south",
                 "regions": ["south", "west"]}},
                {"name": "r", "from": "config", "policy": {"algorithm": "gcra",
                 "limits": [{"max": 10, "per": "1s"}]}}
            ]
        }))
        .unwrap();
        assert_eq!(
            homes_cut_off(&s),
            [("east".to_string(), true), ("south".to_string(), false)]
        );
    }
}
