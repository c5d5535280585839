//! Alerts of a global policy (SPEC §14 across the regions of §12): a
//! threshold is a share of a window's `max`, reached when what **every
//! region spent** in the window reaches it.
//!
//! No key counter holds that sum. The home's counter of a key holds the
//! other regions' shares from a window's start and the slices it granted,
//! spent or not, so a threshold on it would fire before anyone used the
//! units; a region's part holds only that region's. So each region keeps
//! a **tally** of what it spent, apart from the key's counter, counted
//! where the ask was made (as usage is, SPEC §9):
//!
//! - a region other than the home counts its spending of a key in the
//!   counter [`TallyKey::Spent`] and reports that counter, as it stands,
//!   to the home ([`Reported`]); a report says what was spent in each
//!   limit's window so far, so a report lost, repeated or late changes
//!   nothing once a later one arrives;
//! - the home keeps the last report of each region ([`TallyKey::From`])
//!   and adds what is new in it ([`take_report`]) and its own spending to
//!   [`TallyKey::Global`], the counter whose thresholds fire
//!   ([`crate::alerts::watch`], as a regional policy's do).
//!
//! These are ordinary counters of the partition (of the policy's
//! [`crate::policy::Policy::tally`] policies), so snapshots and handovers
//! carry them, and in journal mode the records of the asks rebuild them.
//! An alert is published once by the home region, into its own stream.

use crate::algorithm::fixed_window;
use crate::limit::Limit;
use crate::policy::KeyState;
use crate::region::RegionName;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// Which tally of a key a counter holds; its counter key is the key's
/// counter key (`policy/token`) with a suffix no key token has (a token
/// never holds `/`, [`crate::key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TallyKey<'a> {
    /// What this region (not the home) spent.
    Spent,
    /// At the home: what every region spent.
    Global,
    /// At the home: the last report of a region.
    From(&'a RegionName),
}

/// The suffixes of the tallies' counter keys ([`TallyKey::of`]).
const SPENT: &str = "spent";
const GLOBAL: &str = "global";
const FROM: &str = "from-";

impl TallyKey<'_> {
    /// The counter key of this tally of the key whose counter key is
    /// `counter_key`.
    pub fn of(self, counter_key: &str) -> String {
        match self {
            TallyKey::Spent => format!("{counter_key}/{SPENT}"),
            TallyKey::Global => format!("{counter_key}/{GLOBAL}"),
            TallyKey::From(region) => format!("{counter_key}/{FROM}{region}"),
        }
    }
}

/// A tally's counter key split into the key counter key it is of and its
/// suffix, if it is one: `policy/token/spent` → (`policy/token`, `spent`).
fn split_tally(counter_key: &str) -> Option<(&str, &str)> {
    let (key, suffix) = counter_key.rsplit_once('/')?;
    let tally = suffix == SPENT || suffix == GLOBAL || suffix.starts_with(FROM);
    (key.contains('/') && tally).then_some((key, suffix))
}

/// The key counter key a tally's counter key is of, if it is one:
/// `policy/token/spent` → `policy/token`.
pub fn tallied_key(counter_key: &str) -> Option<&str> {
    split_tally(counter_key).map(|(key, _)| key)
}

/// The key counter key a [`TallyKey::Spent`] counter key is of, if it is
/// one: what a region reports again ([`Reported`]).
pub fn spent_key(counter_key: &str) -> Option<&str> {
    split_tally(counter_key)
        .filter(|&(_, suffix)| suffix == SPENT)
        .map(|(key, _)| key)
}

/// What a region spent of a key in each limit's window, as its
/// [`TallyKey::Spent`] counter stands: one window per limit of the policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reported {
    pub policy: String,
    pub key: String,
    /// Per limit: its window's start (ns) and the units spent in it.
    pub windows: Vec<fixed_window::State>,
}

/// The windows of a tally's state (a tally is a fixed window's state).
pub fn windows_of(state: &KeyState) -> Vec<fixed_window::State> {
    match state {
        KeyState::FixedWindow(windows) => windows.clone(),
        _ => Vec::new(),
    }
}

/// The windows of `reported` that are not over at `now` (the home's
/// clock), each in the place of its limit among `limits`; one that is
/// over reads as nothing reported. A window that ended is not alerted
/// afterwards: the home forgets its tallies of it once idle, and its
/// alerts fired, so a late report of it (sent again after a lost answer,
/// or once a cut healed) would count it anew from the whole report and
/// fire its thresholds a second time.
pub fn not_over(
    reported: &[fixed_window::State],
    limits: &[Limit],
    now: Nanos,
) -> Vec<fixed_window::State> {
    reported
        .iter()
        .zip(limits)
        .map(
            |(window, limit)| match limit.window_end(Nanos(window.start)) > now {
                true => window.clone(),
                false => fixed_window::State::default(),
            },
        )
        .collect()
}

