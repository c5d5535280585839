//! The decision core: an ask in, a reply value and what it counted out.
//!
//! Everything a worker decides goes through [`Decider`]: the asks a shard
//! takes from its partition's subjects ([`Decider::message`]: allow, hit,
//! and the operators' inspect and reset of SPEC §8), the batches
//! of the batching client, per partition or per worker ([`Decider::batch`]),
//! and the journal's records replayed at takeover ([`Decider::replay`]). It
//! needs only the policies, the counters and the stats, never NATS, so
//! "bad input changes nothing" is tested here with a manual clock (see the
//! tests at the bottom) rather than by spawning a worker.
//!
//! The order of the checks is the contract's (SPEC §1), and a request
//! that fails any of them changes no counter: the key token, the body, the
//! key's partition, the policy, the cost. A key whose partition is not
//! answered here gets the one 503 of docs/PROTOCOL.md ("Partitions"),
//! whether it came alone or in a batch, so the batching client asks it again
//! through the server's mapping.
//!
//! What decisions did is gathered in a [`TurnLog`] per partition and batch and
//! published to the stats once; in journal mode the turn's log also holds the
//! [`Record`]s the caller must store before it answers. Decisions by policy
//! (`/metrics`) are counted the same way, on counters found through
//! [`PolicyMeters`] without a lock or an allocation per decision.

use crate::counters::Counters;
use crate::live_policies::LivePolicies;
use crate::stats::{ShardStats, WorkerStats};
use crate::turn_log::{Counted, Recording, TurnLog, Usage};
use crate::usage::ledger::Ledger;
use here::Here;
use sluice_core::ask::{self, Op};
use sluice_core::budget::{Grant, Refund};
use sluice_core::config::Config;
use sluice_core::group;
use sluice_core::holds::HoldId;
use sluice_core::key::KeyToken;
use sluice_core::outstanding::Returned;
use sluice_core::policies::{Override, Policies};
use sluice_core::policy::{Decision, Policy, Spread};
use sluice_core::region::RegionName;
use sluice_core::subject::{Inbound, Verb};
use sluice_core::time::Nanos;
use sluice_core::wire::batch::Budget;
use sluice_core::wire::inspect::{InspectReply, ResetReply};
use sluice_core::wire::{self, Encoding, ErrorReply};
use std::ops::ControlFlow;
use std::sync::Arc;

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
    /// Its usage ledger, when usage is recorded (SPEC §9).
    pub usage: Option<&'c Ledger>,
}

/// What to answer: a reply value, before it gets NATS headers
/// ([`crate::reply::Reply::of`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Answer<'p> {
    Decision {
        decision: Decision,
        policy: &'p str,
        /// The answer to a repeated id (SPEC §16): the first decision.
        repeat: bool,
        encoding: Encoding,
        /// A grouped ask's levels (SPEC §17).
        grouped: Option<Box<Grouped>>,
    },
    Error {
        error: ErrorReply,
        encoding: Encoding,
    },
    /// A batch's results in item order, or why the batch as a whole was
    /// refused (a body that is no batch).
    Batch(Result<Vec<wire::Reply>, ErrorReply>),
    /// A hold verb's decision, and the hold it kept or extended with the
    /// time until it ends (SPEC §13).
    Held {
        decision: Decision,
        policy: &'p str,
        held: Option<(HoldId, Nanos)>,
        /// The answer to a repeated id (SPEC §16): the first one's.
        repeat: bool,
        encoding: Encoding,
        /// A grouped key's levels (SPEC §17).
        grouped: Option<Box<Grouped>>,
    },
    /// A key's state (`rl.inspect`).
    Inspect(InspectReply, Encoding),
    /// What a reset forgot (`rl.reset`).
    Reset(ResetReply, Encoding),
    /// Not answered here: sent to the home region, whose answer the link
    /// task relays ([`crate::global::Forward`]).
    Forward(crate::global::Forward),
    /// An inspect the link task completes with the other regions' state
    /// of the key before it answers ([`crate::global::Gather`]).
    Gather(crate::global::Gather),
}

