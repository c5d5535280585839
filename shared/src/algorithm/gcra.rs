//! GCRA, the generic cell rate algorithm: one theoretical arrival time per key.
//!
//! Each unit is due one emission interval `T = per / max` after the previous
//! one; the TAT (theoretical arrival time) is when the key would be caught up
//! if everything it took so far had been spaced by `T`. A request of `cost`
//! units is allowed iff
//!
//! ```text
//! max(tat, now) + cost·T ≤ now + burst·T
//! ```
//!
//! i.e. the key may run at most `burst` units ahead of schedule. It admits
//! exactly what a token bucket of `burst` tokens refilled at `max / per` admits,
//! but its state is a single point in time that only moves forward, with no
//! refill step, which is why it is the usual choice for high rates (governor,
//! redis-cell, throttled). A hit past the limit pushes the TAT further into
//! the future: debt that has to pass before anything is allowed again.
//!
//! ## Exactness
//!
//! `T` is rarely a whole number of nanoseconds (3 per second: 333 333 333⅓ ns).
//! Rounding it, or rounding the TAT after each step, makes the error grow with
//! every unit admitted while the key is backlogged; at high rates this is what
//! breaks redis-cell (a millisecond clock: redis-cell issues #11 and #80).
//! Here the TAT is kept exactly, in units of `1/max` ns, where `T` is exactly
//! `per` units: `tat` holds the whole nanoseconds and `frac < max` the
//! remainder, and every comparison is made in `u128` on `tat·max + frac`.
//! There is no rounding anywhere, so the error bound is 0 at any rate and
//! over any number of requests; the only rounding is `retry_after`/`reset`,
//! rounded up to the next whole nanosecond, so waiting them is always enough.
//!
//! Arithmetic saturates instead of overflowing; with real clocks and limits
//! the values stay far below `u128::MAX` (`now·max ≤ 2^64·2^64`), so this only
//! matters for restored garbage. A clock that steps back is not detectable
//! from a TAT alone; it just looks like a longer backlog.

use super::{Algo, Check, Usage};
use crate::limit::Limit;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// One limit's theoretical arrival time, `tat + frac / max` ns since the epoch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Whole nanoseconds of the TAT.
    pub tat: u64,
    /// The TAT's fraction of a nanosecond, in units of `1/max` ns (`< max`).
    pub frac: u64,
}

pub struct Gcra;

/// Values scaled by the limit's `max`: time in units of `1/max` ns, where the
/// emission interval is exactly `per`.
struct Scaled {
    /// The TAT.
    tat: u128,
    /// `now`.
    now: u128,
    /// One emission interval (`per`).
    t: u128,
    /// `burst` emission intervals.
    tau: u128,
}

impl Gcra {
    fn scaled(limit: &Limit, state: &State, now: Nanos) -> Scaled {
        let max = u128::from(limit.max());
        let per = u128::from(limit.per().0);
        Scaled {
            tat: (u128::from(state.tat) * max).saturating_add(u128::from(state.frac)),
            now: u128::from(now.0) * max,
            t: per,
            tau: per.saturating_mul(u128::from(limit.burst())),
        }
    }

    /// Nanoseconds (rounded up) from `now` until scaled time `at`.
    fn until(limit: &Limit, now: Nanos, at: u128) -> Nanos {
        let at = at.div_ceil(u128::from(limit.max()));
        Nanos(u64::try_from(at).unwrap_or(u64::MAX).saturating_sub(now.0))
    }
}

impl Algo for Gcra {
    type State = State;

    /// Nothing to do: a TAT in the past means the same as `now`.
    fn advance(_limit: &Limit, _state: &mut State, _now: Nanos) {}

    fn check(limit: &Limit, state: &State, now: Nanos, cost: u64) -> Check {
        let s = Self::scaled(limit, state, now);
        let cost_t = u128::from(cost).saturating_mul(s.t);
        let due = s.tat.max(s.now).saturating_add(cost_t);
        if due <= s.now.saturating_add(s.tau) {
            return Check {
                allowed: true,
                retry_after: Nanos::ZERO,
            };
        }
        // Allowed from the first now' with tat + cost·T ≤ now' + burst·T
        // (then tat > now', so max(tat, now') = tat).
        let retry_after = if cost <= limit.burst() {
            Self::until(
                limit,
                now,
                s.tat.saturating_add(cost_t).saturating_sub(s.tau),
            )
        } else {
            Nanos::MAX
        };
        Check {
            allowed: false,
            retry_after,
        }
    }

    fn consume(limit: &Limit, state: &mut State, now: Nanos, cost: u64) {
        let s = Self::scaled(limit, state, now);
        let tat = s
            .tat
            .max(s.now)
            .saturating_add(u128::from(cost).saturating_mul(s.t));
        let max = u128::from(limit.max());
        *state = match u64::try_from(tat / max) {
            Ok(whole) => State {
                tat: whole,
                frac: (tat % max) as u64,
            },
            Err(_) => State {
                tat: u64::MAX,
                frac: 0,
            },
        };
    }

    /// The TAT moves back by the units' emission intervals. A TAT at or
    /// before `now` means the same as `now` (a key fully rested), so
    /// moving it further back gives nothing more: the same brim as the
    /// token bucket's.
    fn refund(limit: &Limit, state: &mut State, now: Nanos, units: u64, _taken_at: Nanos) {
        let s = Self::scaled(limit, state, now);
        let tat = s
            .tat
            .saturating_sub(u128::from(units).saturating_mul(s.t))
            .max(s.now);
        let max = u128::from(limit.max());
        *state = State {
            tat: u64::try_from(tat / max).unwrap_or(u64::MAX),
            frac: (tat % max) as u64,
        };
    }

    fn usage(limit: &Limit, state: &State, now: Nanos) -> Usage {
        let s = Self::scaled(limit, state, now);
        let backlog = s.tat.saturating_sub(s.now);
        Usage {
            remaining: (s.tau.saturating_sub(backlog) / s.t) as u64,
            reset: if backlog > 0 {
                Self::until(limit, now, s.tat)
            } else {
                Nanos::ZERO
            },
        }
    }
}
