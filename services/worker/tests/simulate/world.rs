//! The simulated regions (`region.rs`) and between them the seeded
//! network of `net.rs` carrying the real messages
//! (`sluice_core::region::transport`), with the link task's rules for
//! replies and timeouts and its health of the link
//! (`sluice_core::region::transport::LinkHealth`).
//! Time is one simulated clock.

use crate::net::{Due, Net};
use crate::region::Outcome;
pub use crate::region::{Answered, Region};
use crate::tallies::{PendingTallies, To};
use crate::usage::ByKey;
use rand::rngs::StdRng;
use sluice_core::key::KeyToken;
use sluice_core::region::global::ASK_TIMEOUT;
use sluice_core::region::state::Action;
use sluice_core::region::tally::Reported;
use sluice_core::region::transport::{self, Outgoing, Send};
use sluice_core::subject::{link_answered, link_ask, LinkInbound, Verb};
use sluice_core::time::Nanos;
use sluice_core::wire::batch::decode_results;
use sluice_core::wire::link;
use sluice_core::wire::{decode_reply, Reply as WireReply};
use sluice_worker::global::Forward;
use std::collections::HashMap;

/// A message of the link, in flight.
#[derive(Clone, Debug)]
pub enum Wire {
    /// To region `to`'s owner, on `subject`; a request (`Some`) waits
    /// for a reply.
    Message {
        from: usize,
        to: usize,
        subject: String,
        body: Vec<u8>,
        request: Option<u64>,
        /// A hit's name in the simulation, the same when the link sends
        /// it again or the network delivers it twice.
        hit: Option<u64>,
    },
    /// The reply to `request`, back to region `to`, decided there at
    /// `decided_at`.
    Reply {
        to: usize,
        request: u64,
        body: Vec<u8>,
        decided_at: Nanos,
    },
}

/// A request that waits for its reply.
struct Waiting {
    from: usize,
    what: Sent,
}

/// What a request carries: an action, or an ask forwarded to the home.
enum Sent {
    Action(Action),
    /// A hit, with its name in the simulation.
    Hit(Action, u64),
    /// An ask forwarded to the home at the time given.
    Forward(Forward, Nanos),
    /// Tallies reported to a home together.
    Tallies(To, Vec<Reported>),
}

/// The answer to an ask forwarded to the home, as the asker got it: the
/// home's (decided at `decided_at`), or the forward's denial when the
/// home did not answer.
#[derive(Clone, Debug)]
pub struct Settled {
    pub at: usize,
    pub key: String,
    pub allowed: bool,
    pub decided_at: Nanos,
}

/// The regions and the link between them.
pub struct World {
    pub regions: Vec<Region>,
    pub net: Net<Wire>,
    pub cut: bool,
    waiting: HashMap<u64, Waiting>,
    /// Each region's tallies waiting for their homes.
    tallies: Vec<PendingTallies>,
    /// Forwarded asks answered since the last look ([`World::settled`]).
    settled: Vec<Settled>,
    /// Each hit the home took (by its name in the simulation), with the
    /// window it counted in: delivered again in that window, it must count
    /// nothing (SPEC §16).
    hits_taken: HashMap<u64, Nanos>,
    next_hit: u64,
    /// Whether the home lost what it remembered (a kill in snapshot mode):
    /// a repeat may then count again, as documented.
    pub home_forgot: bool,
    /// A hit the home counted twice, for the run to report.
    pub counted_twice: Option<String>,
    /// Each fixed window's length (ns), 0 for a bucket: where the hit check
    /// applies; and its `max`.
    pub window: u64,
    pub max: u64,
    next_request: u64,
    partitions: u32,
    /// What happened, for a failing seed's report: kept only when asked
    /// (`tracing`), as formatting every step would cost most of a run.
    pub trace: Vec<String>,
    pub tracing: bool,
}

impl World {
    pub fn new(regions: Vec<Region>, net: Net<Wire>, partitions: u32) -> World {
        let tallies = (0..regions.len())
            .map(|_| PendingTallies::default())
            .collect();
        World {
            regions,
            net,
            cut: false,
            waiting: HashMap::new(),
            tallies,
            settled: Vec::new(),
            hits_taken: HashMap::new(),
            next_hit: 0,
            home_forgot: false,
            counted_twice: None,
            window: 0,
            max: 0,
            next_request: 0,
            partitions,
            trace: Vec::new(),
            tracing: false,
        }
    }

