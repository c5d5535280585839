//! The holds' verbs at a key's owner (SPEC §13): `rl.reserve`,
//! `rl.settle`, `rl.extend`, and the end of holds nobody settled.
//!
//! The rules are `sluice_core::holds`'; here they meet the key's counters,
//! the partition's table of what was granted (`Counters::outstanding`), the
//! turn's log (records in journal mode, usage) and the policy in force. Usage
//! follows the contract: a reserve is not usage yet, a denied one is
//! `denied`; a settle's real cost is `used` in the minute it settles, and
//! an expired hold that is charged is `used` when it ends. In the journal a
//! reserve is written as a slice is (counted, its usage to come) and a
//! settle or an end as a slice given back (what came back, and what was
//! spent), so usage replays exactly; a replayed give-back gives nothing
//! back again (as for slices: replay errs on the side of denying).

use super::ids::Answered;
use super::{blocked, Decider, Once, Owned, Turn};
use crate::counters::Counters;
use crate::journal::record::Kind;
use crate::turn_log::{Counted, TurnLog, Usage};
use sluice_core::ask;
use sluice_core::ask::Op;
use sluice_core::ask_ids::FirstAnswer;
use sluice_core::budget::Refund;
use sluice_core::group;
use sluice_core::holds::{self, Hold, HoldId, Reservation, Reserved, Settle};
use sluice_core::key::KeyToken;
use sluice_core::outstanding::Outstanding;
use sluice_core::policies::Policies;
use sluice_core::policy::{Decision, KeyState, Policy};
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use sluice_core::wire::batch::HoldAct;
use sluice_core::wire::hold::decode_hold_request;
use sluice_core::wire::ErrorReply;

/// What a hold verb answers: the decision, and the hold it kept or
/// extended with the time until it ends.
pub type HoldAnswer<'p> = (Decision, &'p str, Option<(HoldId, Nanos)>);

/// A hold verb's answer to an id (SPEC §16, [`super::ids`]).
impl<'p> Answered<'p> for HoldAnswer<'p> {
    fn first(&self, now: Nanos) -> FirstAnswer {
        FirstAnswer {
            held: self.2.map(|(id, left)| (id, now.saturating_add(left))),
            ..FirstAnswer::new(self.0, now)
        }
    }

    /// The same hold, with the time left until its end as the first
    /// answer set it (an extend since is not seen: the hold's own end is
    /// the owner's).
    fn again(first: FirstAnswer, policy: &'p str, now: Nanos) -> HoldAnswer<'p> {
        let held = first
            .held
            .map(|(id, end)| (id, Nanos(end.0.saturating_sub(now.0))));
        (first.again(now), policy, held)
    }
}

