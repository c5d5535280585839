//! # sluice-worker
//!
//! A limiter worker: owns a share of the partitions, answers `rl.allow.<key>`
//! and counts `rl.hit.<key>` for the keys in them, and keeps their counters
//! safe across handovers and crashes. docs/ARCHITECTURE.md tells the whole
//! story ("The path of one request" follows `rl.allow.<key>` through these
//! files; "The worker's files" maps them). The modules, in the order a
//! request meets them:
//!
//! - [`worker`]: [`worker::run`], the one composition root: joins the
//!   fleet, claims and hands over partitions, shuts down cleanly.
//! - [`probe`]: refuses to start when the server's partition mapping differs.
//! - [`store`]: set-up of the buckets and the stream (their names are in
//!   `sluice_core::storage`).
//! - [`lease`]: partition leases in JetStream KV, the fencing token.
//! - [`shard`]: the task of one owned partition: moves its messages, timers
//!   and store calls.
//! - [`owner`]: what a partition's owner keeps and the rules that carry it
//!   through snapshot, replay, takeover and handover; a state machine
//!   without I/O.
//! - [`kept`]: the kinds of state kept beside the counters' values (budget
//!   slices, holds, alerts, ids, the global state), one registration each.
//! - [`snapshot`]: chunked, fenced snapshots in JetStream KV.
//! - [`journal`]: the journal of counted requests (journal mode): its
//!   record, replay, purge.
//! - [`routes`]: the partitions answering now, for worker batches.
//! - [`worker_batch`]: batches for any of the worker's partitions.
//! - [`decide`]: the decision core: an ask in, a reply value and what it
//!   counted out; no NATS, unit-tested with a manual clock.
//! - [`live_policies`]: the policies in force, replaced whole.
//! - [`turn_log`]: what a turn of decisions did: stats, meters, records, usage.
//! - [`counters`]: one partition's counters, in key buckets held by moka.
//! - [`alerting`]: threshold alerts (SPEC §14): each partition's
//!   fired alerts; [`alert_publisher`]: the task that publishes
//!   them off the decision path.
//! - [`reply`]: the one way out: headers, payload, publish.
//! - [`traced`]: with `--otlp-endpoint`, the spans of asks that carry a
//!   W3C `traceparent`, riding on their replies.
//! - [`outbox`]: where answers go; the only place that knows the durability
//!   mode.
//! - [`group_commit`]: the worker's journal writer; answers wait for it.
//! - [`usage`]: usage history (SPEC §9): each partition's ledger in
//!   memory, stored and rolled up, and the usage queries.
//! - [`policy_watch`]: live policies from the `sluice-policies` bucket.
//! - [`stats`]: what the worker and its shards did, for status and metrics.
//! - [`service`]: `$SRV` discovery and the status endpoint.
//! - [`scatter`]: one request, the answers of many within a time.
//! - [`region`]: with regions (SPEC §12), the checks that the worker
//!   runs in its region, its answers to region hellos, and which other
//!   regions the link reaches.
//! - [`metrics`]: the Prometheus `/metrics` page (`--metrics-listen`),
//!   with `/livez` and `/readyz`; [`readiness`]: what `/readyz` reads.
//! - [`fleet`]: the fleet as NATS sees it (`sluice status`, the gateway's
//!   dashboard): owners, snapshot ages, every worker's status.
//! - [`blocking`]: CPU-heavy jobs off the answering thread.
//! - [`answering`]: what the tasks that answer share (shards, worker
//!   batches, usage queries).

pub mod alert_publisher;
pub mod alerting;
pub mod answering;
pub mod blocking;
pub mod counters;
pub mod decide;
pub mod fleet;
pub mod global;
pub mod global_link;
pub mod group_commit;
pub mod journal;
pub mod kept;
pub mod lease;
pub mod live_policies;
pub mod metrics;
pub mod outbox;
pub mod owner;
pub mod policy_watch;
pub mod probe;
pub mod readiness;
pub mod region;
pub mod reply;
pub mod routes;
pub mod scatter;
pub mod servers;
pub mod service;
pub mod shard;
pub mod snapshot;
pub mod stats;
pub mod store;
pub mod traced;
pub mod turn_log;
pub mod usage;
pub mod worker;
pub mod worker_batch;

pub use worker::{run, WorkerOptions};