    fn region_index(&self, name: &str) -> usize {
        self.regions
            .iter()
            .position(|r| r.name.as_str() == name)
            .unwrap_or_else(|| panic!("no region {name}"))
    }

    /// Keeps `line` in the trace (call only when `tracing`).
    pub fn note(&mut self, now: Nanos, line: String) {
        self.trace
            .push(format!("{:>8.3}s {line}", now.0 as f64 / 1e9));
    }

    /// An ask of `token` under the default policy in region `at`.
    pub fn ask(&mut self, rng: &mut StdRng, at: usize, token: &str, now: Nanos) -> Answered {
        let partition = KeyToken::parse(token)
            .expect("a key")
            .partition(self.partitions);
        let subject = Verb::Allow.mapped_subject(partition, token);
        let (reply, actions) = self.regions[at].decide(partition, &subject, b"", true, now);
        let answered = match reply {
            Outcome::Reply(_, answered) => answered,
            Outcome::Forward(forward) => {
                self.forward(rng, at, forward, now);
                Answered::Forwarded
            }
            Outcome::None => Answered::Other,
        };
        if self.tracing {
            let name = &self.regions[at].name;
            self.note(now, format!("{name} asks {token}: {answered:?}"));
        }
        self.perform(rng, at, actions, now);
        answered
    }

    /// A hit (`rl.hit`, cost 1, no reply) of `token` in region `at`.
    pub fn hit(&mut self, rng: &mut StdRng, at: usize, token: &str, now: Nanos) {
        let partition = KeyToken::parse(token)
            .expect("a key")
            .partition(self.partitions);
        let subject = Verb::Hit.mapped_subject(partition, token);
        let (_, actions) = self.regions[at].decide(partition, &subject, b"", false, now);
        if self.tracing {
            let name = &self.regions[at].name;
            self.note(now, format!("{name} hits {token}"));
        }
        self.perform(rng, at, actions, now);
    }

    /// Sends what region `from` left to cross the link.
    fn perform(&mut self, rng: &mut StdRng, from: usize, actions: Vec<Action>, now: Nanos) {
        for action in actions {
            if let Action::Tally {
                home,
                partition,
                report,
                ..
            } = action
            {
                // Kept by the link task and sent with the next tick's.
                let to = (self.region_index(home.as_str()), partition);
                self.tallies[from].add(to, report);
                continue;
            }
            self.send(rng, from, action, None, now);
        }
    }

    /// Every region's tallies waiting go to their homes, a request per
    /// home and partition (the link task's tick).
    fn send_tallies(&mut self, rng: &mut StdRng, now: Nanos) {
        for from in 0..self.regions.len() {
            for ((to, partition), reports) in self.tallies[from].take() {
                let here = self.regions[from].name.clone();
                let home = &self.regions[to].name;
                let out = transport::tally_message(home, partition, &here, &reports);
                let sent = Sent::Tallies((to, partition), reports);
                let request = Some(self.wait(from, sent, now));
                if self.tracing {
                    self.note(now, format!("{here} sends {} ({request:?})", out.subject));
                }
                self.put(rng, (from, to), out, (request, None), now);
            }
        }
    }

    /// Puts `out` from region `from` to region `to` on the network: a
    /// request when it waits as `request`, a hit when named `hit`.
    fn put(
        &mut self,
        rng: &mut StdRng,
        (from, to): (usize, usize),
        out: Outgoing,
        (request, hit): (Option<u64>, Option<u64>),
        now: Nanos,
    ) {
        let wire = Wire::Message {
            from,
            to,
            subject: out.subject,
            body: out.body,
            request,
            hit,
        };
        self.net.send(rng, now, self.cut, wire);
    }

