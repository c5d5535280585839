//! The tallies of what each region spent of a global policy's keys, for
//! its alerts (SPEC §14 across regions; the why is
//! `sluice_core::region::tally`'s). Each region counts what it spent
//! where the ask was made; a region other than the home reports its tally
//! to the home over the link (coalesced by the link task,
//! [`crate::global_link`]); the home adds what is new to the tally whose
//! thresholds fire. All of them are ordinary counters of the partition,
//! so snapshots and handovers carry them; in journal mode the records of
//! the asks rebuild them ([`Decider::replay_tally`]), and a partition's
//! new owner at the home asks the other regions to report again.

use super::{Decider, Owned, Turn};
use crate::counters::Counters;

use crate::journal::record::{Kind, Record, Typed};
use sluice_core::algorithm::fixed_window::State;
use sluice_core::ask::{self, Op};
use sluice_core::policies::Policies;
use sluice_core::policy::Policy;
use sluice_core::region::state::{Action, When};
use sluice_core::region::tally::{
    add_new, not_over, spent_key, take_report, windows_of, Reported, TallyKey,
};
use sluice_core::region::RegionName;
use sluice_core::time::Nanos;
use sluice_core::wire::link::TallyBatch;

impl Decider {
    /// This region spent `cost` units of `token` under `policy` (the
    /// policy in force for the key): counted in its tally, at the home in
    /// the one whose thresholds fire, elsewhere in its own, reported.
    pub(super) fn tally_spent(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        policy: &Policy,
        token: &str,
        cost: u64,
    ) {
        let (Some(tallies), Some(global), Some(here)) = (
            policy.tallies(),
            policy.scope().global(),
            self.region.as_ref(),
        ) else {
            return;
        };
        if cost == 0 {
            return;
        }
        let (owned, now) = (turn.owned, turn.now);
        ask::with_counter_key(policy.name(), token, |buf| {
            if global.home() == here {
                let key = TallyKey::Global.of(buf);
                owned
                    .counters
                    .apply(&tallies.alerting, &key, now, Op::Record(cost));
                return;
            }
            let key = TallyKey::Spent.of(buf);
            let windows = owned.counters.update(&tallies.silent, &key, now, |state| {
                Op::Record(cost).apply(&tallies.silent, state, now);
                windows_of(state)
            });
            let report = report_of(
                here,
                global.home(),
                owned.partition,
                (policy.name(), token),
                windows,
            );
            turn.log.act(When::Now, report);
        });
    }

    /// At the home: another region's reports of what it spent; what is
    /// new in each goes into the key's tally whose thresholds fire, and
    /// counts as a change of the partition, so that the next snapshot (a
    /// handover's final one too) carries the tally and the alerts it
    /// fired. A window the home's clock says is over takes nothing.
    pub(super) fn take_tallies(
        &self,
        policies: &Policies,
        batch: &TallyBatch,
        owned: Owned<'_>,
        now: Nanos,
    ) {
        let (Some(here), Ok(from)) = (self.region.as_ref(), RegionName::new(&batch.from)) else {
            return;
        };
        for report in &batch.reports {
            let Some(base) = policies.get(&report.policy) else {
                continue;
            };
            let policy = policies.in_force(base, &report.key);
            let (Some(tallies), Some(global)) = (policy.tallies(), policy.scope().global()) else {
                continue;
            };
            if global.home() != here || from == *here {
                continue;
            }
            ask::with_counter_key(policy.name(), &report.key, |buf| {
                let from_key = TallyKey::From(&from).of(buf);
                let new = owned
                    .counters
                    .update(&tallies.silent, &from_key, now, |state| {
                        take_report(state, &not_over(&report.windows, policy.limits(), now))
                    });
                if new.iter().any(|&(_, units)| units > 0) {
                    let key = TallyKey::Global.of(buf);
                    owned
                        .counters
                        .update(&tallies.alerting, &key, now, |state| add_new(state, &new));
                    owned.stats.add_changes(1);
                }
            });
        }
    }

