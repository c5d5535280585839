//! Usage history (CONTRACT §9): how much each key used and was denied, in
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

use crate::duration::format_duration;
use crate::format::{self, NewerFormat};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The most tiers a config may have.
pub const MAX_TIERS: usize = 8;
/// The largest `n` of a top query.
pub const MAX_TOP: usize = 1000;
/// The most points one series reply holds.
pub const MAX_POINTS: usize = 10_000;

/// One tier: buckets of `step`, kept `keep`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tier {
    pub step: Duration,
    pub keep: Duration,
}

impl Tier {
    pub fn step_ms(&self) -> u64 {
        self.step.as_millis() as u64
    }

    pub fn keep_ms(&self) -> u64 {
        self.keep.as_millis() as u64
    }

    /// The step as queries name it (`1m`, `5m`, `1h`, `1d`).
    pub fn name(&self) -> String {
        format_duration(self.step)
    }

    /// The start of the bucket holding `t_ms`.
    pub fn bucket_of(&self, t_ms: u64) -> u64 {
        t_ms - t_ms % self.step_ms()
    }
}

/// `[usage]` of the config (CONTRACT §4, §9), checked: see
/// [`UsageConfig::check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageConfig {
    /// `false`: nothing is recorded and the usage queries are refused.
    pub enabled: bool,
    /// Finest first; each step a whole multiple of the one before.
    pub tiers: Vec<Tier>,
}

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

impl Default for UsageConfig {
    fn default() -> UsageConfig {
        UsageConfig {
            enabled: true,
            tiers: vec![
                Tier {
                    step: MINUTE,
                    keep: DAY,
                },
                Tier {
                    step: 5 * MINUTE,
                    keep: 7 * DAY,
                },
                Tier {
                    step: 60 * MINUTE,
                    keep: 31 * DAY,
                },
                Tier {
                    step: DAY,
                    keep: 730 * DAY,
                },
            ],
        }
    }
}

impl UsageConfig {
    /// Why `tiers` cannot be used, if they cannot: 1 to [`MAX_TIERS`],
    /// the first step whole seconds, each next step a whole multiple of
    /// the one before (so a rollup is a sum of whole buckets), each tier
    /// kept at least one step, and a tier that is rolled up kept at least
    /// twice the next step (its records must outlive the rollup of the
    /// bucket they are in, even after a takeover).
    pub fn check(tiers: &[Tier]) -> Result<(), String> {
        if tiers.is_empty() || tiers.len() > MAX_TIERS {
            return Err(format!(
                "must list 1 to {MAX_TIERS} tiers, found {}",
                tiers.len()
            ));
        }
        let first = tiers[0].step;
        if first < Duration::from_secs(1) || first.subsec_nanos() != 0 {
            return Err(format!(
                "the first tier's step must be whole seconds, at least 1s, found {:?}",
                format_duration(first)
            ));
        }
        for (i, tier) in tiers.iter().enumerate() {
            if tier.keep < tier.step {
                return Err(format!(
                    "tier {i} ({}) must be kept at least one step, found keep = {:?}",
                    tier.name(),
                    format_duration(tier.keep)
                ));
            }
            if let Some(next) = tiers.get(i + 1) {
                if next.step <= tier.step || next.step_ms() % tier.step_ms() != 0 {
                    return Err(format!(
                        "tier {} ({}) must have a step that is a whole multiple of tier {i}'s ({}), larger than it",
                        i + 1,
                        next.name(),
                        tier.name()
                    ));
                }
                if tier.keep < 2 * next.step {
                    return Err(format!(
                        "tier {i} ({}) must be kept at least twice the next tier's step ({}) so that it can be rolled up, found keep = {:?}",
                        tier.name(),
                        next.name(),
                        format_duration(tier.keep)
                    ));
                }
            }
        }
        Ok(())
    }

    /// The tier whose step is called `name` (`1m`, ...).
    pub fn tier_named(&self, name: &str) -> Option<usize> {
        self.tiers.iter().position(|t| t.name() == name)
    }

