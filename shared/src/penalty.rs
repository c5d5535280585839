//! Penalties (SPEC §18): a policy's `block_for`. A denial under it
//! starts a **block** of the key: until it ends, every ask of that key
//! under that policy is denied, counting nothing, and told to retry when
//! the block ends (the decision is `blocked`, its `retry_after` the
//! block's rest). Asks during a block do not lengthen it.
//!
//! Why the block lives in the key's state
//! ([`crate::policy::KeyState::Blocked`], its counters inside) and not beside it: everything that keeps, moves and
//! forgets a key's state (snapshots, handovers, the journal's replay, a
//! reset, idle expiry) then keeps, moves and forgets the block with it,
//! with no kind of kept state of its own. A block that has ended is lifted
//! the next time the key is decided; its counters go on as if
//! it had never been (they were advanced, never charged, meanwhile).
//!
//! What is here: the option's check ([`block_for`]), a blocked state's
//! shape ([`Blocked`]) and the answer to an ask during a block
//! ([`denial`]); [`crate::policy::Policy::decide_within`] uses them, and
//! `KeyState`'s own methods start, read and lift a block.

use crate::limit::{Decision, PolicyError, MAX_BLOCK_FOR};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A blocked key's state: until when, and its counters meanwhile (`S`, a
/// [`crate::policy::KeyState`] never blocked itself; generic so that this
/// module stays below the policy, which uses it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blocked<S> {
    /// When the block ends (ns since the epoch).
    pub until: Nanos,
    pub counters: S,
}

/// A policy's `block_for` as allowed: zero (no penalty) or up to
/// [`MAX_BLOCK_FOR`].
pub fn block_for(block_for: Duration) -> Result<Nanos, PolicyError> {
    if block_for > MAX_BLOCK_FOR {
        return Err(PolicyError::BlockForTooLong);
    }
    Ok(Nanos::from(block_for))
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
