//! Counts of what a worker and each of its shards did, for `sluice status`
//! and `/metrics`.
//!
//! Plain atomics, written by the decision core ([`crate::decide`]) once per
//! batch (a [`crate::turn_log::Tally`] gathers a batch's counts first) and read
//! by the status endpoint and the metrics page. They sit apart from the
//! tasks that write them so that the decision core needs none of the
//! worker's NATS state.
//!
//! What only `/metrics` shows ([`Meters`]: decisions by policy, latencies,
//! leases, handovers, snapshots, journal appends) is measured with the
//! Prometheus client library's own counters and histograms, registered on
//! the page by [`crate::metrics`]. A counter is an atomic add; a histogram's
//! observe takes the library's short mutex, so histograms are observed once
//! per batch, lease renewal, snapshot or append, never per decision.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Counters across the worker's partitions.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub allowed: AtomicU64,
    pub denied: AtomicU64,
    pub errors: AtomicU64,
    pub hits: AtomicU64,
    pub journal_errors: AtomicU64,
    /// Usage flushes that could not store what a partition counted (tried
    /// again at the next tick; a failed final one loses it from usage).
    pub usage_flush_failures: AtomicU64,
    /// Threshold alerts the alerts stream did not acknowledge (published
    /// again until it does).
    pub alert_publish_failures: AtomicU64,
    /// Takeovers refused because a snapshot or journal message is of a
    /// newer format than this worker reads.
    pub format_refusals: AtomicU64,
    /// What `/metrics` shows besides the counts above.
    pub meters: Meters,
    /// What `/readyz` reads, marked by the controller.
    pub readiness: crate::readiness::Readiness,
}

impl WorkerStats {
    /// Counts `n` error replies (they have no policy label on the page:
    /// most are refused before a policy is known).
    pub fn add_errors(&self, n: u64) {
        if n > 0 {
            self.errors.fetch_add(n, Ordering::Relaxed);
            self.meters.errors.inc_by(n);
        }
    }

    /// How many decisions of `outcome` under `policy` were counted.
    #[cfg(test)]
    pub fn decisions_of(&self, outcome: Outcome, policy: &str) -> u64 {
        let labels = DecisionLabels {
            outcome,
            policy: policy.to_string(),
        };
        self.meters.decisions.get_or_create(&labels).get()
    }
}

/// How a decision ended, as the `outcome` label of
/// `sluice_worker_decisions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Allowed,
    Denied,
    Hit,
    Error,
}

impl Outcome {
    /// The outcomes counted per policy.
    pub const OF_POLICIES: [Outcome; 3] = [Outcome::Allowed, Outcome::Denied, Outcome::Hit];

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Hit => "hit",
            Outcome::Error => "error",
        }
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DecisionLabels {
    pub outcome: Outcome,
    /// A policy name (bounded: the configured and live policies), or empty
    /// for errors.
    pub policy: String,
}

/// What happened to a partition lease, as the `event` label of
/// `sluice_worker_lease_events_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaseEvent {
    /// Claimed (created) by this worker.
    Acquired,
    /// Extended in time.
    Renewed,
    /// A renewal failed for a transient reason (retried).
    RenewFailed,
    /// Lost: taken by another worker, or not renewed in time.
    Lost,
    /// Given up at a handover.
    Released,
}

impl LeaseEvent {
    const ALL: [LeaseEvent; 5] = [
        LeaseEvent::Acquired,
        LeaseEvent::Renewed,
        LeaseEvent::RenewFailed,
        LeaseEvent::Lost,
        LeaseEvent::Released,
    ];

    fn as_str(self) -> &'static str {
        match self {
            LeaseEvent::Acquired => "acquired",
            LeaseEvent::Renewed => "renewed",
            LeaseEvent::RenewFailed => "renew_failed",
            LeaseEvent::Lost => "lost",
            LeaseEvent::Released => "released",
        }
    }
}

impl EncodeLabelValue for LeaseEvent {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct LeaseLabels {
    pub event: LeaseEvent,
}

/// Durations from 100 µs to ~26 s, ×2 each bucket.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 19))
}

