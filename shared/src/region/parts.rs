//! A global policy split into one *part* per region (SPEC §12): every
//! region other than the home keeps its weight's fraction of the limit
//! (of the rate and of the burst, for a bucket) in its own counter of the
//! key, and the home keeps the rest. Each part is an ordinary limit of the
//! same algorithm, decided by the usual code. Token buckets, GCRA, sliding
//! logs and sliding windows are split so when a cut-off region decides
//! from its reserved share (`on_cut = "reserved"`); a fixed window is not
//! (its shares are counted at the home when a window opens,
//! [`crate::region::global`]).
//!
//! Why parts: a region cut off from the home must keep deciding from what
//! it reserves ("its weight's fraction of each window's max, or of the
//! rate and burst"), so the home can never spend that fraction itself
//! without the region's say. With parts, the sum over all regions is what
//! one limit of the whole allows, linked or cut, and nothing needs
//! reconciling when a link heals: for a bucket, over any span at most
//! `burst + rate × span`; for a sliding log or window, at most `max` in
//! any window, as each part holds its own.
//!
//! A sliding log or window decides what its part cannot pay at the home:
//! the ask crosses the link and the home decides it from its own part
//! (docs/REGIONS.md). A bucket's units move between parts instead, always
//! taken out of one before they go into another (so none is made twice):
//!
//! - **Slices from the home.** A region whose part cannot pay for an ask
//!   asks the home for a slice of the home's part, as a fixed window's
//!   delegate does ([`crate::region::global::Delegates::from_slices`]); the
//!   home keeps what its own demand needs ([`crate::region::global::home_keeps`]).
//! - **Gifts to the home.** When the home's part runs short it asks the
//!   other regions (a reclaim); each takes out of its own part what its
//!   demand will not need ([`crate::region::global::Delegates::spare`]) and
//!   sends it as a gift, which the home puts into its part like a refund
//!   (never past the brim). A gift older than [`GIFT_FRESH`] is dropped:
//!   what a region took out of its part then is lost, not spent late.
//!
//! Both move units in time, as a local budget's slice does: a unit taken
//! out of one part is spent in another up to a lease later. So over any
//! span the regions admit at most `burst + rate × (span + 2 ×
//! REGION_LEASE)` in all (docs/REGIONS-DESIGN.md, "Bounds"; checked by
//! `shared/tests/region_bucket.rs`), and exactly `burst + rate × span`
//! when no unit moves. (Slices and gifts of a sliding window would not be
//! exact: a unit taken out at one time and spent later is seen by the
//! windows at the wrong time, [`crate::budget`].)

use crate::limit::Limit;
use crate::region::{Global, OnCut, RegionName};
use crate::time::Nanos;

/// How long after a region took units out of its part the home still
/// takes them as a gift.
pub const GIFT_FRESH: Nanos = crate::budget::REGION_LEASE;

