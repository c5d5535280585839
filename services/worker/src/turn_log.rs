//! A turn's log: what the decisions of one turn (a batch of them, a
//! sweep of ended holds, the link's messages) did, gathered before it is
//! published: the stats and the decisions by policy (`/metrics`), the
//! records to store before answering, the usage, and the actions to carry
//! over the link. Not a tally: that word is the regions' (what a region
//! spent of a global key, [`sluice_core::region::tally`]).
//!
//! A batch's counts are added to the shared stats once ([`TurnLog::finish`]),
//! one atomic add per counter and batch rather than per decision, and its
//! decisions by policy are counted on handles found through
//! [`PolicyMeters`] without a lock or an allocation per decision.
//!
//! Whether records are kept is the outbox's to say ([`Recording`],
//! [`crate::outbox::Outbox::recording`]): it is the one place that knows
//! the durability mode.

use crate::counters::Turn;
use crate::journal::record::{NamedOf, Record};
use crate::stats::{DecisionLabels, Outcome, ShardStats, WorkerStats};
use crate::usage::ledger::Ledger;
use prometheus_client::metrics::counter::Counter;
use sluice_core::ask_ids::FirstAnswer;
use sluice_core::budget::Refund;
use sluice_core::holds::Hold;
use sluice_core::policy::Decision;
use sluice_core::region::state::{Action, Actions, When};
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use sluice_core::usage::Counts;
use sluice_core::wire::ErrorReply;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Whether decisions keep records of what they counted, for the outbox to
/// store before the answers go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recording {
    /// Journal mode: every change is a record, and usage reaches the
    /// ledger from the stored records.
    Records,
    /// Snapshot mode: no records (they would be dropped unread); usage goes
    /// to the ledger at once.
    Nothing,
}

/// Units counted for one key under one policy.
#[derive(Clone, Copy, Debug)]
pub struct Counted<'a> {
    pub policy: &'a str,
    pub token: &'a str,
    pub cost: u64,
}

/// An ask's id remembered (SPEC §16), for its record.
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    pub policy: &'a str,
    pub token: &'a str,
    pub cost: u64,
    pub id: &'a str,
    pub verb: Verb,
    pub first: &'a FirstAnswer,
    pub until: Nanos,
}

/// What a decided ask adds to its key's usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    Used,
    Denied,
    /// Allowed without consuming (a peek).
    Neither,
}

/// What the decisions of one turn on one partition did, published to the
/// stats at once by [`TurnLog::finish`] (one atomic add per counter and
/// batch, not per decision).
pub struct TurnLog {
    partition: u32,
    recording: Recording,
    decisions: u64,
    allowed: u64,
    denied: u64,
    hits: u64,
    errors: u64,
    changes: u64,
    /// Local budgets: slices granted, their units, units given back.
    slices: u64,
    sliced_units: u64,
    returned_units: u64,
    /// Units of refunds no slice of this owner explained (not given back).
    unmatched_units: u64,
    /// Asks answered as repeats of a remembered id.
    repeats: u64,
    /// Ids forgotten before their time to keep the bound.
    forgotten_early: u64,
    records: Vec<Record>,
    /// What must cross the link between regions, by when it may leave
    /// ([`TurnLog::act`]).
    actions: Actions,
    meters: Arc<PolicyMeters>,
    /// Allowed, denied and hit counts by policy (its place in `meters`), of
    /// the first [`POLICY_SLOTS`] policies the batch decided for; the
    /// counts of any further one go to its counters at once.
    by_policy: [(usize, [u64; 3]); POLICY_SLOTS],
    policies_used: usize,
    /// The turn these decisions are made in: its records carry its number,
    /// and a snapshot's cut waits for it to end ([`crate::counters::Turns`]).
    turn: Option<Turn>,
}

/// Policies whose counts a [`TurnLog`] gathers before publishing them (a
/// batch rarely decides for more).
const POLICY_SLOTS: usize = 4;

