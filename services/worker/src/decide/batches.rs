//! Batches (`rl.p.<n>.batch`, `rl.w.<worker-id>.batch`, and
//! `sluice-link.<region>.p.<n>.batch` from another region's owners):
//! their items decided in order per partition, each as its own subject
//! would decide it. Apart from `decide.rs`, which decides one ask.

use super::{Answer, Applied, Decider, Owned, Turn};
use crate::journal::record::Record;
use sluice_core::ask::Op;
use sluice_core::policies::Policies;
use sluice_core::region::state::Actions;
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use sluice_core::wire::batch::{Act, Budget, HoldAct};
use sluice_core::wire::hold::HoldTicket;
use sluice_core::wire::{self, batch, DecisionReply, ErrorReply};

impl Decider {
    /// Decides a batch (`rl.p.<n>.batch` or `rl.w.<worker-id>.batch`): each
    /// item on the counters of its partition as `answered` gives them, in
    /// item order per partition, as if sent one after the other: an ask as
    /// `rl.allow` decides it, a hold verb as its own subject does (the
    /// same code, `Decider::hold_act`). Items of partitions not answered
    /// here get the 503 of the partition check.
    /// Returns the reply, in journal mode the records to store before it
    /// is sent, and what must cross the link between regions.
    pub fn batch<'p, 'c>(
        &self,
        policies: &'p Policies,
        body: &[u8],
        now: Nanos,
        answered: &dyn Fn(u32) -> Option<Owned<'c>>,
    ) -> (Answer<'p>, Vec<Record>, Actions) {
        self.batch_from(policies, body, now, answered, false)
    }

    /// [`Decider::batch`], of a batch another region's owner sent over the
    /// link (`link`: its slices are grants to that region, [`crate::global`]).
    pub(super) fn batch_from<'p, 'c>(
        &self,
        policies: &'p Policies,
        body: &[u8],
        now: Nanos,
        answered: &dyn Fn(u32) -> Option<Owned<'c>>,
        link: bool,
    ) -> (Answer<'p>, Vec<Record>, Actions) {
        let items = match batch::decode_items(body) {
            Ok(items) => items,
            Err(error) => {
                self.stats.add_errors(1);
                return (Answer::Batch(Err(error)), Vec::new(), Actions::default());
            }
        };
        let partitions = self.config.partitions;
        let mut results: Vec<Option<wire::Reply>> = (0..items.len()).map(|_| None).collect();
        // (partition, place in the batch, item), grouped by partition in item order.
        let mut asks = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            match item {
                Ok(item) => asks.push((item.key.partition(partitions), i, item)),
                Err(e) => {
                    self.stats.add_errors(1);
                    results[i] = Some(wire::Reply::Error(e));
                }
            }
        }
        asks.sort_by_key(|(partition, _, _)| *partition);
        let mut records = Vec::new();
        let mut actions = Actions::default();
        for share in asks.chunk_by(|a, b| a.0 == b.0) {
            let first = &share[0].2;
            let owned = match self.locate(first.key, answered) {
                Ok(owned) => owned,
                Err(e) => {
                    self.stats.add_errors(share.len() as u64);
                    for (_, i, _) in share {
                        results[*i] = Some(wire::Reply::Error(e.clone()));
                    }
                    continue;
                }
            };
            let mut log = self.turn_log(owned);
            for (_, i, item) in share {
                let turn = &mut Turn::new(policies, owned, now, &mut log, link);
                let result = match item.act {
                    Act::Ask(budget) => self.batch_ask(turn, item, budget),
                    Act::Hold(act) => self.batch_hold(turn, item, act),
                };
                results[*i] = Some(result.map_or_else(wire::Reply::Error, wire::Reply::Decision));
            }
            actions.append(&mut log.take_actions());
            records.append(&mut log.finish(&self.stats, owned.stats));
        }
        let results = results
            .into_iter()
            .map(|r| r.expect("every item got a result"))
            .collect();
        (Answer::Batch(Ok(results)), records, actions)
    }

    /// A batch item that asks, as `rl.allow` would (with what it does for
    /// a local budget).
    fn batch_ask<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        item: &batch::Item<'_>,
        budget: Budget,
    ) -> Result<DecisionReply, ErrorReply> {
        let op = Op::Allow(item.cost);
        let apply =
            |turn: &mut Turn<'_, 'p, '_>| self.apply(turn, item.key, &item.policy, op, budget);
        let named = (item.key, item.id.as_deref());
        let asked = (Verb::Allow, &item.policy[..], item.cost);
        // A refund is remembered though it counts nothing: units given
        // back twice would be spent twice.
        let refund = matches!(budget, Budget::Refund(_));
        let admitted = |applied: &Applied<'p>| refund || op.consumed(&applied.0);
        let applied = self.once(turn, named, asked, admitted, apply);
        if refund {
            // Giving back decides nothing.
            turn.log.refunded_only();
        } else {
            turn.log.outcome_once(Verb::Allow, &applied);
        }
        let grouped = turn.grouped.take().map(|g| *g);
        applied.map(|((decision, policy, grant), repeat)| {
            let (levels, denied_by) =
                grouped.map_or((Vec::new(), None), |g| (g.levels, g.denied_by));
            DecisionReply {
                grant,
                repeat,
                levels,
                denied_by,
                ..DecisionReply::new(&decision, policy)
            }
        })
    }

    /// A batch item that is a hold's verb, as its own subject would take
    /// it: the same decision, counts and reply (the hold it kept or moved
    /// included).
    fn batch_hold(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        item: &batch::Item<'_>,
        act: HoldAct,
    ) -> Result<DecisionReply, ErrorReply> {
        let named = (item.key, item.id.as_deref());
        // A batch item carries no wait (`wire::batch` refuses one).
        let result = self.hold_once(turn, named, (&item.policy, item.cost, 0), act);
        turn.log.outcome_once(act.verb, &result);
        let grouped = turn.grouped.take().map(|g| *g);
        result.map(|((decision, policy, held), repeat)| {
            let (levels, denied_by) =
                grouped.map_or((Vec::new(), None), |g| (g.levels, g.denied_by));
            DecisionReply {
                hold: held.map(|(id, expires)| HoldTicket::new(id, expires)),
                repeat,
                levels,
                denied_by,
                ..DecisionReply::new(&decision, policy)
            }
        })
    }
}