    /// Sends one action's messages; a hit under its name in the
    /// simulation (`hit`, a new one when `None`).
    fn send(
        &mut self,
        rng: &mut StdRng,
        from: usize,
        action: Action,
        hit: Option<u64>,
        now: Nanos,
    ) {
        let hit = matches!(action, Action::Hit { .. }).then(|| {
            hit.unwrap_or_else(|| {
                self.next_hit += 1;
                self.next_hit
            })
        });
        for out in transport::messages_of(&action) {
            let to_name = out.subject.split('.').nth(1).expect("a link subject");
            let to = self.region_index(to_name);
            let sent = match hit {
                Some(name) => Sent::Hit(action.clone(), name),
                None => Sent::Action(action.clone()),
            };
            let request = (out.send == Send::Request).then(|| self.wait(from, sent, now));
            if self.tracing {
                let from = &self.regions[from].name;
                let line = format!("{from} sends {} ({request:?}): {action:?}", out.subject);
                self.note(now, line);
            }
            self.put(rng, (from, to), out, (request, hit), now);
        }
    }

    /// Delivers everything due by `now`.
    pub fn deliver(&mut self, rng: &mut StdRng, now: Nanos) {
        while let Some(due) = self.net.pop_due(now) {
            match due {
                Due::Arrives(Wire::Message {
                    from,
                    to,
                    subject,
                    body,
                    request,
                    hit: name,
                }) => {
                    let region = &mut self.regions[to];
                    let partition = LinkInbound::parse(&subject, region.name.as_str())
                        .unwrap_or_else(|| panic!("{subject} is no link subject of its region"))
                        .partition();
                    let hit = match LinkInbound::parse(&subject, region.name.as_str()) {
                        Some(LinkInbound::Ask(ask)) if ask.verb == Verb::Hit => {
                            Some(ask.key_token.to_string())
                        }
                        _ => None,
                    };
                    let used =
                        |region: &Region, token: &str| region.used(token, self.partitions, now);
                    let before = hit.as_ref().map(|token| used(region, token));
                    let (reply, actions) =
                        region.decide(partition, &subject, &body, request.is_some(), now);
                    if let (Some(token), Some(before), Some(name)) = (&hit, before, name) {
                        let counted = used(&self.regions[to], token) - before;
                        // A full window shows no more (`used` stops at
                        // `max`), and the first count of a window at the
                        // home books the other regions' shares with it.
                        let shows = before > 0 && before < self.max;
                        self.hit_taken(name, token, counted, shows, now);
                    }
                    let reply = match reply {
                        Outcome::Reply(body, answered) => Some((body, answered)),
                        _ => None,
                    };
                    if self.tracing {
                        let answered = reply.as_ref().map(|r| r.1);
                        self.note(now, format!("{subject} arrives: {answered:?}"));
                    }
                    if let (Some(request), Some((body, _))) = (request, reply) {
                        let wire = Wire::Reply {
                            to: from,
                            request,
                            body,
                            decided_at: now,
                        };
                        self.net.send(rng, now, self.cut, wire);
                    }
                    self.perform(rng, to, actions, now);
                }
                Due::Arrives(Wire::Reply {
                    to,
                    request,
                    body,
                    decided_at,
                }) => {
                    // A reply after its request timed out is dropped, as
                    // the link task's request gives up.
                    let Some(waiting) = self.waiting.remove(&request) else {
                        continue;
                    };
                    debug_assert_eq!(waiting.from, to);
                    self.outcome(rng, waiting, Some((&body, decided_at)), now);
                }
                Due::TimesOut(request) => {
                    if let Some(waiting) = self.waiting.remove(&request) {
                        self.outcome(rng, waiting, None, now);
                    }
                }
            }
        }
    }

    /// A request from region `from` now waits for its reply, or its time
    /// to run out: its id.
    fn wait(&mut self, from: usize, what: Sent, now: Nanos) -> u64 {
        let id = self.next_request;
        self.next_request += 1;
        self.waiting.insert(id, Waiting { from, what });
        self.net.time_out(now.saturating_add(ASK_TIMEOUT), id);
        id
    }

    /// Sends an ask region `at` could not pay for to the home, as the
    /// link task does.
    fn forward(&mut self, rng: &mut StdRng, at: usize, forward: Forward, now: Nanos) {
        let to = self.region_index(forward.home.as_str());
        let subject = link_ask(
            forward.home.as_str(),
            forward.partition,
            Verb::Allow,
            &forward.token,
        );
        let body = forward.body.clone();
        let request = self.wait(at, Sent::Forward(forward, now), now);
        if self.tracing {
            let line = format!("forwards {subject} ({request})");
            self.note(now, line);
        }
        let wire = Wire::Message {
            from: at,
            to,
            subject,
            body,
            request: Some(request),
            hit: None,
        };
        self.net.send(rng, now, self.cut, wire);
    }