/// What a grouped ask (SPEC §17) decided at each level, outermost first,
/// and the policy of the level that denied: the `levels` and `denied_by`
/// of its reply ([`levels`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grouped {
    pub levels: Vec<wire::LevelReply>,
    pub denied_by: Option<String>,
}

/// The answer for a key blocked by an override (`max = 0`): denied, asked
/// to come back after the policy's longest window (an unblock is not
/// announced); a shadow policy's is allowed, flagged `shadow_denied`.
fn blocked(base: &Policy) -> Decision {
    let window = base
        .limits()
        .iter()
        .map(|l| l.per())
        .max()
        .unwrap_or(Nanos::ZERO);
    base.mode().answer(Decision {
        allowed: false,
        limit: 0,
        remaining: 0,
        reset: window,
        retry_after: window,
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    })
}

/// `rl.allow` cannot take a concurrency slot (it would never give it
/// back), and a policy of only slots has nothing a hit could count.
fn refuse_unheld(policy: &Policy, op: Op) -> Result<(), ErrorReply> {
    let slots = policy.holding().concurrency.is_some();
    let refused = match op {
        Op::Allow(_) | Op::Wait { .. } => slots,
        Op::Record(_) => policy.limits().is_empty(),
    };
    if refused {
        return Err(ErrorReply::bad_request(format!(
            "policy {:?} limits requests in flight (concurrency {}): take a slot with {} and give it back with {}; {} cannot hold one",
            policy.name(),
            policy.holding().concurrency.unwrap_or(0),
            Verb::Reserve.client_prefix(),
            Verb::Settle.client_prefix(),
            match op {
                Op::Allow(_) | Op::Wait { .. } => Verb::Allow.client_prefix(),
                Op::Record(_) => Verb::Hit.client_prefix(),
            }
        )));
    }
    Ok(())
}

/// Decides asks on the counters it is handed. One per worker, shared by
/// all its tasks.
pub struct Decider {
    config: Arc<Config>,
    stats: Arc<WorkerStats>,
    /// Whether decisions keep records (the outbox's to say).
    recording: Recording,
    /// Usage is recorded (`[usage] enabled`).
    usage: bool,
    /// The policies in force and their meters.
    live: LivePolicies,
    /// Names the holds this worker keeps.
    hold_ids: hold_ids::HoldIds,
    /// This worker's region, when it has regions (global limits,
    /// [`crate::global`]).
    region: Option<RegionName>,
}

/// What the decisions of one batch on one partition share: the policies
/// they decide with, the partition's state, the time, and the turn's log.
struct Turn<'t, 'p, 'c> {
    policies: &'p Policies,
    owned: Owned<'c>,
    now: Nanos,
    log: &'t mut TurnLog,
    /// It came from another region's owner over the link.
    link: bool,
    /// An ask to send to its home region instead of answering it here
    /// (a policy decided at the home, [`crate::global::Forward`]).
    forward: Option<crate::global::Forward>,
    /// What a grouped ask decided at each level, for its answer
    /// ([`levels`]).
    grouped: Option<Box<Grouped>>,
}

impl<'t, 'p, 'c> Turn<'t, 'p, 'c> {
    /// A turn with nothing to forward yet.
    fn new(
        policies: &'p Policies,
        owned: Owned<'c>,
        now: Nanos,
        log: &'t mut TurnLog,
        link: bool,
    ) -> Turn<'t, 'p, 'c> {
        Turn {
            policies,
            owned,
            now,
            log,
            link,
            forward: None,
            grouped: None,
        }
    }
}

/// What [`Decider::apply`] decided: the decision, the policy that
/// decided it, and the slice granted with it.
pub(super) type Applied<'p> = (Decision, &'p str, Option<Grant>);

/// What an ask named by an id (SPEC §16) came to, and whether it was a
/// repeat (its answer the first one's, nothing counted; [`ids`]).
pub(super) type Once<T> = (T, bool);

/// What [`Decider::count`] leaves: the decision, the slice granted, and
/// the budget as settled (a refund no slice explains gives nothing back).
type CounterOutcome = (Decision, Option<Grant>, Budget);