impl Decider {
    /// Decides one hold verb (`verb` is one of [`Verb::HOLDS`]) that came
    /// on its own subject.
    pub(super) fn hold<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        verb: Verb,
        token: &str,
        body: &[u8],
    ) -> Result<Once<HoldAnswer<'p>>, ErrorReply> {
        let key = KeyToken::parse(token)?;
        let request = decode_hold_request(verb, body).map_err(|e| e.reply)?;
        let owned = turn.owned;
        self.locate(key, |p| (p == owned.partition).then_some(owned))?;
        let act = HoldAct {
            verb,
            ttl_ms: request.ttl_ms,
            hold: request.hold,
        };
        let named = (key, request.id.as_deref());
        let asked = (request.policy.as_str(), request.cost, request.wait_ms);
        self.hold_once(turn, named, asked, act)
    }

    /// [`Decider::hold_act`], once per id (SPEC §16): a reserve that kept
    /// a hold, a settle or an extend that was done is remembered, so that
    /// its repeat is answered as the first (the same hold; a settle's
    /// answer, not a 404 for the hold it ended). A reserve may wait up to
    /// `wait_ms` for its start (SPEC §18).
    pub(super) fn hold_once<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        named: (KeyToken<'_>, Option<&str>),
        (policy, cost, wait_ms): (&str, u64, u64),
        act: HoldAct,
    ) -> Result<Once<HoldAnswer<'p>>, ErrorReply> {
        let key = named.0;
        let admitted = |held: &HoldAnswer<'p>| act.verb != Verb::Reserve || held.2.is_some();
        let apply =
            |turn: &mut Turn<'_, 'p, '_>| self.hold_act(turn, key, (policy, cost, wait_ms), act);
        self.once(turn, named, (act.verb, policy, cost), admitted, apply)
    }

    /// Decides a hold verb whose fields are checked
    /// ([`sluice_core::wire::hold`]) and whose key is one of the turn's
    /// partition: on its own subject ([`Decider::hold`]) or as a batch
    /// item ([`Decider::batch`]), the same way. A reserve's `wait_ms` is
    /// checked against the policy's `max_wait` before anything changes. A
    /// grouped key's verb is done at every level of its chain
    /// ([`super::hold_levels`]).
    pub(super) fn hold_act<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        key: KeyToken<'_>,
        (policy, cost, wait_ms): (&str, u64, u64),
        act: HoldAct,
    ) -> Result<HoldAnswer<'p>, ErrorReply> {
        let policies: &'p Policies = turn.policies;
        let base = policies
            .get(policy)
            .ok_or_else(|| ErrorReply::unknown_policy(policy))?;
        if base.scope().global().is_some() {
            // A hold lives with one owner; a global key has one in every
            // region, and only the home's count holds the others' shares.
            return Err(ErrorReply::bad_request(format!(
                "policy {policy} is global (scope = \"global\"): holds are not available on a global policy in this version; reserve under a regional policy"
            )));
        }
        // One ttl for every level of a group: the hold ends at once.
        let ttl = holds::ttl(act.ttl_ms, base.holding().ttl)
            .map_err(|e| ErrorReply::bad_request(e.to_string()))?;
        let at = HoldAt {
            verb: act.verb,
            cost,
            wait_ms,
            ttl,
            // A reserve's hold id is drawn once, for every level.
            hold: match act.verb {
                Verb::Reserve => Some(self.hold_ids.draw()),
                _ => act.hold,
            },
        };
        if base.parent().is_some() || key.is_grouped() {
            let chain = group::resolve(|n| policies.get(n), base, key).map_err(|e| e.reply())?;
            if chain.is_grouped() {
                return self.hold_levels(turn, &chain, at);
            }
        }
        let prepared = self.prepare_hold(turn, key.as_str(), base, &at)?;
        self.hold_at(turn, key.as_str(), prepared, at)
    }

    /// `at` checked for `token` under `base`: the policy in force (its
    /// override's, if any), whether an override blocks the key, and how
    /// long a reserve may wait. A reserve that can never fit is refused.
    pub(super) fn prepare_hold<'p>(
        &self,
        turn: &Turn<'_, 'p, '_>,
        token: &str,
        base: &'p Policy,
        at: &HoldAt,
    ) -> Result<Prepared<'p>, ErrorReply> {
        let Some(policy) = turn.policies.limits_for(base, token) else {
            return Ok(Prepared {
                base,
                policy: base,
                blocked: true,
                within: Nanos::ZERO,
            });
        };
        // An override inherits its base's max_wait (SPEC §18).
        let within = ask::admit_wait(base, at.wait_ms)?;
        if at.verb == Verb::Reserve && !policy.limits().is_empty() && at.cost > policy.capacity() {
            return Err(ErrorReply::cost_above_capacity(
                at.cost,
                base.name(),
                policy.capacity(),
            ));
        }
        Ok(Prepared {
            base,
            policy,
            blocked: false,
            within,
        })
    }

    /// Does `at` on the counter of `token` as `prepared` says: holds whose
    /// end has come end first, then the verb, and the answer.
    pub(super) fn hold_at<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        token: &str,
        prepared: Prepared<'p>,
        at: HoldAt,
    ) -> Result<HoldAnswer<'p>, ErrorReply> {
        let Prepared {
            base,
            policy,
            blocked: is_blocked,
            ..
        } = prepared;
        if is_blocked && at.verb == Verb::Reserve {
            self.record_usage(turn, counted(base, token, at.cost), Usage::Denied);
            return Ok((blocked(base), base.name(), None));
        }
        let (now, holding) = (turn.now, base.holding());
        let outcome = self.with_due_holds_ended(turn, base, policy, token, |state, table, buf| {
            match (at.verb, at.hold) {
                (Verb::Reserve, Some(_)) => {
                    let r = at.reservation(&prepared);
                    holds::reserve(policy, state, table, buf, now, &r)
                        .map(Outcome::Reserved)
                        .map_err(|e| ErrorReply::unavailable(e.to_string()))
                }
                (Verb::Settle, Some(id)) => {
                    let s = Settle {
                        id,
                        cost: at.cost,
                        concurrency: holding.concurrency,
                    };
                    Ok(Outcome::Settled(holds::settle(
                        policy, state, table, buf, now, &s,
                    )))
                }
                (_, Some(id)) => {
                    let moved = table.extend(buf, id, now.saturating_add(at.ttl), now);
                    let peek = holds::peek(policy, state, table, buf, now, holding.concurrency);
                    Ok(Outcome::Extended(peek, moved))
                }
                (_, None) => {
                    unreachable!(
                        "a reserve draws its hold; wire::hold requires one to settle or extend"
                    )
                }
            }
        });
        self.hold_answer(turn, (base, token, at.cost, at.hold), outcome?)
    }

    /// Runs `f` on the state of `token`'s counter under `policy` and the
    /// partition's table of holds, after ending (and logging) the holds
    /// of that counter whose end has come.
    pub(super) fn with_due_holds_ended<T>(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        base: &Policy,
        policy: &Policy,
        token: &str,
        f: impl FnOnce(&mut KeyState, &mut Outstanding, &str) -> T,
    ) -> T {
        let (counters, now) = (turn.owned.counters, turn.now);
        let mut ended = Vec::new();
        let out = ask::with_counter_key(base.name(), token, |buf| {
            counters.update(policy, buf, now, |state| {
                let mut table = counters.outstanding();
                for hold in table.ended_of(buf, now) {
                    holds::end(policy, state, now, &hold);
                    ended.push(hold);
                }
                f(state, &mut table, buf)
            })
        });
        for hold in &ended {
            self.hold_ended(turn, base.name(), token, hold);
        }
        out
    }

    /// What a hold verb that passed the counter answers, and what it
    /// leaves in the turn's log: a hold kept or extended (with the time until it
    /// ends), a denial's usage, a settle's refund and usage, or the error
    /// for a hold this owner does not know.
    fn hold_answer<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        (base, token, cost, id): (&'p Policy, &str, u64, Option<HoldId>),
        outcome: Outcome,
    ) -> Result<HoldAnswer<'p>, ErrorReply> {
        let now = turn.now;
        let unknown = || {
            let id = id.map(|h| h.to_string()).unwrap_or_default();
            ErrorReply::unknown_hold(&id, base.name())
        };
        match outcome {
            Outcome::Reserved(Reserved::Held { decision, hold }) => {
                turn.log.held(base.name(), token, &hold);
                Ok((
                    decision,
                    base.name(),
                    Some((hold.id, Nanos(hold.ends_at.0.saturating_sub(now.0)))),
                ))
            }
            Outcome::Reserved(Reserved::Denied(decision)) => {
                // A blocked key's denial is journaled with its block (SPEC §18).
                let denied = counted(base, token, cost);
                if !self.blocked(turn, base, denied, &decision) {
                    self.record_usage(turn, denied, Usage::Denied);
                }
                Ok((decision, base.name(), None))
            }
            Outcome::Settled(Some((decision, hold))) => {
                self.settled(turn, base.name(), token, &hold, cost);
                Ok((decision, base.name(), None))
            }
            Outcome::Extended(decision, Some(hold)) => {
                turn.log.hold_extended(base.name(), token, &hold, now);
                Ok((
                    decision,
                    base.name(),
                    Some((hold.id, Nanos(hold.ends_at.0.saturating_sub(now.0)))),
                ))
            }
            Outcome::Settled(None) | Outcome::Extended(_, None) => Err(unknown()),
        }
    }

    /// A hold settled for `cost`: what it held and did not use went back,
    /// what it used is usage, and what it used beyond counts like a hit.
    fn settled(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        policy: &str,
        token: &str,
        hold: &Hold,
        cost: u64,
    ) {
        let within = cost.min(hold.units);
        let back = Refund {
            units: hold.units - within,
            spent: within,
            taken_at: hold.taken_at,
        };
        turn.log.hold_ended(policy, token, hold, &back, turn.now);
        let used = Counted {
            policy,
            token,
            cost: within,
        };
        self.record_usage(turn, used, Usage::Used);
        if cost > hold.units {
            let excess = cost - hold.units;
            turn.log.changed(policy, token, excess, turn.now);
            let used = Counted {
                policy,
                token,
                cost: excess,
            };
            self.record_usage(turn, used, Usage::Used);
        }
    }

    /// A hold reached its end unsettled: charged, it is usage now;
    /// released, it went back.
    fn hold_ended(&self, turn: &mut Turn<'_, '_, '_>, policy: &str, token: &str, hold: &Hold) {
        let charged = hold.end == holds::End::Charge;
        let back = Refund {
            units: if charged { 0 } else { hold.units },
            spent: if charged { hold.units } else { 0 },
            taken_at: hold.taken_at,
        };
        turn.log.hold_ended(policy, token, hold, &back, turn.now);
        let used = Counted {
            policy,
            token,
            cost: back.spent,
        };
        self.record_usage(turn, used, Usage::Used);
    }

    /// Ends every hold of the partition whose end has come by the turn's
    /// time (the shard's sweep): released ones go back into their keys'
    /// state, charged ones become usage. Holds under a policy no longer in
    /// force end charged.
    pub fn end_holds(&self, policies: &Policies, owned: Owned<'_>, now: Nanos, log: &mut TurnLog) {
        let turn = &mut Turn::new(policies, owned, now, log, false);
        let ended = owned.counters.outstanding().ended(now);
        for (counter, hold) in ended {
            let Some((name, token)) = counter.split_once('/') else {
                continue;
            };
            let Some(base) = turn.policies.get(name) else {
                continue;
            };
            let policy = turn.policies.in_force(base, token);
            owned.counters.update(policy, &counter, now, |state| {
                holds::end(policy, state, now, &hold)
            });
            self.hold_ended(turn, name, token, &hold);
        }
    }
}