impl TurnLog {
    pub fn new(partition: u32, recording: Recording, meters: Arc<PolicyMeters>) -> TurnLog {
        TurnLog {
            partition,
            recording,
            decisions: 0,
            allowed: 0,
            denied: 0,
            hits: 0,
            errors: 0,
            changes: 0,
            slices: 0,
            sliced_units: 0,
            returned_units: 0,
            unmatched_units: 0,
            repeats: 0,
            forgotten_early: 0,
            records: Vec::new(),
            actions: Actions::default(),
            meters,
            by_policy: [(0, [0; 3]); POLICY_SLOTS],
            policies_used: 0,
            turn: None,
        }
    }

    /// The same log, for decisions made in `turn`.
    pub fn in_turn(mut self, turn: Turn) -> TurnLog {
        self.turn = Some(turn);
        self
    }

    /// One more decision of `outcome` (an index of
    /// [`Outcome::OF_POLICIES`]) under `policy`.
    fn count_policy(&mut self, policy: &str, outcome: usize) {
        let Some(p) = self.meters.index_of(policy) else {
            return;
        };
        let used = &mut self.by_policy[..self.policies_used];
        if let Some((_, counts)) = used.iter_mut().find(|(q, _)| *q == p) {
            counts[outcome] += 1;
        } else if self.policies_used < POLICY_SLOTS {
            let mut counts = [0; 3];
            counts[outcome] = 1;
            self.by_policy[self.policies_used] = (p, counts);
            self.policies_used += 1;
        } else {
            self.meters.counters[p][outcome].inc();
        }
    }

    /// A counter changed by `cost`: with records kept, remember the
    /// record to store.
    pub fn changed(&mut self, policy: &str, token: &str, cost: u64, now: Nanos) {
        self.changes += 1;
        if self.recording == Recording::Records {
            let record = Record::counted(self.partition, policy, token, cost, now);
            self.records.push(record);
        }
    }

    /// A counter was forgotten (`rl.reset`): with records kept, its record.
    pub fn reset(&mut self, policy: &str, token: &str, now: Nanos) {
        self.changes += 1;
        if self.recording == Recording::Records {
            let record = Record::reset(self.partition, policy, token, now);
            self.records.push(record);
        }
    }

    /// An ask's id remembered (SPEC §16): with records kept, its record,
    /// stored with the ask's count in the same turn so a new owner that
    /// replays the count remembers the id too.
    pub fn remembered(&mut self, named: Named<'_>, forgotten_early: u64, now: Nanos) {
        self.forgotten_early += forgotten_early;
        if self.recording == Recording::Records {
            let decision = &named.first.decision;
            let kept = NamedOf {
                id: named.id.to_string(),
                verb: named.verb.as_str().to_string(),
                held: named.first.held.map(|(id, end)| (id, end.as_u64())),
                remaining: decision.remaining,
                limit: decision.limit,
                reset: decision.reset.as_u64(),
                until: named.until.as_u64(),
                start: named.first.stored_start(now),
            };
            let of = (named.policy, named.token);
            let record = Record::id_remembered(self.partition, of, named.cost, kept, now);
            self.records.push(record);
        }
    }

    /// A delegate's books of its share of a global window (SPEC §12):
    /// `units` spent or given back, counted in the key's own counter, not
    /// usage (each ask's usage is recorded apart, [`TurnLog::usage_apart`]).
    pub fn booked(&mut self, policy: &str, token: &str, units: u64, now: Nanos) {
        self.changes += 1;
        if self.recording == Recording::Records {
            let record = Record::booked(self.partition, policy, token, units, now);
            self.records.push(record);
        }
    }

    /// How many records this turn made so far.
    pub fn records_made(&self) -> usize {
        self.records.len()
    }

    /// The records made since `from` ([`TurnLog::records_made`]) count, but
    /// are not usage: they were sent by another region's owner over the
    /// link, and that region records their usage.
    pub fn not_usage_since(&mut self, from: usize) {
        for record in self.records.iter_mut().skip(from) {
            record.set_not_usage();
        }
    }

