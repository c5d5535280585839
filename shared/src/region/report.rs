//! A global key's state as `rl.inspect` reports it (SPEC §12: for a
//! key of a global policy, `rl.inspect` acts on its global state): the
//! region asked gathers what every region the policy holds across has of
//! the key, and reports each region's and what they make together.
//!
//! What they make together depends on where the global count is kept:
//!
//! - **At the home** (a fixed window, or any policy whose regions keep no
//!   part, `on_cut` other than `"reserved"`): the home's count is the
//!   global state. It holds what the other regions reserved or were
//!   granted, spent or not (their own counters only say how much of it
//!   they spent), so it is reported as it is.
//! - **In parts** (a token bucket, GCRA, sliding log or window split into
//!   parts, [`crate::region::parts`]): every region keeps its part, and the
//!   global state is their sum: used and remaining summed, the latest
//!   reset. A region not reached (cut off from the one asked) is left out
//!   of the sum, and shown as not reached.

use crate::policy::Policy;
use crate::region::RegionName;
use crate::wire::inspect::{LimitReport, RegionReport};

/// Where a global policy's count is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobalCount {
    AtHome,
    InParts,
}

impl GlobalCount {
    pub fn of(policy: &Policy, home: &RegionName) -> GlobalCount {
        match policy.part_in(home) {
            Some(_) => GlobalCount::InParts,
            None => GlobalCount::AtHome,
        }
    }
}

/// The global state of a key under a policy of limits `whole` (their
/// `max` and `per`) whose home is `home`, from each region's report; a
/// policy's parts have its limits in its order, each summed on its own.
pub fn combine(
    count: GlobalCount,
    whole: &[LimitReport],
    home: &str,
    regions: &[RegionReport],
) -> Vec<LimitReport> {
    let reached: Vec<&RegionReport> = regions.iter().filter(|r| r.reached).collect();
    match count {
        GlobalCount::AtHome => reached
            .iter()
            .filter(|r| r.region == home)
            .flat_map(|r| r.limits.iter().cloned())
            .collect(),
        GlobalCount::InParts if reached.is_empty() => Vec::new(),
        GlobalCount::InParts => whole
            .iter()
            .enumerate()
            .map(|(i, whole)| {
                let mut total = LimitReport {
                    used: 0,
                    remaining: 0,
                    reset_ms: 0,
                    ..whole.clone()
                };
                for limit in reached.iter().filter_map(|r| r.limits.get(i)) {
                    total.used = total.used.saturating_add(limit.used);
                    total.remaining = total.remaining.saturating_add(limit.remaining);
                    total.reset_ms = total.reset_ms.max(limit.reset_ms);
                }
                total
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(max: u64, used: u64, remaining: u64, reset_ms: u64) -> LimitReport {
        LimitReport {
            max,
            per_ms: 1_000,
            used,
            remaining,
            reset_ms,
        }
    }

    fn region(name: &str, reached: bool, limits: Vec<LimitReport>) -> RegionReport {
        RegionReport {
            region: name.into(),
            reached,
            limits,
        }
    }

    #[test]
    fn parts_are_summed_over_the_regions_reached() {
        let whole = limit(100, 0, 100, 0);
        let regions = [
            region("east", true, vec![limit(50, 10, 40, 200)]),
            region("west", true, vec![limit(30, 30, 0, 900)]),
            region("south", false, vec![]),
        ];
        assert_eq!(
            combine(
                GlobalCount::InParts,
                std::slice::from_ref(&whole),
                "east",
                &regions
            ),
            [limit(100, 40, 40, 900)]
        );
        assert!(combine(GlobalCount::InParts, &[whole], "east", &regions[2..]).is_empty());
    }

    #[test]
    fn a_count_kept_at_home_is_the_homes() {
        let whole = limit(100, 0, 100, 0);
        let regions = [
            region("east", true, vec![limit(100, 70, 30, 500)]),
            region("west", true, vec![limit(100, 20, 80, 500)]),
        ];
        assert_eq!(
            combine(
                GlobalCount::AtHome,
                std::slice::from_ref(&whole),
                "east",
                &regions
            ),
            [limit(100, 70, 30, 500)]
        );
        let cut = [region("east", false, vec![]), regions[1].clone()];
        assert!(combine(GlobalCount::AtHome, &[whole], "east", &cut).is_empty());
    }
}
