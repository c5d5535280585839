//! How a policy that passed its checks decides at this worker's region
//! ([`Here`]): apart from [`super::Decider::apply`], which checks the ask
//! and counts it, so that what the home of a global policy decides with
//! (its part, the other regions' shares, what it keeps for itself) is set
//! up in one place.

use crate::counters::Counters;
use sluice_core::ask::Op;
use sluice_core::budget::Grant;
use sluice_core::limit::Limit;
use sluice_core::policy::{Decision, KeyState, Policy, Spread};
use sluice_core::region::global::remote_shares;
use sluice_core::region::{Global, RegionName};
use sluice_core::time::Nanos;
use sluice_core::wire::batch::Budget;

/// How a policy that passed its checks decides in this region: as it is,
/// or at the home of a global policy with its part (when split in parts),
/// the other regions' shares of a window booked when a key's window
/// opens, and the home's own needs kept out of grants to other regions.
pub(super) struct Here<'p, 'r> {
    /// The policy checked (or the key's override): the limit reported.
    pub(super) whole: &'p Policy,
    /// At the home of a global policy split into parts: its part
    /// (sluice_core::region::parts).
    pub(super) split: Option<&'p Policy>,
    /// What decides: the part, or the whole.
    pub(super) policy: &'p Policy,
    /// At a global window's home: the global policy, this region, and the
    /// limit that decides.
    pub(super) home: Option<((&'p Global, &'r RegionName), &'p Limit)>,
    /// At a global window's home, when spread in shares: the other regions'
    /// shares of its limit, counted when a key's window opens
    /// (sluice_core::region::global).
    pub(super) home_shares: Option<u64>,
    /// A link item's slice: a grant to another region, of up to its cost
    /// and slice together (crate::global); it decides no ask here.
    pub(super) link_grant: bool,
    /// An ask another region sent on to the home: decided leaving what
    /// the home keeps for its own asks ([`forwarded_at_home`]).
    pub(super) forwarded: bool,
}

impl<'p, 'r> Here<'p, 'r> {
    /// `global`: the policy's global scope and this region, if the policy
    /// is global and decided here (at its home); what another region's
    /// owner sent: a grant's request, or an ask sent on.
    pub(super) fn new(
        policy: &'p Policy,
        global: Option<(&'p Global, &'r RegionName)>,
        (link_grant, forwarded): (bool, bool),
    ) -> Self {
        let whole = policy;
        let split = global.and_then(|(_, here)| policy.part_in(here));
        let policy = split.unwrap_or(policy);
        let home = global.zip(policy.limits().first());
        let home_shares = home
            .filter(|_| whole.spread() == Some(Spread::HomeCounts))
            .map(|((global, here), limit)| remote_shares(global, here, limit.max()))
            .filter(|&shares| shares > 0);
        Here {
            whole,
            split,
            policy,
            home,
            home_shares,
            link_grant,
            forwarded,
        }
    }

    /// What the home keeps for its own asks out of a grant to another
    /// region, or an ask it sent on
    /// (sluice_core::region::global::home_keeps).
    fn home_keeps(&self, counters: &Counters, counter_key: &str, now: Nanos) -> u64 {
        match self.home {
            Some(((global, here), limit)) => counters.global().home_keeps(
                counter_key,
                match self.split {
                    // The part is the home's share already.
                    Some(_) => limit.max(),
                    None => global.reserved(here, limit.max()),
                },
                limit,
                now,
            ),
            None => 0,
        }
    }

    /// Under the counter's lock: opens the key's window at the home (its
    /// start, when it opened now with shares booked), and applies the ask,
    /// the grant of a slice, or the refund of one.
    pub(super) fn on_counter(
        &self,
        state: &mut KeyState,
        counters: &Counters,
        counter_key: &str,
        now: Nanos,
        op: Op,
        budget: Budget,
    ) -> (Decision, Option<Grant>, Option<Nanos>) {
        let policy = self.policy;
        let opened = self
            .home_shares
            .and_then(|s| policy.open_at_home(state, now, s));
        let (decision, grant) = match budget {
            Budget::None if self.forwarded => {
                let keeps = self.home_keeps(counters, counter_key, now);
                let decision = forwarded_at_home(policy, state, now, op.cost(), keeps);
                (decision, None)
            }
            Budget::None => (op.apply(policy, state, now), None),
            // A link item's cost and slice are one grant of up to
            // their sum (crate::global).
            Budget::Slice(want) if self.link_grant => policy.grant_to_region(
                state,
                now,
                op.cost().saturating_add(want),
                self.home_keeps(counters, counter_key, now),
            ),
            Budget::Slice(want) => policy.grant(state, now, op.cost(), want),
            Budget::Refund(r) => (policy.refund(state, now, r.units, r.taken_at), None),
        };
        (decision, grant, opened)
    }
}

/// At the home, an ask another region sent on because what it holds could
/// not pay for it: decided on the one count, leaving what the home keeps
/// for its own asks (`keeps`, as out of a grant to that region), so that a
/// busy region's asks do not starve a quiet home.
fn forwarded_at_home(
    policy: &Policy,
    state: &mut KeyState,
    now: Nanos,
    cost: u64,
    keeps: u64,
) -> Decision {
    if keeps > 0 {
        let mut probe = state.clone();
        let room = Op::Allow(cost.saturating_add(keeps)).apply(policy, &mut probe, now);
        if !room.allowed {
            return Decision {
                remaining: room.remaining.saturating_sub(keeps),
                ..room
            };
        }
    }
    Op::Allow(cost).apply(policy, state, now)
}