    /// A slice of `units` was taken for a client's local budget.
    pub fn sliced(&mut self, policy: &str, token: &str, units: u64, now: Nanos) {
        self.changes += 1;
        self.slices += 1;
        self.sliced_units += units;
        if self.recording == Recording::Records {
            let record = Record::sliced(self.partition, policy, token, units, now);
            self.records.push(record);
        }
    }

    /// `hold` was kept: counted like a slice (journaled so, with the
    /// hold), its usage to come when it is settled or ends.
    pub fn held(&mut self, policy: &str, token: &str, hold: &Hold) {
        self.changes += 1;
        if self.recording == Recording::Records {
            let record = Record::hold_reserved(self.partition, policy, token, hold);
            self.records.push(record);
        }
    }

    /// `hold` ended (settled, or at its end): `back` is what went back and
    /// what was spent, journaled as a slice's give-back with the hold.
    pub fn hold_ended(
        &mut self,
        policy: &str,
        token: &str,
        hold: &Hold,
        back: &Refund,
        now: Nanos,
    ) {
        self.changes += 1;
        self.returned_units += back.units;
        if self.recording == Recording::Records {
            let of = (policy, token);
            let record = Record::hold_ended(self.partition, of, hold, back, now);
            self.records.push(record);
        }
    }

    /// `hold`'s end moved (to `hold.ends_at`).
    pub fn hold_extended(&mut self, policy: &str, token: &str, hold: &Hold, now: Nanos) {
        self.changes += 1;
        if self.recording == Recording::Records {
            let record = Record::hold_extended(self.partition, policy, token, hold, now);
            self.records.push(record);
        }
    }

    /// A slice came back: its unspent units went back into the counter
    /// and its spent ones are usage.
    pub fn refunded(&mut self, policy: &str, token: &str, refund: &Refund, now: Nanos) {
        self.changes += 1;
        self.returned_units += refund.units;
        if self.recording == Recording::Records {
            let record = Record::refunded(self.partition, policy, token, refund, now);
            self.records.push(record);
        }
    }

    /// A denial of a key blocked until `until` (SPEC §18): with records,
    /// its record, which replay blocks the key again by (and counts as
    /// usage when usage is recorded, `ledger`); without, its usage.
    pub fn blocked(
        &mut self,
        ledger: (Option<&Ledger>, bool),
        counted: Counted<'_>,
        until: Nanos,
        now: Nanos,
    ) {
        let (ledger, usage) = ledger;
        if self.recording != Recording::Records {
            if usage {
                self.usage(ledger, counted, Usage::Denied, now);
            }
            return;
        }
        let Counted {
            policy,
            token,
            cost,
        } = counted;
        let mut record = Record::blocked(self.partition, policy, token, cost, now, until);
        if !usage {
            record.set_not_usage();
        }
        self.records.push(record);
    }

    /// Records kept, usage recorded: a denied ask's record, stored for
    /// its usage only.
    fn denied(&mut self, policy: &str, token: &str, cost: u64, now: Nanos) {
        let record = Record::denied(self.partition, policy, token, cost, now);
        self.records.push(record);
    }

    /// An ask that repeated a remembered id (SPEC §16): answered,
    /// nothing counted.
    pub fn repeat(&mut self) {
        self.decisions += 1;
        self.repeats += 1;
    }

    /// One answered ask. A settle or an extend that was done decided
    /// nothing (its reply is what a peek says after it, which may well be
    /// "full"), so it is not a decision; one refused is an error.
    pub fn outcome(&mut self, verb: Verb, result: &Result<(Decision, &str), ErrorReply>) {
        if result.is_ok() && matches!(verb, Verb::Settle | Verb::Extend) {
            return;
        }
        self.decisions += 1;
        let (policy, outcome) = match (result, verb) {
            (Err(_), _) => {
                self.errors += 1;
                return;
            }
            (Ok((_, policy)), Verb::Hit) => {
                self.hits += 1;
                (policy, 2)
            }
            // A shadow denial counts as denied (SPEC §14).
            (Ok((d, policy)), _) if d.within_limits() => {
                self.allowed += 1;
                (policy, 0)
            }
            (Ok((_, policy)), _) => {
                self.denied += 1;
                (policy, 1)
            }
        };
        self.count_policy(policy, outcome);
    }

