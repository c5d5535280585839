//! The decision core: an ask in, a reply value and what it counted out.
//!
//! Everything a worker decides goes through [`Decider`]: the asks a shard
//! takes from its partition's subjects ([`Decider::message`]: allow, hit,
//! and the operators' inspect and reset of CONTRACT §8), the batches
//! of the batching client, per partition or per worker ([`Decider::batch`]),
//! and the journal's records replayed at takeover ([`Decider::replay`]). It
//! needs only the policies, the counters and the stats, never NATS, so
//! "bad input changes nothing" is tested here with a manual clock (see the
//! tests at the bottom) rather than by spawning a worker.
//!
//! The order of the checks is the contract's (CONTRACT §1), and a request
//! that fails any of them changes no counter: the key token, the body, the
//! key's partition, the policy, the cost. A key whose partition is not
//! answered here gets the one 503 of docs/PROTOCOL.md ("Partitions"),
//! whether it came alone or in a batch, so the batching client asks it again
//! through the server's mapping.
//!
//! What decisions did is gathered in a [`Tally`] per partition and batch and
//! published to the stats once; in journal mode the tally also holds the
//! [`Record`]s the caller must store before it answers. Decisions by policy
//! (`/metrics`) are counted the same way, on counters found through
//! [`PolicyMeters`] without a lock or an allocation per decision.

use crate::counters::Counters;
use crate::ledger::Ledger;
use crate::stats::{DecisionLabels, Outcome, ShardStats, WorkerStats};
use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};
use sluice_core::ask::{self, Op};
use sluice_core::budget::{Grant, Refund, Returned};
use sluice_core::config::Config;
use sluice_core::key::KeyToken;
use sluice_core::policies::{Override, Policies};
use sluice_core::policy::{Decision, Policy};
use sluice_core::subject::{Inbound, Verb};
use sluice_core::time::Nanos;
use sluice_core::usage::Counts;
use sluice_core::wire::batch::Budget;
use sluice_core::wire::inspect::{
    InspectReply, LimitReport, OverrideReport, PolicyReport, ResetReply,
};
use sluice_core::wire::{self, batch, DecisionReply, Encoding, ErrorReply};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// One counted request: what journal mode stores before it answers
/// ([`crate::journal`] has the format), and replays at takeover.
///
/// Encoded as an array of its fields in this order; the trailing ones only
/// up to the last one set (`[n, p, k, c, t]` for a count, `[.., t, true]`
/// for a reset, `[.., t, false, true]` for a denial, `[.., false, false,
/// true]` for a slice, `[.., false, false, false, g, u]` for a slice given
/// back), so records of counts read the same as before resets, denials
/// and budgets were recorded.
///
/// Generic over its strings: [`Record`] owns them, [`RecordRef`] borrows
/// them from the journal message it was decoded from, so a takeover skips
/// the records it does not replay without allocating for them
/// ([`crate::journal::Tails`]).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
pub struct RecordOf<S> {
    /// Partition.
    pub n: u32,
    /// Policy name.
    pub p: S,
    /// Key token.
    pub k: S,
    /// Units counted (a denial: units denied; a refund: units given back).
    pub c: u64,
    /// When (ns since the epoch, the owner's clock).
    pub t: u64,
    /// A reset (`rl.reset`): the counter was forgotten (`c` is 0).
    #[serde(default)]
    pub r: bool,
    /// A denied ask, journaled for its usage (CONTRACT §9) only when usage
    /// is recorded: it changed no counter and replay changes none.
    #[serde(default)]
    pub d: bool,
    /// A slice of a local budget ([`sluice_core::budget`]): counted like
    /// an ask, but usage counts its units only as they come back spent.
    #[serde(default)]
    pub s: bool,
    /// A slice given back: when it was taken (ns, nonzero), so that replay
    /// gives `c` units back into the same window.
    #[serde(default)]
    pub g: u64,
    /// With a refund: the units of the slice that were spent (its usage).
    #[serde(default)]
    pub u: u64,
}

/// A journal record that owns its strings.
pub type Record = RecordOf<String>;

/// A journal record whose strings borrow from the message it was read from.
pub type RecordRef<'a> = RecordOf<&'a str>;

impl Record {
    /// A record of `c` units of `k` under `p` at `t`: a count, unless
    /// the caller marks it otherwise.
    fn new(n: u32, p: &str, k: &str, c: u64, t: Nanos) -> Record {
        Record {
            n,
            p: p.to_string(),
            k: k.to_string(),
            c,
            t: t.as_u64(),
            r: false,
            d: false,
            s: false,
            g: 0,
            u: 0,
        }
    }
}

impl<S> RecordOf<S> {
    /// A plain count: encoded as its first five fields only, as every
    /// release since journal format 2 reads it.
    pub fn is_count(&self) -> bool {
        self.fields() == 5
    }

    /// How many fields it is encoded as (see [`RecordOf`]).
    fn fields(&self) -> usize {
        if self.g != 0 || self.u != 0 {
            10
        } else if self.s {
            8
        } else if self.d {
            7
        } else if self.r {
            6
        } else {
            5
        }
    }
}

impl<T: Serialize> Serialize for RecordOf<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let fields = self.fields();
        let mut st = s.serialize_struct("Record", fields)?;
        st.serialize_field("n", &self.n)?;
        st.serialize_field("p", &self.p)?;
        st.serialize_field("k", &self.k)?;
        st.serialize_field("c", &self.c)?;
        st.serialize_field("t", &self.t)?;
        if fields > 5 {
            st.serialize_field("r", &self.r)?;
        }
        if fields > 6 {
            st.serialize_field("d", &self.d)?;
        }
        if fields > 7 {
            st.serialize_field("s", &self.s)?;
        }
        if fields > 8 {
            st.serialize_field("g", &self.g)?;
            st.serialize_field("u", &self.u)?;
        }
        st.end()
    }
}

/// What a decided ask adds to its key's usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Usage {
    Used,
    Denied,
    /// Allowed without consuming (a peek).
    Neither,
}

impl RecordRef<'_> {
    pub fn to_owned(self) -> Record {
        Record {
            n: self.n,
            p: self.p.to_string(),
            k: self.k.to_string(),
            c: self.c,
            t: self.t,
            r: self.r,
            d: self.d,
            s: self.s,
            g: self.g,
            u: self.u,
        }
    }
}

/// A message as it arrived on one of a partition's subjects.
#[derive(Clone, Copy, Debug)]
pub struct Message<'m> {
    pub subject: &'m str,
    pub body: &'m [u8],
    /// It has a reply subject (someone waits for the answer).
    pub wants_reply: bool,
}

/// A partition this worker answers for right now: its counters and stats.
#[derive(Clone, Copy)]
pub struct Owned<'c> {
    pub partition: u32,
    pub counters: &'c Counters,
    pub stats: &'c ShardStats,
    /// Its usage ledger, when usage is recorded (CONTRACT §9).
    pub usage: Option<&'c Ledger>,
}

/// What to answer: a reply value, before it gets NATS headers
/// ([`crate::reply::Reply::of`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Answer<'p> {
    Decision {
        decision: Decision,
        policy: &'p str,
        encoding: Encoding,
    },
    Error {
        error: ErrorReply,
        encoding: Encoding,
    },
    /// A batch's results in item order, or why the batch as a whole was
    /// refused (a body that is no batch).
    Batch(Result<Vec<wire::Reply>, ErrorReply>),
    /// A key's state (`rl.inspect`).
    Inspect(InspectReply, Encoding),
    /// What a reset forgot (`rl.reset`).
    Reset(ResetReply, Encoding),
}

/// What the decisions of one batch on one partition did, published to the
/// stats at once by [`Tally::finish`] (one atomic add per counter and
/// batch, not per decision).
pub struct Tally {
    partition: u32,
    journal: bool,
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
    records: Vec<Record>,
    meters: Arc<PolicyMeters>,
    /// Allowed, denied and hit counts by policy (its place in `meters`), of
    /// the first [`POLICY_SLOTS`] policies the batch decided for; the
    /// counts of any further one go to its counters at once.
    by_policy: [(usize, [u64; 3]); POLICY_SLOTS],
    policies_used: usize,
}

/// Policies whose counts a [`Tally`] gathers before publishing them (a
/// batch rarely decides for more).
const POLICY_SLOTS: usize = 4;