    /// The step names, for error messages (`1m, 5m, 1h, 1d`).
    pub fn step_names(&self) -> String {
        self.tiers
            .iter()
            .map(Tier::name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The finest tier that still holds `t_ms` at `now_ms` (the coarsest if
    /// none does: nothing is older than it keeps).
    pub fn finest_holding(&self, t_ms: u64, now_ms: u64) -> usize {
        self.tiers
            .iter()
            .position(|t| t_ms >= now_ms.saturating_sub(t.keep_ms()))
            .unwrap_or(self.tiers.len() - 1)
    }
}

/// What a key used and was denied, in units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u64, u64)", into = "(u64, u64)")]
pub struct Counts {
    /// Units consumed: by allowed asks and by hits.
    pub used: u64,
    /// Units of denied asks.
    pub denied: u64,
}

impl From<(u64, u64)> for Counts {
    fn from((used, denied): (u64, u64)) -> Counts {
        Counts { used, denied }
    }
}

impl From<Counts> for (u64, u64) {
    fn from(c: Counts) -> (u64, u64) {
        (c.used, c.denied)
    }
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.used = self.used.saturating_add(other.used);
        self.denied = self.denied.saturating_add(other.denied);
    }

    pub fn is_zero(&self) -> bool {
        self.used == 0 && self.denied == 0
    }

    /// The count a top query ranks by.
    pub fn of(&self, by: By) -> u64 {
        match by {
            By::Used => self.used,
            By::Denied => self.denied,
        }
    }
}

/// Which count a top query ranks by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    #[default]
    Used,
    Denied,
}

/// One partition's usage in one bucket of one tier, as stored: by policy,
/// then by key token. ([`RecordSum`] writes the same bytes from borrowed
/// counts.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    /// Format ([`format::USAGE`]).
    pub v: u32,
    /// Journal mode: the journal's stream sequence up to which every record
    /// of the partition is in these counts (a new owner replaying the
    /// journal adds only what is past it). 0 otherwise.
    pub w: u64,
    pub keys: BTreeMap<String, BTreeMap<String, Counts>>,
}

/// Why a stored record cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Newer(#[from] NewerFormat),
    #[error(
        "a usage record that is not one ({0}); was it written by something other than sluice?"
    )]
    Malformed(String),
}

impl BucketRecord {
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("a usage record always encodes")
    }

    pub fn decode(bytes: &[u8]) -> Result<BucketRecord, RecordError> {
        #[derive(Deserialize)]
        struct Version {
            v: u32,
        }
        let version: Version =
            rmp_serde::from_slice(bytes).map_err(|e| RecordError::Malformed(e.to_string()))?;
        format::check(
            format::USAGE,
            || "a usage record".to_string(),
            u64::from(version.v),
        )?;
        rmp_serde::from_slice(bytes).map_err(|e| RecordError::Malformed(e.to_string()))
    }

    /// The counts of one key under one policy (zero when absent).
    pub fn counts(&self, policy: &str, key: &str) -> Counts {
        self.keys
            .get(policy)
            .and_then(|keys| keys.get(key))
            .copied()
            .unwrap_or_default()
    }
}

