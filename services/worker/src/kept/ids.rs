//! Ask ids as kept state (SPEC §16): the ids of admitted asks whose
//! asks still count ([`sluice_core::ask_ids::RememberedIds`], kept beside
//! the counters), carried to the next owner so that a retry after a
//! handover or a crash still counts once.

use super::kind::Kept;
use crate::counters::Counters;
use sluice_core::ask_ids::CarriedId;
use sluice_core::time::Nanos;

/// The ids remembered ([`Kept`]).
pub struct Ids;

impl Kept for Ids {
    type Carried = Vec<CarriedId>;

    fn read(counters: &Counters, now: Nanos, _handover: bool) -> Vec<CarriedId> {
        counters.ids().carried(now)
    }

    fn take_over(carried: &Vec<CarriedId>, counters: &Counters, now: Nanos, _handover: bool) {
        counters.ids().take_over(carried, now);
    }
}