impl Decider {
    /// `recording`: whether to build the [`Record`]s of what was counted
    /// ([`crate::outbox::Outbox::recording`]).
    pub fn new(config: Arc<Config>, stats: Arc<WorkerStats>, recording: Recording) -> Decider {
        Decider {
            live: LivePolicies::new(&config, stats.clone()),
            usage: config.usage.enabled,
            config,
            stats,
            recording,
            hold_ids: hold_ids::HoldIds::default(),
            region: None,
        }
    }

    /// The same decider in `region`: it decides global policies (SPEC
    /// §12), and returns what must cross the link as actions.
    pub fn in_region(mut self, region: RegionName) -> Decider {
        self.region = Some(region);
        self
    }

    /// This worker's region, when it decides global policies.
    pub fn region(&self) -> Option<&sluice_core::region::RegionName> {
        self.region.as_ref()
    }

    /// The policies in force now.
    pub fn policies(&self) -> Arc<Policies> {
        self.live.policies()
    }

    /// Puts `policies` in force for the next batches.
    pub fn set_policies(&self, policies: Policies) {
        self.live.set(policies);
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// A turn's log for a batch of decisions on `owned`'s partition, decided
    /// with policies taken before it ([`Decider::policies`]), in a turn of
    /// its own: finish it before any `.await` ([`crate::counters::Turns`]).
    pub fn turn_log(&self, owned: Owned<'_>) -> TurnLog {
        TurnLog::new(owned.partition, self.recording, self.live.meters())
            .in_turn(owned.counters.begin_turn())
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
        log: &mut TurnLog,
    ) -> Option<Answer<'p>> {
        let Message {
            subject,
            body,
            wants_reply,
        } = message;
        if let Some(inbound) = self.link_inbound(subject) {
            return self.link_message(policies, inbound, message, owned, now, log);
        }
        match Inbound::parse(subject)? {
            Inbound::Ask(ask) if matches!(ask.verb, Verb::Inspect | Verb::Reset) => {
                // An inspect nobody waits for changes nothing; a reset is done
                // either way, like a hit.
                if ask.verb == Verb::Inspect && !wants_reply {
                    return None;
                }
                let turn = &mut Turn::new(policies, owned, now, log, false);
                let result = self.admin(turn, ask.verb, ask.key_token, body);
                log.admin(result.is_ok());
                let answer =
                    result.unwrap_or_else(|(error, encoding)| Answer::Error { error, encoding });
                wants_reply.then_some(answer)
            }
            Inbound::Ask(ask) if Verb::HOLDS.contains(&ask.verb) => {
                let encoding = Encoding::of_body(body);
                let turn = &mut Turn::new(policies, owned, now, log, false);
                let result = self.hold(turn, ask.verb, ask.key_token, body);
                turn.log.outcome_once(ask.verb, &result);
                let answer = match result {
                    Ok(((decision, policy, held), repeat)) => Answer::Held {
                        decision,
                        policy,
                        held,
                        repeat,
                        encoding,
                        grouped: turn.grouped.take(),
                    },
                    Err(error) => Answer::Error { error, encoding },
                };
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
                let turn = &mut Turn::new(policies, owned, now, log, false);
                self.answer_ask(turn, verb, ask.key_token, message)
            }
            Inbound::PartitionBatch(partition) => {
                let turn = &mut Turn::new(policies, owned, now, log, false);
                self.answer_batch(turn, partition, message)
            }
        }
    }

