//! The simulated regions: in each, one owner of every partition with the
//! real decision core ([`Decider`]) and the real global state
//! (`sluice_core::region::state`) in its counters; between them, the
//! seeded network of `net.rs` carrying the real messages
//! (`sluice_core::region::transport`), with the link task's rules for
//! replies and timeouts and its health of the link
//! ([`LinkHealth`]). Time is one simulated clock.

use crate::net::{Due, Net};
use sluice_core::config::Config;
use sluice_core::key::KeyToken;
use sluice_core::policies::Policies;
use sluice_core::policy::Decision;
use sluice_core::region::global::ASK_TIMEOUT;
use sluice_core::region::state::{Action, Event};
use sluice_core::region::transport::{self, LinkHealth, Send};
use sluice_core::region::RegionName;
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use sluice_worker::counters::Counters;
use sluice_worker::decide::{Answer, Decider, Message, Owned};
use sluice_worker::journal::record::Record;
use sluice_worker::reply::Reply;
use sluice_worker::stats::ShardStats;
use sluice_worker::tally::Recording;
use std::collections::HashMap;
use std::sync::Arc;

/// One region's worker, owning every partition.
pub struct Region {
    pub name: RegionName,
    decider: Decider,
    policies: Arc<Policies>,
    partitions: Vec<(Counters, ShardStats)>,
    health: LinkHealth,
    /// Journal mode: every partition's records, in the order they were
    /// stored (a restart replays them all: the simulator takes no
    /// snapshots).
    journal: Option<Vec<Vec<Record>>>,
}

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
    },
    /// The reply to `request`, back to region `to`.
    Reply {
        to: usize,
        request: u64,
        body: Vec<u8>,
    },
}

/// A request that waits for its reply.
struct Waiting {
    from: usize,
    action: Action,
}

/// What a region answered an ask.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Answered {
    Decided(Decision),
    /// An error reply, or an ask sent on (to the home).
    Other,
}

impl Region {
    /// A region's worker, in journal mode when `journal`.
    pub fn new(name: &str, toml: &str, partitions: u32, journal: bool) -> Region {
        let mut config = Config::from_toml(toml, "sim.toml").expect("the simulated config");
        config.usage.enabled = false;
        let name = RegionName::new(name).expect("a region name");
        let recording = match journal {
            true => Recording::Records,
            false => Recording::Nothing,
        };
        let decider =
            Decider::new(Arc::new(config), Arc::default(), recording).in_region(name.clone());
        Region {
            name,
            policies: decider.policies(),
            decider,
            partitions: (0..partitions)
                .map(|_| (Counters::new(), ShardStats::default()))
                .collect(),
            health: LinkHealth::default(),
            journal: journal.then(|| (0..partitions).map(|_| Vec::new()).collect()),
        }
    }

    /// The worker is killed and started again: every partition is
    /// restored from its journal, its global state starts empty, and so
    /// does the link's health. `false` in snapshot mode (nothing to
    /// restore from in the simulator: not simulated yet).
    fn restart(&mut self) -> bool {
        let Some(journal) = &self.journal else {
            return false;
        };
        for (partition, records) in journal.iter().enumerate() {
            let counters = Counters::new();
            for record in records {
                self.decider.replay(&self.policies, record, &counters);
            }
            self.partitions[partition] = (counters, ShardStats::default());
        }
        self.health = LinkHealth::default();
        true
    }

    fn owned(&self, partition: u32) -> Owned<'_> {
        let (counters, stats) = &self.partitions[partition as usize];
        Owned {
            partition,
            counters,
            stats,
            usage: None,
        }
    }

    /// Decides one message on `partition`'s subjects: the reply's body
    /// and decision, and the actions (those for once stored go once its
    /// records are, here at once).
    fn decide(
        &mut self,
        partition: u32,
        subject: &str,
        body: &[u8],
        wants_reply: bool,
        now: Nanos,
    ) -> (Option<(Vec<u8>, Answered)>, Vec<Action>) {
        let owned = self.owned(partition);
        let mut tally = self.decider.tally(owned);
        let message = Message {
            subject,
            body,
            wants_reply,
        };
        let answer = self
            .decider
            .message(&self.policies, message, owned, now, &mut tally);
        let actions = tally.take_actions();
        let records = tally.finish(self.decider.stats(), owned.stats);
        let reply = answer.map(|answer| {
            let answered = match &answer {
                Answer::Decision { decision, .. } => Answered::Decided(*decision),
                _ => Answered::Other,
            };
            (Reply::of(&answer, "sim").payload.to_vec(), answered)
        });
        if let Some(journal) = &mut self.journal {
            journal[partition as usize].extend(records);
        }
        let mut all = actions.now;
        all.extend(actions.stored);
        (reply, all)
    }

    fn on_event(&self, partition: u32, event: Event) {
        self.partitions[partition as usize]
            .0
            .global()
            .on_event(event);
    }

    /// The link's health changed: every partition is told.
    fn tell_all(&self, event: Event) {
        for (counters, _) in &self.partitions {
            counters.global().on_event(event.clone());
        }
    }
}

/// The regions and the link between them.
pub struct World {
    pub regions: Vec<Region>,
    pub net: Net<Wire>,
    pub cut: bool,
    waiting: HashMap<u64, Waiting>,
    next_request: u64,
    partitions: u32,
    /// What happened, for a failing seed's report: kept only when asked
    /// (`tracing`), as formatting every step would cost most of a run.
    pub trace: Vec<String>,
    pub tracing: bool,
}

