//! What a run saw and the bounds it checks as asks are admitted: per key
//! and window what each region asked and admitted (a bucket's window is
//! the whole run), what kills in snapshot mode lost, and for a sliding
//! policy its spans ([`SlidingBound`]). Apart from the run's steps
//! (`run.rs`), which only say what happened.

use crate::alerts::AlertCheck;
use crate::scenario::Scenario;
use crate::sliding::SlidingBound;
use crate::usage::{add, ByKey};
use crate::Seen;
use sluice_core::time::Nanos;
use sluice_core::usage::Counts as Usage;
use std::collections::BTreeMap;

/// What a run saw: the totals, and per key and window what each region
/// asked and admitted (a bucket's "window" is the whole run).
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub seen: Seen,
    pub windows: BTreeMap<(String, Nanos), Vec<Counts>>,
    /// Per key and window, the units kills in snapshot mode lost.
    pub lost: BTreeMap<(String, Nanos), u64>,
    /// A sliding policy's bound, checked over spans rather than windows.
    pub sliding: Option<SlidingBound>,
    /// Per region, what it answered by key (used: admitted asks and
    /// hits; denied: denied asks): the usage it must record, once.
    pub answered: Vec<ByKey>,
    /// Per region, the usage kills in snapshot mode took with its
    /// ledgers (not stored yet).
    pub usage_lost: Vec<ByKey>,
    /// A policy with alerts: what was spent, and what the home alerted.
    pub alerts: Option<AlertCheck>,
    /// Per key and window, the units of slices kills took from the
    /// regions that held them.
    pub slices_lost: BTreeMap<(String, Nanos), u64>,
    /// Per key and window, as it ended (`Scenario::watch_slices`): the
    /// home's count, and the units left in the slices the other regions
    /// held.
    pub at_end: BTreeMap<(String, Nanos), (u64, u64)>,
}

impl Report {
    /// What each region asked and admitted of `key` in the window that
    /// holds `at`.
    pub(crate) fn window(&mut self, scenario: &Scenario, key: &str, at: Nanos) -> &mut Vec<Counts> {
        let window = (key.to_string(), scenario.window_start(at));
        self.windows
            .entry(window)
            .or_insert_with(|| vec![Counts::default(); scenario.regions.len()])
    }

    /// An ask was admitted: `Err` with what broke when its key's count
    /// over all regions passes its bound by `now` (it holds what was
    /// admitted since, too).
    pub(crate) fn admit(
        &mut self,
        scenario: &Scenario,
        admission: Admission<'_>,
        (start, now): (Nanos, Nanos),
    ) -> Result<(), String> {
        self.seen.admitted += 1;
        let Admission {
            key,
            asked_in,
            decided_in,
            decided_at,
        } = admission;
        let counts = self.window(scenario, key, decided_at);
        counts[asked_in].admitted += 1;
        let count: u64 = counts.iter().map(|c| c.admitted).sum();
        if let Some(sliding) = &mut self.sliding {
            return sliding.admit(key, decided_in, decided_at);
        }
        let window = (key.to_string(), scenario.window_start(decided_at));
        let lost = self.lost.get(&window).copied().unwrap_or(0);
        if scenario.within(count.saturating_sub(lost), start, now) {
            return Ok(());
        }
        let elapsed = (now.0 - start.0) as f64 / 1e9;
        Err(format!(
            "key {key} admitted {count} ({}: in its window; a bucket: in {elapsed:.3} s), \
             past its bound (max {} per {}, on_cut = {})",
            scenario.algorithm, scenario.max, scenario.per, scenario.on_cut
        ))
    }

    /// Region `at` answered an ask of `key` (`allowed` or not), or
    /// counted a hit (`allowed`), at `now`, its clock reading `clock`:
    /// its usage there, and what it spent.
    pub(crate) fn answered(
        &mut self,
        (at, key): (usize, &str),
        allowed: bool,
        (clock, now): (Nanos, Nanos),
    ) {
        let counts = Usage {
            used: u64::from(allowed),
            denied: u64::from(!allowed),
        };
        add(&mut self.answered[at], key, counts);
        if let (Some(alerts), true) = (&mut self.alerts, allowed) {
            alerts.spent(key, clock, now);
        }
    }

    /// Region `name` (`at`) recorded `recorded`: `Err` unless that is what
    /// it answered, less what kills in snapshot mode lost of it.
    pub(crate) fn check_usage(
        &self,
        at: usize,
        name: &str,
        recorded: &ByKey,
    ) -> Result<(), String> {
        let none = Usage::default();
        let keys = self.answered[at].keys().chain(recorded.keys());
        for key in keys {
            let answered = self.answered[at].get(key).unwrap_or(&none);
            let recorded = recorded.get(key).unwrap_or(&none);
            let lost = self.usage_lost[at].get(key).unwrap_or(&none);
            let with_lost = Usage {
                used: recorded.used + lost.used,
                denied: recorded.denied + lost.denied,
            };
            if with_lost != *answered {
                return Err(format!(
                    "{name} recorded the usage of {key} as {recorded:?}, with {lost:?} lost \
                     by kills in snapshot mode, but answered {answered:?}"
                ));
            }
        }
        Ok(())
    }

    /// A kill in snapshot mode at `now` gave `key` back room for `lost`
    /// units it had counted: its window (a sliding policy: every span
    /// that holds `now`) may admit those again.
    pub(crate) fn lost(&mut self, scenario: &Scenario, key: &str, now: Nanos, lost: u64) {
        self.seen.lost += lost;
        if let Some(sliding) = &mut self.sliding {
            sliding.lost(key, now, lost);
        } else if lost > 0 {
            let window = (key.to_string(), scenario.window_start(now));
            *self.lost.entry(window).or_default() += lost;
        }
    }
}

/// An admitted ask: of which key, asked in which region, decided by
/// which region's counter (the home's, for an ask sent on to it), and
/// when (on the simulation's clock).
pub(crate) struct Admission<'k> {
    pub key: &'k str,
    pub asked_in: usize,
    pub decided_in: usize,
    pub decided_at: Nanos,
}

/// What one region asked and admitted in a window.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub asked: u64,
    pub admitted: u64,
}
