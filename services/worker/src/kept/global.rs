//! The partition's global state as kept state (SPEC §12): what its owner
//! keeps of global keys beside their counters
//! ([`sluice_core::region::state::GlobalState`]), carried to the next owner
//! so that it keeps, asks for and gives back what the last one would have.
//!
//! What the limit needs to hold is not here: a delegate's spent share is
//! in the key's own counter, which the journal's records rebuild after a
//! crash. What is here is each key's demand (what a delegate keeps when
//! the home reclaims, what it asks for ahead; what the home keeps for its
//! own asks and when it last reclaimed) and, from a handover's final copy
//! only, a delegate's slices: its owner spends nothing after that copy, so
//! the next owner spends and gives back exactly what is left of them. A
//! periodic snapshot carries no slice, and a handover's slices are taken
//! only by the first owner after it (the fence clears the manifest's
//! `handover`): an owner after a crash cannot tell what was spent of a
//! slice since the copy (no record says which slice an ask spent), so it
//! asks anew, and their units stay counted at the home until their window
//! ends (under-admission, never more). Journal replay adds to the home's
//! demand what the records of its own asks after the snapshot say
//! (`Decider::replay_home_demand`); a delegate's books it leaves as the
//! snapshot had them (grants come over the link and are not journaled,
//! and a delegate's use of its slices is journaled only with usage or
//! alerts), which only paces them.

use super::kind::Kept;
use crate::counters::Counters;
use sluice_core::region::state::CarriedGlobal;
use sluice_core::time::Nanos;

/// The global state ([`Kept`]).
pub struct Global;

impl Kept for Global {
    type Carried = CarriedGlobal;

    fn read(counters: &Counters, now: Nanos, handover: bool) -> CarriedGlobal {
        counters.global().carried(now, handover)
    }

    fn take_over(carried: &CarriedGlobal, counters: &Counters, _now: Nanos, handover: bool) {
        counters.global().take_over(carried, handover);
    }

    /// A delegate's slices: granted over the link, they change no count,
    /// and only a handover's final snapshot carries them.
    fn unsaved(counters: &Counters) -> bool {
        counters.global().holds_slices()
    }
}
