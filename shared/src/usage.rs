//! Usage history (SPEC §9): how much each key used and was denied, in
//! buckets of several tiers (by default 1 minute kept a day, 5 minutes kept
//! a week, 1 hour kept a month, 1 day kept two years).
//!
//! The pure part lives here: the tiers and their buckets, the record one
//! partition's bucket is stored as, which stored buckets answer a range
//! ([`cover`]), the query's checks ([`resolve_series`], [`resolve_top`]),
//! and the top-N merge. The worker records, stores and reads
//! (`services/worker/src/usage/`); docs/USAGE.md has the design and why.
//!
//! Why a record holds one partition's bucket (every key of it) rather than
//! one key's: nats-server keeps an in-memory index entry per subject, and a
//! subject per key and minute would be 1440 subjects a day per active key
//! (100k keys: 144M subjects). Per partition, a day of the finest tier is
//! 1440 subjects per partition, whatever the number of keys, and the owner
//! writes each bucket it touched once per flush, so the write rate does not
//! grow with the request rate either.
//!
//! Why records hold absolute counts, not increments: a reader needs one
//! record per bucket, and a new owner continues a bucket by reading it
//! first. The owner keeps in memory only what it counted since its last
//! write and adds that to the stored record ([`add_to_record`]); each write
//! is marked so that a retried one is recognised, not added twice (the
//! worker's `ledger` module says how). Coarser
//! tiers are rollups, recomputed from the finer tier's stored records once
//! a bucket has ended: a rollup is an exact sum of the finer tier by
//! construction, and recomputing one is as idempotent as writing it.
//!
//! The files below are split by job, and everything is used through the
//! names re-exported here (`sluice_core::usage::Tier`, ...):
//!
//! - `usage/tiers.rs`: [`Tier`] and [`UsageConfig`], the tiers and their check.
//! - `usage/counts.rs`: [`Counts`] and [`By`], which keys a top query ranks
//!   ([`TopFilter`]), and the top-N merge ([`top`]).
//! - `usage/record.rs`: [`BucketRecord`], a partition's stored bucket, read,
//!   visited and added to ([`add_to_record`]).
//! - `usage/range.rs`: which buckets answer a range ([`cover`]) and the
//!   checks of a query ([`resolve_series`], [`resolve_top`]).
//! - `usage/ranked.rs`: a bucket's counts ranked once ([`RankedBucket`])
//!   and the top N over several by the threshold algorithm ([`top_of`]).

mod counts;
mod range;
mod ranked;
mod record;
mod tiers;

pub use counts::{top, By, Counts, TopFilter};
pub use range::{
    cover, resolve_series, resolve_top, BucketId, Part, QueryError, SeriesPlan, TopPlan,
    MAX_POINTS, MAX_TOP,
};
pub use ranked::{top_of, KeyPolicy, RankedBucket, TopStats};
pub use record::{add_to_record, visit_record, BucketRecord, RecordError, RecordSum};
pub use tiers::{Tier, UsageConfig, MAX_TIERS};
