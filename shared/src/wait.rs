//! Waiting instead of denying (SPEC §18): an ask that carries a wait
//! (`wait_ms`) and does not fit now, but will fit within that wait, is
//! allowed now for the earliest moment it fits, and told how long from now
//! that is (the decision's `wait`). It is taken at once, so the limits go
//! into debt by its cost and the next ask's moment comes after it: asks
//! start in the order they arrived, spaced at the limit's rate, and a
//! fleet paces itself without a single denial. An ask whose moment would
//! come later than its wait is denied and takes nothing, as any denial.
//!
//! Only the token bucket and GCRA wait: their state after taking an ask
//! now is exactly their state had it been taken at its start (the refill
//! is linear while the bucket is below its brim), so nothing about the
//! future has to be kept. A window algorithm would have to book units in
//! a window that has not opened yet; [`max_wait`] refuses it.
//!
//! What is here: the policy option's check ([`max_wait`]) and the earliest
//! moment an ask fits every limit ([`earliest`]), which
//! [`crate::policy::Policy::decide_within`] uses; below the policy, so
//! that the policy can use them. An ask's wait is checked against its
//! policy's `max_wait` with the other rules an ask passes
//! ([`crate::ask::admit_wait`]).

use crate::algorithm::Algo;
use crate::limit::{Algorithm, Limit, PolicyError};
use crate::time::Nanos;
use std::time::Duration;

pub use crate::limit::MAX_WAIT;

/// A policy's `max_wait` as the algorithm allows it: zero for any (asks
/// never wait), anything up to [`MAX_WAIT`] for a token bucket or GCRA.
pub fn max_wait(algorithm: Algorithm, max_wait: Duration) -> Result<Nanos, PolicyError> {
    if max_wait.is_zero() {
        return Ok(Nanos::ZERO);
    }
    if !algorithm.has_burst() {
        return Err(PolicyError::WaitNotSupported(algorithm));
    }
    if max_wait > MAX_WAIT {
        return Err(PolicyError::MaxWaitTooLong);
    }
    Ok(Nanos::from(max_wait))
}

/// How long from `now` until `cost` fits every one of `limits` (zero: it
/// fits now), assuming nothing else is taken meanwhile: the latest of the
/// limits' own earliest moments, since a limit that fits stays fitting
/// while nothing is taken. [`Nanos::MAX`] when it never fits.
/// `states` have been advanced to `now`.
pub(crate) fn earliest<A: Algo>(
    limits: &[Limit],
    states: &[A::State],
    now: Nanos,
    cost: u64,
) -> Nanos {
    limits
        .iter()
        .zip(states)
        .map(|(limit, state)| {
            let check = A::check(limit, state, now, cost);
            if check.allowed {
                Nanos::ZERO
            } else {
                check.retry_after
            }
        })
        .max()
        .unwrap_or(Nanos::ZERO)
}

#[cfg(test)]
mod tests;
