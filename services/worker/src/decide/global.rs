//! The decision core's part in global limits (SPEC §12,
//! [`crate::global`]): a delegate's decisions from its books, the home's
//! requests for shares back, and the messages other regions' owners send
//! this partition over the link. Apart from `decide.rs`, which decides
//! from the counters: a delegate never touches them.

use super::{Answer, Applied, Decider, Message, Owned, Turn};
use crate::global::{Forward, GatherPolicy};
use crate::turn_log::{Counted, TurnLog, Usage};
use sluice_core::ask::{self, Op};
use sluice_core::budget::Refund;
use sluice_core::key::KeyToken;
use sluice_core::limit::Limit;
use sluice_core::policies::Policies;
use sluice_core::policy::{Decision, Policy, Spread};
use sluice_core::region::global::{cut_share, Decided, ASK_TIMEOUT};
use sluice_core::region::report::GlobalCount;
use sluice_core::region::state::{Action, When};
use sluice_core::region::{Global, OnCut, RegionName};
use sluice_core::subject::{LinkInbound, Verb};
use sluice_core::time::Nanos;
use sluice_core::wire::batch::Budget;
use sluice_core::wire::inspect::LimitReport;
use sluice_core::wire::link::{self, Answered, Gift, Reclaim, Resend, TallyBatch};
use sluice_core::wire::{self, Encoding, ErrorReply};

/// How long a hit a delegate could not count from a global bucket's part
/// or slices is sent again to the home while the home cannot take it.
const BUCKET_HIT_KEPT: Nanos = Nanos(60_000_000_000);

/// The `limit` a region answers: the whole limit the deciding one is a
/// part of (its first without a part).
fn reported_whole(policy: &Policy, part: Option<&Policy>, reported: u64) -> u64 {
    match part {
        Some(part) => policy.whole_reported(part, reported),
        None => policy.limits()[0].reported(),
    }
}

/// A region's answer to an ask it has no part to pay for and does not
/// send to the home (or whose home does not answer): denied; worth asking
/// again in a second, when the home may be reachable again.
pub(crate) fn not_here(whole: &Limit) -> Decision {
    Decision {
        allowed: false,
        limit: whole.reported(),
        remaining: 0,
        reset: whole.per(),
        retry_after: ASK_TIMEOUT,
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    }
}

/// A bucket's (or split window's) ask at a delegate after its part
/// decided it (`by_part`, none without a part): allowed by the part,
/// else decided from the home's slices; what to ask the home for ahead.
fn part_or_slices(
    owned: Owned<'_>,
    counter_key: &str,
    whole: &Limit,
    now: Nanos,
    cost: u64,
    by_part: Option<Decision>,
) -> (Decision, Option<u64>) {
    let left = by_part.map_or(0, |d| d.remaining);
    let mut books = owned.counters.global();
    let delegates = books.delegates();
    let (decision, want) = match by_part {
        Some(d) if d.allowed => {
            let want = (cost > 0)
                .then(|| delegates.paid_by_part(counter_key, whole, now, cost, left))
                .flatten();
            (d, want)
        }
        _ => {
            let sliced = delegates.from_slices(counter_key, whole, now, cost, left);
            let d = match by_part {
                // Denied by both: when the part has the units again.
                Some(d) if !sliced.decision.allowed => Decision {
                    retry_after: d.retry_after.min(sliced.decision.retry_after),
                    ..d
                },
                Some(d) => Decision {
                    remaining: sliced.decision.remaining.saturating_add(left),
                    reset: d.reset,
                    ..sliced.decision
                },
                None => sliced.decision,
            };
            (d, sliced.want)
        }
    };
    if want.is_some() {
        delegates.asked(counter_key, now);
    }
    (decision, want)
}

/// What the key's own counter holds in the window at `now`: the units of
/// this region's share spent or given back there, by this owner or the
/// ones before it.
fn recorded_share(owned: Owned<'_>, policy: &Policy, counter_key: &str, now: Nanos) -> u64 {
    owned
        .counters
        .state(counter_key)
        .and_then(|state| policy.inspect(&state, now).first().map(|l| l.used))
        .unwrap_or(0)
}

