//! # sluice-core
//!
//! The pure core of sluice, a distributed rate limiter on NATS. Everything
//! here is free of I/O and takes time as an argument, so it can be tested
//! exactly and shared by the worker, the client library and the gateway.
//!
//! The modules in the order an ask meets them (subject, key, body, the
//! rules, the policy and its algorithm, the key's state), then what the
//! processes around it are configured and stored with:
//!
//! - [`subject`]: every NATS subject, built and parsed; the [`subject::Verb`]s;
//!   the mapping probe's pure part.
//! - [`partition`]: the key → partition hash nats-server computes.
//! - [`conformance`]: the vectors other clients check themselves against
//!   (`docs/conformance/`), generated from the modules they cover.
//! - [`key`]: percent-encoding of keys into one NATS subject token.
//! - [`wire`]: request bodies, decision and error replies, RateLimit headers,
//!   batches (split by what they hold under `wire/`).
//! - [`ask`]: the rules an ask passes before it touches a counter, and what it
//!   does to it; the same at a worker and in a client's local limiter.
//! - [`ask_ids`]: idempotent asks (SPEC §16): the ids an owner remembers so
//!   that a retried ask counts once.
//! - [`policies`]: the policies in force: the file's overlaid by the
//!   `sluice-policies` bucket (SPEC §7).
//! - [`policy`]: [`policy::Policy`] (an algorithm plus limits that must all
//!   hold), [`policy::Decision`], per-key [`policy::KeyState`].
//! - [`limit`]: what a policy is made of ([`limit::Limit`], the algorithm's
//!   name, the decision), apart so that algorithms and budgets need no policy.
//! - [`algorithm`]: fixed window, sliding log, sliding window, token bucket, GCRA.
//! - [`wait`]: waiting instead of denying (SPEC §18): an ask of a token
//!   bucket or GCRA allowed now for the earliest moment it fits.
//! - [`penalty`]: penalties (SPEC §18): a denial blocks the key for its
//!   policy's `block_for`, the block kept in the key's state.
//! - [`calendar`]: a fixed window's calendar periods (day, week, month of a
//!   time zone), through daylight saving and short months.
//! - [`packed`]: a key's state packed into a few bytes, as a worker holds it.
//! - [`time`]: nanosecond timestamps and the [`time::Clock`] seam.
//! - [`budget`]: local budgets for hot keys: slices a key's owner grants a
//!   client to decide from without a round trip, and what is exact with them.
//! - [`holds`]: reserve now, settle later; concurrency slots (SPEC §13).
//! - [`alerts`]: threshold alerts (SPEC §14): which thresholds a
//!   decision reached, the message, the alerts an owner fired.
//! - [`outstanding`]: what an owner granted and has not had back (slices
//!   and holds), in one table that travels with the counters.
//! - [`usage`]: usage history (SPEC §9), split by job under `usage/`:
//!   tiers, counts and the top-N merge, stored records, which buckets answer
//!   a range and the checks of a query.
//! - [`config`]: the TOML config of SPEC §4, validated; one policy
//!   table alone ([`config::PolicyTable`]), as SPEC §7 stores it in JSON.
//! - [`duration`]: durations as the config writes them (`"10s"`), parsed and
//!   formatted, for the config and usage history's tiers.
//! - [`nats_config`]: the nats-server config with the partition mapping.
//! - [`storage`]: names of the JetStream buckets, keys and streams.
//! - [`replication`]: how many JetStream replicas keep them, matched to
//!   the NATS cluster unless `--replicas` says.
//! - [`format`]: the format versions of snapshots, journal messages and
//!   lease values, so a worker refuses state newer than it reads.
//! - [`assignment`]: which live worker owns which partition (balanced rendezvous).
//! - [`metrics`]: `/metrics` pages through the Prometheus client library.
//! - [`readiness`]: whether a worker or a gateway is ready (`/readyz`).
//!
//! ```
//! use sluice_core::policy::Policy;
//! use sluice_core::time::Nanos;
//!
//! let policy = Policy::builtin_default(); // 15 per second
//! let mut state = policy.new_state();
//! let now = Nanos::from_secs(1_000);
//! let allowed = (0..16).filter(|_| policy.decide(&mut state, now, 1).allowed).count();
//! assert_eq!(allowed, 15);
//! ```

pub mod alerts;
pub mod algorithm;
pub mod ask;
pub mod ask_ids;
pub mod assignment;
pub mod budget;
pub mod calendar;
pub mod config;
pub mod conformance;
pub mod duration;
pub mod format;
pub mod group;
pub mod holds;
pub mod key;
pub mod limit;
pub mod metrics;
pub mod nats_config;
pub mod outstanding;
pub mod packed;
pub mod partition;
pub mod penalty;
pub mod policies;
pub mod policy;
pub mod readiness;
pub mod region;
pub mod replication;
pub mod storage;
pub mod subject;
pub mod time;
pub mod usage;
pub mod wait;
pub mod wire;