/// Hands every `(policy, key, counts)` of an encoded [`BucketRecord`] to
/// `f`, without building the record: a query over a month reads hundreds
/// of records with thousands of keys each, and wants one key (or a sum).
/// The format is checked first (`v` leads the map, as
/// [`BucketRecord::encode`] writes it). Returns the record's watermark
/// (`w`).
pub fn visit_record<'a>(
    bytes: &'a [u8],
    mut f: impl FnMut(&'a str, &'a str, Counts),
) -> Result<u64, RecordError> {
    use crate::wire::msgpack::{Reader, Value};
    let malformed = |what: &str| RecordError::Malformed(what.to_string());
    let mut r = Reader::new(bytes);
    let mut next = move || r.next().map_err(|e| malformed(e.sentence()));
    let Value::Map(fields) = next()? else {
        return Err(malformed("not a map"));
    };
    let mut versioned = false;
    let mut watermark = 0;
    for _ in 0..fields {
        let field = match next()? {
            Value::Str(s) => s,
            _ => return Err(malformed("a field name that is not a string")),
        };
        match (field, versioned) {
            ("v", false) => {
                let Value::Uint(v) = next()? else {
                    return Err(malformed("v is not a number"));
                };
                format::check(format::USAGE, || "a usage record".to_string(), v)?;
                versioned = true;
            }
            ("w", true) => {
                let Value::Uint(w) = next()? else {
                    return Err(malformed("w is not a number"));
                };
                watermark = w;
            }
            ("keys", true) => {
                let Value::Map(policies) = next()? else {
                    return Err(malformed("keys is not a map"));
                };
                for _ in 0..policies {
                    let (Value::Str(policy), Value::Map(keys)) = (next()?, next()?) else {
                        return Err(malformed("a policy's keys are not a map"));
                    };
                    for _ in 0..keys {
                        let (
                            Value::Str(key),
                            Value::Array(2),
                            Value::Uint(used),
                            Value::Uint(denied),
                        ) = (next()?, next()?, next()?, next()?)
                        else {
                            return Err(malformed("a key's counts are not [used, denied]"));
                        };
                        f(policy, key, Counts { used, denied });
                    }
                }
            }
            _ => return Err(malformed("an unexpected field, or no format version first")),
        }
    }
    Ok(watermark)
}

/// A sum of counts borrowed from encoded records and from memory, to be
/// encoded as one record (a rollup, or a stored minute plus what its owner
/// counted since): no string is copied.
///
/// The counts are gathered in one vector and sorted once when encoded, not
/// kept in a map as they come: a stored record is already in key order, so
/// that sort is one merge pass with the few keys added to it, and a rollup
/// merges its finer records' runs. A map's insert per key (a search of
/// string compares down the tree) made a flush of a minute of 30,000 keys
/// the answering thread's largest cost in a flood of new keys
/// (docs/BENCHMARKS.md, "A flood of new keys").
#[derive(Debug)]
pub struct RecordSum<'a> {
    w: u64,
    entries: Vec<(&'a str, &'a str, Counts)>,
}

impl<'a> RecordSum<'a> {
    /// An empty sum with watermark `w`.
    pub fn new(w: u64) -> Self {
        RecordSum {
            w,
            entries: Vec::new(),
        }
    }

    pub fn add_counts(&mut self, policy: &'a str, key: &'a str, counts: Counts) {
        self.entries.push((policy, key, counts));
    }

    /// Adds every count of an encoded record and keeps the larger watermark.
    pub fn add_encoded(&mut self, bytes: &'a [u8]) -> Result<(), RecordError> {
        let entries = &mut self.entries;
        let w = visit_record(bytes, |policy, key, counts| {
            entries.push((policy, key, counts))
        })?;
        self.w = self.w.max(w);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The record, encoded as [`BucketRecord::encode`] encodes the same
    /// counts.
    pub fn encode(mut self) -> Vec<u8> {
        // Stable and adaptive: runs already in order are merged, not sorted.
        self.entries.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        self.entries.dedup_by(|next, kept| {
            let same = (next.0, next.1) == (kept.0, kept.1);
            if same {
                kept.2.add(next.2);
            }
            same
        });
        let policies: Vec<&[(&str, &str, Counts)]> =
            self.entries.chunk_by(|a, b| a.0 == b.0).collect();
        let record = SortedRecord {
            v: format::USAGE,
            w: self.w,
            keys: Policies(&policies),
        };
        rmp_serde::to_vec_named(&record).expect("a usage record always encodes")
    }
}

/// A record's fields as [`BucketRecord`] has them, over sorted counts
/// with no key twice: serialized the same way, without building the maps.
#[derive(Serialize)]
struct SortedRecord<'s, 'a> {
    v: u32,
    w: u64,
    keys: Policies<'s, 'a>,
}

/// Counts grouped by policy, each group sorted by key.
struct Policies<'s, 'a>(&'s [&'s [(&'a str, &'a str, Counts)]]);

/// One policy's counts, sorted by key.
struct Keys<'s, 'a>(&'s [(&'a str, &'a str, Counts)]);

impl Serialize for Policies<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|group| (group[0].0, Keys(group))))
    }
}