/// Records `units` of the share as spent in the key's own counter, which
/// snapshots and the journal carry to the partition's next owner.
pub(super) fn record_share(
    owned: Owned<'_>,
    policy: &Policy,
    counter_key: &str,
    now: Nanos,
    units: u64,
) {
    owned.counters.update(policy, counter_key, now, |state| {
        policy.record(state, now, units)
    });
}

/// A global window's ask at a delegate, its policy spread in shares
/// (`sluice_core::region::global`): decided from this region's `share`
/// and the slices the home granted (the books), with what to ask the
/// home for ahead; what it took from the share is recorded on the key's
/// own counter, so that the next owner does not spend it again.
fn decide_by_share(
    turn: &mut Turn<'_, '_, '_>,
    (policy, limit, share): (&Policy, &Limit, u64),
    (token, counter_key): (&str, &str),
    cost: u64,
) -> Decided {
    let (owned, now) = (turn.owned, turn.now);
    let buf = counter_key;
    // The key's counter is read only for a key new in this window,
    // and not under the books' lock (a bucket's lock comes first).
    let mut books = owned.counters.global();
    let mut recorded = 0;
    if !books.delegates().knows(buf, limit, now) {
        drop(books);
        recorded = recorded_share(owned, policy, buf, now);
        books = owned.counters.global();
    }
    let delegates = books.delegates();
    let decided = delegates.decide(buf, limit, share, now, cost, || recorded);
    if decided.want.is_some() {
        delegates.asked(buf, now);
    }
    drop(books);
    if decided.from_share > 0 {
        record_share(owned, policy, buf, now, decided.from_share);
        turn.log
            .booked(policy.name(), token, decided.from_share, now);
    }
    decided
}

/// A hit of a global key denied at a delegate goes to the home, to be
/// counted once there: a hit is never lost, and named by `id` (SPEC §16),
/// so that a hit the link sends again (its answer was lost) counts once.
/// Kept until its window ends (a bucket has no window it would count in
/// wrongly: counted late, the debt is repaid late).
fn hit_at_home(
    turn: &mut Turn<'_, '_, '_>,
    (global, policy, limit): (&Global, &Policy, &Limit),
    (token, id): (&str, &str),
    cost: u64,
) {
    let (owned, now) = (turn.owned, turn.now);
    let hit = Action::Hit {
        home: global.home().clone(),
        partition: owned.partition,
        token: token.to_string(),
        body: wire::encode_request_with_id(
            Some(policy.name()),
            Some(cost),
            Some(id),
            Encoding::MsgPack,
        ),
        until: match policy.algorithm().has_burst() {
            false => limit.window_end(limit.window_start(now)),
            true => now.saturating_add(BUCKET_HIT_KEPT),
        },
    };
    turn.log.act(When::Now, hit);
}

