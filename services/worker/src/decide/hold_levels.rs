//! A grouped key's hold verbs (SPEC §13, §17): a reserve holds at every
//! level of its chain, and a settle or an extend does so at every level,
//! by one hold id.
//!
//! A hold is the start of work whose cost is known only after it; the
//! organisation's pool must carry it as the user's limit does, or twenty
//! users could each hold the org's whole pool. So, as a grouped ask
//! (`levels.rs`), a reserve is decided in two steps under the group's
//! lock: every level is checked, taking nothing (its override, then its
//! slots and limits after its holds whose end has come ended,
//! [`holds::check_reserve`]); then, when every level admits it, it is
//! reserved at each under the one hold id drawn for it and the one ttl
//! (the ask's own policy's), so that it ends at every level together.
//! When a level denies, that level denies the reserve for real (its
//! usage, its block), and every other level records a denied ask.
//!
//! A settle settles the hold at each level for the same real cost (the
//! work used what it used, at every level); an extend moves its end at
//! each. A level that no longer knows the hold (it cannot, unless its
//! owner lost it in snapshot mode) is answered with a peek, and the verb
//! fails only when the ask's own level does not know it. The journal and
//! the snapshots carry each level's hold as any other hold of its key, so
//! a takeover restores every level.

use super::holding::{counted, HoldAnswer, HoldAt, Prepared};
use super::levels::conclude;
use super::{blocked, Decider, Turn};
use crate::turn_log::Usage;
use sluice_core::group::Chain;
use sluice_core::holds;
use sluice_core::outstanding::{TooManyHolds, MOST_HOLDS};
use sluice_core::policy::Decision;
use sluice_core::subject::Verb;
use sluice_core::wire::ErrorReply;

impl Decider {
    /// Does the hold verb `at` at every level of `chain` (a grouped key's,
    /// more than one level), leaving the levels in the turn for the
    /// answer, which is the ask's own level's hold with the levels'
    /// decisions combined ([`conclude`]).
    pub(super) fn hold_levels<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        chain: &Chain<'p, '_>,
        at: HoldAt,
    ) -> Result<HoldAnswer<'p>, ErrorReply> {
        let _group = turn.owned.counters.group(chain.group());
        let answers = match at.verb {
            Verb::Reserve => self.reserve_levels(turn, chain, at)?,
            _ => self.at_every_level(turn, chain, at)?,
        };
        let decisions: Vec<Decision> = answers.iter().map(|a| a.0).collect();
        let (_, policy, held) = *answers.last().expect("a chain has a level");
        Ok((conclude(turn, chain, &decisions), policy, held))
    }

    /// A reserve at every level, or at none.
    fn reserve_levels<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        chain: &Chain<'p, '_>,
        at: HoldAt,
    ) -> Result<Vec<HoldAnswer<'p>>, ErrorReply> {
        let prepared = chain
            .levels()
            .map(|l| self.prepare_hold(turn, l.key.as_str(), l.policy, &at))
            .collect::<Result<Vec<_>, _>>()?;
        if turn.owned.counters.outstanding().holds_len() + chain.len() > MOST_HOLDS {
            return Err(ErrorReply::unavailable(TooManyHolds.to_string()));
        }
        let checked: Vec<Decision> = chain
            .levels()
            .zip(&prepared)
            .map(|(l, p)| self.check_hold(turn, l.key.as_str(), *p, at))
            .collect();
        if checked.iter().any(|d| !d.allowed) {
            return self.deny_hold_levels(turn, chain, &prepared, &checked, at);
        }
        let mut held = Vec::with_capacity(chain.len());
        for (level, p) in chain.levels().zip(&prepared) {
            match self.hold_at(turn, level.key.as_str(), *p, at) {
                Ok(answer) if answer.2.is_some() => held.push(answer),
                // Checked under the group's lock, every level holds it; a
                // plain ask of a level's key on another thread (`sluice
                // dev`) may still come between: what was held goes back.
                _ => {
                    let settle = HoldAt {
                        verb: Verb::Settle,
                        cost: 0,
                        ..at
                    };
                    for (level, p) in chain.levels().zip(&prepared).take(held.len()) {
                        let _ = self.hold_at(turn, level.key.as_str(), *p, settle);
                    }
                    return Err(ErrorReply::unavailable(format!(
                        "level {} of the group changed while the reserve was decided; reserve again",
                        level.policy.name()
                    )));
                }
            }
        }
        Ok(held)
    }

    /// What a reserve at one level would come to, taking nothing.
    fn check_hold(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        token: &str,
        p: Prepared<'_>,
        at: HoldAt,
    ) -> Decision {
        if p.blocked {
            return blocked(p.base);
        }
        let (r, now) = (at.reservation(&p), turn.now);
        self.with_due_holds_ended(turn, p.base, p.policy, token, |state, table, buf| {
            holds::check_reserve(p.policy, state, table, buf, now, &r)
        })
    }

    /// A reserve some level denied (`checked` says which): each such level
    /// denies it as a plain reserve, every other one records a denied ask.
    fn deny_hold_levels<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        chain: &Chain<'p, '_>,
        prepared: &[Prepared<'p>],
        checked: &[Decision],
        at: HoldAt,
    ) -> Result<Vec<HoldAnswer<'p>>, ErrorReply> {
        let mut answers = Vec::with_capacity(checked.len());
        for ((level, p), check) in chain.levels().zip(prepared).zip(checked) {
            let token = level.key.as_str();
            if check.allowed {
                self.record_usage(turn, counted(p.base, token, at.cost), Usage::Denied);
                answers.push((*check, p.base.name(), None));
            } else {
                answers.push(self.hold_at(turn, token, *p, at)?);
            }
        }
        Ok(answers)
    }

    /// A settle or an extend at every level; it fails only when the ask's
    /// own level does not know the hold.
    fn at_every_level<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        chain: &Chain<'p, '_>,
        at: HoldAt,
    ) -> Result<Vec<HoldAnswer<'p>>, ErrorReply> {
        let mut answers = Vec::with_capacity(chain.len());
        for level in chain.levels() {
            let token = level.key.as_str();
            let p = self.prepare_hold(turn, token, level.policy, &at)?;
            match self.hold_at(turn, token, p, at) {
                Ok(answer) => answers.push(answer),
                Err(unknown) if answers.len() + 1 == chain.len() => return Err(unknown),
                Err(_) => {
                    let (now, concurrency) = (turn.now, p.base.holding().concurrency);
                    let peek = self.with_due_holds_ended(
                        turn,
                        p.base,
                        p.policy,
                        token,
                        |state, table, buf| {
                            holds::peek(p.policy, state, table, buf, now, concurrency)
                        },
                    );
                    answers.push((peek, p.base.name(), None));
                }
            }
        }
        Ok(answers)
    }
}