/// The partition of `subject`'s link or client subject.
fn partition_of_subject(subject: &str) -> u32 {
    let mut tokens = subject.split('.');
    while let Some(token) = tokens.next() {
        if token == "p" {
            if let Some(n) = tokens.next().and_then(|n| n.parse().ok()) {
                return n;
            }
        }
    }
    panic!("no partition in {subject}")
}

impl World {
    pub fn new(regions: Vec<Region>, net: Net<Wire>, partitions: u32) -> World {
        World {
            regions,
            net,
            cut: false,
            waiting: HashMap::new(),
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
    pub fn ask(
        &mut self,
        rng: &mut rand::rngs::StdRng,
        at: usize,
        token: &str,
        now: Nanos,
    ) -> Answered {
        let partition = KeyToken::parse(token)
            .expect("a key")
            .partition(self.partitions);
        let subject = Verb::Allow.mapped_subject(partition, token);
        let (reply, actions) = self.regions[at].decide(partition, &subject, b"", true, now);
        let answered = reply.map_or(Answered::Other, |(_, a)| a);
        if self.tracing {
            let name = &self.regions[at].name;
            self.note(now, format!("{name} asks {token}: {answered:?}"));
        }
        self.perform(rng, at, actions, now);
        answered
    }

    /// Sends what region `from` left to cross the link.
    fn perform(
        &mut self,
        rng: &mut rand::rngs::StdRng,
        from: usize,
        actions: Vec<Action>,
        now: Nanos,
    ) {
        for action in actions {
            for out in transport::messages_of(&action) {
                let to_name = out.subject.split('.').nth(1).expect("a link subject");
                let to = self.region_index(to_name);
                let request = (out.send == Send::Request).then(|| {
                    let id = self.next_request;
                    self.next_request += 1;
                    let waiting = Waiting {
                        from,
                        action: action.clone(),
                    };
                    self.waiting.insert(id, waiting);
                    self.net.time_out(now.saturating_add(ASK_TIMEOUT), id);
                    id
                });
                if self.tracing {
                    let from = &self.regions[from].name;
                    let line = format!("{from} sends {} ({request:?}): {action:?}", out.subject);
                    self.note(now, line);
                }
                let wire = Wire::Message {
                    from,
                    to,
                    subject: out.subject,
                    body: out.body,
                    request,
                };
                self.net.send(rng, now, self.cut, wire);
            }
        }
    }

    /// Delivers everything due by `now`.
    pub fn deliver(&mut self, rng: &mut rand::rngs::StdRng, now: Nanos) {
        while let Some(due) = self.net.pop_due(now) {
            match due {
                Due::Arrives(Wire::Message {
                    from,
                    to,
                    subject,
                    body,
                    request,
                }) => {
                    let partition = partition_of_subject(&subject);
                    let region = &mut self.regions[to];
                    let (reply, actions) =
                        region.decide(partition, &subject, &body, request.is_some(), now);
                    if self.tracing {
                        let answered = reply.as_ref().map(|r| r.1);
                        self.note(now, format!("{subject} arrives: {answered:?}"));
                    }
                    if let (Some(request), Some((body, _))) = (request, reply) {
                        let wire = Wire::Reply {
                            to: from,
                            request,
                            body,
                        };
                        self.net.send(rng, now, self.cut, wire);
                    }
                    self.perform(rng, to, actions, now);
                }
                Due::Arrives(Wire::Reply { to, request, body }) => {
                    // A reply after its request timed out is dropped, as
                    // the link task's request gives up.
                    let Some(waiting) = self.waiting.remove(&request) else {
                        continue;
                    };
                    debug_assert_eq!(waiting.from, to);
                    self.outcome(waiting, Some(&body), now);
                }
                Due::TimesOut(request) => {
                    if let Some(waiting) = self.waiting.remove(&request) {
                        self.outcome(waiting, None, now);
                    }
                }
            }
        }
    }

    /// What came of a request, as the link task reads it.
    fn outcome(&mut self, waiting: Waiting, reply: Option<&[u8]>, now: Nanos) {
        let Action::Grant {
            home,
            partition,
            sent,
            ..
        } = &waiting.action
        else {
            return;
        };
        let (event, outcome) = transport::grant_outcome(&waiting.action, reply, now);
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

    /// Region `at`'s worker is killed and started again (journal mode):
    /// what its link task waited for is forgotten with it. `false` when
    /// it cannot be (snapshot mode).
    pub fn restart(&mut self, at: usize, now: Nanos) -> bool {
        if !self.regions[at].restart() {
            return false;
        }
        self.waiting.retain(|_, waiting| waiting.from != at);
        if self.tracing {
            let name = self.regions[at].name.clone();
            self.note(
                now,
                format!("{name}'s worker killed and restarted from its journal"),
            );
        }
        true
    }

    /// Each region's owners give back the slices whose lease ended.
    pub fn sweep(&mut self, rng: &mut rand::rngs::StdRng, now: Nanos) {
        for at in 0..self.regions.len() {
            let region = &self.regions[at];
            let mut actions = Vec::new();
            for partition in 0..self.partitions {
                let owned = region.owned(partition);
                actions.extend(region.decider.sweep_global(&region.policies, owned, now));
            }
            self.perform(rng, at, actions, now);
        }
    }
}
