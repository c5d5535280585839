//! What the owner does for penalties (SPEC §18, `sluice_core::penalty`)
//! beside deciding: the record of a blocked key's denial, and that
//! record's replay. Apart from `decide.rs`, which only calls these.
//!
//! A block is in the key's state, so a snapshot keeps it; between
//! snapshots (journal mode) every denial of a blocked key is journaled
//! with its block's end, whether or not usage is recorded, and replay
//! blocks the key again until then. A denial's record, not one of its
//! own: releases before blocks read it as the denial it also is, so the
//! journal's format need not move.

use super::{Decider, Turn};
use crate::counters::Counters;
use crate::journal::record::{Kind, Record};
use crate::turn_log::Counted;
use sluice_core::ask;
use sluice_core::policy::{Decision, Policy};

impl Decider {
    /// Records a denial because the key is blocked under `policy` (the
    /// limits that decided): its usage, and with records its block's end.
    /// `false` when the decision is no such denial (a peek says blocked
    /// and records nothing), for the caller to record its usage as any.
    pub(super) fn blocked(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        policy: &Policy,
        counted: Counted<'_>,
        decision: &Decision,
    ) -> bool {
        if !decision.blocked || counted.cost == 0 || turn.link {
            return false;
        }
        let state = ask::with_counter_key(policy.name(), counted.token, |key| {
            turn.owned.counters.state(key)
        });
        let Some(until) = state.and_then(|s| policy.blocked_until(&s, turn.now)) else {
            return false;
        };
        let ledger = (turn.owned.usage, self.usage);
        turn.log.blocked(ledger, counted, until, turn.now);
        true
    }

    /// Replays a record of `kind`, when it is a blocked key's denial: the key
    /// under `policy` (the limits in force for it) is blocked until the
    /// block's end again, or later if a later record or the snapshot says so.
    /// `false` for any other record (which changed no counter).
    pub(super) fn replay_block(
        policy: &Policy,
        record: &Record,
        kind: Kind<'_, String>,
        counters: &Counters,
    ) -> bool {
        let Kind::Denied {
            blocked_until: Some(until),
            ..
        } = kind
        else {
            return false;
        };
        ask::with_counter_key(record.policy(), record.key(), |key| {
            counters.update(policy, key, record.at(), |state| state.block(until));
        });
        true
    }
}
