//! Idempotent asks (SPEC §16): an ask named by an `id` counts once. Apart
//! from `decide.rs` because it wraps whatever decides the ask, an ask or
//! a hold's verb: the id is looked up first (a repeat answers the first
//! answer and counts nothing; a reuse is refused), and an admitted ask's
//! id is remembered with a record of its own in the same turn, so a
//! journal that replays the count remembers the id too
//! ([`sluice_core::ask_ids`]).

use super::{Applied, Decider, Once, Turn};
use crate::turn_log::Named;
use sluice_core::ask_ids::{Asked, FirstAnswer, Seen};
use sluice_core::key::KeyToken;
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use sluice_core::wire::ErrorReply;

/// What [`Decider::once`] needs of an answer: the first answer to
/// remember, and the same answer again from it.
pub(super) trait Answered<'p> {
    fn first(&self, now: Nanos) -> FirstAnswer;
    fn again(first: FirstAnswer, policy: &'p str, now: Nanos) -> Self;
}

impl<'p> Answered<'p> for Applied<'p> {
    fn first(&self, now: Nanos) -> FirstAnswer {
        FirstAnswer::new(self.0, now)
    }

    /// A repeat gets no slice again: the first ask's was granted once. An
    /// ask admitted for a later start is told the wait left until it.
    fn again(first: FirstAnswer, policy: &'p str, now: Nanos) -> Applied<'p> {
        (first.again(now), policy, None)
    }
}

impl Decider {
    /// Decides an ask of `verb` on `key` with `apply`, once per `id`;
    /// `admitted` says whether its answer is one to remember (it counted,
    /// or it did what a repeat must not do again).
    pub(super) fn once<'p, T: Answered<'p>>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        (key, id): (KeyToken<'_>, Option<&str>),
        (verb, policy_name, cost): (Verb, &str, u64),
        admitted: impl FnOnce(&T) -> bool,
        apply: impl FnOnce(&mut Turn<'_, 'p, '_>) -> Result<T, ErrorReply>,
    ) -> Result<Once<T>, ErrorReply> {
        // Without an id, or for a policy not configured (whose refusal is
        // the decision's to give), nothing to remember.
        // (The id first: an ask without one pays for no policy lookup.)
        let Some((id, policy)) = id.and_then(|id| Some((id, turn.policies.get(policy_name)?)))
        else {
            return apply(turn).map(|answered| (answered, false));
        };
        let (token, now, counters) = (key.as_str(), turn.now, turn.owned.counters);
        let asked = Asked {
            verb,
            policy: policy.name(),
            cost,
        };
        let (seen, name) = {
            let ids = counters.ids();
            let name = ids.name(token, id);
            (ids.seen(name, &asked, now), name)
        };
        match seen {
            Seen::Repeat(first) => {
                turn.log.repeat();
                self.repeat_levels(turn, key, policy);
                return Ok((T::again(first, policy.name(), now), true));
            }
            Seen::Reused(error) => return Err(error),
            Seen::First => {}
        }
        let answered = apply(turn)?;
        // An ask sent on to its home region is remembered there (the id
        // travels in its body), not here, where nothing was counted.
        if turn.forward.is_none() && admitted(&answered) {
            let first = answered.first(now);
            // An ask that starts later counts from its start on.
            let until = policy.remembered_until(first.start.max(now));
            let forgotten = {
                let mut ids = counters.ids();
                let before = ids.forgotten_early();
                ids.remember(name, asked, first, until, now);
                ids.forgotten_early() - before
            };
            let named = Named {
                policy: policy.name(),
                token,
                cost,
                id,
                verb,
                first: &first,
                until,
            };
            turn.log.remembered(named, forgotten, now);
        }
        Ok((answered, false))
    }
}
