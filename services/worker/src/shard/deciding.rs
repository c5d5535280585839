//! What the decision core does in a takeover ([`Deciding`], the owner's
//! [`Rules`]): replaying records, and what to tell the other regions once
//! the partition is taken. Apart from `turns.rs`, which works on the shard,
//! so that `shard` names it without an import cycle (`tests/modules.rs`).
//! Public for the simulator (`tests/simulate`), whose owners take over as
//! a shard does.

use crate::counters::Counters;
use crate::decide::{Decider, Owned};
use crate::journal::record::Record;
use crate::owner::Rules;
use sluice_core::policies::Policies;
use sluice_core::policy::Policy;
use sluice_core::region::state::Action;

/// The decision core's part in a takeover ([`Rules`]): under the policies
/// in force when it started.
pub struct Deciding<'a> {
    pub decider: &'a Decider,
    pub policies: &'a Policies,
}

impl<'a> Deciding<'a> {
    /// The limits a restored counter of `key_token` under the policy
    /// `name` is kept under, as the decision core counts it: an
    /// override's, if any; of a global bucket, this region's part. `None`
    /// when the policy is gone (the counter is dropped).
    pub fn kept_under(&self, name: &str, key_token: &str) -> Option<&'a Policy> {
        let base = self.policies.get(name)?;
        let in_force = self.policies.in_force(base, key_token);
        Some(in_force.counted_under(self.decider.region()))
    }
}

impl Rules for Deciding<'_> {
    fn replay(&self, record: &Record, counters: &Counters) -> bool {
        self.decider.replay(self.policies, record, counters)
    }

    fn taken_over(&self, owned: Owned<'_>) -> Vec<Action> {
        self.decider.took_over_tallies(self.policies, owned)
    }
}
