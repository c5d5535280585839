//! Journal replay at takeover ([`Decider::replay`]): each record of a turn
//! the restored snapshot does not hold is applied again, at its own time,
//! under the limits its key was decided under. Apart from `decide.rs`,
//! which decides asks as they come, because replay changes counters from
//! what was decided, never decides: a record counts again whatever the
//! limit, a reset forgets again, a slice's refund gives back only what its
//! slice still holds, an id is remembered again (and a gift's id gives the
//! gift again), a blocked key's denial blocks it again.

use super::Decider;
use crate::counters::Counters;
use crate::journal::record::{Kind, NamedOf, Record};
use sluice_core::ask::{self, Op};
use sluice_core::budget::Refund;
use sluice_core::outstanding::Returned;
use sluice_core::policies::Policies;
use sluice_core::policy::Policy;
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;

impl Decider {
    /// Applies a journal record at takeover: it was counted, so it is
    /// counted again whatever the limit, at its original time; a reset
    /// forgets the counter again. `false` for a record of a policy no
    /// longer configured (it is skipped).
    pub fn replay(&self, policies: &Policies, record: &Record, counters: &Counters) -> bool {
        let Some(base) = policies.get(record.policy()) else {
            return false;
        };
        let typed = record.typed();
        if let Kind::IdRemembered { cost, named } = typed.kind {
            remember_replayed(record, cost, named, counters);
            self.replay_gift(policies, record, &named.id, counters);
            return true;
        }
        self.replay_tally(policies, base, record, typed, counters);
        let in_force = policies.in_force(base, record.key());
        self.replay_home_demand(in_force, record, typed, counters);
        // Under the limits the key was decided under: an override's, if
        // any; of a global bucket, this region's part.
        let policy = policies
            .in_force(base, record.key())
            .counted_under(self.region());
        if let Kind::Denied { .. } | Kind::UsedOnly { .. } = typed.kind {
            // Usage only, no counter changed; or a blocked key's denial.
            return Decider::replay_block(policy, record, typed.kind, counters);
        }
        let t = record.at();
        ask::with_counter_key(record.policy(), record.key(), |buf| match typed.kind {
            Kind::Denied { .. } | Kind::UsedOnly { .. } | Kind::IdRemembered { .. } => false,
            Kind::HoldReserved { .. } | Kind::HoldExtended { .. } | Kind::HoldEnded { .. } => {
                Decider::replay_hold(policy, typed.kind, buf, t, counters)
            }
            Kind::Reset => {
                counters.forget(buf);
                true
            }
            Kind::Counted { units } => {
                counters.apply(policy, buf, t, Op::Record(units));
                true
            }
            Kind::Sliced { units } => {
                counters.apply(policy, buf, t, Op::Record(units));
                let until = policy.grant_kept_until(t);
                counters.outstanding().replayed_grant(buf, t, units, until);
                true
            }
            Kind::Refunded(back) => {
                replay_refund(policy, back, record.turn(), buf, t, counters);
                true
            }
        })
    }
}

/// A slice's refund replayed at `t` on the counter `buf` names.
fn replay_refund(
    policy: &Policy,
    back: Refund,
    turn: u64,
    buf: &str,
    t: Nanos,
    counters: &Counters,
) {
    if turn != 0 {
        // A slice given back in a turn the snapshot does not hold (the
        // takeover replays no other): given back again, as it was, if its
        // slice is known here (carried, or replayed).
        let known = counters.outstanding().refund(buf, &back, t);
        if matches!(known, Ok(Returned::Known)) && back.units > 0 {
            counters.update(policy, buf, t, |state| {
                policy.refund(state, t, back.units, back.taken_at)
            });
        }
    } else {
        // A slice given back in a journal written before turns were
        // numbered is not given back again: the record may be in the
        // restored snapshot too, so its units stay counted until their
        // window ends or the bucket refills them. Its slice holds that
        // much less.
        counters.outstanding().replayed_refund(
            buf,
            back.taken_at,
            back.units.saturating_add(back.spent),
        );
    }
}

/// An ask's id, remembered again from its record (SPEC §16).
fn remember_replayed(record: &Record, cost: u64, named: &NamedOf<String>, counters: &Counters) {
    let Some(verb) = Verb::parse(&named.verb) else {
        return;
    };
    let asked = sluice_core::ask_ids::Asked {
        verb,
        policy: record.policy(),
        cost,
    };
    let answer = (named.remaining, named.limit, named.reset, false);
    let first = sluice_core::ask_ids::FirstAnswer::stored(answer, named.held, named.start);
    let until = Nanos(named.until);
    let mut ids = counters.ids();
    let name = ids.name(record.key(), &named.id);
    ids.remember(name, asked, first, until, record.at());
}