impl Serialize for Keys<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(_, key, counts)| (key, counts)))
    }
}

/// The record holding the counts of `stored` (an encoded record; `None`:
/// nothing stored yet) plus every count of `more`, encoded, with the larger
/// of the two watermarks. The stored keys are borrowed, not copied: an
/// owner adds what it counted since its last write to a record of every
/// key of the partition's minute.
pub fn add_to_record<'a>(
    stored: Option<&'a [u8]>,
    w: u64,
    more: impl IntoIterator<Item = (&'a str, &'a str, Counts)>,
) -> Result<Vec<u8>, RecordError> {
    let mut sum = RecordSum::new(w);
    if let Some(bytes) = stored {
        sum.add_encoded(bytes)?;
    }
    for (policy, key, counts) in more {
        sum.add_counts(policy, key, counts);
    }
    Ok(sum.encode())
}

/// A bucket of a tier: `(tier index, start in ms)`.
pub type BucketId = (usize, u64);

/// The buckets whose sum is `[from_ms, to_ms)` (both aligned to the finest
/// step), coarsest first where a whole bucket fits and `usable` says its
/// stored record is final; the rest from finer tiers, down to the finest,
/// whose buckets are always usable (absent is zero). `tier` is the
/// coarsest tier to use.
pub fn cover(
    tiers: &[Tier],
    tier: usize,
    from_ms: u64,
    to_ms: u64,
    usable: &dyn Fn(BucketId) -> bool,
) -> Vec<BucketId> {
    let mut out = Vec::new();
    cover_into(tiers, tier, from_ms, to_ms, usable, &mut out);
    out
}

fn cover_into(
    tiers: &[Tier],
    tier: usize,
    from_ms: u64,
    to_ms: u64,
    usable: &dyn Fn(BucketId) -> bool,
    out: &mut Vec<BucketId>,
) {
    if from_ms >= to_ms {
        return;
    }
    let step = tiers[tier].step_ms();
    if tier == 0 {
        let mut t = from_ms - from_ms % step;
        while t < to_ms {
            out.push((0, t));
            t += step;
        }
        return;
    }
    let first = from_ms.div_ceil(step) * step;
    let last = to_ms - to_ms % step;
    if first >= last {
        cover_into(tiers, tier - 1, from_ms, to_ms, usable, out);
        return;
    }
    cover_into(tiers, tier - 1, from_ms, first, usable, out);
    let mut t = first;
    while t < last {
        if usable((tier, t)) {
            out.push((tier, t));
        } else {
            cover_into(tiers, tier - 1, t, t + step, usable, out);
        }
        t += step;
    }
    cover_into(tiers, tier - 1, last, to_ms, usable, out);
}

/// Why a usage or top query is refused (400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueryError(pub String);

/// One span of a series reply and the step its points have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub from_ms: u64,
    pub to_ms: u64,
    pub step_ms: u64,
}

/// A series query, checked and laid out: the points to compute, each a
/// bucket of a tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesPlan {
    /// The step asked for (or chosen): the finest part's.
    pub step_ms: u64,
    /// Oldest first; one per tier the range needs.
    pub parts: Vec<Part>,
    /// Every point, oldest first.
    pub points: Vec<BucketId>,
}

