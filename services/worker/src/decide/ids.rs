//! Idempotent asks (SPEC §16): an ask named by an `id` counts once. Apart
//! from `decide.rs` because it wraps whatever decides the ask: the id is
//! looked up first (a repeat answers the first decision and counts
//! nothing; a reuse is refused), and an admitted ask's id is remembered
//! with a record of its own in the same turn, so a journal that replays
//! the count remembers the id too ([`sluice_core::ask_ids`]).

use super::{Applied, Decider, Turn};
use crate::tally::Named;
use sluice_core::ask::Op;
use sluice_core::ask_ids::{Asked, Seen};
use sluice_core::key::KeyToken;
use sluice_core::subject::Verb;
use sluice_core::wire::batch::Budget;
use sluice_core::wire::ErrorReply;

/// What an ask came to, and whether it was a repeat (its decision the
/// first answer's, nothing counted).
pub(super) type Once<'p> = (Applied<'p>, bool);

impl Decider {
    /// Decides an ask of `verb` on `key` with `apply`, once per `id`. A
    /// refund (`budget`) is remembered though it consumes nothing: units
    /// given back twice would be spent twice.
    pub(super) fn once<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        (key, id): (KeyToken<'_>, Option<&str>),
        (verb, policy_name, op, budget): (Verb, &str, Op, Budget),
        apply: impl FnOnce(&mut Turn<'_, 'p, '_>) -> Result<Applied<'p>, ErrorReply>,
    ) -> Result<Once<'p>, ErrorReply> {
        // Without an id, or for a policy not configured (whose refusal is
        // the decision's to give), nothing to remember.
        let (Some(id), Some(policy)) = (id, turn.policies.get(policy_name)) else {
            return apply(turn).map(|applied| (applied, false));
        };
        let (token, now, counters) = (key.as_str(), turn.now, turn.owned.counters);
        let asked = Asked {
            verb,
            policy: policy.name().to_string(),
            cost: op.cost(),
        };
        let seen = counters.ids().seen(token, id, &asked, now);
        match seen {
            Seen::Repeat(decision) => {
                turn.tally.repeat();
                return Ok(((decision, policy.name(), None), true));
            }
            Seen::Reused(error) => return Err(error),
            Seen::First => {}
        }
        let applied = apply(turn)?;
        // An ask sent on to its home region is remembered there (the id
        // travels in its body), not here, where nothing was counted.
        let refund = matches!(budget, Budget::Refund(_));
        if turn.forward.is_none() && (op.consumed(&applied.0) || refund) {
            let until = policy.remembered_until(now);
            let forgotten = {
                let mut ids = counters.ids();
                let before = ids.forgotten_early();
                ids.remember((token, id), asked, applied.0, until, now);
                ids.forgotten_early() - before
            };
            let named = Named {
                policy: policy.name(),
                token,
                cost: op.cost(),
                id,
                hit: verb == Verb::Hit,
                decision: &applied.0,
                until,
            };
            turn.tally.remembered(named, forgotten, now);
        }
        Ok((applied, false))
    }
}
