//! A grouped ask (SPEC §17, `sluice_core::group`): decided at every level
//! of its chain in one turn, all or nothing.
//!
//! Every key of a group lives in its first token's partition, so the owner
//! has every level's counter at hand. An ask that takes (an `allow` of a
//! cost, waiting or not) is decided in two steps under the group's lock
//! ([`crate::counters::Counters::group`]): every level is checked, taking
//! nothing (its override, a block, its mode included); then, when every
//! level admits it, it is taken at each, through the same path a plain
//! ask takes (records, usage, alerts). When a level denies, that level
//! decides the ask for real (denied, taking nothing, its penalty started)
//! and every other level records a denied ask in its usage: the ask was
//! asked of every level's key. A hit counts at every level, as a hit does
//! whether or not it fits; a peek looks at every level.

use super::{blocked, refuse_unheld, Applied, Decider, Grouped, Turn};
use crate::turn_log::{Counted, Usage};
use sluice_core::ask::{self, Op};
use sluice_core::group::{self, Chain, Level};
use sluice_core::holds;
use sluice_core::key::KeyToken;
use sluice_core::policy::{Decision, Policy};
use sluice_core::wire::batch::Budget;
use sluice_core::wire::{ErrorReply, LevelReply};

impl Decider {
    /// Decides `op` at every level of `chain` (a grouped ask's, more than
    /// one level), leaving the levels in the turn for the answer.
    pub(super) fn apply_levels<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        chain: &Chain<'p, '_>,
        op: Op,
        budget: Budget,
    ) -> Result<Applied<'p>, ErrorReply> {
        if budget != Budget::None {
            return Err(ErrorReply::bad_request(
                "a grouped key takes no slice of a local budget (SPEC §17): ask it without one",
            ));
        }
        for level in chain.levels() {
            refuse_unheld(level.policy, op)?;
            ask::admit(|_| Some(level.policy), level.policy.name(), op)?;
        }
        let _group = turn.owned.counters.group(chain.group());
        let takes = matches!(op, Op::Allow(cost) | Op::Wait { cost, .. } if cost > 0);
        let decisions = if takes {
            let checked: Vec<Decision> = chain.levels().map(|l| self.check(turn, l, op)).collect();
            let combined = group::combine(&checked).expect("a chain has a level");
            match combined.denied_by {
                Some(_) => self.deny_levels(turn, chain, op, &checked)?,
                None => self.take_levels(turn, chain, op)?,
            }
        } else {
            self.take_levels(turn, chain, op)?
        };
        let own = chain.level(chain.len() - 1).expect("a chain has a level");
        Ok((conclude(turn, chain, &decisions), own.policy.name(), None))
    }

    /// `op` applied at every level, each as a plain ask of its key.
    fn take_levels<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        chain: &Chain<'p, '_>,
        op: Op,
    ) -> Result<Vec<Decision>, ErrorReply> {
        chain
            .levels()
            .map(|l| Ok(self.apply_to(turn, l.key, l.policy, op, Budget::None)?.0))
            .collect()
    }

    /// A grouped ask some level denied (`checked` says which): each such
    /// level decides it as a plain ask (denied, taking nothing, its
    /// penalty started), every other one records a denied ask.
    fn deny_levels<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        chain: &Chain<'p, '_>,
        op: Op,
        checked: &[Decision],
    ) -> Result<Vec<Decision>, ErrorReply> {
        let mut decisions = Vec::with_capacity(checked.len());
        for (level, check) in chain.levels().zip(checked) {
            if check.allowed {
                let counted = Counted {
                    policy: level.policy.name(),
                    token: level.key.as_str(),
                    cost: op.cost(),
                };
                self.record_usage(turn, counted, Usage::Denied);
                decisions.push(*check);
            } else {
                let (decision, _, _) =
                    self.apply_to(turn, level.key, level.policy, op, Budget::None)?;
                decisions.push(decision);
            }
        }
        Ok(decisions)
    }

    /// The levels of a repeated grouped ask (SPEC §16, §17): each level
    /// as it stands now, peeked (its slots too), none denying; the answer's
    /// own decision is the first one's, remembered. A repeat is of an ask
    /// that was admitted at every level, so no level denied it.
    pub(super) fn repeat_levels<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        key: KeyToken<'_>,
        base: &'p Policy,
    ) {
        if base.parent().is_none() {
            return;
        }
        let policies = turn.policies;
        let Ok(chain) = group::resolve(|n| policies.get(n), base, key) else {
            return;
        };
        let (now, counters) = (turn.now, turn.owned.counters);
        let levels = chain
            .levels()
            .map(|level| {
                let token = level.key.as_str();
                let policy = policies.in_force(level.policy, token);
                let concurrency = level.policy.holding().concurrency;
                let peek = ask::with_counter_key(level.policy.name(), token, |buf| {
                    counters.update(policy, buf, now, |state| {
                        let table = counters.outstanding();
                        holds::peek(policy, state, &table, buf, now, concurrency)
                    })
                });
                LevelReply::new(level.policy.name(), &peek)
            })
            .collect();
        turn.grouped = Some(Box::new(Grouped {
            levels,
            denied_by: None,
        }));
    }

    /// What `op` would get at `level`, taking nothing: its override's
    /// limits (or the denial of a key blocked by one), its block, its mode.
    fn check(&self, turn: &Turn<'_, '_, '_>, level: Level<'_, '_>, op: Op) -> Decision {
        let (base, token) = (level.policy, level.key.as_str());
        let Some(policy) = turn.policies.limits_for(base, token) else {
            return blocked(base);
        };
        let (now, counters) = (turn.now, turn.owned.counters);
        ask::with_counter_key(policy.name(), token, |key| {
            counters.update(policy, key, now, |state| {
                policy.check_within(state, now, op.cost(), op.within())
            })
        })
    }
}

/// The one decision the levels' `decisions` sum up to
/// ([`group::combine`]), leaving every level and the one that denied in
/// the turn for the answer.
pub(super) fn conclude(
    turn: &mut Turn<'_, '_, '_>,
    chain: &Chain<'_, '_>,
    decisions: &[Decision],
) -> Decision {
    let combined = group::combine(decisions).expect("a chain has a level");
    let levels = chain
        .levels()
        .zip(decisions)
        .map(|(l, d)| LevelReply::new(l.policy.name(), d))
        .collect();
    let denied_by = combined
        .denied_by
        .and_then(|i| chain.level(i))
        .map(|l| l.policy.name().to_string());
    turn.grouped = Some(Box::new(Grouped { levels, denied_by }));
    combined.decision
}