/// Checks a series query and lays it out at `now_ms`. `from`/`to` default
/// to the last hour; `step` to the finest tier that still holds `from`.
/// The part of the range older than the step's tier keeps is answered by
/// the finest coarser tier that still holds it (its own part, with its own
/// step); what is older than every tier keeps is left out.
pub fn resolve_series(
    config: &UsageConfig,
    now_ms: u64,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    step: Option<&str>,
) -> Result<SeriesPlan, QueryError> {
    let (from_ms, to_ms) = range(now_ms, from_ms, to_ms)?;
    let tiers = &config.tiers;
    let chosen = match step {
        Some(name) => config.tier_named(name).ok_or_else(|| {
            QueryError(format!(
                "step {name:?} is not one of the usage tiers: {}",
                config.step_names()
            ))
        })?,
        None => config.finest_holding(from_ms, now_ms),
    };
    // Newest part first: the chosen tier from the range's end back as far
    // as it keeps; then each coarser tier for what is older, from a bucket
    // boundary of its own step, so the parts meet without a gap.
    let mut parts = Vec::new();
    let mut points = Vec::new();
    let mut end = to_ms.div_ceil(tiers[chosen].step_ms()) * tiers[chosen].step_ms();
    for (tier, t) in tiers.iter().enumerate().skip(chosen) {
        let step = t.step_ms();
        end = end.div_ceil(step) * step;
        let wanted = t.bucket_of(from_ms);
        let oldest = now_ms.saturating_sub(t.keep_ms()).div_ceil(step) * step;
        let next = tiers.get(tier + 1);
        let (start, older_left) = match next {
            Some(next) if wanted < oldest => {
                (oldest.div_ceil(next.step_ms()) * next.step_ms(), true)
            }
            _ => (wanted.max(oldest), false),
        };
        let start = start.min(end);
        if start < end {
            let mine: Vec<BucketId> = (start..end)
                .step_by(step as usize)
                .map(|b| (tier, b))
                .collect();
            points.splice(0..0, mine);
            parts.insert(
                0,
                Part {
                    from_ms: start,
                    to_ms: end,
                    step_ms: step,
                },
            );
            if points.len() > MAX_POINTS {
                return Err(QueryError(format!(
                    "the range holds more than {MAX_POINTS} points at step {}; ask for a coarser step or a shorter range",
                    t.name()
                )));
            }
        }
        if !older_left {
            break;
        }
        end = start;
    }
    Ok(SeriesPlan {
        step_ms: tiers[chosen].step_ms(),
        parts,
        points,
    })
}

/// A top query's range, checked and aligned: from the start of the finest
/// step that still holds `from` to the end of the finest step holding `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopPlan {
    pub from_ms: u64,
    pub to_ms: u64,
    pub n: usize,
    pub by: By,
}

/// Checks a top query at `now_ms` (`from`/`to` default to the last hour;
/// `n` to 10, at most [`MAX_TOP`]).
pub fn resolve_top(
    config: &UsageConfig,
    now_ms: u64,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    n: Option<u64>,
    by: By,
) -> Result<TopPlan, QueryError> {
    let (from_ms, to_ms) = range(now_ms, from_ms, to_ms)?;
    let n = n.unwrap_or(10);
    if n == 0 || n > MAX_TOP as u64 {
        return Err(QueryError(format!(
            "n must be from 1 to {MAX_TOP}, found {n}"
        )));
    }
    let holding = &config.tiers[config.finest_holding(from_ms, now_ms)];
    let finest = &config.tiers[0];
    Ok(TopPlan {
        from_ms: holding.bucket_of(from_ms),
        to_ms: to_ms.div_ceil(finest.step_ms()) * finest.step_ms(),
        n: n as usize,
        by,
    })
}

/// The default range (the last hour) and the one check every range passes.
fn range(now_ms: u64, from_ms: Option<u64>, to_ms: Option<u64>) -> Result<(u64, u64), QueryError> {
    let to_ms = to_ms.unwrap_or(now_ms);
    let from_ms = from_ms.unwrap_or(to_ms.saturating_sub(3_600_000));
    if from_ms > to_ms {
        return Err(QueryError(format!(
            "from_ms ({from_ms}) is after to_ms ({to_ms})"
        )));
    }
    Ok((from_ms, to_ms))
}

