//! One simulated region's worker ([`Region`]): one owner of every
//! partition with the real decision core ([`Decider`]) and the real
//! global state (`sluice_core::region::state`) in its counters,
//! snapshotted, journaled, killed and handed over as `owner.rs` keeps it,
//! on its own clock (off the home's by the seed's skew). Apart from
//! `world.rs`, which carries what the regions send each other.

use crate::owner::Partition;
use crate::usage::{add, ByKey};
use sluice_core::alerts::FiredAlert;
use sluice_core::config::Config;
use sluice_core::key::KeyToken;
use sluice_core::policies::Policies;
use sluice_core::policy::Decision;
use sluice_core::region::state::{Action, Actions, Event};
use sluice_core::region::transport::LinkHealth;
use sluice_core::region::RegionName;
use sluice_core::time::Nanos;
use sluice_core::usage::Tier;
use sluice_worker::alerting::{Note, Sink};
use sluice_worker::counters::Counters;
use sluice_worker::decide::{Answer, Decider, Message, Owned};
use sluice_worker::global::Forward;
use sluice_worker::journal::record::Record;
use sluice_worker::reply::Reply;
use sluice_worker::turn_log::Recording;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// One region's worker, owning every partition.
pub struct Region {
    pub name: RegionName,
    pub decider: Decider,
    pub policies: Arc<Policies>,
    partitions: Vec<Partition>,
    pub health: LinkHealth,
    /// The alerts its owners fired, on their way to its publisher.
    alerts: UnboundedReceiver<Note>,
    /// How far this region's clock is off the home's (ns; the home's is
    /// the simulation's): everything it decides or stamps, it does by its
    /// own clock.
    pub offset: i64,
}

/// What a region answered an ask.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Answered {
    Decided(Decision),
    /// Sent to the home, whose answer comes later ([`Settled`]).
    Forwarded,
    /// An error reply.
    Other,
}

/// What a region's owner did with a message.
pub enum Outcome {
    /// The reply's body and what it answered.
    Reply(Vec<u8>, Answered),
    /// An ask to send to the home.
    Forward(Forward),
    None,
}

impl Region {
    /// A region's worker, in journal mode when `journal`, its partitions
    /// taken over at `start`; `epoch`: the simulated clock's start.
    pub fn new(
        name: &str,
        toml: &str,
        partitions: u32,
        journal: bool,
        (epoch, start): (Instant, Nanos),
    ) -> Region {
        let mut config = Config::from_toml(toml, "sim.toml").expect("the simulated config");
        // Usage by the second, so that a run of seconds meets several
        // minutes' records (a replay reads each one's position).
        config.usage.enabled = true;
        config.usage.tiers = vec![Tier {
            step: Duration::from_secs(1),
            keep: Duration::from_secs(60),
        }];
        let tiers = config.usage.tiers.clone();
        let (sink, alerts) = Sink::new();
        let name = RegionName::new(name).expect("a region name");
        let recording = match journal {
            true => Recording::Records,
            false => Recording::Nothing,
        };
        let decider =
            Decider::new(Arc::new(config), Arc::default(), recording).in_region(name.clone());
        let mut region = Region {
            name,
            policies: decider.policies(),
            decider,
            partitions: (0..partitions)
                .map(|p| Partition::new(p, journal, (tiers.clone(), sink.clone()), epoch))
                .collect(),
            health: LinkHealth::default(),
            alerts,
            offset: 0,
        };
        for partition in &mut region.partitions {
            partition.open(&region.decider, &region.policies, start);
        }
        region
    }

    /// This region's clock when the simulation's reads `now`.
    pub fn clock(&self, now: Nanos) -> Nanos {
        Nanos(now.0.saturating_add_signed(self.offset))
    }

    /// The worker stops (`handover`: gracefully, each partition's final
    /// snapshot first; else killed) and starts again: every partition's
    /// next owner takes over, and so the link's health starts over. What
    /// the partitions must tell the other regions, and the usage their
    /// ledgers held unstored.
    pub fn restart(&mut self, handover: bool, now: Nanos) -> (Vec<Action>, ByKey) {
        let now = self.clock(now);
        let mut actions = Vec::new();
        let mut usage_held = ByKey::new();
        for partition in &mut self.partitions {
            let next = partition.next_owner(&self.decider, &self.policies, handover, now);
            actions.extend(next.actions);
            for (key, counts) in next.usage_held {
                add(&mut usage_held, &key, counts);
            }
        }
        self.health = LinkHealth::default();
        (actions, usage_held)
    }

    /// The alerts its owners fired since the last call, published: each
    /// stored in the stream at once (journal mode: after the records
    /// before it, which are stored as their turn ends).
    pub fn published(&mut self) -> Vec<FiredAlert> {
        let mut published = Vec::new();
        while let Ok(note) = self.alerts.try_recv() {
            note.stored();
            published.push(note.alert);
        }
        published
    }

    /// The alerts its owners fired and its publisher had not published
    /// are gone with the worker (killed): its next owners fire them again
    /// from what they restore.
    pub fn forget_alerts(&mut self) {
        while self.alerts.try_recv().is_ok() {}
    }

