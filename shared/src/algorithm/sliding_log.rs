//! Sliding log: remember when each unit was taken; count those in `(now − per, now]`.
//!
//! The exact answer to "at most `max` in any window of length `per`": no
//! boundary bursts (fixed window), no estimate (sliding window). It costs one
//! timestamp per unit, so memory and snapshot size grow with `max`; that is
//! why `Policy::new` caps `max` at [`crate::policy::SLIDING_LOG_MAX`] and why
//! it suits small, important limits (logins, password resets) best.
//!
//! A unit taken at `t` counts against requests at times in `[t, t + per)`.
//! The log is a ring buffer (`VecDeque`) so that expiring the oldest entries
//! and appending new ones are O(1) each; finding the window edge is a binary
//! search.

use super::{Algo, Check, Usage};
use crate::limit::Limit;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// One limit's log.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Times (ns since the epoch) of the units taken, oldest first, one entry
    /// per unit, never more than `max` entries.
    pub log: VecDeque<u64>,
}

pub struct SlidingLog;

impl SlidingLog {
    /// The state's time for `now`: never earlier than the newest entry, so a
    /// clock that stepped back neither un-expires entries nor appends out of order.
    fn effective_now(state: &State, now: Nanos) -> u64 {
        state.log.back().map_or(now.0, |&newest| now.0.max(newest))
    }

    /// Index of the oldest entry still in `(now − per, now]`. Restored logs
    /// that are not sorted give odd answers here, never a panic.
    fn first_live(limit: &Limit, state: &State, now: u64) -> usize {
        // Entry t has expired once t + per <= now, i.e. t <= now − per.
        match now.checked_sub(limit.per().0) {
            Some(edge) => state.log.partition_point(|&t| t <= edge),
            None => 0,
        }
    }

    /// Time at which the entry at `index` stops counting.
    fn expiry(limit: &Limit, state: &State, index: usize) -> u64 {
        state
            .log
            .get(index)
            .map_or(0, |&t| t.saturating_add(limit.per().0))
    }
}

impl Algo for SlidingLog {
    type State = State;

    fn advance(limit: &Limit, state: &mut State, now: Nanos) {
        let now = Self::effective_now(state, now);
        let expired = Self::first_live(limit, state, now);
        state.log.drain(..expired);
        // A restored log may be longer than `max`; see `consume` for why
        // keeping the newest `max` is exact.
        let max = usize::try_from(limit.max()).unwrap_or(usize::MAX);
        if state.log.len() > max {
            let extra = state.log.len() - max;
            state.log.drain(..extra);
        }
    }

    fn check(limit: &Limit, state: &State, now: Nanos, cost: u64) -> Check {
        let eff = Self::effective_now(state, now);
        let first = Self::first_live(limit, state, eff);
        let live = (state.log.len() - first) as u64;
        if live.saturating_add(cost) <= limit.max() {
            return Check {
                allowed: true,
                retry_after: Nanos::ZERO,
            };
        }
        // `cost` fits once at most `max − cost` entries are live, i.e. once
        // the oldest `live − (max − cost)` of them have expired: the moment
        // the last of those expires.
        let retry_after = match limit.max().checked_sub(cost) {
            Some(room) => {
                let must_expire = live - room; // >= 1, since live + cost > max
                let last =
                    first.saturating_add(usize::try_from(must_expire - 1).unwrap_or(usize::MAX));
                Nanos(Self::expiry(limit, state, last).saturating_sub(now.0))
            }
            None => Nanos::MAX,
        };
        Check {
            allowed: false,
            retry_after,
        }
    }

    fn consume(limit: &Limit, state: &mut State, now: Nanos, cost: u64) {
        // Only the newest `max` entries are kept. That is exact: entries
        // expire oldest first, so the live ones are always a suffix of the
        // log. While that suffix is no longer than `max` it lies within the
        // kept part and is counted exactly; while it is longer, the full log
        // and the kept one both deny every cost >= 1 and report 0 remaining.
        // A cost fits again once at most `max − cost` (< `max`) entries are
        // live, and when that happens depends only on the newest `max`
        // entries. So every answer, retry_after included, is unchanged.
        let now = Self::effective_now(state, now);
        let max = usize::try_from(limit.max()).unwrap_or(usize::MAX);
        let add = usize::try_from(cost).unwrap_or(usize::MAX).min(max);
        let keep = max - add;
        if state.log.len() > keep {
            let extra = state.log.len() - keep;
            state.log.drain(..extra);
        }
        state.log.extend(std::iter::repeat_n(now, add));
    }

    /// Takes out up to `units` entries stamped `taken_at` (a hold settled
    /// for less than it held, or released): exact, since each unit has its
    /// own entry. Entries already expired, or dropped past `max`, are not
    /// there to take out, and nothing else is taken instead.
    fn refund(_limit: &Limit, state: &mut State, _now: Nanos, units: u64, taken_at: Nanos) {
        let from = state.log.partition_point(|&t| t < taken_at.0);
        let to = state.log.partition_point(|&t| t <= taken_at.0);
        let take = (to - from).min(usize::try_from(units).unwrap_or(usize::MAX));
        state.log.drain(to - take..to);
    }

    fn usage(limit: &Limit, state: &State, now: Nanos) -> Usage {
        let eff = Self::effective_now(state, now);
        let first = Self::first_live(limit, state, eff);
        let live = (state.log.len() - first) as u64;
        let reset = if live > 0 {
            Nanos(Self::expiry(limit, state, state.log.len() - 1).saturating_sub(now.0))
        } else {
            Nanos::ZERO
        };
        Usage {
            remaining: limit.max().saturating_sub(live),
            reset,
        }
    }
}
