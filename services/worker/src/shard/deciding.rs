//! What the decision core does in a takeover ([`Deciding`], the owner's
//! [`Rules`]): replaying records, and what to tell the other regions once
//! the partition is taken. Apart from `turns.rs`, which works on the shard,
//! so that `shard` names it without an import cycle (`tests/modules.rs`).

use crate::counters::Counters;
use crate::decide::{Decider, Owned};
use crate::journal::record::Record;
use crate::owner::Rules;
use sluice_core::policies::Policies;
use sluice_core::region::state::Action;

/// The decision core's part in a takeover ([`Rules`]): under the policies
/// in force when it started.
pub(super) struct Deciding<'a> {
    pub decider: &'a Decider,
    pub policies: &'a Policies,
}

impl Rules for Deciding<'_> {
    fn replay(&self, record: &Record, counters: &Counters) -> bool {
        self.decider.replay(self.policies, record, counters)
    }

    fn taken_over(&self, owned: Owned<'_>) -> Vec<Action> {
        self.decider.took_over_tallies(self.policies, owned)
    }
}