    /// [`TurnLog::outcome`] of an ask decided once per id (SPEC §16): the
    /// answer with its repeat flag, or the error. A repeat was counted as
    /// one already ([`TurnLog::repeat`]).
    pub fn outcome_once<T>(
        &mut self,
        verb: Verb,
        result: &Result<((Decision, &str, T), bool), ErrorReply>,
    ) {
        match result {
            Ok((_, true)) => {}
            Ok(((decision, policy, _), false)) => self.outcome(verb, &Ok((*decision, policy))),
            Err(error) => self.outcome(verb, &Err(error.clone())),
        }
    }

    /// An inspect or a reset was answered (`ok`) or refused.
    pub fn admin(&mut self, ok: bool) {
        self.decisions += 1;
        if !ok {
            self.errors += 1;
        }
    }

    /// A batch item only gave a slice back: it decided nothing.
    pub fn refunded_only(&mut self) {
        self.decisions += 1;
    }

    /// A refund no slice of this owner explained: its units are not given
    /// back.
    pub fn unmatched(&mut self, units: u64) {
        self.unmatched_units += units;
    }

    /// Records decided elsewhere in the same batch (a partition batch's
    /// items), to be stored with this log's.
    pub fn append(&mut self, records: &mut Vec<Record>) {
        self.records.append(records);
    }

    /// Records the usage of one decided ask (SPEC §9): `cost` units
    /// used or denied (a peek, cost 0, is neither). Without records into
    /// the partition's `ledger` now; with records a count is already one
    /// and a denial becomes one, and both reach the ledger once stored
    /// ([`crate::usage::UsageHistory::journaled`]).
    pub fn usage(
        &mut self,
        ledger: Option<&Ledger>,
        counted: Counted<'_>,
        usage: Usage,
        now: Nanos,
    ) {
        self.usage_of(ledger, counted, usage, now, false);
    }

    /// [`TurnLog::usage`] of an ask whose count is no record of its own (a
    /// delegate's, decided from budget its home counted, SPEC §12):
    /// with records, a use becomes a usage-only record too.
    pub fn usage_apart(
        &mut self,
        ledger: Option<&Ledger>,
        counted: Counted<'_>,
        usage: Usage,
        now: Nanos,
    ) {
        self.usage_of(ledger, counted, usage, now, true);
    }

    fn usage_of(
        &mut self,
        ledger: Option<&Ledger>,
        counted: Counted<'_>,
        usage: Usage,
        now: Nanos,
        apart: bool,
    ) {
        let Counted {
            policy,
            token,
            cost,
        } = counted;
        if cost == 0 {
            return;
        }
        let counts = match usage {
            Usage::Used => Counts {
                used: cost,
                denied: 0,
            },
            Usage::Denied => Counts {
                used: 0,
                denied: cost,
            },
            Usage::Neither => return,
        };
        match self.recording {
            Recording::Records if usage == Usage::Denied => self.denied(policy, token, cost, now),
            Recording::Records if apart => {
                let record = Record::used_only(self.partition, policy, token, cost, now);
                self.records.push(record);
            }
            Recording::Records => {}
            Recording::Nothing => {
                if let Some(ledger) = ledger {
                    ledger.add(policy, token, now.as_u64() / 1_000_000, counts);
                }
            }
        }
    }

    /// `action` must cross the link between regions, `when` it may
    /// (SPEC §12): the decisions return it, they send nothing.
    pub fn act(&mut self, when: When, action: Action) {
        self.actions.push(when, action);
    }

    /// Adds actions decided apart (a batch's, [`crate::decide::Decider::batch`]).
    pub fn append_actions(&mut self, actions: &mut Actions) {
        self.actions.append(actions);
    }