impl Tally {
    fn new(partition: u32, journal: bool, meters: Arc<PolicyMeters>) -> Tally {
        Tally {
            partition,
            journal,
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
            records: Vec::new(),
            meters,
            by_policy: [(0, [0; 3]); POLICY_SLOTS],
            policies_used: 0,
        }
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

    /// A counter changed (by `cost`, or forgotten by a reset): in journal
    /// mode, remember the record to store.
    fn changed(&mut self, policy: &str, token: &str, cost: u64, reset: bool, now: Nanos) {
        self.changes += 1;
        if self.journal {
            let mut record = Record::new(self.partition, policy, token, cost, now);
            record.r = reset;
            self.records.push(record);
        }
    }

    /// A slice of `units` was taken for a client's local budget.
    fn sliced(&mut self, policy: &str, token: &str, units: u64, now: Nanos) {
        self.changes += 1;
        self.slices += 1;
        self.sliced_units += units;
        if self.journal {
            let mut record = Record::new(self.partition, policy, token, units, now);
            record.s = true;
            self.records.push(record);
        }
    }

    /// A slice came back: its unspent units went back into the counter
    /// and its spent ones are usage.
    fn refunded(&mut self, policy: &str, token: &str, refund: &Refund, now: Nanos) {
        self.changes += 1;
        self.returned_units += refund.units;
        if self.journal {
            let mut record = Record::new(self.partition, policy, token, refund.units, now);
            record.g = refund.taken_at.as_u64().max(1);
            record.u = refund.spent;
            self.records.push(record);
        }
    }

    /// Journal mode with usage recorded: a denied ask's record, stored
    /// for its usage only.
    fn denied(&mut self, policy: &str, token: &str, cost: u64, now: Nanos) {
        let mut record = Record::new(self.partition, policy, token, cost, now);
        record.d = true;
        self.records.push(record);
    }

    fn outcome(&mut self, verb: Verb, result: &Result<(Decision, &str), ErrorReply>) {
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
            (Ok((d, policy)), _) if d.allowed => {
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

    /// Publishes the counts to `worker` and to the partition's `shard` and
    /// returns the records to store (journal mode; empty otherwise). The
    /// changes are published last (Release), after the counters they wrote.
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
        ] {
            if n > 0 {
                counter.inc_by(n);
            }
        }
        add(&shard.decisions, self.decisions);
        shard.add_changes(self.changes);
        self.records
    }
}

fn add(counter: &AtomicU64, n: u64) {
    if n > 0 {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

thread_local! {
    /// The counter key is built here for every decision: one buffer per
    /// thread, not one `String` per request.
    static KEY: RefCell<String> = RefCell::new(String::with_capacity(128));
}

/// The answer for a key blocked by an override (`max = 0`): denied, asked
/// to come back after the policy's longest window (an unblock is not
/// announced).
fn blocked(base: &Policy) -> Decision {
    let window = base
        .limits()
        .iter()
        .map(|l| l.per())
        .max()
        .unwrap_or(Nanos::ZERO);
    Decision {
        allowed: false,
        limit: 0,
        remaining: 0,
        reset: window,
        retry_after: window,
    }
}

/// The allowed, denied and hit counters of `sluice_worker_decisions_total`
/// for each policy, found by name without a lock: the decision core looks
/// a policy up here once per decision, and a [`Tally`] adds to the
/// counters once per batch. Replaced whole when the policies change, and
/// only ever grows: a policy taken out of force keeps its series (a counter
/// never goes back), so whatever version of the policies a batch decides
/// with, its names are here.
pub struct PolicyMeters {
    index: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    counters: Vec<[Counter; 3]>,
}

impl PolicyMeters {
    /// These meters and those of `names` not among them yet, from `stats`'
    /// family.
    fn with<'n>(&self, stats: &WorkerStats, names: impl Iterator<Item = &'n str>) -> PolicyMeters {
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

    fn index_of(&self, policy: &str) -> Option<usize> {
        self.index.get(policy).copied()
    }
}

/// Decides asks on the counters it is handed. One per worker, shared by
/// all its tasks.
pub struct Decider {
    config: Arc<Config>,
    stats: Arc<WorkerStats>,
    journal: bool,
    /// Usage is recorded (`[usage] enabled`).
    usage: bool,
    /// The policies in force; replaced whole when the bucket changes
    /// ([`Decider::set_policies`]). A batch takes them once and decides
    /// with that version.
    policies: RwLock<Arc<Policies>>,
    /// The decision counters of every policy ever in force.
    meters: RwLock<Arc<PolicyMeters>>,
}

impl Decider {
    /// `journal`: build the [`Record`]s of what was counted (journal mode);
    /// snapshot mode builds none, they would be dropped unread.
    pub fn new(config: Arc<Config>, stats: Arc<WorkerStats>, journal: bool) -> Decider {
        let policies = Policies::from_config(&config);
        let none = PolicyMeters {
            index: HashMap::default(),
            counters: Vec::new(),
        };
        let meters = none.with(&stats, policies.iter().map(Policy::name));
        Decider {
            policies: RwLock::new(Arc::new(policies)),
            meters: RwLock::new(Arc::new(meters)),
            usage: config.usage.enabled,
            config,
            stats,
            journal,
        }
    }

    /// The policies in force now.
    pub fn policies(&self) -> Arc<Policies> {
        self.policies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `policies` in force for the next batches.
    pub fn set_policies(&self, policies: Policies) {
        // The meters first: a batch that takes the new policies then finds
        // their names in the meters its tally takes.
        let meters = self
            .meters()
            .with(&self.stats, policies.iter().map(Policy::name));
        *self.meters.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(meters);
        *self.policies.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policies);
    }

    fn meters(&self) -> Arc<PolicyMeters> {
        self.meters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// A tally for a batch of decisions on `partition`, decided with
    /// policies taken before it ([`Decider::policies`]).
    pub fn tally(&self, partition: u32) -> Tally {
        Tally::new(partition, self.journal, self.meters())
    }

    /// Decides one message that arrived on `subject`, one of the subjects of
    /// `owned`'s partition (`rl.p.<n>.<verb>.<key>` or `rl.p.<n>.batch`).
    /// Returns what to answer if the message wants a reply (`wants_reply`).
    /// An `allow` or a batch nobody waits for is not a request (the mapping
    /// probe sends those): nothing is decided or counted. A `hit` counts
    /// either way.
    pub fn message<'p>(
        &self,
        policies: &'p Policies,
        message: Message<'_>,
        owned: Owned<'_>,
        now: Nanos,
        tally: &mut Tally,
    ) -> Option<Answer<'p>> {
        let Message {
            subject,
            body,
            wants_reply,
        } = message;
        match Inbound::parse(subject)? {
            Inbound::Ask(ask) if matches!(ask.verb, Verb::Inspect | Verb::Reset) => {
                // An inspect nobody waits for changes nothing; a reset is done
                // either way, like a hit.
                if ask.verb == Verb::Inspect && !wants_reply {
                    return None;
                }
                let result = self.admin(policies, ask.verb, ask.key_token, body, owned, now, tally);
                tally.decisions += 1;
                if result.is_err() {
                    tally.errors += 1;
                }
                let answer =
                    result.unwrap_or_else(|(error, encoding)| Answer::Error { error, encoding });
                wants_reply.then_some(answer)
            }
            Inbound::Ask(ask) => {
                let verb = ask.verb;
                // Usage queries are the shard's ([`crate::usage::query`]).
                if !Verb::ANSWERED.contains(&verb)
                    || verb == Verb::Usage
                    || (verb == Verb::Allow && !wants_reply)
                {
                    return None;
                }
                let encoding = Encoding::of_body(body);
                let result = self.ask(policies, verb, ask.key_token, body, owned, now, tally);
                tally.outcome(verb, &result);
                let answer = match result {
                    Ok((decision, policy)) => Answer::Decision {
                        decision,
                        policy,
                        encoding,
                    },
                    Err(error) => Answer::Error { error, encoding },
                };
                wants_reply.then_some(answer)
            }
            Inbound::PartitionBatch(partition) => {
                if !wants_reply {
                    return None;
                }
                let answered = |p: u32| (p == partition && p == owned.partition).then_some(owned);
                let (answer, mut records) = self.batch(policies, body, now, &answered);
                tally.records.append(&mut records);
                Some(answer)
            }
        }
    }

    /// `rl.inspect` or `rl.reset` of one key: under the policy the body
    /// names, or under every configured policy with state for the key.
    #[allow(clippy::too_many_arguments)]
    fn admin<'p>(
        &self,
        policies: &'p Policies,
        verb: Verb,
        token: &str,
        body: &[u8],
        owned: Owned<'_>,
        now: Nanos,
        tally: &mut Tally,
    ) -> Result<Answer<'p>, (ErrorReply, Encoding)> {
        let encoding = Encoding::of_body(body);
        let key = KeyToken::parse(token).map_err(|e| (e.into(), encoding))?;
        let scope = wire::inspect::decode_scope(body).map_err(|e| (e.reply, e.encoding))?;
        let owned = self
            .locate(key, |p| (p == owned.partition).then_some(owned))
            .map_err(|e| (e, encoding))?;
        let chosen: Vec<&Policy> = match &scope.policy {
            Some(name) => vec![policies
                .get(name)
                .ok_or_else(|| (ErrorReply::unknown_policy(name), encoding))?],
            None => policies.iter().collect(),
        };
        let token = key.as_str();
        let mut counter = String::new();
        if verb == Verb::Inspect {
            let mut reports = Vec::new();
            for base in chosen {
                ask::counter_key(&mut counter, base.name(), token);
                let state = owned.counters.state(&counter);
                let over = policies.override_of(base.name(), token);
                if state.is_none() && over.is_none() {
                    continue;
                }
                // The limits in force for this key: an override's, if any.
                let policy = match over {
                    Some(Override::Limits(limits)) => limits,
                    _ => base,
                };
                let state = state.unwrap_or_else(|| policy.new_state());
                reports.push(PolicyReport {
                    policy: base.name().to_string(),
                    algorithm: base.algorithm().as_str().to_string(),
                    limits: policy
                        .inspect(&state, now)
                        .iter()
                        .map(LimitReport::from)
                        .collect(),
                    overridden: over.map(|o| OverrideReport {
                        blocked: *o == Override::Blocked,
                    }),
                });
            }
            let reply = InspectReply {
                key: token.to_string(),
                policies: reports,
            };
            return Ok(Answer::Inspect(reply, scope.encoding));
        }
        let mut reset = Vec::new();
        for policy in chosen {
            ask::counter_key(&mut counter, policy.name(), token);
            if owned.counters.forget(&counter) {
                tally.changed(policy.name(), token, 0, true, now);
                reset.push(policy.name().to_string());
            }
        }
        let reply = ResetReply {
            key: token.to_string(),
            reset,
        };
        Ok(Answer::Reset(reply, scope.encoding))
    }

