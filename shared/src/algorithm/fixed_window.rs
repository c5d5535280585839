//! Fixed window: count units in windows `[k·per, (k+1)·per)` aligned to the epoch.
//!
//! The cheapest limiter there is: two integers per limit, one comparison per
//! decision, and every key's window resets at the same instant, which makes
//! it easy to explain ("10 per calendar minute"). The price is the boundary:
//! `max` units at the end of one window and `max` more at the start of the
//! next all pass, so up to `2·max` can go through within a few nanoseconds.
//! Use the sliding log or sliding window when that burst matters.
//!
//! Windows are aligned to the epoch rather than to a key's first request so
//! that the state needs no extra field and every worker agrees on where a
//! window starts, whichever of them restored the snapshot. A limit whose
//! `per` is a calendar period has the windows of its calendar instead
//! ([`crate::calendar`]); the state is the same two integers, `start` then
//! a calendar boundary.

use super::{Algo, Check, Usage};
use crate::limit::Limit;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// One limit's counter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Start of the window `count` belongs to (ns since the epoch, a
    /// multiple of `per` or a calendar boundary).
    pub start: u64,
    /// Units counted in that window; may exceed `max` after a hit.
    pub count: u64,
}

pub struct FixedWindow;

impl FixedWindow {
    /// The state's time for `now`: a clock that stepped back stays in the
    /// state's window rather than reopening an older one.
    fn effective_now(state: &State, now: Nanos) -> u64 {
        now.0.max(state.start)
    }

    fn window_end(limit: &Limit, state: &State) -> u64 {
        limit.window_end(Nanos(state.start)).0
    }
}

impl Algo for FixedWindow {
    type State = State;

    fn advance(limit: &Limit, state: &mut State, now: Nanos) {
        let now = Self::effective_now(state, now);
        let start = limit.window_start(Nanos(now)).0;
        if start > state.start {
            *state = State { start, count: 0 };
        }
    }

    fn check(limit: &Limit, state: &State, now: Nanos, cost: u64) -> Check {
        if state.count.saturating_add(cost) <= limit.max() {
            return Check {
                allowed: true,
                retry_after: Nanos::ZERO,
            };
        }
        // The next window starts empty, so anything up to `max` fits there.
        let retry_after = if cost <= limit.max() {
            Nanos(Self::window_end(limit, state).saturating_sub(now.0))
        } else {
            Nanos::MAX
        };
        Check {
            allowed: false,
            retry_after,
        }
    }

    fn consume(_limit: &Limit, state: &mut State, _now: Nanos, cost: u64) {
        state.count = state.count.saturating_add(cost);
    }

    /// Only into the window the units were taken in: once it has ended
    /// they are gone with it, and taking them off the next window's count
    /// would let that window admit more than `max`.
    fn refund(limit: &Limit, state: &mut State, _now: Nanos, units: u64, taken_at: Nanos) {
        if limit.window_start(taken_at).0 == state.start {
            state.count = state.count.saturating_sub(units);
        }
    }

    fn usage(limit: &Limit, state: &State, now: Nanos) -> Usage {
        Usage {
            remaining: limit.max().saturating_sub(state.count),
            reset: if state.count > 0 {
                Nanos(Self::window_end(limit, state).saturating_sub(now.0))
            } else {
                Nanos::ZERO
            },
        }
    }
}
