//! Running an algorithm over a policy's limits: advancing each limit's
//! state, deciding all or nothing across them, and summing the limits up
//! into one [`Decision`] (the most restrictive limit's numbers).
//!
//! Apart from [`super`] because this is the one generic part (over
//! [`Algo`]) of a policy: the policy itself picks the algorithm from the
//! key's state and hands its limits here.

use crate::algorithm::{Algo, Check, Usage};
use crate::limit::{Decision, Limit};
use crate::time::Nanos;
use crate::wait;

/// What a run of the algorithm is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Run {
    /// An ask, which may start up to `within` from now ([`crate::wait`];
    /// zero: now or never).
    Allow {
        within: Nanos,
    },
    /// What [`Run::Allow`] would decide, taking nothing: a level of a
    /// group asked before any level takes ([`crate::group`]).
    Check {
        within: Nanos,
    },
    Record,
    Expiry,
    Refund {
        units: u64,
        taken_at: Nanos,
    },
}

pub(super) fn run_limits<A: Algo>(
    limits: &[Limit],
    states: &mut [A::State],
    now: Nanos,
    cost: u64,
    mode: Run,
) -> Decision {
    for (limit, state) in limits.iter().zip(states.iter_mut()) {
        A::advance(limit, state, now);
        if let Run::Refund { units, taken_at } = mode {
            A::refund(limit, state, now, units, taken_at);
        }
    }
    let within = match mode {
        Run::Allow { within } | Run::Check { within } => within,
        Run::Record | Run::Expiry | Run::Refund { .. } => Nanos::ZERO,
    };
    let asking = matches!(mode, Run::Allow { .. } | Run::Check { .. }) && cost > 0;
    // How long until the ask fits every limit (zero: it fits now).
    let mut start = Nanos::ZERO;
    let take = match mode {
        Run::Allow { .. } if asking => {
            start = wait::earliest::<A>(limits, states, now, cost);
            if start <= within {
                cost
            } else {
                0
            }
        }
        Run::Check { .. } if asking => {
            start = wait::earliest::<A>(limits, states, now, cost);
            0
        }
        Run::Record => cost,
        Run::Allow { .. } | Run::Check { .. } | Run::Expiry | Run::Refund { .. } => 0,
    };
    // Taken now even when it starts later: the limits go into debt by
    // `cost`, which is what they hold at its start had it been taken then
    // (the refill is linear below the brim), so later asks queue behind.
    if take > 0 {
        for (limit, state) in limits.iter().zip(states.iter_mut()) {
            A::consume(limit, state, now, take);
        }
    }
    // What the caller is told: for a consuming allow, the outcome of the
    // request itself; otherwise (peek, hit) whether one more unit fits now,
    // or for a peek that may wait, within its wait.
    let (asked, allowed) = if asking {
        (
            cost,
            take > 0 || (matches!(mode, Run::Check { .. }) && start <= within),
        )
    } else {
        start = wait::earliest::<A>(limits, states, now, 1);
        (1, start <= within)
    };
    let decision = summarize::<A>(limits, states, now, asked, allowed, mode);
    Decision {
        wait: if allowed { start } else { Nanos::ZERO },
        ..decision
    }
}

pub(super) fn inspect_limits<A: Algo>(
    limits: &[Limit],
    states: &mut [A::State],
    now: Nanos,
) -> Vec<LimitState> {
    limits
        .iter()
        .zip(states.iter_mut())
        .map(|(limit, state)| {
            A::advance(limit, state, now);
            let usage = A::usage(limit, state, now);
            LimitState {
                max: limit.reported(),
                per: limit.per(),
                period: limit.calendar().map(|c| c.period()),
                used: limit.reported().saturating_sub(usage.remaining),
                remaining: usage.remaining,
                reset: usage.reset,
            }
        })
        .collect()
}

/// One limit of a key's policy as `rl.inspect` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitState {
    /// [`Limit::reported`]: its `max`, or its `burst` when bigger.
    pub max: u64,
    pub per: Nanos,
    /// A calendar limit's period (`per` is then its nominal length).
    pub period: Option<crate::calendar::Period>,
    /// `max - remaining`.
    pub used: u64,
    pub remaining: u64,
    /// Time until the limit is fully available again.
    pub reset: Nanos,
}

fn summarize<A: Algo>(
    limits: &[Limit],
    states: &[A::State],
    now: Nanos,
    asked: u64,
    allowed: bool,
    mode: Run,
) -> Decision {
    let mut deciding: Option<(u64, Usage)> = None;
    let mut retry_after = Nanos::ZERO;
    let mut reset = Nanos::ZERO;
    for (limit, state) in limits.iter().zip(states.iter()) {
        let usage = A::usage(limit, state, now);
        reset = reset.max(usage.reset);
        if allowed {
            // The most restrictive limit: the one with the least left.
            if deciding.is_none_or(|(_, u)| usage.remaining < u.remaining) {
                deciding = Some((limit.reported(), usage));
            }
        } else {
            let Check {
                allowed: fits,
                retry_after: wait,
            } = A::check(limit, state, now, asked);
            if !fits && (deciding.is_none() || wait > retry_after) {
                retry_after = wait;
                deciding = Some((limit.reported(), usage));
            }
        }
    }
    let (limit, usage) = deciding.unwrap_or((
        limits.first().map(|l| l.reported()).unwrap_or(0),
        Usage {
            remaining: 0,
            reset: Nanos::ZERO,
        },
    ));
    Decision {
        allowed,
        limit,
        remaining: usage.remaining,
        reset: if mode == Run::Expiry {
            reset
        } else {
            usage.reset
        },
        retry_after: if allowed { Nanos::ZERO } else { retry_after },
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    }
}
