//! Penalties (SPEC §18): a policy's `block_for`. A denial under it
//! starts a **block** of the key: until it ends, every ask of that key
//! under that policy is denied, counting nothing, and told to retry when
//! the block ends (the decision is `blocked`, its `retry_after` the
//! block's rest). Asks during a block do not lengthen it.
//!
//! Why the block lives in the key's state ([`KeyState::Blocked`], its
//! counters inside) and not beside it: everything that keeps, moves and
//! forgets a key's state (snapshots, handovers, the journal's replay, a
//! reset, idle expiry) then keeps, moves and forgets the block with it,
//! with no kind of kept state of its own. A block that has ended is lifted
//! the next time the key is decided ([`lift`]); its counters go on as if
//! it had never been (they were advanced, never charged, meanwhile).
//!
//! What is here: the option's check ([`block_for`]), starting and lifting
//! a block, and the answer to an ask during one ([`denial`]).
//! [`crate::policy::Policy::decide_within`] uses them.

use crate::limit::{Decision, PolicyError, MAX_BLOCK_FOR};
use crate::policy::KeyState;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A blocked key's state: until when, and its counters meanwhile (never
/// blocked themselves).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blocked {
    /// When the block ends (ns since the epoch).
    pub until: Nanos,
    pub counters: KeyState,
}

/// A policy's `block_for` as allowed: zero (no penalty) or up to
/// [`MAX_BLOCK_FOR`].
pub fn block_for(block_for: Duration) -> Result<Nanos, PolicyError> {
    if block_for > MAX_BLOCK_FOR {
        return Err(PolicyError::BlockForTooLong);
    }
    Ok(Nanos::from(block_for))
}

/// Until when `state` is blocked at `now` (`None`: it is not, or its
/// block has ended).
pub fn until(state: &KeyState, now: Nanos) -> Option<Nanos> {
    match state {
        KeyState::Blocked(b) if b.until > now => Some(b.until),
        _ => None,
    }
}

/// Blocks `state` until `until`; a block already there ends at the later
/// of the two (a replayed record may be older than the block it finds).
pub fn start(state: &mut KeyState, until: Nanos) {
    if let KeyState::Blocked(b) = state {
        b.until = b.until.max(until);
        return;
    }
    let counters = std::mem::replace(state, KeyState::FixedWindow(Vec::new()));
    *state = KeyState::Blocked(Box::new(Blocked { until, counters }));
}

/// Lifts `state`'s block when it has ended by `now`, or when its policy
/// has no `block_for` any more (`lifted`), leaving its counters.
pub(crate) fn lift(state: &mut KeyState, now: Nanos, lifted: bool) {
    let ended = matches!(state, KeyState::Blocked(b) if lifted || b.until <= now);
    if ended {
        if let KeyState::Blocked(b) = std::mem::replace(state, KeyState::FixedWindow(Vec::new())) {
            *state = b.counters;
        }
    }
}

/// The answer to an ask of a key blocked until `until`, from what a peek
/// of its counters says (`peek`, which took nothing): denied, nothing
/// left, retry when the block ends.
pub(crate) fn denial(peek: Decision, until: Nanos, now: Nanos) -> Decision {
    Decision {
        allowed: false,
        remaining: 0,
        retry_after: until.saturating_sub(now),
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: true,
        ..peek
    }
}

#[cfg(test)]
mod tests;