impl Decider {
    /// A subject of this region's link partition subjects, parsed.
    pub(super) fn link_inbound<'s>(&self, subject: &'s str) -> Option<LinkInbound<'s>> {
        let region = self.region.as_ref()?;
        LinkInbound::parse(subject, region.as_str())
    }

    /// A message another region's owner sent this partition.
    pub(super) fn link_message<'p>(
        &self,
        policies: &'p Policies,
        inbound: LinkInbound<'_>,
        message: Message<'_>,
        owned: Owned<'_>,
        now: Nanos,
        log: &mut TurnLog,
    ) -> Option<Answer<'p>> {
        if let LinkInbound::Answered(partition) = inbound {
            // This region's own link task, about an ask made here.
            if partition == owned.partition {
                match link::decode::<Answered>(message.body) {
                    Ok(note) => self.forwarded_usage(policies, &note, owned, now, log),
                    Err(e) => tracing::debug!("an answered note refused: {}", e.message),
                }
            }
            return None;
        }
        let from = log.records_made();
        let answer = match inbound {
            LinkInbound::Batch(partition) => {
                let turn = &mut Turn::new(policies, owned, now, log, true);
                self.answer_batch(turn, partition, message)
            }
            LinkInbound::Ask(ask) if matches!(ask.verb, Verb::Reset | Verb::Inspect) => {
                // Of this region's state only: not sent on again.
                let turn = &mut Turn::new(policies, owned, now, log, true);
                let answer = self.admin(turn, ask.verb, ask.key_token, message.body);
                let answer =
                    answer.unwrap_or_else(|(error, encoding)| Answer::Error { error, encoding });
                message.wants_reply.then_some(answer)
            }
            LinkInbound::Ask(ask) => {
                let turn = &mut Turn::new(policies, owned, now, log, true);
                self.answer_ask(turn, ask.verb, ask.key_token, message)
            }
            LinkInbound::Answered(_) => None,
            LinkInbound::Gift(partition) => {
                if partition == owned.partition {
                    match link::decode::<Gift>(message.body) {
                        Ok(gift) => self.take_gift(policies, &gift, owned, now, log),
                        Err(e) => tracing::debug!("a gift refused: {}", e.message),
                    }
                }
                None
            }
            LinkInbound::Tally(partition) => {
                if partition != owned.partition {
                    return None;
                }
                match link::decode::<TallyBatch>(message.body) {
                    Ok(batch) => {
                        self.take_tallies(policies, &batch, owned, now);
                        Some(Answer::Batch(Ok(Vec::new())))
                    }
                    Err(e) => Some(Answer::Batch(Err(e))),
                }
            }
            LinkInbound::Resend(partition) => {
                if partition == owned.partition {
                    match link::decode::<Resend>(message.body).map(|r| RegionName::new(&r.home)) {
                        Ok(Ok(home)) => {
                            for report in self.report_tallies(policies, owned, Some(&home)) {
                                log.act(When::Now, report);
                            }
                        }
                        _ => tracing::debug!("a resend request refused"),
                    }
                }
                None
            }
            LinkInbound::Reclaim(partition) => {
                if partition == owned.partition {
                    match link::decode::<Reclaim>(message.body) {
                        Ok(reclaim) => self.refund_share(policies, &reclaim, owned, now, log),
                        Err(e) => tracing::debug!("a reclaim refused: {}", e.message),
                    }
                }
                None
            }
        };
        // Counted here, but their usage is the sending region's.
        log.not_usage_since(from);
        answer
    }

    /// The home answered an ask this owner forwarded: its usage, recorded
    /// where the ask was made (as a delegate's, apart from any count).
    fn forwarded_usage(
        &self,
        policies: &Policies,
        note: &Answered,
        owned: Owned<'_>,
        now: Nanos,
        log: &mut TurnLog,
    ) {
        let Some(base) = policies.get(&note.policy) else {
            return;
        };
        if KeyToken::parse(&note.key).is_err() {
            return;
        }
        let usage = match (note.allowed, note.cost) {
            (true, 0) => Usage::Neither,
            (true, _) => Usage::Used,
            (false, _) => Usage::Denied,
        };
        let turn = &mut Turn::new(policies, owned, now, log, false);
        let policy = policies.in_force(base, &note.key);
        if usage == Usage::Used {
            // Counted at the home, spent here: in this region's tally of
            // what it spent (alerts), as a hit sent to the home is.
            self.tally_spent(turn, policy, &note.key, note.cost);
        }
        let counted = Counted {
            policy: base.name(),
            token: &note.key,
            cost: note.cost,
        };
        self.record_usage_apart(turn, counted, usage, policy.tallies().is_some());
    }

    /// The home asks for a key's share of a window back: what this
    /// delegate will not need goes back as a refund.
    fn refund_share(
        &self,
        policies: &Policies,
        reclaim: &Reclaim,
        owned: Owned<'_>,
        now: Nanos,
        log: &mut TurnLog,
    ) {
        let Some(here) = self.region.as_ref() else {
            return;
        };
        let Some(policy) = policies.get(&reclaim.policy) else {
            return;
        };
        let (Some(global), Some(limit)) = (policy.scope().global(), policy.limits().first()) else {
            return;
        };
        if global.home() == here || KeyToken::parse(&reclaim.key).is_err() {
            return;
        }
        match policy.spread() {
            Some(Spread::SplitParts) => {
                let policy = policies.in_force(policy, &reclaim.key);
                return self.gift_spare(policy, reclaim, here, owned, now, log);
            }
            // Nothing moves between a sliding policy's parts.
            Some(Spread::PartsThenForward) | None => return,
            Some(Spread::HomeCounts) => {}
        }
        let share = cut_share(global, here, limit.max());
        let refund = ask::with_counter_key(policy.name(), &reclaim.key, |buf| {
            let recorded = recorded_share(owned, policy, buf, now);
            let refund = owned.counters.global().delegates().reclaim(
                buf,
                limit,
                share,
                Nanos(reclaim.window_start),
                now,
                || recorded,
            );
            // Given back is gone from the share for good, whoever owns
            // the partition next: recorded as spent.
            if let Some(refund) = refund {
                record_share(owned, policy, buf, now, refund.units);
                log.booked(policy.name(), &reclaim.key, refund.units, now);
            }
            refund
        });
        if let Some(refund) = refund {
            // Sent once its record is stored: a kill -9 before that would
            // let the next owner spend again what went back.
            let refund = Action::Refund {
                home: global.home().clone(),
                partition: owned.partition,
                policy: policy.name().to_string(),
                token: reclaim.key.clone(),
                refund,
            };
            log.act(When::Stored, refund);
        }
    }

    /// An ask of a global policy whose home is another region: decided
    /// from this region's share and the slices the home granted, never
    /// waiting on the link; what is missing is asked for ahead. `None`:
    /// the home is cut off and the policy says `on_cut = "open"`, so an
    /// ask the books cannot pay for is decided here as a regional limit,
    /// on the key's own counter (at most `max` a window in each region).
    pub(super) fn delegate<'p>(
        &self,
        turn: &mut Turn<'_, 'p, '_>,
        key: KeyToken<'_>,
        (base, policy): (&'p Policy, &'p Policy),
        (global, here): (&Global, &RegionName),
        op: Op,
        budget: Budget,
    ) -> Result<Option<Applied<'p>>, ErrorReply> {
        let (owned, now) = (turn.owned, turn.now);
        let token = key.as_str();
        let Some(limit) = policy.limits().first() else {
            return Err(ErrorReply::bad_request(format!(
                "policy {} has no limit to decide a global ask from",
                policy.name()
            )));
        };
        let cost = match (op, budget) {
            // A slice given back here: none was granted from here (a
            // delegate grants none), so only its spending is usage.
            (_, Budget::Refund(_)) => 0,
            (Op::Allow(c) | Op::Record(c) | Op::Wait { cost: c, .. }, _) => c,
        };
        let spread = policy.spread();
        let forwards_past_part = spread == Some(Spread::PartsThenForward);
        let share = cut_share(global, here, limit.max());
        let decided = ask::with_counter_key(policy.name(), token, |buf| {
            if spread != Some(Spread::HomeCounts) {
                return self.decide_by_part(turn, policy, here, (token, buf), cost);
            }
            decide_by_share(turn, (policy, limit, share), (token, buf), cost)
        });
        if let Some(want) = decided.want {
            let grant = Action::Grant {
                home: global.home().clone(),
                partition: owned.partition,
                policy: policy.name().to_string(),
                token: token.to_string(),
                want,
                sent: now,
            };
            turn.log.act(When::Now, grant);
        }
        // The books and parts decide as enforced; the answer is in the
        // policy's mode (a shadow denial is answered allowed).
        let decision = decided.decision;
        let answered = policy.mode().answer(decision);
        if let Budget::Refund(refund) = budget {
            turn.log.unmatched(refund.units);
            self.refunded(turn, base.name(), token, &Refund { units: 0, ..refund });
            return Ok(Some((answered, policy.name(), None)));
        }
        let cut = owned.counters.global().is_cut(global.home());
        let cut_open = global.on_cut() == OnCut::Open && cut;
        // What this region holds cannot pay: the home decides, from the
        // one count (a denial while the link is up means the global
        // count has no room). The link task sends it there and relays the
        // answer. While the home is cut off, a policy decided at the home
        // sends one a second (to tell when it is back) and denies the
        // rest here; any other decides here as its `on_cut` says (its
        // requests for slices tell when the link is back).
        let to_home = forwards_past_part || !cut;
        if to_home
            && !decision.allowed
            && matches!(op, Op::Allow(_) | Op::Wait { .. })
            && !cut_open
            && owned.counters.global().may_forward(global.home(), now)
        {
            turn.forward = Some(Forward {
                here: here.clone(),
                home: global.home().clone(),
                partition: owned.partition,
                policy: base.name().to_string(),
                token: token.to_string(),
                cost,
                body: Vec::new(),
                unanswered: answered,
                decided_by: policy.name().to_string(),
            });
            return Err(ErrorReply::unavailable(format!(
                "policy {} is decided at its home region {} once what this region holds of \
                 it is spent: ask key {token} alone on {}, not in a batch",
                base.name(),
                global.home(),
                Verb::Allow.client_subject(token)
            )));
        }
        if !decision.allowed && cut_open {
            return Ok(None);
        }
        let usage = match op {
            Op::Record(_) => {
                if !decision.allowed {
                    let id = self.hold_ids.draw().to_string();
                    hit_at_home(turn, (global, policy, limit), (token, &id), cost);
                }
                Usage::Used
            }
            // A global policy has no max_wait (SPEC §18), so an ask of it
            // never waits; were it to, it would count as an allow.
            Op::Allow(_) | Op::Wait { .. } if decision.allowed && cost > 0 => Usage::Used,
            Op::Allow(_) | Op::Wait { .. } if decision.allowed => Usage::Neither,
            Op::Allow(_) | Op::Wait { .. } => Usage::Denied,
        };
        if usage == Usage::Used {
            self.tally_spent(turn, policy, token, cost);
        }
        let counted = Counted {
            policy: base.name(),
            token,
            cost,
        };
        self.record_usage_apart(turn, counted, usage, policy.tallies().is_some());
        Ok(Some((answered, policy.name(), None)))
    }

    /// A global bucket's or sliding policy's ask at a delegate
    /// (`sluice_core::region::parts`): decided from this region's part,
    /// kept in the key's own counter, else (a bucket) from the slices the
    /// home granted, with what to ask the home for ahead; a sliding
    /// policy's denial here goes on to the home.
    fn decide_by_part(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        policy: &Policy,
        here: &RegionName,
        (token, counter_key): (&str, &str),
        cost: u64,
    ) -> Decided {
        let (owned, now) = (turn.owned, turn.now);
        let whole = &policy.limits()[0];
        let part = policy.part_in(here);
        let by_part = part.map(|part| {
            owned.counters.update(part, counter_key, now, |state| {
                part.decide(state, now, cost)
            })
        });
        if by_part.is_some_and(|d| d.allowed) && cost > 0 {
            turn.log.booked(policy.name(), token, cost, now);
        }
        let (mut decision, want) = if policy.spread() == Some(Spread::PartsThenForward) {
            // A sliding policy: its part is all a region decides; the
            // rest is decided at the home.
            (by_part.unwrap_or_else(|| not_here(whole)), None)
        } else {
            part_or_slices(owned, counter_key, whole, now, cost, by_part)
        };
        decision.limit = reported_whole(policy, part, decision.limit);
        Decided {
            decision,
            want,
            from_share: 0,
        }
    }

    /// At the home, after an ask of `token` left the window short (denied,
    /// or under a tenth of `max` left): asks the other regions for their
    /// shares back (of a global bucket split into parts: their spare
    /// units), at most every eighth of a window per key. The caller tells
    /// whether any is out.
    pub(super) fn reclaim_if_short(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        (global, here): (&Global, &RegionName),
        limit: &Limit,
        (policy, token, counter_key): (&str, &str, &str),
        decision: &Decision,
    ) {
        if decision.within_limits() && decision.remaining >= limit.max() / 10 {
            return;
        }
        let counters = turn.owned.counters;
        let window_start = limit.window_start(turn.now);
        if !counters.global().reclaim_due(counter_key, limit, turn.now) {
            return;
        }
        let reclaim = Action::Reclaim {
            regions: global.others(here).cloned().collect(),
            partition: turn.owned.partition,
            reclaim: Reclaim {
                policy: policy.to_string(),
                key: token.to_string(),
                window_start: window_start.as_u64(),
            },
        };
        turn.log.act(When::Now, reclaim);
    }

    /// A key of `policy` was reset here: if the policy is global, the
    /// reset goes to every other region it holds across (each forgets its
    /// own state of the key); their names.
    pub(super) fn reset_elsewhere(
        &self,
        turn: &mut Turn<'_, '_, '_>,
        policy: &Policy,
        token: &str,
    ) -> Vec<String> {
        let (Some(here), Some(global)) = (self.region.as_ref(), policy.scope().global()) else {
            return Vec::new();
        };
        let regions: Vec<RegionName> = global.others(here).cloned().collect();
        let names = regions.iter().map(|r| r.as_str().to_string()).collect();
        let reset = Action::Reset {
            regions,
            partition: turn.owned.partition,
            token: token.to_string(),
            body: wire::encode_request(Some(policy.name()), None, Encoding::MsgPack),
        };
        turn.log.act(When::Now, reset);
        names
    }

    /// What an inspect of a key of the global `policy` (in force for it)
    /// asks the other regions for, with this region's own `local` limits;
    /// `None` without a link.
    pub(super) fn gather_of(
        &self,
        policy: &Policy,
        global: &Global,
        local: Vec<LimitReport>,
        now: Nanos,
    ) -> Option<GatherPolicy> {
        let here = self.region.as_ref()?;
        let whole: Vec<LimitReport> = policy
            .inspect(&policy.new_state(), now)
            .iter()
            .map(LimitReport::from)
            .collect();
        let regions = global
            .weights()
            .iter()
            .map(|(region, _)| {
                if region == here {
                    return (region.clone(), true, local.clone());
                }
                // A region with no state of the key has its part whole
                // (the home, without parts, the whole limit).
                let fresh = match policy.part_in(region) {
                    Some(part) => part
                        .inspect(&part.new_state(), now)
                        .iter()
                        .map(LimitReport::from)
                        .collect(),
                    None if region == global.home() => whole.clone(),
                    None => Vec::new(),
                };
                (region.clone(), false, fresh)
            })
            .collect();
        Some(GatherPolicy {
            policy: policy.name().to_string(),
            count: GlobalCount::of(policy, global.home()),
            home: global.home().clone(),
            whole,
            regions,
        })
    }

    /// A delegate's slices whose lease ended go back to their homes (the
    /// shard's sweep): the refunds to send.
    pub fn sweep_global(&self, policies: &Policies, owned: Owned<'_>, now: Nanos) -> Vec<Action> {
        if self.region.is_none() {
            return Vec::new();
        }
        let refunds = owned.counters.global().sweep(now);
        let mut actions = Vec::with_capacity(refunds.len());
        for (counter_key, refund) in refunds {
            let Some((name, token)) = counter_key.split_once('/') else {
                continue;
            };
            let Some(global) = policies.get(name).and_then(|p| p.scope().global()) else {
                continue;
            };
            actions.push(Action::Refund {
                home: global.home().clone(),
                partition: owned.partition,
                policy: name.to_string(),
                token: token.to_string(),
                refund,
            });
        }
        actions
    }
}