    /// The actions of this turn, to carry out.
    pub fn take_actions(&mut self) -> Actions {
        std::mem::take(&mut self.actions)
    }

    /// Publishes the counts to `worker` and to the partition's `shard` and
    /// returns the records to store (none unless records are kept), each
    /// numbered with the turn, which ends here. The changes are published
    /// last (Release), after the counters they wrote.
    pub fn finish(self, worker: &WorkerStats, shard: &ShardStats) -> Vec<Record> {
        add(&worker.allowed, self.allowed);
        add(&worker.denied, self.denied);
        add(&worker.hits, self.hits);
        worker.add_errors(self.errors);
        for (p, counts) in &self.by_policy[..self.policies_used] {
            for (counter, n) in self.meters.counters[*p].iter().zip(counts) {
                if *n > 0 {
                    counter.inc_by(*n);
                }
            }
        }
        for (counter, n) in [
            (&worker.meters.budget_slices, self.slices),
            (&worker.meters.budget_sliced_units, self.sliced_units),
            (&worker.meters.budget_returned_units, self.returned_units),
            (&worker.meters.budget_unmatched_units, self.unmatched_units),
            (&worker.meters.ask_repeats, self.repeats),
            (&worker.meters.ids_forgotten_early, self.forgotten_early),
        ] {
            if n > 0 {
                counter.inc_by(n);
            }
        }
        add(&shard.decisions, self.decisions);
        shard.add_changes(self.changes);
        let mut records = self.records;
        if let Some(turn) = self.turn {
            for record in &mut records {
                record.set_turn(turn.number());
            }
        }
        records
    }
}

