//! Gifts (SPEC §12, `sluice_core::region::parts`): when the home of a
//! global bucket split into parts runs short, it reclaims, and each other
//! region takes what its part holds beyond its demand out of it and gives
//! it to the home's part. Apart from `global.rs` because a gift has a life
//! of its own at both ends: made at a delegate, taken once at the home by
//! its id (the link may deliver it twice), and replayed from the journal
//! record of that id after a crash there.

use super::global::record_share;
use super::{Decider, Owned};
use crate::counters::Counters;
use crate::journal::record::Record;
use crate::turn_log::{Named, TurnLog};
use sluice_core::ask;
use sluice_core::ask_ids::{Asked, FirstAnswer, Seen};
use sluice_core::key::KeyToken;
use sluice_core::policies::Policies;
use sluice_core::policy::Policy;
use sluice_core::region::parts::GIFT_FRESH;
use sluice_core::region::state::{Action, When};
use sluice_core::region::RegionName;
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use sluice_core::wire::link::{Gift, Reclaim};

impl Decider {
    /// The home of a global bucket asks for units back: what this region's
    /// part holds beyond what its demand needs is taken out of it and sent
    /// as a gift, once that is stored.
    pub(super) fn gift_spare(
        &self,
        policy: &Policy,
        reclaim: &Reclaim,
        here: &RegionName,
        owned: Owned<'_>,
        now: Nanos,
        log: &mut TurnLog,
    ) {
        let (Some(part), Some(global)) = (policy.part_in(here), policy.scope().global()) else {
            return;
        };
        let whole = &policy.limits()[0];
        if whole.window_start(now) != Nanos(reclaim.window_start) {
            return;
        }
        let spare = ask::with_counter_key(policy.name(), &reclaim.key, |buf| {
            let state = owned
                .counters
                .state(buf)
                .unwrap_or_else(|| part.new_state());
            // What every limit of the part can spare.
            let left = part.inspect(&state, now).iter().map(|l| l.remaining).min();
            let left = left.unwrap_or(0);
            let spare = owned
                .counters
                .global()
                .delegates()
                .spare(buf, whole, now, left);
            if spare > 0 {
                record_share(owned, part, buf, now, spare);
                log.booked(policy.name(), &reclaim.key, spare, now);
            }
            spare
        });
        if spare > 0 {
            let gift_action = Action::Gift {
                home: global.home().clone(),
                partition: owned.partition,
                gift: Gift {
                    policy: policy.name().to_string(),
                    key: reclaim.key.clone(),
                    units: spare,
                    taken_at: now.as_u64(),
                    from: here.as_str().to_string(),
                },
            };
            log.act(When::Stored, gift_action);
        }
    }

    /// At a global bucket's home: units another region took out of its
    /// part, put into the home's part (never past the brim); one that
    /// left longer than [`GIFT_FRESH`] ago is dropped (its units are lost,
    /// not spent late), and so is one taken before: the home remembers a
    /// gift's id ([`Gift::id`]) as it remembers an ask's, with a journal
    /// record, which a replay takes as the gift again
    /// ([`Decider::replay_gift`]).
    pub(super) fn take_gift(
        &self,
        policies: &Policies,
        gift: &Gift,
        owned: Owned<'_>,
        now: Nanos,
        log: &mut TurnLog,
    ) {
        let Some((policy, part)) = self.home_part(policies, &gift.policy, &gift.key) else {
            return;
        };
        if now > Nanos(gift.taken_at).saturating_add(GIFT_FRESH) {
            tracing::debug!("a gift of {} for {} came too late", gift.units, gift.key);
            return;
        }
        let id = gift.id();
        let asked = Asked {
            verb: Verb::Allow,
            policy: policy.name(),
            cost: gift.units,
        };
        {
            let ids = owned.counters.ids();
            if ids.seen(ids.name(&gift.key, &id), &asked, now) != Seen::First {
                return;
            }
        }
        let decision = give(
            part,
            &gift.key,
            (gift.units, Nanos(gift.taken_at)),
            owned.counters,
            now,
        );
        let first = FirstAnswer::new(decision, now);
        let until = policy.remembered_until(now);
        let forgotten = {
            let mut ids = owned.counters.ids();
            let before = ids.forgotten_early();
            let name = ids.name(&gift.key, &id);
            ids.remember(name, asked, first, until, now);
            ids.forgotten_early() - before
        };
        let named = Named {
            policy: policy.name(),
            token: &gift.key,
            cost: gift.units,
            id: &id,
            verb: Verb::Allow,
            first: &first,
            until,
        };
        log.remembered(named, forgotten, now);
    }

    /// Replays the record of a remembered id that is a gift's: its units
    /// into the home's part again, as they went in live (the id was
    /// remembered by [`remember_replayed`](super::remember_replayed)).
    /// Records of other ids, and gifts replayed by a region that is not
    /// the home, change nothing.
    pub(super) fn replay_gift(
        &self,
        policies: &Policies,
        record: &Record,
        id: &str,
        counters: &Counters,
    ) {
        let Some((units, taken_at)) = Gift::parse_id(id) else {
            return;
        };
        if let Some((_, part)) = self.home_part(policies, record.policy(), record.key()) {
            give(
                part,
                record.key(),
                (units, Nanos(taken_at)),
                counters,
                record.at(),
            );
        }
    }

    /// The in-force policy of `key` under `policy` and, when this region is
    /// its home, the home's part, which gifts fill.
    fn home_part<'p>(
        &self,
        policies: &'p Policies,
        policy: &str,
        key: &str,
    ) -> Option<(&'p Policy, &'p Policy)> {
        let here: &RegionName = self.region.as_ref()?;
        let base = policies.get(policy)?;
        KeyToken::parse(key).ok()?;
        let policy = policies.in_force(base, key);
        let home_here = policy.scope().global().is_some_and(|g| g.home() == here);
        let part = policy.part_in(here).filter(|_| home_here)?;
        Some((policy, part))
    }
}

/// Puts `units` taken out of another region's part at `taken_at` into
/// the home's `part` of `key`, at `now`.
fn give(
    part: &Policy,
    key: &str,
    (units, taken_at): (u64, Nanos),
    counters: &Counters,
    now: Nanos,
) -> sluice_core::policy::Decision {
    ask::with_counter_key(part.name(), key, |buf| {
        counters.update(part, buf, now, |state| {
            // Into the window the units left (a window's part).
            part.refund(state, now, units, taken_at)
        })
    })
}
