//! Token bucket: a bucket of `burst` tokens refilled at `max` per `per`.
//!
//! The limiter for "a sustained rate, with some slack": a key that has been
//! quiet may spend up to `burst` at once, then gets the steady rate. Unlike
//! the window algorithms it has no boundaries at all, and its state is three
//! integers whatever the rate.
//!
//! The state stores what is *missing* from a full bucket rather than what is
//! in it, so the all-zero default is a full bucket (a new key starts full) and
//! a hit past the limit is simply a deficit larger than `burst`: debt that the
//! refill repays before anything is allowed again, so nothing counted is lost.
//!
//! Refill is lazy and exact. A refill of `elapsed · max / per` tokens is
//! rarely whole, so the state keeps the fraction: `frac` counts partial
//! progress towards the next token in units of `1/per` token, i.e. each
//! nanosecond adds exactly `max` units and `per` units make a token. Summing
//! integers loses nothing, so refilling a million times in small steps gives
//! exactly what one big step gives (`advance` is pure bookkeeping), and
//! `retry_after` is the exact nanosecond at which enough tokens are back.
//! (The usual "move the refill timestamp only by the time that produced whole
//! tokens" drifts as soon as `per / max` is not a whole number of ns.)
//!
//! Admission is identical to [`super::gcra`] with the same limit; the bucket
//! just keeps a level where GCRA keeps a time. `tests/properties.rs` checks
//! that the two agree decision by decision.

use super::{Algo, Check, Usage};
use crate::limit::Limit;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// One limit's bucket.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Time of the last refill (ns since the epoch).
    pub at: u64,
    /// Whole tokens missing from a full bucket; more than `burst` is debt.
    pub used: u64,
    /// Progress towards the next token, in `1/per` of a token (`< per`);
    /// 0 while the bucket is full.
    pub frac: u64,
}

pub struct TokenBucket;

impl TokenBucket {
    /// The bucket refilled up to `now` (a clock that stepped back refills nothing).
    fn refilled(limit: &Limit, state: &State, now: Nanos) -> State {
        let per = u128::from(limit.per().0);
        let elapsed = now.0.saturating_sub(state.at);
        let progress = u128::from(state.frac) + u128::from(elapsed) * u128::from(limit.max());
        let tokens = progress / per;
        let at = now.0.max(state.at);
        if tokens >= u128::from(state.used) {
            // Full: whatever would overflow the bucket is gone.
            State {
                at,
                used: 0,
                frac: 0,
            }
        } else {
            State {
                at,
                used: state.used - tokens as u64,
                frac: (progress % per) as u64,
            }
        }
    }

    /// Time from `now` until at most `target` tokens are missing, for a
    /// refilled state `s` with `s.used > target`.
    fn wait_until_missing(limit: &Limit, s: &State, now: Nanos, target: u64) -> Nanos {
        let need = u128::from(s.used - target) * u128::from(limit.per().0);
        let need = need.saturating_sub(u128::from(s.frac));
        let ns = need.div_ceil(u128::from(limit.max()));
        let wait = u64::try_from(ns).unwrap_or(u64::MAX);
        // `s.at` is later than `now` only when the clock stepped back.
        Nanos(s.at.saturating_add(wait).saturating_sub(now.0))
    }
}

impl Algo for TokenBucket {
    type State = State;

    fn advance(limit: &Limit, state: &mut State, now: Nanos) {
        *state = Self::refilled(limit, state, now);
    }

    fn check(limit: &Limit, state: &State, now: Nanos, cost: u64) -> Check {
        let s = Self::refilled(limit, state, now);
        if s.used.saturating_add(cost) <= limit.burst() {
            return Check {
                allowed: true,
                retry_after: Nanos::ZERO,
            };
        }
        let retry_after = match limit.burst().checked_sub(cost) {
            Some(target) => Self::wait_until_missing(limit, &s, now, target),
            None => Nanos::MAX,
        };
        Check {
            allowed: false,
            retry_after,
        }
    }

    fn consume(limit: &Limit, state: &mut State, now: Nanos, cost: u64) {
        let mut s = Self::refilled(limit, state, now);
        s.used = s.used.saturating_add(cost);
        *state = s;
    }

    /// Back into the bucket, which never holds more than full: the refill
    /// is linear up to the brim, so a bucket that would have overflowed
    /// without the units taken is full either way.
    fn refund(_limit: &Limit, state: &mut State, _now: Nanos, units: u64, _taken_at: Nanos) {
        state.used = state.used.saturating_sub(units);
        if state.used == 0 {
            state.frac = 0;
        }
    }

    fn usage(limit: &Limit, state: &State, now: Nanos) -> Usage {
        let s = Self::refilled(limit, state, now);
        Usage {
            remaining: limit.burst().saturating_sub(s.used),
            reset: if s.used > 0 {
                Self::wait_until_missing(limit, &s, now, 0)
            } else {
                Nanos::ZERO
            },
        }
    }
}