/// The `n` largest of `totals` by `by` (ties by key, so the answer does not
/// depend on the order totals come in); zero totals are left out.
pub fn top<K: Ord + Clone>(
    totals: impl IntoIterator<Item = (K, Counts)>,
    n: usize,
    by: By,
) -> Vec<(K, Counts)> {
    let mut all: Vec<(K, Counts)> = totals.into_iter().filter(|(_, c)| c.of(by) > 0).collect();
    all.sort_by(|(ka, a), (kb, b)| b.of(by).cmp(&a.of(by)).then_with(|| ka.cmp(kb)));
    all.truncate(n);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 60_000;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;

    fn tiers() -> Vec<Tier> {
        UsageConfig::default().tiers
    }

    #[test]
    fn the_default_tiers_pass_their_own_check_and_bad_ones_say_why() {
        assert_eq!(UsageConfig::check(&tiers()), Ok(()));
        let t = |step: u64, keep: u64| Tier {
            step: Duration::from_millis(step),
            keep: Duration::from_millis(keep),
        };
        for (bad, says) in [
            (vec![], "1 to 8"),
            (vec![t(500, D)], "whole seconds"),
            (vec![t(2 * M, D), t(3 * M, D)], "whole multiple"),
            (vec![t(5 * M, D), t(M, D)], "whole multiple"),
            (vec![t(M, 30_000)], "at least one step"),
            (vec![t(M, 5 * M), t(5 * M, D)], "twice the next"),
        ] {
            let e = UsageConfig::check(&bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_record_round_trips_and_a_newer_one_is_refused() {
        let mut r = BucketRecord {
            v: format::USAGE,
            w: 7,
            ..Default::default()
        };
        r.keys
            .entry("default".into())
            .or_default()
            .insert("alice".into(), Counts { used: 3, denied: 1 });
        let back = BucketRecord::decode(&r.encode()).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            back.counts("default", "alice"),
            Counts { used: 3, denied: 1 }
        );
        assert_eq!(back.counts("default", "bob"), Counts::default());
        r.v = format::USAGE + 1;
        assert!(matches!(
            BucketRecord::decode(&r.encode()),
            Err(RecordError::Newer(_))
        ));
        assert!(matches!(
            BucketRecord::decode(b"\xc1"),
            Err(RecordError::Malformed(_))
        ));
    }

    #[test]
    fn a_visit_sees_what_decoding_sees_and_refuses_the_same() {
        let mut r = BucketRecord {
            v: format::USAGE,
            w: 3,
            ..Default::default()
        };
        for (policy, key, used, denied) in [
            ("a", "k1", 1, 0),
            ("a", "k2", 300, 7),
            ("b", "k1", u64::MAX, 1),
        ] {
            r.keys
                .entry(policy.into())
                .or_default()
                .insert(key.into(), Counts { used, denied });
        }
        let mut seen = Vec::new();
        let bytes = r.encode();
        let w = visit_record(&bytes, |p, k, c| {
            seen.push((p.to_string(), k.to_string(), c))
        })
        .unwrap();
        assert_eq!(w, 3);
        let want: Vec<_> = r
            .keys
            .iter()
            .flat_map(|(p, keys)| keys.iter().map(move |(k, c)| (p.clone(), k.clone(), *c)))
            .collect();
        assert_eq!(seen, want);
        r.v = format::USAGE + 1;
        assert!(matches!(
            visit_record(&r.encode(), |_, _, _| {}),
            Err(RecordError::Newer(_))
        ));
        for bad in [&b"\xc1"[..], b"\x81\xa4keys\x80", b"\x91\x01"] {
            assert!(
                matches!(
                    visit_record(bad, |_, _, _| {}),
                    Err(RecordError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn adding_to_a_record_sums_every_key_and_keeps_the_larger_watermark() {
        let c = |used, denied| Counts { used, denied };
        let mut stored = BucketRecord {
            v: format::USAGE,
            w: 9,
            ..Default::default()
        };
        for (policy, key, counts) in [
            ("a", "k1", c(1, 0)),
            ("a", "k2", c(3, 2)),
            ("b", "k1", c(5, 0)),
        ] {
            stored
                .keys
                .entry(policy.into())
                .or_default()
                .insert(key.into(), counts);
        }
        let bytes = stored.encode();
        let more = [
            ("a", "k2", c(1, 1)),
            ("a", "k3", c(2, 0)),
            ("c", "k1", c(0, 4)),
        ];
        let sum = BucketRecord::decode(&add_to_record(Some(&bytes), 4, more).unwrap()).unwrap();
        assert_eq!(sum.w, 9);
        assert_eq!(sum.counts("a", "k1"), c(1, 0));
        assert_eq!(sum.counts("a", "k2"), c(4, 3));
        assert_eq!(sum.counts("a", "k3"), c(2, 0));
        assert_eq!(sum.counts("b", "k1"), c(5, 0));
        assert_eq!(sum.counts("c", "k1"), c(0, 4));
        assert_eq!(sum.keys.values().map(|k| k.len()).sum::<usize>(), 5);
        // Nothing stored: the counts alone, with our watermark.
        let alone = BucketRecord::decode(&add_to_record(None, 4, more).unwrap()).unwrap();
        assert_eq!((alone.w, alone.counts("a", "k2")), (4, c(1, 1)));
        // A stored record that cannot be read is an error, not a zero.
        assert!(add_to_record(Some(b"\xc1"), 4, more).is_err());
        stored.v = format::USAGE + 1;
        assert!(matches!(
            add_to_record(Some(&stored.encode()), 4, more),
            Err(RecordError::Newer(_))
        ));
    }

    proptest::proptest! {
        /// Records of random keys (some shared, several policies, keys
        /// added twice, additions out of order): the sum's bytes must be
        /// those of the record a map of the summed counts encodes to.
        #[test]
        fn a_sum_encodes_as_the_record_of_the_same_counts_would(
            records in proptest::collection::vec(
                (0..100u64, proptest::collection::vec((0..3usize, 0..300u32, 0..1000u64, 0..3u64), 0..200)),
                0..4,
            ),
            more in proptest::collection::vec((0..2usize, 0..300u32, 0..2u64), 0..50),
            w in 0..100u64,
        ) {
            let key = |i: u32| format!("k{}", i * 7919 % 1000);
            let mut want = BucketRecord { v: format::USAGE, w, ..Default::default() };
            let mut encoded = Vec::new();
            for (record_w, entries) in &records {
                let mut record = BucketRecord { v: format::USAGE, w: *record_w, ..Default::default() };
                for &(policy, k, used, denied) in entries {
                    let policy = ["api", "b", "login"][policy];
                    record.keys.entry(policy.into()).or_default().insert(key(k), Counts { used, denied });
                }
                want.w = want.w.max(record.w);
                for (policy, keys) in &record.keys {
                    for (k, counts) in keys {
                        want.keys.entry(policy.clone()).or_default().entry(k.clone()).or_default().add(*counts);
                    }
                }
                encoded.push(record.encode());
            }
            let more: Vec<(&str, String, Counts)> = more
                .iter()
                .map(|&(policy, k, denied)| (["api", "zz"][policy], key(k), Counts { used: 1, denied }))
                .collect();
            let mut sum = RecordSum::new(w);
            for bytes in &encoded {
                sum.add_encoded(bytes).unwrap();
            }
            for (policy, k, counts) in &more {
                sum.add_counts(policy, k, *counts);
                want.keys.entry(policy.to_string()).or_default().entry(k.clone()).or_default().add(*counts);
            }
            proptest::prop_assert_eq!(sum.encode(), want.encode());
        }
    }

    #[test]
    fn cover_takes_whole_final_buckets_and_finer_ones_at_the_edges() {
        let tiers = tiers();
        let all = |_: BucketId| true;
        // 10:58 to 12:03 of day 10: minutes 10:58, 10:59; hour 11; 5m 12:00
        // would not fit whole (ends 12:05), so minutes 12:00..12:02.
        let from = 10 * D + 10 * H + 58 * M;
        let to = 10 * D + 12 * H + 3 * M;
        let got = cover(&tiers, 3, from, to, &all);
        let mut want = vec![(0, from), (0, from + M), (2, 10 * D + 11 * H)];
        want.extend((0..3).map(|i| (0, 10 * D + 12 * H + i * M)));
        assert_eq!(got, want);
        // The hour not final yet: its twelve 5-minute buckets instead.
        let not_hour = |(tier, _): BucketId| tier != 2;
        let got = cover(&tiers, 3, from, to, &not_hour);
        assert_eq!(got.len(), 2 + 12 + 3);
        assert!(got.iter().all(|(tier, _)| *tier != 2));
        // Every minute of the range is covered exactly once, either way.
        for usable in [&all as &dyn Fn(BucketId) -> bool, &not_hour] {
            let got = cover(&tiers, 3, from, to, usable);
            let minutes: u64 = got.iter().map(|(t, _)| tiers[*t].step_ms() / M).sum();
            assert_eq!(minutes, (to - from) / M);
        }
    }

    #[test]
    fn a_series_defaults_to_the_last_hour_at_the_finest_step() {
        let config = UsageConfig::default();
        let now = 100 * D + 30 * M + 20_000;
        let plan = resolve_series(&config, now, None, None, None).unwrap();
        assert_eq!(plan.step_ms, M);
        assert_eq!(plan.parts.len(), 1);
        // 60 whole minutes back plus the current one.
        assert_eq!(plan.points.len(), 61);
        assert_eq!(plan.points.last(), Some(&(0, 100 * D + 30 * M)));
    }

    #[test]
    fn a_range_older_than_the_step_keeps_is_answered_by_coarser_tiers() {
        let config = UsageConfig::default();
        let now = 100 * D;
        // 3 days at 1 minute: the last day by minute, days 2 and 3 by 5m.
        let plan = resolve_series(&config, now, Some(now - 3 * D), Some(now), Some("1m")).unwrap();
        assert_eq!(plan.step_ms, M);
        assert_eq!(plan.parts.len(), 2);
        assert_eq!(plan.parts[0].step_ms, 5 * M);
        assert_eq!(plan.parts[0].from_ms, now - 3 * D);
        assert_eq!(plan.parts[0].to_ms, plan.parts[1].from_ms);
        assert_eq!(plan.parts[1].step_ms, M);
        assert_eq!(plan.parts[1].to_ms, now);
        // Oldest first and no point twice.
        let mut sorted = plan.points.clone();
        sorted.sort_by_key(|(_, t)| *t);
        assert_eq!(sorted, plan.points);
        let covered: u64 = plan
            .points
            .iter()
            .map(|(t, _)| config.tiers[*t].step_ms())
            .sum();
        assert_eq!(covered, 3 * D);
        // Without a step: the finest tier that holds `from` (5m).
        let plan = resolve_series(&config, now, Some(now - 3 * D), Some(now), None).unwrap();
        assert_eq!((plan.step_ms, plan.parts.len()), (5 * M, 1));
    }

    #[test]
    fn bad_queries_are_refused_with_a_reason() {
        let config = UsageConfig::default();
        let now = 100 * D;
        let e = resolve_series(&config, now, Some(now), Some(now - 1), None).unwrap_err();
        assert!(e.0.contains("after"), "{e}");
        let e = resolve_series(&config, now, None, None, Some("2m")).unwrap_err();
        assert!(e.0.contains("1m, 5m, 1h, 1d"), "{e}");
        // From the epoch at 1 minute: every tier answers what it keeps,
        // and nothing older than the coarsest keeps is asked for.
        let later = 1000 * D;
        let all = resolve_series(&config, later, Some(0), Some(later), Some("1m")).unwrap();
        assert_eq!(all.parts.len(), 4);
        assert_eq!(all.parts[0].from_ms, later - 730 * D);
        let e = resolve_top(&config, now, None, None, Some(1001), By::Used).unwrap_err();
        assert!(e.0.contains("1 to 1000"), "{e}");
        assert!(resolve_top(&config, now, None, None, Some(0), By::Used).is_err());
        let ok = resolve_top(&config, now + 1, None, None, None, By::Denied).unwrap();
        assert_eq!((ok.n, ok.to_ms - ok.from_ms), (10, H + M));
    }

    #[test]
    fn top_ranks_by_the_chosen_count_and_breaks_ties_by_key() {
        let c = |used, denied| Counts { used, denied };
        let totals = vec![
            ("b", c(5, 0)),
            ("a", c(5, 9)),
            ("c", c(7, 1)),
            ("d", c(0, 0)),
        ];
        let by_used: Vec<&str> = top(totals.clone(), 3, By::Used)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(by_used, ["c", "a", "b"]);
        let by_denied: Vec<&str> = top(totals, 10, By::Denied)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(by_denied, ["a", "c"]);
    }
}
