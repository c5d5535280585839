//! # sluice-worker
//!
//! A limiter worker: owns a share of the partitions, answers `rl.allow.<key>`
//! and counts `rl.hit.<key>` for the keys in them, and keeps their counters
//! safe across handovers and crashes. docs/ARCHITECTURE.md tells the whole
//! story ("The path of one request" follows `rl.allow.<key>` through these
//! files); the modules, from the outside in:
//!
//! - [`worker`]: [`worker::run`], the controller that joins the fleet, claims
//!   and hands over partitions, and shuts down cleanly.
//! - [`probe`]: refuses to start when the server's partition mapping differs.
//! - [`shared`]: what every task of the worker shares.
//! - [`shard`]: the owner task of one partition (restore, answer, renew,
//!   snapshot, hand over).
//! - [`worker_batch`]: batches for any of the worker's partitions, decided on
//!   the counters [`routes`] finds.
//! - [`decide`]: the decision core: an ask in, a reply value and what it
//!   counted out; no NATS, unit-tested with a manual clock.
//! - [`reply`]: the one way out: headers, payload, publish.
//! - [`outbox`]: where answers go; the only place that knows the durability
//!   mode.
//! - [`policy_watch`]: live policies from the `sluice-policies` bucket.
//! - [`counters`]: one partition's counters, in key buckets held by moka.
//! - [`ledger`]: one partition's usage (CONTRACT §9) in memory, minute by
//!   minute, until stored.
//! - [`stats`]: what the worker and its shards did, for status and metrics.
//! - [`lease`]: partition leases in JetStream KV, the fencing token.
//! - [`snapshot`]: chunked, fenced snapshots in JetStream KV.
//! - [`journal`]: the journal of counted requests (journal mode): format,
//!   replay, purge.
//! - [`group_commit`]: the worker's journal writer; answers wait for it.
//! - [`store`]: set-up of the buckets and the stream (their names are in
//!   `sluice_core::storage`).
//! - [`service`]: `$SRV` discovery and the status endpoint.
//! - [`metrics`]: the Prometheus `/metrics` page (`--metrics-listen`).
//! - [`usage`]: usage history (CONTRACT §9): the ledgers stored and rolled
//!   up per partition, and the usage queries.

pub mod blocking;
pub mod counters;
pub mod decide;
pub mod group_commit;
pub mod journal;
pub mod lease;
pub mod ledger;
pub mod metrics;
pub mod outbox;
pub mod policy_watch;
pub mod probe;
pub mod reply;
pub mod routes;
pub mod service;
pub mod shard;
pub mod shared;
pub mod snapshot;
pub mod stats;
pub mod store;
pub mod usage;
pub mod worker;
pub mod worker_batch;

pub use worker::{run, WorkerOptions};