/// The home takes `reported` into the last report it kept of that region
/// (`from`): what is new in it per limit, as (window start, units) for
/// [`add_new`]. A window older than the one kept is late and adds nothing;
/// a newer one replaces it.
pub fn take_report(from: &mut KeyState, reported: &[fixed_window::State]) -> Vec<(u64, u64)> {
    let KeyState::FixedWindow(kept) = from else {
        return Vec::new();
    };
    kept.iter_mut()
        .zip(reported)
        .map(|(kept, reported)| {
            if reported.start < kept.start {
                return (kept.start, 0);
            }
            if reported.start > kept.start {
                *kept = fixed_window::State {
                    start: reported.start,
                    count: 0,
                };
            }
            let new = reported.count.saturating_sub(kept.count);
            kept.count = kept.count.max(reported.count);
            (kept.start, new)
        })
        .collect()
}

/// Adds what [`take_report`] found new to the home's [`TallyKey::Global`]
/// state, each limit into its window: a window newer than the one the
/// state holds starts it; one older (over at the home) adds nothing.
pub fn add_new(global: &mut KeyState, new: &[(u64, u64)]) {
    let KeyState::FixedWindow(windows) = global else {
        return;
    };
    for (window, &(start, units)) in windows.iter_mut().zip(new) {
        if units == 0 || start < window.start {
            continue;
        }
        if start > window.start {
            *window = fixed_window::State { start, count: 0 };
        }
        window.count = window.count.saturating_add(units);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fixed_window::State;

    fn state(windows: &[(u64, u64)]) -> KeyState {
        KeyState::FixedWindow(
            windows
                .iter()
                .map(|&(start, count)| State { start, count })
                .collect(),
        )
    }

    fn windows(windows: &[(u64, u64)]) -> Vec<State> {
        windows_of(&state(windows))
    }

    #[test]
    fn a_report_adds_only_what_is_new_whatever_arrives_twice_or_late() {
        let mut from = state(&[(0, 0), (0, 0)]);
        let mut global = state(&[(0, 0), (0, 0)]);
        let take = |from: &mut KeyState, global: &mut KeyState, reported: &[(u64, u64)]| {
            let new = take_report(from, &windows(reported));
            add_new(global, &new);
        };
        take(&mut from, &mut global, &[(100, 5), (0, 5)]);
        take(&mut from, &mut global, &[(100, 5), (0, 5)]); // again: nothing new
        take(&mut from, &mut global, &[(100, 8), (0, 8)]);
        take(&mut from, &mut global, &[(100, 6), (0, 6)]); // late: older than kept
        assert_eq!(global, state(&[(100, 8), (0, 8)]));
        // The first limit's window turned: the new one starts from what
        // the report says; the second goes on.
        take(&mut from, &mut global, &[(200, 2), (0, 10)]);
        assert_eq!(global, state(&[(200, 2), (0, 10)]));
        // A report of the window before: nothing.
        take(&mut from, &mut global, &[(100, 50), (0, 10)]);
        assert_eq!(global, state(&[(200, 2), (0, 10)]));
        assert_eq!(from, state(&[(200, 2), (0, 10)]));
    }

    #[test]
    fn the_homes_own_spending_and_reports_add_up_in_the_homes_window() {
        let mut global = state(&[(100, 30)]);
        add_new(&mut global, &[(100, 20)]);
        assert_eq!(global, state(&[(100, 50)]));
        // A report of a window over at the home adds nothing to it.
        add_new(&mut global, &[(0, 20)]);
        assert_eq!(global, state(&[(100, 50)]));
    }

    #[test]
    fn tally_keys_name_their_key_and_no_key_counter_is_taken_for_one() {
        let west = RegionName::new("west").unwrap();
        for which in [TallyKey::Spent, TallyKey::Global, TallyKey::From(&west)] {
            let key = which.of("plan/alice");
            assert_eq!(tallied_key(&key), Some("plan/alice"), "{key}");
        }
        assert_eq!(TallyKey::From(&west).of("p/k"), "p/k/from-west");
        assert_eq!(spent_key("p/k/spent"), Some("p/k"));
        assert_eq!(spent_key("p/k/global"), None);
        assert_eq!(spent_key("p/spent"), None);
        assert_eq!(tallied_key("plan/alice"), None);
        assert_eq!(tallied_key("plan/spent"), None);
    }
}