    /// Validates and applies one ask whose body is still encoded.
    #[allow(clippy::too_many_arguments)]
    fn ask<'p>(
        &self,
        policies: &'p Policies,
        verb: Verb,
        token: &str,
        body: &[u8],
        owned: Owned<'_>,
        now: Nanos,
        tally: &mut Tally,
    ) -> Result<(Decision, &'p str), ErrorReply> {
        let key = KeyToken::parse(token)?;
        let request = wire::decode_request(body).map_err(|e| e.reply)?;
        let op = Op::of(verb, request.cost)
            .ok_or_else(|| ErrorReply::bad_request(format!("{} does not count", verb.as_str())))?;
        let owned = self.locate(key, |p| (p == owned.partition).then_some(owned))?;
        self.apply(
            policies,
            key,
            &request.policy,
            op,
            Budget::None,
            now,
            owned,
            tally,
        )
        .map(|(decision, policy, _)| (decision, policy))
    }

    /// Decides a batch (`rl.p.<n>.batch` or `rl.w.<worker-id>.batch`): each
    /// item on the counters of its partition as `answered` gives them, in
    /// item order per partition, as if sent one after the other. Items of
    /// partitions not answered here get the 503 of the partition check.
    /// Returns the reply and, in journal mode, the records to store before
    /// it is sent.
    pub fn batch<'p, 'c>(
        &self,
        policies: &'p Policies,
        body: &[u8],
        now: Nanos,
        answered: &dyn Fn(u32) -> Option<Owned<'c>>,
    ) -> (Answer<'p>, Vec<Record>) {
        let items = match batch::decode_items(body) {
            Ok(items) => items,
            Err(error) => {
                self.stats.add_errors(1);
                return (Answer::Batch(Err(error)), Vec::new());
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
            let mut tally = self.tally(owned.partition);
            for (_, i, item) in share {
                let op = Op::Allow(item.cost);
                let applied = self.apply(
                    policies,
                    item.key,
                    &item.policy,
                    op,
                    item.budget,
                    now,
                    owned,
                    &mut tally,
                );
                let (result, grant) = match applied {
                    Ok((decision, policy, grant)) => (Ok((decision, policy)), grant),
                    Err(e) => (Err(e), None),
                };
                if matches!(item.budget, Budget::Refund(_)) {
                    // Giving back decides nothing.
                    tally.decisions += 1;
                } else {
                    tally.outcome(Verb::Allow, &result);
                }
                results[*i] = Some(match result {
                    Ok((decision, policy)) => {
                        let mut reply = DecisionReply::new(&decision, policy);
                        reply.grant = grant;
                        wire::Reply::Decision(reply)
                    }
                    Err(e) => wire::Reply::Error(e),
                });
            }
            records.append(&mut tally.finish(&self.stats, owned.stats));
        }
        let results = results
            .into_iter()
            .map(|r| r.expect("every item got a result"))
            .collect();
        (Answer::Batch(Ok(results)), records)
    }

    /// The one partition check: the partition `key` belongs to, if this
    /// worker answers for it right now, else the 503 that sends the client
    /// through the server's mapping (PROTOCOL.md, "Partitions").
    fn locate<'c>(
        &self,
        key: KeyToken<'_>,
        answered: impl Fn(u32) -> Option<Owned<'c>>,
    ) -> Result<Owned<'c>, ErrorReply> {
        let partitions = self.config.partitions;
        let home = key.partition(partitions);
        answered(home).ok_or_else(|| {
            ErrorReply::unavailable(format!(
                "key {key} belongs to partition {home} of {partitions}, which this worker does not \
                 answer for right now (another worker owns it, it is still being restored, or the \
                 sender uses another partition count); ask it on {}",
                Verb::Allow.client_subject(key.as_str())
            ))
        })
    }

    /// Checks the policy and the cost, then applies `op`, and with it what
    /// a batch item does for a local budget ([`sluice_core::budget`]): an
    /// ask that also asks for a slice (the grant comes back), or a slice
    /// given back (the item's cost is 0; the answer is a peek's). Nothing
    /// changes unless every check passed.
    #[allow(clippy::too_many_arguments)]
    fn apply<'p>(
        &self,
        policies: &'p Policies,
        key: KeyToken<'_>,
        policy_name: &str,
        op: Op,
        budget: Budget,
        now: Nanos,
        owned: Owned<'_>,
        tally: &mut Tally,
    ) -> Result<(Decision, &'p str, Option<Grant>), ErrorReply> {
        let base = ask::admit(|name| policies.get(name), policy_name, op)?;
        let cost = match op {
            Op::Allow(c) | Op::Record(c) => c,
        };
        let token = key.as_str();
        // A per-key override replaces the policy's limits for this key;
        // a blocked key is denied (a hit is still recorded, as served, and
        // what was spent from a slice is still usage).
        let policy = match (policies.override_of(base.name(), token), op) {
            (None, _) | (Some(Override::Blocked), Op::Record(_)) => base,
            (Some(Override::Limits(limits)), _) => ask::admit(|_| Some(limits), base.name(), op)?,
            (Some(Override::Blocked), Op::Allow(_)) => {
                let decision = blocked(base);
                self.record_usage(base.name(), token, cost, Usage::Denied, now, owned, tally);
                if let Budget::Refund(refund) = budget {
                    let spent_only = Refund { units: 0, ..refund };
                    self.gave_back(base.name(), token, &spent_only, now, owned, tally);
                }
                return Ok((decision, base.name(), None));
            }
        };
        let (decision, grant, budget) = KEY.with(|buf| {
            let mut buf = buf.borrow_mut();
            ask::counter_key(&mut buf, policy.name(), token);
            // A refund gives back at most what its own slice held, once; one
            // that no slice of this owner explains gives nothing back.
            let budget = match budget {
                Budget::Refund(r) => match owned.counters.slices().refund(&buf, &r, now) {
                    Ok(Returned::Known) => Budget::Refund(r),
                    Ok(Returned::Unknown) => {
                        tally.unmatched_units += r.units;
                        Budget::Refund(Refund { units: 0, ..r })
                    }
                    Err(overclaim) => return Err(ErrorReply::bad_request(overclaim.to_string())),
                },
                other => other,
            };
            let (decision, grant) =
                owned
                    .counters
                    .update(policy, &buf, now, |state| match budget {
                        Budget::None => (op.apply(policy, state, now), None),
                        Budget::Slice(want) => policy.grant(state, now, cost, want),
                        Budget::Refund(r) => (policy.refund(state, now, r.units, r.taken_at), None),
                    });
            if let Some(g) = grant.filter(|g| g.units > 0) {
                owned.counters.slices().granted(&buf, g.taken_at, g.units);
            }
            Ok((decision, grant, budget))
        })?;
        if let Budget::Refund(refund) = budget {
            self.gave_back(policy.name(), token, &refund, now, owned, tally);
            return Ok((decision, policy.name(), None));
        }
        let usage = if op.consumed(&decision) {
            tally.changed(policy.name(), token, cost, false, now);
            if let Some(g) = grant.filter(|g| g.units > 0) {
                tally.sliced(policy.name(), token, g.units, now);
            }
            Usage::Used
        } else if decision.allowed {
            Usage::Neither
        } else {
            Usage::Denied
        };
        self.record_usage(base.name(), token, cost, usage, now, owned, tally);
        Ok((decision, policy.name(), grant))
    }

    /// A slice came back: its record (journal mode) and the usage of what
    /// was spent from it (journal mode counts that once the record is
    /// stored).
    #[allow(clippy::too_many_arguments)]
    fn gave_back(
        &self,
        policy: &str,
        token: &str,
        refund: &Refund,
        now: Nanos,
        owned: Owned<'_>,
        tally: &mut Tally,
    ) {
        if refund.units > 0 || refund.spent > 0 {
            tally.refunded(policy, token, refund, now);
        }
        self.record_usage(policy, token, refund.spent, Usage::Used, now, owned, tally);
    }

    /// Records the usage of one decided ask (CONTRACT §9): `cost` units
    /// used or denied (a peek, cost 0, is neither). In snapshot mode into
    /// the partition's ledger now; in journal mode a count is already a
    /// record and a denial becomes one, and both reach the ledger once
    /// stored ([`crate::usage::UsageBook::journaled`]).
    #[allow(clippy::too_many_arguments)]
    fn record_usage(
        &self,
        policy: &str,
        token: &str,
        cost: u64,
        usage: Usage,
        now: Nanos,
        owned: Owned<'_>,
        tally: &mut Tally,
    ) {
        if !self.usage || cost == 0 {
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
        if self.journal {
            if usage == Usage::Denied {
                tally.denied(policy, token, cost, now);
            }
        } else if let Some(ledger) = owned.usage {
            ledger.add(policy, token, now.as_u64() / 1_000_000, counts);
        }
    }

    /// Applies a journal record at takeover: it was counted, so it is
    /// counted again whatever the limit, at its original time; a reset
    /// forgets the counter again. `false` for a record of a policy no
    /// longer configured (it is skipped).
    pub fn replay(&self, policies: &Policies, record: &Record, counters: &Counters) -> bool {
        let Some(policy) = policies.get(&record.p) else {
            return false;
        };
        if record.d {
            return false;
        }
        KEY.with(|buf| {
            let mut buf = buf.borrow_mut();
            ask::counter_key(&mut buf, &record.p, &record.k);
            if record.r {
                counters.forget(&buf);
            } else if record.g == 0 {
                counters.apply(policy, &buf, Nanos(record.t), Op::Record(record.c));
                if record.s {
                    counters
                        .slices()
                        .replayed_grant(&buf, Nanos(record.t), record.c);
                }
            } else {
                // A slice given back (`g`) is not given back again: a
                // record may be in the restored snapshot and replayed too,
                // and replay errs on the side of denying (ARCHITECTURE.md,
                // "The journal"), so its units stay counted until their
                // window ends or the bucket refills them. Its slice holds
                // that much less.
                counters.slices().replayed_refund(
                    &buf,
                    Nanos(record.g),
                    record.c.saturating_add(record.u),
                );
            }
        });
        true
    }
}

