//! Journal replay at the home of a global policy: a replayed ask of the
//! home's own counts in its demand again. Apart from `here.rs`, which the
//! decision path uses ([`Here`]), because this is replay's, and a module
//! of its own keeps `decide` free of an import cycle (`tests/modules.rs`).

use super::here::Here;
use super::Decider;
use crate::counters::Counters;
use crate::journal::record::{Kind, Record, Typed};
use sluice_core::policy::Policy;

impl Decider {
    /// A journal record of the home's own ask replayed (a count that is
    /// usage: not what another region sent over the link, nor a
    /// delegate's books): its demand too, as [`Decider::apply`] notes it,
    /// on top of what the snapshot carried ([`crate::kept`]), so that the
    /// home keeps for itself after a crash what it kept before.
    pub(super) fn replay_home_demand(
        &self,
        policy: &Policy,
        record: &Record,
        typed: Typed<'_, String>,
        counters: &Counters,
    ) {
        let (Kind::Counted { units }, true) = (typed.kind, typed.is_usage) else {
            return;
        };
        let (Some(here), Some(global)) = (self.region.as_ref(), policy.scope().global()) else {
            return;
        };
        if global.home() != here {
            return;
        }
        let at_home = Here::new(policy, Some((global, here)), (false, false));
        let shared = at_home.home_shares.is_some() || at_home.split.is_some();
        if let (Some((_, limit)), true) = (at_home.home, shared) {
            sluice_core::ask::with_counter_key(record.policy(), record.key(), |buf| {
                counters.global().home_took(buf, limit, record.at(), units);
            });
        }
    }
}
