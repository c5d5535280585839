//! Budget slices as kept state: the slices of local budgets an owner
//! granted and that are not back yet ([`sluice_core::outstanding::Outstanding`],
//! kept beside the counters), carried to the next owner so that their
//! refunds still come back after a handover or a crash.

use super::kind::Kept;
use crate::counters::Counters;
use sluice_core::outstanding::HeldSlice;
use sluice_core::time::Nanos;

/// The budget slices not back yet ([`Kept`]).
pub struct Slices;

impl Kept for Slices {
    type Carried = Vec<HeldSlice>;

    fn read(counters: &Counters, now: Nanos, _handover: bool) -> Vec<HeldSlice> {
        counters.outstanding().carried(now)
    }

    fn take_over(carried: &Vec<HeldSlice>, counters: &Counters, now: Nanos, _handover: bool) {
        counters.outstanding().take_over(carried, now);
    }
}
