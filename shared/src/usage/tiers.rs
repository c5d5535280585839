//! The tiers of usage history and the `[usage]` config that lists them:
//! each tier a bucket size (`step`) and how long its buckets are kept, each
//! step a whole multiple of the finer one's, so a coarser bucket is an
//! exact sum of finer ones (the rollup, `crate::usage`).

use crate::duration::format_duration;
use std::time::Duration;

/// The most tiers a config may have.
pub const MAX_TIERS: usize = 8;

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

/// `[usage]` of the config (SPEC §4, §9), checked: see
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

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 60_000;
    const H: u64 = 60 * M;
    const D: u64 = 24 * H;

    #[test]
    fn the_default_tiers_pass_their_own_check_and_bad_ones_say_why() {
        assert_eq!(UsageConfig::check(&UsageConfig::default().tiers), Ok(()));
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
}