#[cfg(test)]
mod tests {
    //! The decision core with a manual clock and no NATS: each ask is the
    //! subject and body a worker would receive.
    use super::*;
    use sluice_core::partition::partition_of;
    use sluice_core::subject::{batch_subject, Verb};
    use sluice_core::wire::{ErrorCode, MAX_BODY};
    use std::borrow::Cow;

    const PARTITIONS: u32 = 4;
    const SEC: u64 = 1_000_000_000;
    const T0: Nanos = Nanos(1_000 * SEC);

    const CONFIG: &str = r#"
        partitions = 4
        [policies.default]
        algorithm = "sliding_window"
        limits = [ { max = 15, per = "1s" } ]
        [policies.login]
        algorithm = "sliding_log"
        limits = [ { max = 3, per = "1s" }, { max = 5, per = "1m" } ]
    "#;

    /// One partition's state and a worker's decision core, in journal mode
    /// so that every count would show as a record.
    struct Fixture {
        decider: Decider,
        /// The policies of the tests' asks (the decider's at the start).
        policies: Arc<Policies>,
        counters: Counters,
        shard: ShardStats,
        partition: u32,
    }

    impl Fixture {
        /// Journal mode without usage: every record is a count or a reset.
        fn new() -> Fixture {
            let mut config = Config::from_toml(CONFIG, "test.toml").unwrap();
            config.usage.enabled = false;
            Fixture::with(config, true)
        }

        fn with(config: Config, journal: bool) -> Fixture {
            let decider = Decider::new(Arc::new(config), Arc::default(), journal);
            Fixture {
                policies: decider.policies(),
                decider,
                counters: Counters::new(),
                shard: ShardStats::default(),
                partition: 1,
            }
        }

        fn owned(&self) -> Owned<'_> {
            Owned {
                partition: self.partition,
                counters: &self.counters,
                stats: &self.shard,
                usage: None,
            }
        }

        /// Sends `body` on `rl.p.<partition>.<verb>.<token>`; returns the
        /// answer and the records to store.
        fn send(
            &self,
            verb: Verb,
            token: &str,
            body: &[u8],
            wants_reply: bool,
            now: Nanos,
        ) -> (Option<Answer<'_>>, Vec<Record>) {
            let subject = verb.mapped_subject(self.partition, token);
            let mut tally = self.decider.tally(self.partition);
            let answer = self.decider.message(
                &self.policies,
                Message {
                    subject: &subject,
                    body,
                    wants_reply,
                },
                self.owned(),
                now,
                &mut tally,
            );
            let records = tally.finish(self.decider.stats(), &self.shard);
            (answer, records)
        }

