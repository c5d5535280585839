//! Sliding window counter (Cloudflare's weighted estimate).
//!
//! Counts per fixed window, like the fixed window, but judges a request by an
//! estimate of the last `per`: the current window's count plus the previous
//! window's count weighted by how much of the previous window still overlaps
//! `(now − per, now]`:
//!
//! ```text
//! estimate = prev · (per − elapsed) / per + curr
//! ```
//!
//! It assumes the previous window's units were spread evenly. That keeps the
//! state at three integers whatever `max` is (the sliding log needs one
//! timestamp per unit) and removes the fixed window's boundary burst: right
//! after a window rolls, the previous window still weighs fully. The price is
//! that it is an estimate: a burst at the very end of a window is forgotten
//! gradually during the next one rather than all at once `per` later, so it
//! can both deny a little too early and admit more than `max` within some
//! window of length `per`: at most `2·max − 1`, and only for traffic shaped
//! against it (`docs/ALGORITHMS.md` has the numbers and the proof sketch).
//!
//! Everything is decided in integers: `estimate + cost ≤ max` is checked as
//! `prev·(per − e) + (curr + cost)·per ≤ max·per` in `u128`, so there is no
//! rounding at all and `retry_after` is the exact first nanosecond at which
//! the same request fits.

use super::{Algo, Check, Usage};
use crate::limit::Limit;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// One limit's two counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Start of the current window (ns since the epoch, a multiple of `per`).
    pub start: u64,
    /// Units counted in the window before it.
    pub prev: u64,
    /// Units counted in the current window; may exceed `max` after a hit.
    pub curr: u64,
}

pub struct SlidingWindow;

/// A state seen at a time: the rolled state and how far into its window we are.
struct View {
    s: State,
    /// ns since `s.start`, always `< per`.
    elapsed: u64,
}

impl SlidingWindow {
    /// The state rolled forward to `now` (or to its own start, for a clock that
    /// stepped back). Windows follow each other every `per` from `start`; a
    /// state that has been idle for two windows starts over, aligned.
    fn view(limit: &Limit, state: &State, now: Nanos) -> View {
        let per = limit.per().0;
        let now = now.0.max(state.start);
        let next = state.start.saturating_add(per);
        let s = if now < next {
            state.clone()
        } else if now < next.saturating_add(per) {
            State {
                start: next,
                prev: state.curr,
                curr: 0,
            }
        } else {
            State {
                start: now - now % per,
                prev: 0,
                curr: 0,
            }
        };
        // Saturated starts (restored garbage) can leave `now` a window or more
        // past `start`; clamp so the weight of `prev` stays in [1, per].
        let elapsed = (now - s.start.min(now)).min(per - 1);
        View { s, elapsed }
    }

    /// `prev·(per − e) + units·per`: `per` times the estimate with `units` in
    /// the current window.
    fn scaled_estimate(per: u64, prev: u64, elapsed: u64, units: u128) -> u128 {
        let per = u128::from(per);
        let weighted = u128::from(prev).saturating_mul(per - u128::from(elapsed));
        weighted.saturating_add(units.saturating_mul(per))
    }

    /// The first time (ns since the epoch) at which `cost` fits, given a state
    /// at which it does not.
    fn first_fit(limit: &Limit, view: &View, cost: u64) -> u64 {
        let per = limit.per().0;
        let max = limit.max();
        let State { start, prev, curr } = view.s;
        // Later in this window: prev·(per − e) ≤ room·per with room = max − curr − cost,
        // i.e. e ≥ per − ⌊room·per / prev⌋.
        if let Some(room) = max.checked_sub(curr).and_then(|r| r.checked_sub(cost)) {
            if prev == 0 {
                return start.saturating_add(view.elapsed); // fits already
            }
            let q = u128::from(room) * u128::from(per) / u128::from(prev);
            if q >= 1 {
                let e = u128::from(per).saturating_sub(q) as u64; // < per
                return start.saturating_add(e.max(view.elapsed));
            }
        }
        // In the next window `curr` becomes `prev` and the count starts at 0:
        // curr·(per − e) ≤ (max − cost)·per.
        let next = start.saturating_add(per);
        let Some(room) = max.checked_sub(cost) else {
            return u64::MAX; // never fits; callers refuse such costs
        };
        if curr == 0 {
            return next;
        }
        let q = u128::from(room) * u128::from(per) / u128::from(curr);
        if q >= u128::from(per) {
            next
        } else if q >= 1 {
            next.saturating_add(per - q as u64)
        } else {
            // Only once both windows are empty: the one after next.
            next.saturating_add(per)
        }
    }
}

impl Algo for SlidingWindow {
    type State = State;

    fn advance(limit: &Limit, state: &mut State, now: Nanos) {
        *state = Self::view(limit, state, now).s;
    }

    fn check(limit: &Limit, state: &State, now: Nanos, cost: u64) -> Check {
        let per = limit.per().0;
        let view = Self::view(limit, state, now);
        let units = u128::from(view.s.curr) + u128::from(cost);
        let estimate = Self::scaled_estimate(per, view.s.prev, view.elapsed, units);
        if estimate <= u128::from(limit.max()) * u128::from(per) {
            return Check {
                allowed: true,
                retry_after: Nanos::ZERO,
            };
        }
        Check {
            allowed: false,
            retry_after: Nanos(Self::first_fit(limit, &view, cost).saturating_sub(now.0)),
        }
    }

    fn consume(limit: &Limit, state: &mut State, now: Nanos, cost: u64) {
        let mut s = Self::view(limit, state, now).s;
        s.curr = s.curr.saturating_add(cost);
        *state = s;
    }

    /// Takes `units` back out of the window they were counted in, the
    /// current or the previous one (a hold settled for less than it held,
    /// or released); once that window has rolled out, nothing.
    fn refund(limit: &Limit, state: &mut State, now: Nanos, units: u64, taken_at: Nanos) {
        let per = limit.per().0;
        let mut s = Self::view(limit, state, now).s;
        if (s.start..s.start.saturating_add(per)).contains(&taken_at.0) {
            s.curr = s.curr.saturating_sub(units);
        } else if (s.start.saturating_sub(per)..s.start).contains(&taken_at.0) {
            s.prev = s.prev.saturating_sub(units);
        }
        *state = s;
    }

    fn usage(limit: &Limit, state: &State, now: Nanos) -> Usage {
        let per = limit.per().0;
        let view = Self::view(limit, state, now);
        let State { start, prev, curr } = view.s;
        let estimate = Self::scaled_estimate(per, prev, view.elapsed, u128::from(curr));
        let cap = u128::from(limit.max()) * u128::from(per);
        // ⌊max − estimate⌋: the largest cost that still fits.
        let remaining = (cap.saturating_sub(estimate) / u128::from(per)) as u64;
        // The estimate is 0 once both windows are empty.
        let zero_at = if curr > 0 {
            start.saturating_add(per).saturating_add(per)
        } else if prev > 0 {
            start.saturating_add(per)
        } else {
            now.0
        };
        Usage {
            remaining,
            reset: Nanos(zero_at.saturating_sub(now.0)),
        }
    }
}