fn add(counter: &AtomicU64, n: u64) {
    if n > 0 {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The allowed, denied and hit counters of `sluice_worker_decisions_total`
/// for each policy, found by name without a lock: the decision core looks
/// a policy up here once per decision, and a [`TurnLog`] adds to the
/// counters once per batch. Replaced whole when the policies change, and
/// only ever grows: a policy taken out of force keeps its series (a counter
/// never goes back), so whatever version of the policies a batch decides
/// with, its names are here.
#[derive(Default)]
pub struct PolicyMeters {
    index: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    counters: Vec<[Counter; 3]>,
}

impl PolicyMeters {
    /// These meters and those of `names` not among them yet, from `stats`'
    /// family.
    pub fn with<'n>(
        &self,
        stats: &WorkerStats,
        names: impl Iterator<Item = &'n str>,
    ) -> PolicyMeters {
        let mut index = self.index.clone();
        let mut counters = self.counters.clone();
        for name in names {
            if index.contains_key(name) {
                continue;
            }
            index.insert(name.into(), counters.len());
            counters.push(Outcome::OF_POLICIES.map(|outcome| {
                stats.meters.decisions.get_or_create_owned(&DecisionLabels {
                    outcome,
                    policy: name.to_string(),
                })
            }));
        }
        PolicyMeters { index, counters }
    }

    pub fn index_of(&self, policy: &str) -> Option<usize> {
        self.index.get(policy).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch deciding for more policies than a turn's log gathers counts the
    /// rest at once: every decision is counted either way, and a name
    /// without meters is not counted per policy.
    #[test]
    fn a_turn_log_counts_every_policy_past_its_slots() {
        let stats = WorkerStats::default();
        let names = ["a", "b", "c", "d", "e", "f"];
        let meters = Arc::new(PolicyMeters::default().with(&stats, names.into_iter()));
        let mut log = TurnLog::new(0, Recording::Nothing, meters);
        for (i, name) in names.iter().enumerate() {
            for _ in 0..=i {
                log.count_policy(name, 1);
            }
        }
        log.count_policy("unknown", 1);
        log.finish(&stats, &ShardStats::default());
        for (i, name) in names.iter().enumerate() {
            assert_eq!(stats.decisions_of(Outcome::Denied, name), i as u64 + 1);
        }
        assert_eq!(
            stats
                .meters
                .decisions
                .get(&DecisionLabels {
                    outcome: Outcome::Denied,
                    policy: "unknown".into()
                })
                .map(|c| c.get()),
            None
        );
    }

    /// Reserves decide; a settle or an extend that was done does not, even
    /// when the peek it answers with is full; one refused is an error.
    #[test]
    fn only_reserves_and_errors_of_the_hold_verbs_count_as_decisions() {
        let stats = WorkerStats::default();
        let meters = Arc::new(PolicyMeters::default().with(&stats, ["slots"].into_iter()));
        let mut log = TurnLog::new(0, Recording::Nothing, meters);
        let decision = |allowed| Decision {
            allowed,
            limit: 1,
            remaining: 0,
            reset: Nanos(0),
            retry_after: Nanos(0),
            shadow_denied: false,
            wait: Nanos::ZERO,
            blocked: false,
        };
        let (open, full) = (decision(true), decision(false));
        log.outcome(Verb::Reserve, &Ok((open, "slots")));
        log.outcome(Verb::Reserve, &Ok((full, "slots")));
        log.outcome(Verb::Settle, &Ok((full, "slots")));
        log.outcome(Verb::Extend, &Ok((open, "slots")));
        let unknown = ErrorReply::unknown_hold("00000000000000000000000000000000", "slots");
        log.outcome(Verb::Settle, &Err(unknown));
        let shard = ShardStats::default();
        log.finish(&stats, &shard);
        assert_eq!(stats.decisions_of(Outcome::Allowed, "slots"), 1);
        assert_eq!(stats.decisions_of(Outcome::Denied, "slots"), 1);
        assert_eq!(stats.errors.load(Ordering::Relaxed), 1);
        assert_eq!(shard.decisions.load(Ordering::Relaxed), 3);
    }

    /// Global limits in journal mode: the usage history counts each ask
    /// once, in the region it was made in. A delegate's books of its share
    /// count but are not usage, its asks are usage that counts nothing, and
    /// what another region sent over the link counts at the home without
    /// being usage there.
    #[test]
    fn across_regions_each_ask_is_usage_once_where_it_was_made() {
        let usage = |records: &[Record]| -> (u64, u64) {
            records
                .iter()
                .filter_map(crate::usage::counts_of)
                .fold((0, 0), |(u, d), c| (u + c.used, d + c.denied))
        };
        let counted = |cost| Counted {
            policy: "plan",
            token: "k",
            cost,
        };
        let meters = Arc::new(PolicyMeters::default());
        let stats = (WorkerStats::default(), ShardStats::default());
        // The delegate: 3 units from its share, an ask of 2 from a slice,
        // 1 denied, 4 units of its share given back.
        let mut delegate = TurnLog::new(0, Recording::Records, meters.clone());
        delegate.booked("plan", "k", 3, Nanos(1));
        delegate.usage_apart(None, counted(3), Usage::Used, Nanos(1));
        delegate.usage_apart(None, counted(2), Usage::Used, Nanos(2));
        delegate.usage_apart(None, counted(1), Usage::Denied, Nanos(3));
        delegate.booked("plan", "k", 4, Nanos(4));
        let records = delegate.finish(&stats.0, &stats.1);
        assert_eq!(usage(&records), (5, 1));
        assert_eq!(
            crate::journal::format_of(&records),
            sluice_core::format::JOURNAL_USAGE
        );
        // The home: its own ask of 1, then a hit forwarded over the link
        // and a slice given back with 2 of it spent.
        let mut home = TurnLog::new(0, Recording::Records, meters);
        home.changed("plan", "k", 1, Nanos(5));
        let from = home.records_made();
        home.changed("plan", "k", 1, Nanos(6));
        let back = Refund {
            units: 3,
            spent: 2,
            taken_at: Nanos(1),
        };
        home.refunded("plan", "k", &back, Nanos(7));
        home.not_usage_since(from);
        let records = home.finish(&stats.0, &stats.1);
        assert_eq!(records.len(), 3);
        assert_eq!(usage(&records), (1, 0));
    }
}