/// Measured with the Prometheus client library; registered on the page by
/// [`crate::metrics`].
#[derive(Debug)]
pub struct Meters {
    /// Decisions by outcome and policy. Allowed, denied and hit are counted
    /// through [`crate::turn_log::PolicyMeters`]' handles, errors through
    /// [`Meters::errors`].
    pub decisions: Family<DecisionLabels, Counter>,
    /// `decisions{outcome="error",policy=""}`.
    pub errors: Counter,
    /// From taking a batch's first message off the subscription to
    /// publishing its last reply, per batch (seconds).
    pub decision_latency: Histogram,
    pub lease_events: Family<LeaseLabels, Counter>,
    /// The counters of `lease_events`, in [`LeaseEvent::ALL`] order.
    by_lease_event: [Counter; 5],
    /// From a stop request to the lease released, per handover (seconds).
    pub handover_duration: Histogram,
    /// From the lease acquired to answering (restore and replay), per
    /// takeover (seconds).
    pub takeover_duration: Histogram,
    /// Encoding and writing one snapshot (seconds).
    pub snapshot_duration: Histogram,
    /// Encoded size of each snapshot written (bytes).
    pub snapshot_bytes: Histogram,
    pub snapshot_failures: Counter,
    /// One journal append, from publish to JetStream's ack (seconds).
    pub journal_append_duration: Histogram,
    /// Local budgets: slices granted (of at least one unit).
    pub budget_slices: Counter,
    /// Local budgets: units taken from keys' states for slices.
    pub budget_sliced_units: Counter,
    /// Local budgets: units of slices given back unspent.
    pub budget_returned_units: Counter,
    /// Local budgets: unspent units of refunds that no slice of this owner
    /// explained, not given back.
    pub budget_unmatched_units: Counter,
    /// Asks that repeated a remembered id (SPEC §16).
    pub ask_repeats: Counter,
    /// Ids forgotten before their time to keep `max_ids`.
    pub ids_forgotten_early: Counter,
}

impl Default for Meters {
    fn default() -> Meters {
        let decisions = Family::<DecisionLabels, Counter>::default();
        let errors = decisions.get_or_create_owned(&DecisionLabels {
            outcome: Outcome::Error,
            policy: String::new(),
        });
        let lease_events = Family::<LeaseLabels, Counter>::default();
        // Every event shows from the start, at 0.
        let by_lease_event =
            LeaseEvent::ALL.map(|event| lease_events.get_or_create_owned(&LeaseLabels { event }));
        Meters {
            decisions,
            errors,
            decision_latency: duration_histogram(),
            lease_events,
            by_lease_event,
            handover_duration: duration_histogram(),
            takeover_duration: duration_histogram(),
            snapshot_duration: duration_histogram(),
            // 256 B to 1 GiB, ×4 each bucket.
            snapshot_bytes: Histogram::new(exponential_buckets(256.0, 4.0, 12)),
            snapshot_failures: Counter::default(),
            journal_append_duration: duration_histogram(),
            budget_slices: Counter::default(),
            budget_sliced_units: Counter::default(),
            budget_returned_units: Counter::default(),
            budget_unmatched_units: Counter::default(),
            ask_repeats: Counter::default(),
            ids_forgotten_early: Counter::default(),
        }
    }
}

impl Meters {
    /// Counts a lease event (rare: a few per partition and lease ttl).
    pub fn lease(&self, event: LeaseEvent) {
        self.by_lease_event[event as usize].inc();
    }
}

/// Seconds, as the duration histograms observe them.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// What the worker made of the policy bucket, for `sluice status`.
#[derive(Debug, Default)]
pub struct PolicyStatus {
    /// The bucket revision last applied (0: none yet).
    pub revision: AtomicU64,
    /// Values refused so far (each kept the previous version in force).
    pub refusals: AtomicU64,
    /// Keys whose value in the bucket is refused now, with why.
    pub refused: Mutex<BTreeMap<String, String>>,
}

/// Facts about one owned partition.
#[derive(Debug, Default)]
pub struct ShardStats {
    pub decisions: AtomicU64,
    pub changes: AtomicU64,
    pub last_snapshot_ms: AtomicU64,
    pub keys: AtomicU64,
    /// Live holds, at the last snapshot (or takeover).
    pub holds: AtomicU64,
    pub answering: AtomicBool,
}

impl ShardStats {
    /// Adds `n` counter changes, made by the shard's task or a worker
    /// batch's. Release, paired with [`ShardStats::changes`]: a snapshot that
    /// sees these changes counted also sees the counters they wrote.
    pub fn add_changes(&self, n: u64) {
        if n > 0 {
            self.changes.fetch_add(n, Ordering::Release);
        }
    }

    /// The counter changes so far.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }
}

/// The stats of this worker's shards by partition, shared with the status
/// endpoint and the metrics page (read-only there).
pub type ShardsView = Arc<Mutex<BTreeMap<u32, Arc<ShardStats>>>>;