    /// Reports this region's tallies of the partition's keys whose home
    /// is `home` (any home: `None`) to their homes: after a takeover here,
    /// and when a home's new owner asks. The reports to send.
    pub(super) fn report_tallies(
        &self,
        policies: &Policies,
        owned: Owned<'_>,
        home: Option<&RegionName>,
    ) -> Vec<Action> {
        let Some(here) = self.region.as_ref() else {
            return Vec::new();
        };
        let mut reports = Vec::new();
        owned.counters.for_each(|counter_key, state| {
            let Some((name, token)) = spent_key(counter_key).and_then(|key| key.split_once('/'))
            else {
                return;
            };
            let Some(global) = policies.get(name).and_then(|p| p.scope().global()) else {
                return;
            };
            if home.is_some_and(|home| home != global.home()) || global.home() == here {
                return;
            }
            let windows = windows_of(state);
            reports.push(report_of(
                here,
                global.home(),
                owned.partition,
                (name, token),
                windows,
            ));
        });
        reports
    }

    /// A partition was taken over here: its tallies go to their homes
    /// again, and, as a home, it asks every other region for theirs (its
    /// snapshot may hold older reports than the last owner had taken).
    /// What to send.
    pub fn took_over_tallies(&self, policies: &Policies, owned: Owned<'_>) -> Vec<Action> {
        let Some(here) = self.region.as_ref() else {
            return Vec::new();
        };
        // Most systems have no such policy: no walk over every counter.
        if !policies.iter().any(|p| p.tallies().is_some()) {
            return Vec::new();
        }
        let mut actions = self.report_tallies(policies, owned, None);
        let mut regions: Vec<RegionName> = policies
            .iter()
            .filter(|p| p.tallies().is_some())
            .filter_map(|p| p.scope().global())
            .filter(|g| g.home() == here)
            .flat_map(|g| g.others(here).cloned().collect::<Vec<_>>())
            .collect();
        regions.sort();
        regions.dedup();
        if !regions.is_empty() {
            actions.push(Action::Resend {
                regions,
                partition: owned.partition,
                home: here.clone(),
            });
        }
        actions
    }

    /// Replays what a journal record spent into the key's tally: an ask
    /// made in this region (a count of its own, or a delegate's use
    /// recorded apart), not what another region sent over the link.
    pub(super) fn replay_tally(
        &self,
        policies: &Policies,
        base: &Policy,
        record: &Record,
        typed: Typed<'_, String>,
        counters: &Counters,
    ) {
        let policy = policies.in_force(base, record.key());
        let (Some(tallies), Some(global), Some(region)) =
            (policy.tallies(), policy.scope().global(), self.region())
        else {
            return;
        };
        let spent_here = match typed.kind {
            Kind::Reset => {
                ask::with_counter_key(policy.name(), record.key(), |buf| {
                    forget_tallies(policy, buf, counters)
                });
                return;
            }
            Kind::Counted { units } if typed.is_usage => units,
            Kind::UsedOnly { units } => units,
            _ => 0,
        };
        if spent_here == 0 {
            return;
        }
        ask::with_counter_key(policy.name(), record.key(), |buf| {
            let (tally, key) = match global.home() == region {
                true => (&tallies.alerting, TallyKey::Global.of(buf)),
                false => (&tallies.silent, TallyKey::Spent.of(buf)),
            };
            counters.apply(tally, &key, record.at(), Op::Record(spent_here));
        });
    }
}

/// The action that reports this region's (`here`) tally of `(policy,
/// token)`, its `windows`, to the key's `home`.
fn report_of(
    here: &RegionName,
    home: &RegionName,
    partition: u32,
    (policy, token): (&str, &str),
    windows: Vec<State>,
) -> Action {
    Action::Tally {
        home: home.clone(),
        partition,
        from: here.clone(),
        report: Reported {
            policy: policy.to_string(),
            key: token.to_string(),
            windows,
        },
    }
}

/// A reset (`rl.reset`) of the counter `counter_key` under `policy` forgets
/// its tallies too: what was spent before it no longer counts toward the
/// window's thresholds, as a regional policy's count starts over (an
/// alert that fired stays fired in its window).
pub(super) fn forget_tallies(policy: &Policy, counter_key: &str, counters: &Counters) {
    let (Some(_), Some(global)) = (policy.tallies(), policy.scope().global()) else {
        return;
    };
    counters.forget(&TallyKey::Spent.of(counter_key));
    counters.forget(&TallyKey::Global.of(counter_key));
    for (region, _) in global.weights() {
        counters.forget(&TallyKey::From(region).of(counter_key));
    }
}