impl Decider {
    /// Replays a hold's record (`kind`, made at `t`) at takeover (journal
    /// mode) on the counter `buf` names. The table says what the restored
    /// snapshot already holds: a carried hold's reserve is in the counters (a
    /// snapshot carries only holds kept from before its counters were encoded
    /// to after), its settle not yet. So a reserve is counted and kept unless
    /// the hold is there already, and a settle or end gives back only if the
    /// hold was there: each once. `false` for a record of no hold, or of a
    /// hold id that does not parse (it is skipped).
    pub(super) fn replay_hold(
        policy: &Policy,
        kind: Kind<'_, String>,
        buf: &str,
        t: Nanos,
        counters: &Counters,
    ) -> bool {
        match kind {
            Kind::HoldReserved {
                hold,
                units,
                ends_at,
                end,
                slot,
            } => {
                let Some(id) = HoldId::parse(hold) else {
                    return false;
                };
                if !counters.outstanding().has_hold(buf, id) {
                    counters.apply(policy, buf, t, Op::Record(units));
                    let hold = Hold {
                        id,
                        taken_at: t,
                        units,
                        ends_at,
                        end,
                        slot,
                    };
                    counters.outstanding().replayed_hold(buf, hold);
                }
            }
            Kind::HoldEnded { hold, back } => {
                let Some(id) = HoldId::parse(hold) else {
                    return false;
                };
                let was_here = counters.outstanding().replayed_end(buf, id);
                if was_here && back.units > 0 {
                    counters.update(policy, buf, t, |state| {
                        policy.refund(state, t, back.units, back.taken_at)
                    });
                }
            }
            Kind::HoldExtended { hold, ends_at } => {
                let Some(id) = HoldId::parse(hold) else {
                    return false;
                };
                counters.outstanding().replayed_extend(buf, id, ends_at);
            }
            _ => return false,
        }
        true
    }
}

