//! A key's state blocked (SPEC §18, [`crate::penalty`]): starting, reading
//! and lifting its block. Methods of [`KeyState`] apart from the policy,
//! which decides when a key is blocked; here is only how a state holds it.

use super::KeyState;
use crate::penalty::Blocked;
use crate::time::Nanos;

impl KeyState {
    /// Until when it is blocked at `now` (`None`: it is not, or its block
    /// has ended).
    pub fn blocked_at(&self, now: Nanos) -> Option<Nanos> {
        match self {
            KeyState::Blocked(b) if b.until > now => Some(b.until),
            _ => None,
        }
    }

    /// Its counters: inside its block, if it is blocked.
    pub fn counters(&self) -> &KeyState {
        match self {
            KeyState::Blocked(b) => &b.counters,
            state => state,
        }
    }

    /// Blocks it until `until`; a block already there ends at the later
    /// of the two (a replayed record may be older than the block it finds).
    pub fn block(&mut self, until: Nanos) {
        if let KeyState::Blocked(b) = self {
            b.until = b.until.max(until);
            return;
        }
        let counters = std::mem::replace(self, KeyState::FixedWindow(Vec::new()));
        *self = KeyState::Blocked(Box::new(Blocked { until, counters }));
    }

    /// Lifts its block when it has ended by `now`, or when its policy has
    /// no `block_for` any more (`lifted`), leaving its counters.
    pub(super) fn lift_block(&mut self, now: Nanos, lifted: bool) {
        let ended = matches!(self, KeyState::Blocked(b) if lifted || b.until <= now);
        if ended {
            if let KeyState::Blocked(b) = std::mem::replace(self, KeyState::FixedWindow(Vec::new()))
            {
                *self = b.counters;
            }
        }
    }
}