        fn allow(&self, token: &str, body: &[u8], now: Nanos) -> Answer<'_> {
            self.send(Verb::Allow, token, body, true, now)
                .0
                .expect("an allow with a reply subject is answered")
        }

        /// A peek's remaining for `token` under `default`.
        fn remaining(&self, token: &str, now: Nanos) -> u64 {
            match self.allow(token, br#"{"cost":0}"#, now) {
                Answer::Decision { decision, .. } => decision.remaining,
                other => panic!("a peek is decided: {other:?}"),
            }
        }
    }

    /// A key token of `partition`.
    fn key_in(partition: u32, prefix: &str) -> String {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|k| partition_of(k, PARTITIONS) == partition)
            .unwrap()
    }

    fn decision(answer: Answer<'_>) -> Decision {
        match answer {
            Answer::Decision { decision, .. } => decision,
            other => panic!("expected a decision, got {other:?}"),
        }
    }

    /// The decision counter of `outcome` under `policy` on `/metrics`.
    fn decisions_of(stats: &WorkerStats, outcome: Outcome, policy: &str) -> u64 {
        let labels = DecisionLabels {
            outcome,
            policy: policy.to_string(),
        };
        stats.meters.decisions.get_or_create(&labels).get()
    }

    #[test]
    fn decisions_are_counted_by_outcome_and_policy() {
        let f = Fixture::new();
        let key = key_in(1, "k");
        for _ in 0..16 {
            f.allow(&key, b"", T0);
        }
        f.allow(&key, br#"{"policy":"login"}"#, T0);
        f.send(
            Verb::Hit,
            &key,
            br#"{"policy":"login","cost":2}"#,
            false,
            T0,
        );
        f.allow(&key, br#"{"policy":"nope"}"#, T0);
        f.allow("bad%zz", b"", T0);
        let stats = f.decider.stats();
        assert_eq!(decisions_of(stats, Outcome::Allowed, "default"), 15);
        assert_eq!(decisions_of(stats, Outcome::Denied, "default"), 1);
        assert_eq!(decisions_of(stats, Outcome::Allowed, "login"), 1);
        assert_eq!(decisions_of(stats, Outcome::Hit, "login"), 1);
        assert_eq!(decisions_of(stats, Outcome::Error, ""), 2);
        assert_eq!(decisions_of(stats, Outcome::Error, "nope"), 0);
    }

    /// A batch deciding for more policies than a tally gathers counts the
    /// rest at once: every decision is counted either way, and a name
    /// without meters is not counted per policy.
    #[test]
    fn a_tally_counts_every_policy_past_its_slots() {
        let stats = WorkerStats::default();
        let names = ["a", "b", "c", "d", "e", "f"];
        let none = PolicyMeters {
            index: HashMap::default(),
            counters: Vec::new(),
        };
        let meters = Arc::new(none.with(&stats, names.into_iter()));
        let mut tally = Tally::new(0, false, meters);
        for (i, name) in names.iter().enumerate() {
            for _ in 0..=i {
                tally.count_policy(name, 1);
            }
        }
        tally.count_policy("unknown", 1);
        tally.finish(&stats, &ShardStats::default());
        for (i, name) in names.iter().enumerate() {
            assert_eq!(decisions_of(&stats, Outcome::Denied, name), i as u64 + 1);
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

    #[test]
    fn every_error_reply_changes_no_counter() {
        let f = Fixture::new();
        let mine = key_in(1, "k");
        let elsewhere = key_in(2, "k");
        let cases: Vec<(&str, Vec<u8>, ErrorCode, Encoding)> = vec![
            // The key token.
            ("bad%zz", vec![], ErrorCode::BadRequest, Encoding::MsgPack),
            ("bad%4", vec![], ErrorCode::BadRequest, Encoding::MsgPack),
            // The body.
            (&mine, vec![0xc1], ErrorCode::BadRequest, Encoding::MsgPack),
            (
                &mine,
                br#"{"cots":5}"#.to_vec(),
                ErrorCode::BadRequest,
                Encoding::Json,
            ),
            (
                &mine,
                br#"{"cost":-1}"#.to_vec(),
                ErrorCode::BadRequest,
                Encoding::Json,
            ),
            (
                &mine,
                br#"{"cost":1.5}"#.to_vec(),
                ErrorCode::BadRequest,
                Encoding::Json,
            ),
            (
                &mine,
                br#"{"cost":1} x"#.to_vec(),
                ErrorCode::BadRequest,
                Encoding::Json,
            ),
            (
                &mine,
                vec![b' '; MAX_BODY + 1],
                ErrorCode::TooLarge,
                Encoding::MsgPack,
            ),
            // The partition.
            (
                &elsewhere,
                vec![],
                ErrorCode::Unavailable,
                Encoding::MsgPack,
            ),
            // The policy.
            (
                &mine,
                br#"{"policy":"nope"}"#.to_vec(),
                ErrorCode::UnknownPolicy,
                Encoding::Json,
            ),
            (
                &mine,
                br#"{"policy":"bad name!"}"#.to_vec(),
                ErrorCode::BadRequest,
                Encoding::Json,
            ),
            // The cost: more than the policy can ever hold.
            (
                &mine,
                br#"{"cost":16}"#.to_vec(),
                ErrorCode::BadRequest,
                Encoding::Json,
            ),
            (
                &mine,
                br#"{"policy":"login","cost":4}"#.to_vec(),
                ErrorCode::BadRequest,
                Encoding::Json,
            ),
        ];
        let n = cases.len() as u64;
        for (token, body, code, encoding) in cases {
            let capacity = std::str::from_utf8(&body)
                .is_ok_and(|b| b.contains(r#""cost":16"#) || b.contains(r#""cost":4"#));
            // A hit records what was served, whatever its size: only an
            // allow can cost too much.
            let verbs: &[Verb] = if capacity {
                &[Verb::Allow]
            } else {
                &[Verb::Allow, Verb::Hit]
            };
            for &verb in verbs {
                let (answer, records) = f.send(verb, token, &body, true, T0);
                match answer {
                    Some(Answer::Error { error, encoding: e }) => {
                        assert_eq!(error.code, code, "{verb:?} {token} {body:?}: {error}");
                        assert_eq!(e, encoding, "{token} {body:?}: the reply's encoding");
                    }
                    other => panic!("{verb:?} {token} {body:?}: expected {code:?}, got {other:?}"),
                }
                assert!(records.is_empty(), "{token} {body:?} stored a record");
            }
        }
        assert!(f.counters.is_empty(), "a refused request changed a counter");
        assert_eq!(f.shard.changes(), 0);
        assert_eq!(f.decider.stats().errors.load(Ordering::Relaxed), 2 * n - 2);
        // The key asked with a refused cost still has its whole limit.
        assert_eq!(f.remaining(&mine, T0), 15);
    }

    #[test]
    fn an_allowed_ask_counts_once_and_is_recorded() {
        let f = Fixture::new();
        let key = key_in(1, "alice");
        let d = decision(f.allow(&key, b"", T0));
        assert!(d.allowed);
        assert_eq!((d.limit, d.remaining), (15, 14));
        assert_eq!(f.shard.changes(), 1);
        let (_, records) = f.send(Verb::Allow, &key, br#"{"cost":2}"#, true, T0);
        assert_eq!(records.len(), 1);
        assert_eq!(
            (
                records[0].n,
                records[0].p.as_str(),
                records[0].k.as_str(),
                records[0].c
            ),
            (1, "default", key.as_str(), 2)
        );
        assert_eq!(f.remaining(&key, T0), 12);
    }

    #[test]
    fn a_peek_consumes_nothing() {
        let f = Fixture::new();
        let key = key_in(1, "peek");
        for _ in 0..20 {
            let (answer, records) = f.send(Verb::Allow, &key, br#"{"cost":0}"#, true, T0);
            let d = decision(answer.unwrap());
            assert!(d.allowed);
            assert_eq!(d.remaining, 15);
            assert!(records.is_empty());
        }
        assert_eq!(f.shard.changes(), 0);
    }

    #[test]
    fn a_denial_changes_nothing_and_says_when_to_retry() {
        let f = Fixture::new();
        let key = key_in(1, "busy");
        for _ in 0..15 {
            assert!(decision(f.allow(&key, b"", T0)).allowed);
        }
        let changes = f.shard.changes();
        let (answer, records) = f.send(Verb::Allow, &key, b"", true, T0);
        let d = decision(answer.unwrap());
        assert!(!d.allowed);
        assert!(d.retry_after > Nanos::ZERO);
        assert!(records.is_empty());
        assert_eq!(f.shard.changes(), changes);
        assert_eq!(f.decider.stats().denied.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn every_limit_of_a_policy_must_hold() {
        let f = Fixture::new();
        let key = key_in(1, "login");
        let login = br#"{"policy":"login"}"#;
        let allowed = |now| decision(f.allow(&key, login, now)).allowed;
        assert!((0..3).all(|_| allowed(T0)));
        let d = decision(f.allow(&key, login, T0));
        assert!(!d.allowed, "the 1s limit holds");
        assert_eq!(d.limit, 3);
        let later = Nanos(T0.as_u64() + SEC);
        assert!(allowed(later) && allowed(later));
        let d = decision(f.allow(&key, login, later));
        assert!(!d.allowed, "the 1m limit holds");
        assert_eq!(d.limit, 5);
    }

    #[test]
    fn a_hit_counts_over_the_limit_and_an_unanswerable_allow_counts_nothing() {
        let f = Fixture::new();
        let key = key_in(1, "hits");
        let (answer, records) = f.send(Verb::Hit, &key, br#"{"cost":20}"#, false, T0);
        assert!(answer.is_none());
        assert_eq!(records.len(), 1);
        assert_eq!(f.remaining(&key, T0), 0);
        // An allow nobody waits for (the mapping probe) is not a request.
        let other = key_in(1, "probe");
        let (answer, records) = f.send(Verb::Allow, &other, b"", false, T0);
        assert!(answer.is_none() && records.is_empty());
        assert_eq!(f.remaining(&other, T0), 15);
        // A hit with a reply subject answers what a peek would.
        let (answer, _) = f.send(Verb::Hit, &other, b"", true, T0);
        assert_eq!(decision(answer.unwrap()).remaining, 14);
    }

    /// Sends `items` as one batch on the fixture's partition; returns the
    /// results and the records to store.
    fn batch_of(
        f: &Fixture,
        items: &[batch::Item<'_>],
        now: Nanos,
    ) -> (Vec<wire::Reply>, Vec<Record>) {
        let body = batch::encode_items(items);
        let subject = batch_subject(f.partition);
        let mut tally = f.decider.tally(f.partition);
        let message = Message {
            subject: &subject,
            body: &body,
            wants_reply: true,
        };
        let answer = f
            .decider
            .message(&f.policies, message, f.owned(), now, &mut tally);
        let records = tally.finish(f.decider.stats(), &f.shard);
        let Some(Answer::Batch(Ok(results))) = answer else {
            panic!("expected batch results, got {answer:?}");
        };
        (results, records)
    }

    /// Journal mode, usage off: `default` (100 a second) with local
    /// budgets, `plain` the same without.
    fn budget_fixture() -> Fixture {
        let mut config = Config::from_toml(
            r#"
            partitions = 4
            [policies.default]
            algorithm = "fixed_window"
            limits = [ { max = 100, per = "1s" } ]
            local_budget = true
            [policies.plain]
            algorithm = "fixed_window"
            limits = [ { max = 100, per = "1s" } ]
            "#,
            "test.toml",
        )
        .unwrap();
        config.usage.enabled = false;
        Fixture::with(config, true)
    }

    /// A batch item of `key` under `default` (see [`budget_fixture`]).
    fn hot_item(key: &str, cost: u64, budget: Budget) -> batch::Item<'_> {
        batch::Item {
            key: KeyToken::parse(key).unwrap(),
            policy: Cow::Borrowed("default"),
            cost,
            budget,
        }
    }

    fn refund(units: u64, spent: u64, taken_at: Nanos) -> Budget {
        Budget::Refund(Refund {
            units,
            spent,
            taken_at,
        })
    }

    #[test]
    fn a_budget_slice_is_counted_and_journaled_and_what_comes_back_is_given_back() {
        let f = budget_fixture();
        let key = key_in(1, "hot");
        let item = |policy: &'static str, cost, budget| batch::Item {
            key: KeyToken::parse(&key).unwrap(),
            policy: Cow::Borrowed(policy),
            cost,
            budget,
        };
        let (results, records) = batch_of(&f, &[item("default", 1, Budget::Slice(30))], T0);
        let wire::Reply::Decision(d) = &results[0] else {
            panic!("{results:?}")
        };
        let grant = d.grant.expect("a policy with local budgets grants a slice");
        assert_eq!((grant.units, d.remaining), (30, 69));
        assert_eq!(grant.taken_at, T0);
        assert_eq!(records.len(), 2, "the ask and the slice");
        assert!(!records[0].s && records[1].s && records[1].c == 30);
        // Usage: the ask is used now, the slice only as it comes back spent.
        let used = |r: &Record| crate::usage::counts_of(r).map(|c| c.used);
        assert_eq!((used(&records[0]), used(&records[1])), (Some(1), None));
        // 20 of the 30 come back, 10 were spent.
        let refund = Budget::Refund(Refund {
            units: 20,
            spent: 10,
            taken_at: grant.taken_at,
        });
        let (results, records) = batch_of(&f, &[item("default", 0, refund)], T0);
        let wire::Reply::Decision(d) = &results[0] else {
            panic!("{results:?}")
        };
        assert_eq!((d.remaining, d.grant), (89, None));
        assert_eq!(
            (records[0].c, records[0].u, records[0].g),
            (20, 10, T0.as_u64())
        );
        assert_eq!(used(&records[0]), Some(10));
        let meters = &f.decider.stats().meters;
        assert_eq!(meters.budget_slices.get(), 1);
        assert_eq!(meters.budget_sliced_units.get(), 30);
        assert_eq!(meters.budget_returned_units.get(), 20);
        // A refund record reads back as written.
        let bytes = rmp_serde::to_vec(&records[0]).unwrap();
        assert_eq!(rmp_serde::from_slice::<Record>(&bytes).unwrap(), records[0]);
        // Replayed, a refund gives nothing back (replay errs towards denying).
        let replayed = Counters::new();
        for r in &records {
            f.decider.replay(&f.policies, r, &replayed);
        }
        assert_eq!(replayed.len(), 0);
        // A policy without local budgets grants none; the ask is decided.
        let (results, _) = batch_of(&f, &[item("plain", 1, Budget::Slice(30))], T0);
        let wire::Reply::Decision(d) = &results[0] else {
            panic!("{results:?}")
        };
        assert_eq!((d.allowed, d.remaining, d.grant), (true, 99, None));
    }

    #[test]
    fn a_refund_gives_back_only_what_its_own_slice_held_and_only_once() {
        let f = budget_fixture();
        let key = key_in(1, "hot");
        let item = |cost, budget| hot_item(&key, cost, budget);
        let outcomes = |items: &[batch::Item<'_>]| -> Vec<Result<u64, ErrorCode>> {
            batch_of(&f, items, T0)
                .0
                .iter()
                .map(|r| match r {
                    wire::Reply::Decision(d) => Ok(d.remaining),
                    wire::Reply::Error(e) => Err(e.code),
                })
                .collect()
        };
        let meters = &f.decider.stats().meters;
        // Never granted: nothing goes back (a client freeing a key's
        // budget would be a reset without the admin role).
        assert_eq!(
            outcomes(&[item(1, Budget::None), item(0, refund(50, 0, T0))]),
            [Ok(99), Ok(99)]
        );
        assert_eq!(meters.budget_unmatched_units.get(), 50);
        let (results, _) = batch_of(&f, &[item(1, Budget::Slice(30))], T0);
        let wire::Reply::Decision(d) = &results[0] else {
            panic!("{results:?}")
        };
        let taken_at = d.grant.expect("a slice").taken_at;
        assert_eq!(d.remaining, 68);
        // More than the slice held: refused whole, nothing changes.
        let (results, records) = batch_of(&f, &[item(0, refund(25, 10, taken_at))], T0);
        let wire::Reply::Error(e) = &results[0] else {
            panic!("{results:?}")
        };
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("holds 30"), "{e}");
        assert!(records.is_empty());
        // Its own slice: the 20 unspent go back, once.
        assert_eq!(outcomes(&[item(0, refund(20, 10, taken_at))]), [Ok(88)]);
        assert_eq!(outcomes(&[item(0, refund(20, 10, taken_at))]), [Ok(88)]);
        assert_eq!(meters.budget_returned_units.get(), 20);
        assert_eq!(meters.budget_unmatched_units.get(), 70);
        // A reset forgets its key's slices: one granted before it gives
        // nothing back into the counts after it.
        let (results, _) = batch_of(&f, &[item(1, Budget::Slice(30))], T0);
        let wire::Reply::Decision(d) = &results[0] else {
            panic!("{results:?}")
        };
        let taken_at = d.grant.expect("a slice").taken_at;
        let (answer, _) = f.send(Verb::Reset, &key, b"", true, T0);
        assert!(matches!(answer, Some(Answer::Reset(..))), "{answer:?}");
        assert_eq!(outcomes(&[item(5, Budget::None)]), [Ok(95)]);
        assert_eq!(outcomes(&[item(0, refund(30, 0, taken_at))]), [Ok(95)]);
    }

    #[test]
    fn a_journal_replay_remembers_the_slices_not_back_yet() {
        let old = budget_fixture();
        let key = key_in(1, "hot");
        let item = |cost, budget| hot_item(&key, cost, budget);
        let later = Nanos(T0.0 + 1_000_000);
        let mut journal = Vec::new();
        for (now, want) in [(T0, 30), (later, 10)] {
            let (results, records) = batch_of(&old, &[item(1, Budget::Slice(want))], now);
            assert!(matches!(&results[0], wire::Reply::Decision(d) if d.grant.is_some()));
            journal.extend(records);
        }
        let (_, records) = batch_of(&old, &[item(0, refund(10, 0, later))], later);
        journal.extend(records);

        // The next owner, from the journal alone (no snapshot).
        let new = budget_fixture();
        for record in &journal {
            new.decider.replay(&new.policies, record, &new.counters);
        }
        let remaining = |items: &[batch::Item<'_>]| match &batch_of(&new, items, later).0[0] {
            wire::Reply::Decision(d) => d.remaining,
            other => panic!("{other:?}"),
        };
        // Replay gave nothing back: 2 asks and both slices are counted.
        assert_eq!(remaining(&[item(0, Budget::None)]), 100 - 42);
        // The first slice comes back there; the second was back already.
        assert_eq!(remaining(&[item(0, refund(20, 10, T0))]), 100 - 22);
        assert_eq!(remaining(&[item(0, refund(10, 0, later))]), 100 - 22);
    }

    #[test]
    fn budget_fields_that_do_not_go_together_are_refused_and_change_nothing() {
        let f = Fixture::new();
        let key = key_in(1, "bad");
        let item = |cost, budget| batch::Item {
            key: KeyToken::parse(&key).unwrap(),
            policy: Cow::Borrowed("default"),
            cost,
            budget,
        };
        let refund = Budget::Refund(Refund {
            units: 5,
            spent: 0,
            taken_at: T0,
        });
        let (results, records) = batch_of(&f, &[item(0, Budget::Slice(3)), item(1, refund)], T0);
        for r in &results {
            let wire::Reply::Error(e) = r else {
                panic!("{r:?}")
            };
            assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
        }
        assert!(records.is_empty());
        assert_eq!(f.remaining(&key, T0), 15);
    }

    #[test]
    fn a_batch_decides_its_own_partition_in_order_and_refuses_the_others() {
        let f = Fixture::new();
        let mine = key_in(1, "b");
        let theirs = key_in(3, "b");
        let item = |key: &'static str, policy: &'static str, cost| batch::Item {
            key: KeyToken::parse(key).unwrap(),
            policy: Cow::Borrowed(policy),
            cost,
            budget: Default::default(),
        };
        let mine: &'static str = Box::leak(mine.into_boxed_str());
        let theirs: &'static str = Box::leak(theirs.into_boxed_str());
        let body = batch::encode_items(&[
            item(mine, "default", 10),
            item(theirs, "default", 1),
            item(mine, "default", 6),
            item(mine, "nope", 1),
            item(mine, "default", 5),
        ]);
        let subject = batch_subject(f.partition);
        let mut tally = f.decider.tally(f.partition);
        let answer = f.decider.message(
            &f.policies,
            Message {
                subject: &subject,
                body: &body,
                wants_reply: true,
            },
            f.owned(),
            T0,
            &mut tally,
        );
        let records = tally.finish(f.decider.stats(), &f.shard);
        let Some(Answer::Batch(Ok(results))) = answer else {
            panic!("expected batch results, got {answer:?}");
        };
        let codes: Vec<Option<ErrorCode>> = results
            .iter()
            .map(|r| match r {
                wire::Reply::Error(e) => Some(e.code),
                wire::Reply::Decision(_) => None,
            })
            .collect();
        assert_eq!(
            codes,
            [
                None,
                Some(ErrorCode::Unavailable),
                None,
                Some(ErrorCode::UnknownPolicy),
                None
            ]
        );
        let allowed: Vec<bool> = results
            .iter()
            .filter_map(|r| match r {
                wire::Reply::Decision(d) => Some(d.allowed),
                wire::Reply::Error(_) => None,
            })
            .collect();
        // 10 fits, 6 more does not (in item order), 5 more does.
        assert_eq!(allowed, [true, false, true]);
        assert_eq!(records.iter().map(|r| r.c).collect::<Vec<_>>(), [10, 5]);
        assert_eq!(f.remaining(mine, T0), 0);
        assert_eq!(f.counters.len(), 1, "another partition's key was counted");

        // A body that is no batch: one error for the batch, nothing counted.
        let mut tally = f.decider.tally(f.partition);
        let answer = f.decider.message(
            &f.policies,
            Message {
                subject: &subject,
                body: b"\x91",
                wants_reply: true,
            },
            f.owned(),
            T0,
            &mut tally,
        );
        assert!(
            matches!(answer, Some(Answer::Batch(Err(ref e))) if e.code == ErrorCode::BadRequest)
        );
        assert!(tally.finish(f.decider.stats(), &f.shard).is_empty());
        // A batch nobody waits for is not decided.
        let mut tally = f.decider.tally(f.partition);
        let answer = f.decider.message(
            &f.policies,
            Message {
                subject: &subject,
                body: &body,
                wants_reply: false,
            },
            f.owned(),
            T0,
            &mut tally,
        );
        assert!(answer.is_none());
        assert_eq!(f.remaining(mine, T0), 0);
    }

    #[test]
    fn a_worker_batch_decides_each_item_on_its_partition() {
        let f = Fixture::new();
        let other = Counters::new();
        let other_stats = ShardStats::default();
        let a: &'static str = Box::leak(key_in(1, "w").into_boxed_str());
        let b: &'static str = Box::leak(key_in(2, "w").into_boxed_str());
        let body = batch::encode_items(&[
            batch::Item {
                key: KeyToken::parse(a).unwrap(),
                policy: Cow::Borrowed("default"),
                cost: 2,
                budget: Default::default(),
            },
            batch::Item {
                key: KeyToken::parse(b).unwrap(),
                policy: Cow::Borrowed("default"),
                cost: 3,
                budget: Default::default(),
            },
        ]);
        let answered = |p: u32| match p {
            1 => Some(f.owned()),
            2 => Some(Owned {
                partition: 2,
                counters: &other,
                stats: &other_stats,
                usage: None,
            }),
            _ => None,
        };
        let (answer, records) = f.decider.batch(&f.policies, &body, T0, &answered);
        assert!(matches!(answer, Answer::Batch(Ok(ref r)) if r.len() == 2));
        assert_eq!(
            records.iter().map(|r| (r.n, r.c)).collect::<Vec<_>>(),
            [(1, 2), (2, 3)]
        );
        assert_eq!(f.shard.changes(), 1);
        assert_eq!(other_stats.changes(), 1);
        assert_eq!(other.len(), 1);
    }

    #[test]
    fn a_replayed_record_counts_whatever_the_limit() {
        let f = Fixture::new();
        let key = key_in(1, "r");
        let record = Record {
            n: 1,
            p: "default".into(),
            k: key.clone(),
            c: 20,
            t: T0.as_u64(),
            r: false,
            d: false,
            s: false,
            g: 0,
            u: 0,
        };
        assert!(f.decider.replay(&f.policies, &record, &f.counters));
        assert_eq!(f.remaining(&key, T0), 0);
        let gone = Record {
            p: "retired".into(),
            ..record
        };
        assert!(!f.decider.replay(&f.policies, &gone, &f.counters));
    }

    #[test]
    fn inspect_shows_every_limit_and_consumes_nothing() {
        let f = Fixture::new();
        let key = key_in(1, "seen");
        let login = br#"{"policy":"login"}"#;
        for _ in 0..2 {
            assert!(decision(f.allow(&key, login, T0)).allowed);
        }
        assert!(decision(f.allow(&key, b"", T0)).allowed);
        let changes = f.shard.changes();
        let inspect = |body: &[u8]| match f.send(Verb::Inspect, &key, body, true, T0).0 {
            Some(Answer::Inspect(reply, _)) => reply,
            other => panic!("expected an inspect reply, got {other:?}"),
        };
        let all = inspect(b"");
        assert_eq!(all.key, key);
        let mut names: Vec<&str> = all.policies.iter().map(|p| p.policy.as_str()).collect();
        names.sort();
        assert_eq!(names, ["default", "login"]);
        let login_state = inspect(login);
        assert_eq!(login_state.policies.len(), 1);
        let limits = &login_state.policies[0].limits;
        assert_eq!(
            limits
                .iter()
                .map(|l| (l.max, l.per_ms, l.used, l.remaining))
                .collect::<Vec<_>>(),
            [(3, 1_000, 2, 1), (5, 60_000, 2, 3)]
        );
        assert_eq!(login_state.policies[0].algorithm, "sliding_log");
        assert_eq!(f.shard.changes(), changes, "an inspect changed a counter");
        // Again: still the same, nothing was consumed.
        assert_eq!(inspect(login), login_state);
        // A key with no state shows no policy; an unknown policy is a 404.
        assert!(inspect_of(&f, &key_in(1, "never")).policies.is_empty());
        match f
            .send(Verb::Inspect, &key, br#"{"policy":"nope"}"#, true, T0)
            .0
        {
            Some(Answer::Error { error, .. }) => assert_eq!(error.code, ErrorCode::UnknownPolicy),
            other => panic!("expected a 404, got {other:?}"),
        }
    }

    fn inspect_of(f: &Fixture, key: &str) -> InspectReply {
        match f.send(Verb::Inspect, key, b"", true, T0).0 {
            Some(Answer::Inspect(reply, _)) => reply,
            other => panic!("expected an inspect reply, got {other:?}"),
        }
    }

    #[test]
    fn reset_forgets_one_policy_or_all_and_is_journaled_and_replayed() {
        let f = Fixture::new();
        let key = key_in(1, "reset");
        for _ in 0..15 {
            f.allow(&key, b"", T0);
        }
        f.allow(&key, br#"{"policy":"login"}"#, T0);
        assert_eq!(f.remaining(&key, T0), 0);
        let (answer, records) = f.send(Verb::Reset, &key, br#"{"policy":"default"}"#, true, T0);
        match answer {
            Some(Answer::Reset(reply, Encoding::Json)) => assert_eq!(reply.reset, ["default"]),
            other => panic!("expected a reset reply, got {other:?}"),
        }
        assert_eq!(records.len(), 1);
        assert!(records[0].r && records[0].c == 0 && records[0].p == "default");
        assert_eq!(f.remaining(&key, T0), 15);
        assert_eq!(
            inspect_of(&f, &key).policies.len(),
            1,
            "login kept its state"
        );
        // All policies; then nothing is left to reset.
        let (answer, _) = f.send(Verb::Reset, &key, b"", true, T0);
        assert!(matches!(answer, Some(Answer::Reset(ref r, _)) if r.reset == ["login"]));
        let (answer, records) = f.send(Verb::Reset, &key, b"", true, T0);
        assert!(matches!(answer, Some(Answer::Reset(ref r, _)) if r.reset.is_empty()));
        assert!(records.is_empty());

        // Replayed in order at takeover: the counts, then the reset.
        let replayed = Counters::new();
        let counted = Record {
            n: 1,
            p: "default".into(),
            k: key.clone(),
            c: 15,
            t: T0.as_u64(),
            r: false,
            d: false,
            s: false,
            g: 0,
            u: 0,
        };
        let reset = Record {
            c: 0,
            r: true,
            d: false,
            ..counted.clone()
        };
        assert!(f.decider.replay(&f.policies, &counted, &replayed));
        assert!(!replayed.is_empty());
        assert!(f.decider.replay(&f.policies, &reset, &replayed));
        assert!(replayed.is_empty(), "the replayed reset forgot the key");
    }

    #[test]
    fn a_reset_record_reads_as_before_when_it_is_no_reset() {
        // Records are stored positionally (rmp-serde arrays): a count keeps
        // its five fields, so journals written before resets existed read
        // the same, and a reset adds the sixth.
        let count = Record {
            n: 1,
            p: "default".into(),
            k: "k".into(),
            c: 2,
            t: 7,
            r: false,
            d: false,
            s: false,
            g: 0,
            u: 0,
        };
        let bytes = rmp_serde::to_vec(&count).unwrap();
        assert_eq!(bytes[0], 0x95, "a count is an array of five");
        let old: (u32, String, String, u64, u64) = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(old, (1, "default".into(), "k".into(), 2, 7));
        let reset = Record {
            r: true,
            d: false,
            c: 0,
            ..count.clone()
        };
        let back: Record = rmp_serde::from_slice(&rmp_serde::to_vec(&reset).unwrap()).unwrap();
        assert_eq!(back, reset);
        // What a worker of the version before resets makes of a message
        // with one: the whole message is unreadable (and skipped, logged).
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct OldRecord {
            n: u32,
            p: String,
            k: String,
            c: u64,
            t: u64,
        }
        let message = rmp_serde::to_vec(&vec![reset.clone(), reset]).unwrap();
        let old = rmp_serde::from_slice::<Vec<OldRecord>>(&message);
        assert!(old.is_err(), "{old:?}");
        // A denial (usage): seven fields, read back as one.
        let denial = Record {
            d: true,
            c: 3,
            ..count.clone()
        };
        let bytes = rmp_serde::to_vec(&denial).unwrap();
        let back: Record = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, denial);
        assert_eq!(rmp_serde::to_vec(&count).unwrap().first(), Some(&0x95));
        assert_eq!(bytes.first(), Some(&0x97));
    }

    #[test]
    fn a_policy_changed_in_force_keeps_what_was_counted_and_a_new_algorithm_starts_afresh() {
        let f = Fixture::new();
        let key = key_in(1, "live");
        for _ in 0..5 {
            assert!(decision(f.allow(&key, b"", T0)).allowed);
        }
        let decide_under = |json: &[u8]| {
            let mut p = (*f.decider.policies()).clone();
            p.apply("default", Some(json)).unwrap();
            f.decider.set_policies(p);
            let policies = f.decider.policies();
            let mut tally = f.decider.tally(f.partition);
            let subject = Verb::Allow.mapped_subject(f.partition, &key);
            let answer = f.decider.message(
                &policies,
                Message {
                    subject: &subject,
                    body: PEEK_BODY,
                    wants_reply: true,
                },
                f.owned(),
                T0,
                &mut tally,
            );
            decision(answer.unwrap())
        };
        // Lowered from 15 to 3 in the same window: the 5 counted stay.
        let d = decide_under(br#"{"algorithm":"sliding_window","limits":[{"max":3,"per":"1s"}]}"#);
        assert_eq!((d.limit, d.remaining, d.allowed), (3, 0, false));
        // Raised to 20: 15 left.
        let d = decide_under(br#"{"algorithm":"sliding_window","limits":[{"max":20,"per":"1s"}]}"#);
        assert_eq!((d.limit, d.remaining), (20, 15));
        // Another algorithm: the key starts afresh.
        let d = decide_under(br#"{"algorithm":"fixed_window","limits":[{"max":20,"per":"1s"}]}"#);
        assert_eq!((d.limit, d.remaining), (20, 20));
    }

    const PEEK_BODY: &[u8] = br#"{"cost":0}"#;

    mod hostile {
        //! Arbitrary bytes on every subject a shard listens to: an answer
        //! (an error or a decision) whenever one is wanted, never a panic,
        //! and a counter changes only with a decision that counted.
        use super::*;
        use proptest::prelude::*;
        use sluice_core::subject::PARTITION_PREFIX;

        /// Bodies: any bytes, and near-misses of the real formats (a JSON
        /// or MessagePack map with odd fields and values), so the property
        /// reaches past the first byte.
        fn body() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..64),
                (
                    "[a-z]{0,8}",
                    prop_oneof![
                        any::<i64>().prop_map(|v| v.to_string()),
                        "\"[ -~]{0,12}\"".prop_map(String::from),
                        Just("null".to_string()),
                        Just("1.5".to_string()),
                        Just("[1]".to_string()),
                    ]
                )
                    .prop_map(|(k, v)| format!("{{\"{k}\":{v}}}").into_bytes()),
                (
                    0u64..40,
                    prop_oneof![
                        Just("default".to_string()),
                        Just("login".to_string()),
                        "[a-z_]{1,10}"
                    ]
                )
                    .prop_map(|(cost, policy)| {
                        wire::encode_request(Some(&policy), Some(cost), Encoding::MsgPack)
                    }),
                proptest::collection::vec(any::<u8>(), 0..64).prop_map(|mut v| {
                    v.insert(0, 0x81);
                    v
                }),
            ]
        }

        fn token() -> impl Strategy<Value = String> {
            prop_oneof![
                "[A-Za-z0-9_%-]{1,12}".prop_map(String::from),
                "[ -~]{0,12}".prop_map(String::from),
                Just("*".to_string()),
                Just(">".to_string()),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]
            #[test]
            fn any_message_gets_an_answer_and_only_a_counted_decision_changes_a_counter(
                verb in prop_oneof![Just("allow"), Just("hit"), Just("inspect"), Just("reset"), Just("batch")],
                token in token(),
                body in body(),
                wants_reply in any::<bool>(),
            ) {
                let f = Fixture::new();
                let subject = if verb == "batch" {
                    batch_subject(f.partition)
                } else {
                    format!("{PARTITION_PREFIX}.{}.{verb}.{token}", f.partition)
                };
                let mut tally = f.decider.tally(f.partition);
                let answer = f.decider.message(&f.policies, Message { subject: &subject, body: &body, wants_reply }, f.owned(), T0, &mut tally);
                let records = tally.finish(f.decider.stats(), &f.shard);
                let counted = f.shard.changes();
                prop_assert_eq!(records.len() as u64, counted, "a record for every change (journal mode)");
                match answer {
                    None => prop_assert!(
                        !wants_reply || verb == "inspect" || Inbound::parse(&subject).is_none(),
                        "a wanted reply was not given"
                    ),
                    Some(Answer::Error { .. }) | Some(Answer::Batch(Err(_))) => {
                        prop_assert_eq!(counted, 0, "an error reply changed a counter");
                        prop_assert!(f.counters.is_empty());
                    }
                    Some(Answer::Decision { decision, .. }) => {
                        prop_assert!(counted <= 1);
                        if verb == "allow" && !decision.allowed {
                            prop_assert_eq!(counted, 0, "a denial changed a counter");
                        }
                    }
                    Some(Answer::Inspect(..)) => prop_assert_eq!(counted, 0, "an inspect changed a counter"),
                    Some(Answer::Reset(reply, _)) => prop_assert_eq!(counted, reply.reset.len() as u64),
                    Some(Answer::Batch(Ok(results))) => {
                        let decided = results.iter().filter(|r| matches!(r, wire::Reply::Decision(d) if d.allowed)).count();
                        prop_assert!(counted as usize <= decided);
                    }
                }
            }
        }
    }

    /// Usage (CONTRACT §9) in snapshot mode goes into the ledger when
    /// decided: allowed asks and hits as used, denied asks as denied, a
    /// peek as neither, each under the policy asked for.
    #[test]
    fn usage_is_recorded_in_the_ledger_as_decided_in_snapshot_mode() {
        let f = Fixture::with(Config::from_toml(CONFIG, "test.toml").unwrap(), false);
        let ledger = Ledger::new(f.decider.config().usage.tiers.clone(), 0);
        let key = key_in(1, "u");
        let owned = Owned {
            usage: Some(&ledger),
            ..f.owned()
        };
        let send = |verb: Verb, body: &[u8]| {
            let subject = verb.mapped_subject(1, &key);
            let mut tally = f.decider.tally(1);
            let message = Message {
                subject: &subject,
                body,
                wants_reply: true,
            };
            f.decider
                .message(&f.policies, message, owned, T0, &mut tally);
            assert!(
                tally.finish(f.decider.stats(), &f.shard).is_empty(),
                "no records in snapshot mode"
            );
        };
        for _ in 0..17 {
            send(Verb::Allow, b""); // 15 allowed, 2 denied
        }
        send(Verb::Allow, br#"{"cost":0}"#);
        send(Verb::Hit, br#"{"cost":4}"#);
        send(Verb::Allow, br#"{"policy":"login","cost":2}"#);
        let minute = T0.as_u64() / 1_000_000 / 60_000 * 60_000;
        let everything = |_: &str, _: &str| true;
        let mut counts = ledger
            .minute_counts(minute, &everything)
            .expect("the minute is in memory")
            .lacking(&crate::ledger::WriteMarks::default());
        counts.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            counts,
            vec![
                (
                    "default".to_string(),
                    key.clone(),
                    Counts {
                        used: 19,
                        denied: 2
                    }
                ),
                (
                    "login".to_string(),
                    key.clone(),
                    Counts { used: 2, denied: 0 }
                ),
            ]
        );
    }

    /// In journal mode a denial becomes a record of its own (`d`), so its
    /// usage survives a crash; a peek still stores nothing.
    #[test]
    fn a_denial_is_journaled_for_its_usage_in_journal_mode() {
        let f = Fixture::with(Config::from_toml(CONFIG, "test.toml").unwrap(), true);
        let key = key_in(1, "d");
        let mut records = Vec::new();
        for _ in 0..16 {
            records.extend(f.send(Verb::Allow, &key, b"", true, T0).1);
        }
        records.extend(f.send(Verb::Allow, &key, br#"{"cost":0}"#, true, T0).1);
        assert_eq!(records.len(), 16);
        assert!(records[..15].iter().all(|r| !r.d && r.c == 1));
        assert!(records[15].d && records[15].c == 1 && !records[15].r);
        // Replayed, a denial changes no counter.
        let fresh = Counters::new();
        assert!(!f.decider.replay(&f.policies, &records[15], &fresh));
        assert_eq!(fresh.len(), 0);
    }
}
