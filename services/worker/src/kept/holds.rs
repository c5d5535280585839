//! Holds as kept state (SPEC §13): the live holds of the partition's
//! keys ([`sluice_core::outstanding::Outstanding`], the table the budget
//! slices are kept in), carried to the next owner so that a hold reserved
//! before a handover is settled, extended or ended after it.

use super::kind::Kept;
use crate::counters::Counters;
use sluice_core::outstanding::HeldHold;
use sluice_core::time::Nanos;

/// The live holds ([`Kept`]).
pub struct Holds;

impl Kept for Holds {
    type Carried = Vec<HeldHold>;

    fn read(counters: &Counters, _now: Nanos, _handover: bool) -> Vec<HeldHold> {
        counters.outstanding().carried_holds()
    }

    fn take_over(carried: &Vec<HeldHold>, counters: &Counters, _now: Nanos, _handover: bool) {
        counters.outstanding().take_over_holds(carried);
    }
}
