//! Which stored buckets answer a range ([`cover`]: whole coarse buckets
//! where they are final, finer ones at the edges), and the checks and
//! layout of a query over a range: a series ([`resolve_series`], one part
//! per tier the range reaches back into) and a top ([`resolve_top`]).

use super::counts::By;
use super::tiers::{Tier, UsageConfig};
use serde::{Deserialize, Serialize};

/// The largest `n` of a top query.
pub const MAX_TOP: usize = 1000;
/// The most points one series reply holds.
pub const MAX_POINTS: usize = 10_000;

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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    // Nothing older than the coarsest tier keeps, nor later than now, is
    // stored: a range past either ends is cut to what can hold counts, so
    // that a range of years does not read thousands of empty buckets.
    let kept_from = now_ms.saturating_sub(config.tiers.last().map_or(0, Tier::keep_ms));
    let to_ms = to_ms.min(now_ms);
    let from_ms = from_ms.max(kept_from).min(to_ms);
    let holding = &config.tiers[config.finest_holding(from_ms, now_ms)];
    let finest = &config.tiers[0];
    Ok(TopPlan {
        from_ms: holding.bucket_of(from_ms),
        to_ms: to_ms.div_ceil(finest.step_ms()) * finest.step_ms(),
        n: n as usize,
        by,
    })
}

/// The latest instant a range may name: the end of the year 9999 (UTC).
/// Past it no calendar goes (a stored record is read from a time), and
/// rounding a range up to whole steps could overflow.
pub const MAX_TIME_MS: u64 = 253_402_300_799_999;

/// The default range (the last hour) and the checks every range passes.
fn range(now_ms: u64, from_ms: Option<u64>, to_ms: Option<u64>) -> Result<(u64, u64), QueryError> {
    for (name, ms) in [("from_ms", from_ms), ("to_ms", to_ms)] {
        if let Some(ms) = ms.filter(|&ms| ms > MAX_TIME_MS) {
            return Err(QueryError(format!(
                "{name} ({ms}) is past the year 9999; give milliseconds since the epoch, at most {MAX_TIME_MS}"
            )));
        }
    }
    let to_ms = to_ms.unwrap_or(now_ms);
    let from_ms = from_ms.unwrap_or(to_ms.saturating_sub(3_600_000));
    if from_ms > to_ms {
        return Err(QueryError(format!(
            "from_ms ({from_ms}) is after to_ms ({to_ms})"
        )));
    }
    Ok((from_ms, to_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range past any calendar was a 503 ("starts out of the
    /// calendar") from the store, and one near `u64::MAX` overflowed
    /// while rounded up to whole steps: both are the asker's mistake.
    #[test]
    fn a_range_past_the_year_9999_is_refused_with_a_sentence() {
        let config = UsageConfig::default();
        for (from, to) in [
            (None, Some(MAX_TIME_MS + 1)),
            (None, Some(u64::MAX)),
            (Some(u64::MAX - 1), Some(u64::MAX)),
            (Some(MAX_TIME_MS + 1), None),
        ] {
            let e = resolve_series(&config, 0, from, to, None).unwrap_err();
            assert!(e.0.contains("past the year 9999"), "{e}");
            let e = resolve_top(&config, 0, from, to, Some(10), By::Used).unwrap_err();
            assert!(e.0.contains("past the year 9999"), "{e}");
        }
        assert!(resolve_series(
            &config,
            0,
            Some(MAX_TIME_MS - 3_600_000),
            Some(MAX_TIME_MS),
            None
        )
        .is_ok());
    }

    /// Found by schemathesis: a top over decades (`from=7`) read every
    /// day's empty bucket since 1970 in every partition, past the scatter's
    /// 5 s (a 503). Nothing older than the coarsest tier keeps is stored,
    /// nor anything after now: the range is cut to that.
    #[test]
    fn a_top_range_is_cut_to_what_the_tiers_keep() {
        let config = UsageConfig::default();
        let now = 60 * 365 * D;
        let kept = config.tiers.last().unwrap().keep_ms();
        let plan = resolve_top(&config, now, Some(7), Some(MAX_TIME_MS), None, By::Used).unwrap();
        assert!(plan.from_ms >= now - kept - D, "{}", plan.from_ms);
        assert!(plan.to_ms <= now + M, "{}", plan.to_ms);
        let plan = resolve_top(&config, now, Some(now - H), None, None, By::Used).unwrap();
        assert_eq!((plan.from_ms, plan.to_ms), (now - H, now));
    }

    const M: u64 = 60_000;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;

    fn tiers() -> Vec<Tier> {
        UsageConfig::default().tiers
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
}
