//! Holds as kept state (CONTRACT §13): the live holds of the partition's
//! keys ([`sluice_core::outstanding::Outstanding`], the table the budget
//! slices are kept in), carried to the next owner so that a hold reserved
//! before a handover is settled, extended or ended after it.

use super::kind::Kept;
use crate::counters::Counters;
use sluice_core::holds::HoldId;
use sluice_core::outstanding::HeldHold;
use sluice_core::time::Nanos;
use std::collections::HashMap;

/// The live holds ([`Kept`]).
pub struct Holds;

impl Kept for Holds {
    type Carried = Vec<HeldHold>;

    fn before(counters: &Counters, _now: Nanos) -> Vec<HeldHold> {
        counters.outstanding().carried_holds()
    }

    /// Those live from before the counters were encoded to after: one
    /// reserved meanwhile may be missing from the counters, one settled
    /// meanwhile may have given back into them (carried, it could be
    /// given back twice); left out, its settle is refused (404) and what
    /// it held stays counted, which is safe.
    fn through(before: Vec<HeldHold>, counters: &Counters, _now: Nanos) -> Vec<HeldHold> {
        let after: HashMap<(String, HoldId), u64> = counters
            .outstanding()
            .carried_holds()
            .into_iter()
            .map(|h| ((h.key, h.id), h.ends_at))
            .collect();
        before
            .into_iter()
            .filter_map(|mut h| {
                let ends_at = *after.get(&(h.key.clone(), h.id))?;
                // An extend meanwhile: the later end (it only keeps it longer).
                h.ends_at = h.ends_at.max(ends_at);
                Some(h)
            })
            .collect()
    }

    fn take_over(carried: &Vec<HeldHold>, counters: &Counters, _now: Nanos) {
        counters.outstanding().take_over_holds(carried);
    }
}