/// A hold verb as every level of it does it: the verb, its cost, how long
/// a reserve may wait, the hold's ttl, and the hold (a reserve's drawn
/// id, or the one to settle or extend).
#[derive(Clone, Copy, Debug)]
pub(super) struct HoldAt {
    pub verb: Verb,
    pub cost: u64,
    pub wait_ms: u64,
    pub ttl: Nanos,
    pub hold: Option<HoldId>,
}

impl HoldAt {
    /// The reserve it is, as `prepared` (a key's policy in force) keeps it.
    pub fn reservation(&self, prepared: &Prepared<'_>) -> Reservation {
        let holding = prepared.base.holding();
        Reservation {
            cost: self.cost,
            ttl: self.ttl,
            id: self.hold.expect("a reserve draws its hold"),
            end: holding.on_expiry,
            concurrency: holding.concurrency,
            within: prepared.within,
        }
    }
}

/// A hold verb's ask at one key, checked ([`Decider::prepare_hold`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Prepared<'p> {
    pub base: &'p Policy,
    /// The policy in force: the override's, or `base`.
    pub policy: &'p Policy,
    /// An override blocks the key (`max = 0`): a reserve is denied.
    pub blocked: bool,
    /// How long a reserve may wait for its start.
    pub within: Nanos,
}

enum Outcome {
    Reserved(Reserved),
    Settled(Option<(Decision, Hold)>),
    Extended(Decision, Option<Hold>),
}

pub(super) fn counted<'a>(policy: &'a Policy, token: &'a str, cost: u64) -> Counted<'a> {
    Counted {
        policy: policy.name(),
        token,
        cost,
    }
}