/// Each region's part of `limits` (a token bucket's, GCRA's, sliding
/// log's or sliding window's): every region other than the home its
/// reserved share of each limit's `max` and burst ([`Global::reserved`]),
/// none where any share is below one unit (such a region decides from
/// slices, or at the home, alone), and the home all the rest. Empty
/// unless a cut-off region decides from its share (`on_cut =
/// "reserved"`): otherwise the home keeps the whole limits.
pub fn parts(global: &Global, limits: &[Limit]) -> Vec<(RegionName, Vec<Limit>)> {
    if global.on_cut() != OnCut::Reserved {
        return Vec::new();
    }
    let share = |region: &RegionName, limit: &Limit| {
        let max = global.reserved(region, limit.max());
        let burst = global.reserved(region, limit.burst());
        Limit::new(max, limit.per().into(), Some(burst)).ok()
    };
    let mut parts: Vec<(RegionName, Vec<Limit>)> = global
        .weights()
        .iter()
        .filter(|(region, _)| region != global.home())
        .filter_map(|(region, _)| {
            let part = limits
                .iter()
                .map(|l| share(region, l))
                .collect::<Option<_>>()?;
            Some((region.clone(), part))
        })
        .collect();
    if parts.is_empty() {
        return parts;
    }
    let home = limits
        .iter()
        .enumerate()
        .map(|(i, limit)| {
            let (max, burst) = parts.iter().fold((0, 0), |(m, b), (_, part)| {
                (m + part[i].max(), b + part[i].burst())
            });
            // The shares are rounded down and the home's weight is at
            // least 1, so the home's part is at least one unit of each.
            Limit::new(
                limit.max() - max,
                limit.per().into(),
                Some(limit.burst() - burst),
            )
            .expect("the home keeps at least its own share")
        })
        .collect();
    parts.insert(0, (global.home().clone(), home));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn global(shares: &[(&str, i64)], on_cut: OnCut) -> Global {
        let regions = ["east".to_string(), "west".to_string(), "south".to_string()];
        let shares: Vec<(String, i64)> = shares.iter().map(|(r, w)| (r.to_string(), *w)).collect();
        Global::new("east", &regions, &shares, on_cut).unwrap()
    }

    fn of<'a>(parts: &'a [(RegionName, Vec<Limit>)], region: &str) -> Option<&'a Limit> {
        parts
            .iter()
            .find(|(r, _)| r.as_str() == region)
            .map(|(_, l)| &l[0])
    }

    #[test]
    fn the_parts_sum_to_the_limit_and_the_home_keeps_the_rounding() {
        let limit = Limit::new(100, Duration::from_secs(1), Some(31)).unwrap();
        let parts = parts(
            &global(&[("west", 2)], OnCut::Reserved),
            std::slice::from_ref(&limit),
        );
        let west = of(&parts, "west").unwrap();
        let south = of(&parts, "south").unwrap();
        let east = of(&parts, "east").unwrap();
        assert_eq!((west.max(), west.burst()), (50, 15));
        assert_eq!((south.max(), south.burst()), (25, 7));
        assert_eq!((east.max(), east.burst()), (25, 9));
        assert_eq!(east.per(), limit.per());
        let sum: u64 = parts.iter().map(|(_, l)| l[0].burst()).sum();
        assert_eq!(sum, 31);
    }

    /// A bucket's books measure demand per `per` but keep their slices
    /// across it, and give back what the part holds over the need.
    #[test]
    fn a_buckets_books_keep_slices_across_the_stretch_and_spare_the_rest() {
        use crate::budget::{Grant, REGION_LEASE};
        use crate::limit::Decision;
        use crate::region::global::Delegates;
        const MS: u64 = 1_000_000;
        let limit = Limit::new(100, Duration::from_secs(1), None).unwrap();
        let mut d = Delegates::default();
        let t = Nanos(10_900 * MS);
        let out = d.from_slices("k", &limit, t, 1, 0);
        assert!(!out.decision.allowed, "no slice yet");
        assert!(out.want.is_some(), "asks the home");
        d.asked("k", t);
        let grant = Grant {
            units: 5,
            lease: REGION_LEASE,
            taken_at: t,
        };
        let home = Decision {
            allowed: true,
            limit: 100,
            remaining: 10,
            reset: Nanos(100 * MS),
            retry_after: Nanos::ZERO,
            shadow_denied: false,
            wait: Nanos::ZERO,
            blocked: false,
        };
        d.answered("k", t, Nanos(t.0 + 100 * MS), Some(&grant), &home);
        // Past the stretch's end (11 s): the slice still pays.
        let later = Nanos(11_200 * MS);
        assert!(d.from_slices("k", &limit, later, 1, 0).decision.allowed);
        assert!(d.sweep(Nanos(11_500 * MS)).is_empty(), "the lease lasts");
        assert_eq!(d.sweep(Nanos(t.0 + REGION_LEASE.0)).len(), 1);
        // Too little asked to tell a rate: nothing spared; then 4 units in
        // 400 ms, 10 a second: 6 needed until 12 s, 7 kept of 50.
        assert_eq!(d.spare("q", &limit, Nanos(12_000 * MS), 50), 0);
        for ms in [0, 100, 200, 300] {
            d.paid_by_part("q", &limit, Nanos((12_000 + ms) * MS), 1, 50);
        }
        assert_eq!(d.spare("q", &limit, Nanos(12_400 * MS), 50), 50 - 8);
    }

    #[test]
    fn each_limit_is_split_and_a_region_short_of_one_has_no_part() {
        let second = Limit::new(3, Duration::from_secs(60), None).unwrap();
        let first = Limit::new(100, Duration::from_secs(1), None).unwrap();
        let limits = [first, second];
        let parts = parts(&global(&[("west", 2)], OnCut::Reserved), &limits);
        let west = &parts.iter().find(|(r, _)| r.as_str() == "west").unwrap().1;
        assert_eq!((west[0].max(), west[1].max()), (50, 1));
        assert!(
            !parts.iter().any(|(r, _)| r.as_str() == "south"),
            "south's share of 3 is under one unit"
        );
        let east = &parts[0].1;
        assert_eq!(
            (east[0].max(), east[1].max()),
            (50, 2),
            "the home: the rest"
        );
    }

    #[test]
    fn a_share_under_one_unit_gives_no_part_and_other_cuts_give_none() {
        let limit = Limit::new(2, Duration::from_secs(1), None).unwrap();
        let parts = parts(&global(&[], OnCut::Reserved), &[limit]);
        assert!(of(&parts, "west").is_none() && of(&parts, "south").is_none());
        assert!(parts.is_empty(), "the home alone: not split");
        let limit = Limit::new(30, Duration::from_secs(1), None).unwrap();
        assert!(super::parts(&global(&[], OnCut::Closed), std::slice::from_ref(&limit)).is_empty());
        assert!(super::parts(&global(&[], OnCut::Open), &[limit]).is_empty());
    }
}