    /// The usage this region recorded, by key: stored, and what its
    /// ledgers hold (stored now).
    pub fn usage(&mut self) -> ByKey {
        let mut usage = ByKey::new();
        for partition in &mut self.partitions {
            for (key, counts) in partition.usage() {
                add(&mut usage, &key, counts);
            }
        }
        usage
    }

    /// A snapshot interval passed: each partition writes a snapshot if
    /// its owner says one is due. How many did.
    pub fn snapshot(&mut self, now: Nanos) -> usize {
        let now = self.clock(now);
        self.partitions
            .iter_mut()
            .filter_map(|p| p.tick(now).then_some(()))
            .count()
    }

    pub fn owned(&self, partition: u32) -> Owned<'_> {
        self.partitions[partition as usize].owner.owned()
    }

    pub fn counters(&self, partition: u32) -> &Counters {
        self.partitions[partition as usize].counters()
    }

    /// How many units an ask of `token` would find room for here now,
    /// under the limits its counter is kept under (a global bucket's: this
    /// region's part): what a lost count gives back.
    pub fn room(&self, token: &str, partitions: u32, now: Nanos) -> u64 {
        let now = self.clock(now);
        let partition = KeyToken::parse(token).expect("a key").partition(partitions);
        let base = self.policies.get("default").expect("the policy");
        let policy = self
            .policies
            .in_force(base, token)
            .counted_under(Some(&self.name));
        let fresh = || policy.limits()[0].reported();
        self.counters(partition)
            .state(&format!("default/{token}"))
            .map_or_else(fresh, |state| policy.inspect(&state, now)[0].remaining)
    }

    /// How many units the slices this region holds of `token` (granted by
    /// the home, a delegate's) have left now, lease ended or not: what a
    /// crash loses (docs/REGIONS-DESIGN.md, "Handovers and crashes").
    pub fn slices_held(&self, token: &str, partitions: u32, now: Nanos) -> u64 {
        let now = self.clock(now);
        let partition = KeyToken::parse(token).expect("a key").partition(partitions);
        let counter_key = format!("default/{token}");
        let mut global = self.counters(partition).global();
        let books = global.delegates().carried(now, true);
        books
            .iter()
            .filter(|b| b.key == counter_key)
            .flat_map(|b| b.slices())
            .map(|s| s.left())
            .sum()
    }

    /// How many units `token`'s fixed window holds counted here now (a
    /// hit counts whether or not it fits, past `max` too).
    pub fn used(&self, token: &str, partitions: u32, now: Nanos) -> u64 {
        let now = self.clock(now);
        let partition = KeyToken::parse(token).expect("a key").partition(partitions);
        let policy = self.policies.get("default").expect("the policy");
        self.counters(partition)
            .state(&format!("default/{token}"))
            .map_or(0, |state| policy.inspect(&state, now)[0].used)
    }

    /// Decides one message on `partition`'s subjects: the reply's body
    /// and decision, and the actions (those for once stored go once its
    /// records are, here at once).
    pub fn decide(
        &mut self,
        partition: u32,
        subject: &str,
        body: &[u8],
        wants_reply: bool,
        now: Nanos,
    ) -> (Outcome, Vec<Action>) {
        let message = Message {
            subject,
            body,
            wants_reply,
        };
        let (reply, actions, records) = self.turn(partition, message, now);
        self.partitions[partition as usize].store(records);
        let mut all = actions.now;
        all.extend(actions.stored);
        (reply, all)
    }

    /// Decides one ask on `partition`'s subjects, and the worker dies
    /// before the turn's records are stored (journal mode): nothing is
    /// answered (an answer waits for its records), nothing that leaves
    /// only once they are stored leaves; what leaves at once, as the
    /// turn ends, has left: those actions.
    pub fn crash_in_turn(&mut self, partition: u32, subject: &str, now: Nanos) -> Vec<Action> {
        let message = Message {
            subject,
            body: b"",
            wants_reply: true,
        };
        let (_, actions, _) = self.turn(partition, message, now);
        actions.now
    }

    /// One turn of the decision core on `message`: what to answer, the
    /// actions, and the records to store.
    fn turn(
        &mut self,
        partition: u32,
        message: Message<'_>,
        now: Nanos,
    ) -> (Outcome, Actions, Vec<Record>) {
        let now = self.clock(now);
        let owned = self.owned(partition);
        let mut log = self.decider.turn_log(owned);
        let answer = self
            .decider
            .message(&self.policies, message, owned, now, &mut log);
        let actions = log.take_actions();
        let records = log.finish(self.decider.stats(), owned.stats);
        let reply = match answer {
            None => Outcome::None,
            Some(Answer::Forward(forward)) => Outcome::Forward(forward),
            Some(answer) => {
                let answered = match &answer {
                    Answer::Decision { decision, .. } => Answered::Decided(*decision),
                    _ => Answered::Other,
                };
                Outcome::Reply(Reply::of(&answer, "sim").payload.to_vec(), answered)
            }
        };
        (reply, actions, records)
    }

    pub fn on_event(&self, partition: u32, event: Event) {
        self.counters(partition).global().on_event(event);
    }

    /// The link's health changed: every partition is told.
    pub fn tell_all(&self, event: Event) {
        for partition in &self.partitions {
            partition.counters().global().on_event(event.clone());
        }
    }
}