    /// The forwarded asks answered since the last call.
    pub fn settled(&mut self) -> Vec<Settled> {
        std::mem::take(&mut self.settled)
    }

    /// What came of a request, as the link task reads it.
    fn outcome(
        &mut self,
        rng: &mut StdRng,
        waiting: Waiting,
        reply: Option<(&[u8], Nanos)>,
        now: Nanos,
    ) {
        let action = match waiting.what {
            Sent::Action(action) => action,
            Sent::Hit(action, name) => {
                return self.hit_answered(rng, waiting.from, (action, name), reply, now)
            }
            Sent::Forward(forward, sent) => {
                return self.relayed(rng, (waiting.from, forward, sent), reply, now)
            }
            Sent::Tallies(to, reports) => {
                let taken = reply.is_some_and(|(body, _)| decode_results(body, 0).is_ok());
                if !taken {
                    self.tallies[waiting.from].put_back(to, reports);
                }
                return;
            }
        };
        let Action::Grant {
            home,
            partition,
            sent,
            ..
        } = &action
        else {
            return;
        };
        let heard = self.regions[waiting.from].clock(now);
        let (event, outcome) = transport::grant_outcome(&action, reply.map(|r| r.0), heard);
        if self.tracing {
            let to = &self.regions[waiting.from].name;
            let line = format!("{to} hears: {event:?} {outcome:?}");
            self.note(now, line);
        }
        let region = &mut self.regions[waiting.from];
        if let Some(event) = event {
            region.on_event(*partition, event);
        }
        if let Some(reach) = region.health.outcome(home, *sent, outcome.is_ok()) {
            region.tell_all(reach.clone());
            if self.tracing {
                let name = region.name.clone();
                self.note(now, format!("{name}: {reach:?}"));
            }
        }
    }

    /// What came of hit `name` region `from` sent to the home, as the link
    /// task's `send_hit` reads it: sent again until the home takes it (a
    /// decision; a refusal under 500 too, which would come again), while
    /// its window lasts.
    fn hit_answered(
        &mut self,
        rng: &mut StdRng,
        from: usize,
        (action, name): (Action, u64),
        reply: Option<(&[u8], Nanos)>,
        now: Nanos,
    ) {
        let Action::Hit { until, .. } = &action else {
            return;
        };
        let taken = reply.is_some_and(|(body, _)| match decode_reply(body) {
            Ok(WireReply::Error(e)) => e.code.status() < 500,
            _ => true,
        });
        if !taken && self.regions[from].clock(now) < *until {
            if self.tracing {
                self.note(now, format!("hit {name} is sent again: {action:?}"));
            }
            self.send(rng, from, action, Some(name), now);
        }
    }

    /// The home's answer to an ask region `at` forwarded (none: not in
    /// time), as the link task relays it: to the asker, to the link's
    /// health, and to the asking partition as an answered note for its
    /// usage and tally.
    fn relayed(
        &mut self,
        rng: &mut StdRng,
        (at, forward, sent): (usize, Forward, Nanos),
        reply: Option<(&[u8], Nanos)>,
        now: Nanos,
    ) {
        let decided = reply.and_then(|(body, decided_at)| match decode_reply(body) {
            Ok(WireReply::Decision(d)) => Some(Ok((d.allowed && !d.shadow_denied, decided_at))),
            Ok(WireReply::Error(e)) if e.code.status() < 500 => Some(Err(())),
            _ => None,
        });
        let region = &mut self.regions[at];
        if let Some(reach) = region
            .health
            .outcome(&forward.home, sent, decided.is_some())
        {
            region.tell_all(reach);
        }
        let (allowed, decided_at) = match decided {
            Some(Ok(answer)) => answer,
            // A bad request counted nothing anywhere.
            Some(Err(())) => return,
            None => (false, now),
        };
        if self.tracing {
            let line = format!("the home answers {} forwarded: {allowed}", forward.token);
            self.note(now, line);
        }
        self.settled.push(Settled {
            at,
            key: forward.token.clone(),
            allowed,
            decided_at,
        });
        let note = link::Answered {
            policy: forward.policy.clone(),
            key: forward.token.clone(),
            cost: forward.cost,
            allowed,
        };
        let subject = link_answered(forward.here.as_str(), forward.partition);
        let (_, actions) = self.regions[at].decide(
            forward.partition,
            &subject,
            &link::encode(&note),
            false,
            now,
        );
        self.perform(rng, at, actions, now);
    }