    /// Decides one ask of `verb` and answers it, if someone waits.
    fn answer_ask<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        verb: Verb,
        key_token: &str,
        message: Message<'_>,
    ) -> Option<Answer<'p>> {
        let encoding = Encoding::of_body(message.body);
        let result = self.ask(turn, verb, key_token, message.body);
        if let Some(mut forward) = turn.forward.take() {
            forward.body = message.body.to_vec();
            return message.wants_reply.then_some(Answer::Forward(forward));
        }
        turn.log.outcome_once(verb, &result);
        let answer = match result {
            Ok(((decision, policy, _), repeat)) => Answer::Decision {
                decision,
                policy,
                repeat,
                encoding,
                grouped: turn.grouped.take(),
            },
            Err(error) => Answer::Error { error, encoding },
        };
        message.wants_reply.then_some(answer)
    }

    /// Decides a batch for `partition` (from the link, as `turn` says)
    /// and answers it; a batch nobody waits for is not decided.
    fn answer_batch<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        partition: u32,
        message: Message<'_>,
    ) -> Option<Answer<'p>> {
        if !message.wants_reply {
            return None;
        }
        let owned = turn.owned;
        let answered = |p: u32| (p == partition && p == owned.partition).then_some(owned);
        let (answer, mut records, mut actions) =
            self.batch_from(turn.policies, message.body, turn.now, &answered, turn.link);
        turn.log.append(&mut records);
        turn.log.append_actions(&mut actions);
        Some(answer)
    }

    /// Validates and applies one ask whose body is still encoded, once
    /// per id (SPEC §16).
    fn ask<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        verb: Verb,
        token: &str,
        body: &[u8],
    ) -> Result<Once<Applied<'p>>, ErrorReply> {
        let key = KeyToken::parse(token)?;
        let request = wire::decode_request(body).map_err(|e| e.reply)?;
        let op = Op::asked(verb, request.cost, request.wait_ms)?;
        let owned = turn.owned;
        self.locate(key, |p| (p == owned.partition).then_some(owned))?;
        let policy = &request.policy;
        let apply = |turn: &mut Turn<'_, 'p, '_>| self.apply(turn, key, policy, op, Budget::None);
        let asked = (verb, &policy[..], op.cost());
        let admitted = |applied: &Applied<'p>| op.consumed(&applied.0);
        self.once(turn, (key, request.id.as_deref()), asked, admitted, apply)
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
        let partition = key.partition(partitions);
        answered(partition).ok_or_else(|| {
            ErrorReply::unavailable(format!(
                "key {key} belongs to partition {partition} of {partitions}, which this worker does not \
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
    fn apply<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        key: KeyToken<'_>,
        policy_name: &str,
        op: Op,
        budget: Budget,
    ) -> Result<Applied<'p>, ErrorReply> {
        let policies = turn.policies;
        if let Some(base) = policies.get(policy_name) {
            refuse_unheld(base, op)?;
        }
        let base = ask::admit(|name| policies.get(name), policy_name, op)?;
        if base.parent().is_some() || key.is_grouped() {
            let chain = group::resolve(|n| policies.get(n), base, key).map_err(|e| e.reply())?;
            if chain.is_grouped() {
                return self.apply_levels(turn, &chain, op, budget);
            }
        }
        self.apply_to(turn, key, base, op, budget)
    }

    /// [`Decider::apply`] on one key under `base`, the policy admitted: its
    /// override, global or not, counted and concluded.
    fn apply_to<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        key: KeyToken<'_>,
        base: &'p Policy,
        op: Op,
        budget: Budget,
    ) -> Result<Applied<'p>, ErrorReply> {
        let policy = match self.overridden(turn, base, key.as_str(), op, budget)? {
            ControlFlow::Continue(policy) => policy,
            ControlFlow::Break(blocked) => return Ok(blocked),
        };
        let mut global = base.scope().global().zip(self.region.as_ref());
        if let Some((g, here)) = global {
            if g.home() != here {
                match self.delegate(turn, key, (base, policy), (g, here), op, budget)? {
                    Some(decided) => return Ok(decided),
                    // Cut off from the home with `on_cut = "open"`: decided
                    // here, as a regional limit.
                    None => global = None,
                }
            }
        }
        let link_grant = turn.link && matches!(budget, Budget::Slice(_));
        // An ask another region sent on to the home (what it holds could
        // not pay for it).
        let forwarded = turn.link && matches!((op, budget), (Op::Allow(_), Budget::None));
        let here = Here::new(policy, global, (link_grant, forwarded));
        // Only another region's owner gives back units of a global key: a
        // client holds no slice of one, and a refund it made up (the shares
        // are booked at the window's start, which anyone can tell) would
        // free the other regions' shares while they spend them.
        let budget = match budget {
            Budget::Refund(r) if global.is_some() && !turn.link => {
                turn.log.unmatched(r.units);
                Budget::Refund(Refund { units: 0, ..r })
            }
            other => other,
        };
        let counted = self.count(turn, &here, key.as_str(), op, budget)?;
        Ok(self.conclude(turn, &here, (base, key.as_str(), op), counted))
    }

    /// A per-key override replaces the policy's limits for this key
    /// (`Continue` with the policy that decides); a blocked key is denied
    /// (`Break` with its answer), but a hit is still recorded, as served,
    /// and what was spent from a slice is still usage.
    fn overridden<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        base: &'p Policy,
        token: &str,
        op: Op,
        budget: Budget,
    ) -> Result<ControlFlow<Applied<'p>, &'p Policy>, ErrorReply> {
        match (turn.policies.override_of(base.name(), token), op) {
            (None, _) | (Some(Override::Blocked), Op::Record(_)) => Ok(ControlFlow::Continue(base)),
            (Some(Override::Limits(limits)), _) => Ok(ControlFlow::Continue(ask::admit(
                |_| Some(limits),
                base.name(),
                op,
            )?)),
            (Some(Override::Blocked), Op::Allow(cost) | Op::Wait { cost, .. }) => {
                let decision = blocked(base);
                let counted = Counted {
                    policy: base.name(),
                    token,
                    cost,
                };
                self.record_usage(turn, counted, Usage::Denied);
                if let Budget::Refund(refund) = budget {
                    let spent_only = Refund { units: 0, ..refund };
                    self.refunded(turn, base.name(), token, &spent_only);
                }
                Ok(ControlFlow::Break((decision, base.name(), None)))
            }
        }
    }

    /// Counts the ask on its key's counter: a refund settled against the
    /// slices this owner gave out, then the ask, grant or refund applied
    /// under the counter's lock ([`Here::on_counter`]), then what the home
    /// of a global policy books beside the counter: the other regions'
    /// shares of a window just opened, the slice granted, what it took
    /// itself and whether to reclaim. Returns the decision, the grant and
    /// the budget as settled.
    fn count<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        here: &Here<'p, '_>,
        token: &str,
        op: Op,
        budget: Budget,
    ) -> Result<CounterOutcome, ErrorReply> {
        let (owned, now) = (turn.owned, turn.now);
        let (policy, cost) = (here.policy, op.cost());
        ask::with_counter_key(policy.name(), token, |buf| {
            // A refund gives back at most what its own slice held, once; one
            // that no slice of this owner explains gives nothing back.
            let budget = match budget {
                Budget::Refund(r) => match owned.counters.outstanding().refund(buf, &r, now) {
                    Ok(Returned::Known) => Budget::Refund(r),
                    Ok(Returned::Unknown) => {
                        turn.log.unmatched(r.units);
                        Budget::Refund(Refund { units: 0, ..r })
                    }
                    Err(overclaim) => return Err(ErrorReply::bad_request(overclaim.to_string())),
                },
                other => other,
            };
            let (decision, grant, opened) = owned.counters.update(policy, buf, now, |state| {
                here.on_counter(state, owned.counters, buf, now, op, budget)
            });
            if let (Some(window_start), Some(shares)) = (opened, here.home_shares) {
                owned.counters.outstanding().granted_until(
                    buf,
                    window_start,
                    shares,
                    policy.grant_kept_until(window_start),
                );
                turn.log.sliced(policy.name(), token, shares, window_start);
            }
            if let Some(g) = grant.filter(|g| g.units > 0) {
                owned
                    .counters
                    .outstanding()
                    .granted(buf, g.taken_at, g.units);
            }
            let shared = here.home_shares.is_some() || here.split.is_some();
            if let (Some(((global, region), limit)), true, false) = (here.home, shared, turn.link) {
                if op.consumed(&decision) {
                    owned.counters.global().home_took(buf, limit, now, cost);
                }
                // A bucket's parts are always out (a sliding policy's
                // never move); a window's shares may be back already.
                let window_start = limit.window_start(now);
                let parts_gift =
                    here.split.is_some() && here.whole.spread() == Some(Spread::SplitParts);
                if parts_gift || owned.counters.outstanding().units(buf, window_start) > 0 {
                    let key = (policy.name(), token, buf);
                    self.reclaim_if_short(turn, (global, region), limit, key, &decision);
                }
            }
            Ok((decision, grant, budget))
        })
    }

    /// What a counted ask leaves: the decision as the policy reports it (a
    /// part's limit is the whole's), and in the turn's log what it changed, the
    /// slice it granted or the refund it made, and its usage.
    fn conclude<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        here: &Here<'p, '_>,
        (base, token, op): (&'p Policy, &str, Op),
        (decision, grant, budget): CounterOutcome,
    ) -> Applied<'p> {
        let (policy, whole, now, cost) = (here.policy, here.whole, turn.now, op.cost());
        // A part decides as enforced; the answer is in the policy's mode.
        let decision = match here.split {
            Some(part) => whole.mode().answer(Decision {
                limit: whole.whole_reported(part, decision.limit),
                ..decision
            }),
            None => decision,
        };
        if here.link_grant {
            // A grant to another region decides no ask here.
            if let Some(g) = grant.filter(|g| g.units > 0) {
                turn.log.sliced(policy.name(), token, g.units, now);
            }
            return (decision, policy.name(), grant);
        }
        if let Budget::Refund(refund) = budget {
            self.refunded(turn, policy.name(), token, &refund);
            return (decision, policy.name(), None);
        }
        let usage = if op.consumed(&decision) {
            turn.log.changed(policy.name(), token, cost, now);
            if let Some(g) = grant.filter(|g| g.units > 0) {
                turn.log.sliced(policy.name(), token, g.units, now);
            }
            Usage::Used
        } else if decision.within_limits() {
            Usage::Neither
        } else {
            Usage::Denied
        };
        if usage == Usage::Used && !turn.link {
            self.tally_spent(turn, whole, token, cost);
        }
        let counted = Counted {
            policy: base.name(),
            token,
            cost,
        };
        if !self.blocked(turn, policy, counted, &decision) {
            self.record_usage(turn, counted, usage);
        }
        (decision, policy.name(), grant)
    }

    /// A slice came back: its record (with records kept) and the usage
    /// of what was spent from it.
    fn refunded(&self, turn: &mut Turn<'_, '_, '_>, policy: &str, token: &str, refund: &Refund) {
        if refund.units > 0 || refund.spent > 0 {
            turn.log.refunded(policy, token, refund, turn.now);
        }
        let counted = Counted {
            policy,
            token,
            cost: refund.spent,
        };
        self.record_usage(turn, counted, Usage::Used);
    }

    /// Records the usage of one decided ask, when usage is recorded
    /// ([`TurnLog::usage`]). Not what another region's owner sends over the
    /// link (SPEC §12): the region where an ask was made records its
    /// usage, so a hit forwarded to the home, or a slice's spent units
    /// coming back, would be counted twice.
    fn record_usage(&self, turn: &mut Turn<'_, '_, '_>, counted: Counted<'_>, usage: Usage) {
        if self.usage && !turn.link {
            turn.log.usage(turn.owned.usage, counted, usage, turn.now);
        }
    }

    /// [`Decider::record_usage`] of a delegate's ask, whose count is no
    /// record of its own ([`TurnLog::usage_apart`]). With `tallied` (a
    /// policy with alerts across regions) its record is made whether or
    /// not usage is recorded: in journal mode it rebuilds the region's
    /// tally of what it spent ([`Decider::replay_tally`]).
    fn record_usage_apart(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        counted: Counted<'_>,
        usage: Usage,
        tallied: bool,
    ) {
        if (self.usage || tallied) && !turn.link {
            let ledger = turn.owned.usage.filter(|_| self.usage);
            turn.log.usage_apart(ledger, counted, usage, turn.now);
        }
    }
}

mod admin;
mod batches;
mod gifts;
mod global;
mod here;
mod hold_ids;
mod hold_levels;
mod holding;
mod home_demand;
mod ids;
mod levels;
mod penalties;
mod replay;
mod tally;
#[cfg(test)]
mod tests;