    /// The home counted `counted` units for hit `name`:
    /// 1 the first time, none when delivered again in the same window
    /// (unless the home forgot its ids). Only where it `shows`: fixed
    /// windows already counting, with room (`used` stops at `max`, a
    /// bucket's level at its brim).
    fn hit_taken(&mut self, name: u64, token: &str, counted: u64, shows: bool, now: Nanos) {
        if self.window == 0 {
            return;
        }
        let window = Nanos(now.0 - now.0 % self.window);
        let again = self.hits_taken.get(&name) == Some(&window);
        let want = u64::from(!again);
        let wrong = shows && counted != want && !(again && self.home_forgot);
        if wrong && self.counted_twice.is_none() {
            self.counted_twice = Some(format!(
                "the home counted {counted} for a hit of {token} delivered {}, not {want}",
                if again { "again" } else { "first" }
            ));
        }
        self.hits_taken.insert(name, window);
    }

    /// Whether the home's count of `token` has room at `now`: a global
    /// fixed window's one count (its own asks, the other regions' shares
    /// and the slices out), a sliding policy's part at the home.
    pub fn home_has_room(&self, token: &str, now: Nanos) -> bool {
        self.regions[0].room(token, self.partitions, now) > 0
    }

    /// Region `at`'s worker stops (`handover`: gracefully; else killed)
    /// and starts again: what its link task waited for is forgotten with
    /// it, and what its partitions must tell the other regions is sent.
    /// The usage its ledgers held unstored.
    pub fn restart(&mut self, rng: &mut StdRng, at: usize, handover: bool, now: Nanos) -> ByKey {
        let (mut actions, usage_held) = self.regions[at].restart(handover, now);
        in_a_stable_order(&mut actions);
        self.waiting.retain(|_, waiting| waiting.from != at);
        self.tallies[at].clear();
        if self.tracing {
            let name = self.regions[at].name.clone();
            let how = match handover {
                true => "handed over",
                false => "killed",
            };
            self.note(now, format!("{name}'s worker {how} and started again"));
        }
        self.perform(rng, at, actions, now);
        usage_held
    }

    /// Region `at`'s worker decides an ask of `token` and is killed
    /// before the turn's records are stored (journal mode): the ask is
    /// never answered, what the turn sent at once has left, and the
    /// partitions' next owners take over. The usage the ledgers held.
    pub fn crash_in_turn(&mut self, rng: &mut StdRng, at: usize, token: &str, now: Nanos) -> ByKey {
        let partition = KeyToken::parse(token)
            .expect("a key")
            .partition(self.partitions);
        let subject = Verb::Allow.mapped_subject(partition, token);
        let actions = self.regions[at].crash_in_turn(partition, &subject, now);
        if self.tracing {
            let name = &self.regions[at].name;
            let line =
                format!("{name} decides an ask of {token}, killed before storing its records");
            self.note(now, line);
        }
        self.perform(rng, at, actions, now);
        // Its alerts wait for its records (journal mode): never published.
        self.regions[at].forget_alerts();
        self.restart(rng, at, false, now)
    }

    /// Each region's owners give back the slices whose lease ended, and
    /// its tallies waiting go to their homes (both every 250 ms).
    pub fn sweep(&mut self, rng: &mut StdRng, now: Nanos) {
        self.send_tallies(rng, now);
        for at in 0..self.regions.len() {
            let region = &self.regions[at];
            let mut actions = Vec::new();
            for partition in 0..self.partitions {
                let owned = region.owned(partition);
                let policies = &region.policies;
                actions.extend(
                    region
                        .decider
                        .sweep_global(policies, owned, region.clock(now)),
                );
            }
            in_a_stable_order(&mut actions);
            self.perform(rng, at, actions, now);
        }
    }
}

/// Sorts actions that come out of maps (a sweep's refunds, a takeover's
/// tallies) in an order that does not depend on hashing, which differs
/// from map to map and process to process: each action draws its delays
/// from the seed's generator, so a seed replays exactly only if they are
/// sent in the same order.
fn in_a_stable_order(actions: &mut [Action]) {
    actions.sort_by_cached_key(|action| format!("{action:?}"));
}
