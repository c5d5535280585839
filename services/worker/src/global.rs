//! Global limits across regions (SPEC §12) on a worker: the transport
//! between a partition's global state and the link. The rules and the
//! state are `sluice_core::region::state`'s and
//! `sluice_core::region::global`'s; this is where they meet NATS.
//!
//! Decisions never wait on the link: the decision core ([`crate::decide`])
//! decides from the partition's [`GlobalState`], synchronously, and
//! returns what must cross the link as [`Action`]s with its answers; the
//! shard hands them to the link task (those marked `Stored` through the
//! outbox, once the turn's records are stored). The link task
//! ([`crate::global_link`]) only carries them:
//!
//! - a delegate (the key's owner in a region that is not the home) asks the
//!   home's owner for a slice (`sluice-link.<home>.p.<n>.batch`, an item
//!   with `slice`, answered like a client's local budget) and gives back
//!   the slices whose lease ended with units left (an item with `refund`);
//! - a hit that found no budget at a delegate goes to the home as a hit
//!   (`sluice-link.<home>.p.<n>.hit.<key>`), so it is counted once, there;
//! - the home, when its own room runs short, asks the delegates for their
//!   shares back (`sluice-link.<region>.p.<n>.reclaim`); the delegate's
//!   owner gives back what it will not need as a refund item.
//!
//! What came of a request (a slice granted, a request lost, a forwarded
//! ask answered or not) goes back to the shard of the partition that made
//! it as an [`Event`], through its mailbox ([`Link::register`]), and the
//! shard applies it to its state on its own task. Requests go out on the
//! link connection (its inbox is a link inbox, the only replies the link
//! carries). A request that gets no answer within
//! [`sluice_core::region::global::ASK_TIMEOUT`] is taken as lost: the key
//! may then ask again, and what the home may have granted stays counted
//! there (under-admission, never more than the limit).
//!
//! [`GlobalState`]: sluice_core::region::state::GlobalState

use sluice_core::region::state::{Action, Event};
use sluice_core::region::transport::LinkHealth;
use sluice_core::region::RegionName;
use sluice_core::time::Nanos;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// An ask of a policy decided at the home (a global sliding log or
/// window, SPEC §12) that this region's part could not pay: sent to
/// the home's owner as it came, its answer relayed to the asker
/// ([`crate::global_link`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Forward {
    /// This region, whose owner records the ask's usage.
    pub here: RegionName,
    pub home: RegionName,
    pub partition: u32,
    /// The policy as asked (its base name) and the key token.
    pub policy: String,
    pub token: String,
    pub cost: u64,
    /// The ask's body, as the asker sent it.
    pub body: Vec<u8>,
    /// The answer when the home does not answer in time (denied).
    pub unanswered: sluice_core::policy::Decision,
    /// The policy the unanswered denial names.
    pub decided_by: String,
}

/// An inspect of a key with global policies (SPEC §12): this region's
/// reply, to complete with what the other regions have of the key
/// (`sluice_core::region::report`) before it goes to the asker.
#[derive(Clone, Debug, PartialEq)]
pub struct Gather {
    pub reply: sluice_core::wire::inspect::InspectReply,
    pub encoding: sluice_core::wire::Encoding,
    pub partition: u32,
    pub policies: Vec<GatherPolicy>,
}

/// One global policy of a [`Gather`].
#[derive(Clone, Debug, PartialEq)]
pub struct GatherPolicy {
    pub policy: String,
    pub count: sluice_core::region::report::GlobalCount,
    pub home: RegionName,
    /// The whole limits' `max` and `per` (used and remaining unset).
    pub whole: Vec<sluice_core::wire::inspect::LimitReport>,
    /// Every region in the policy's order: this one with its own limits,
    /// the others with what a region with no state of the key has (its
    /// part fresh, or nothing), to ask them for theirs.
    pub regions: Vec<(
        RegionName,
        bool,
        Vec<sluice_core::wire::inspect::LimitReport>,
    )>,
}

/// What the link task carries: an action of a partition's global state,
/// or an answer that waits on the other regions.
pub enum Need {
    /// An action of a partition's [`sluice_core::region::state`].
    Act(Action),
    /// An inspect to complete with the other regions' state; the answer
    /// goes to `reply`.
    Gather { gather: Gather, reply: String },
    /// An ask forwarded to the home; its answer goes to `reply`.
    Forward {
        forward: Forward,
        /// The asker's inbox.
        reply: String,
    },
}

/// The transport of this worker's global limits: where the shards hand
/// what must cross the link ([`crate::global_link`]), and where the link
/// task hands the outcomes back, to the shard of the partition that made
/// the request, which applies them on its own task.
#[derive(Clone, Debug)]
pub struct Link {
    needs: mpsc::UnboundedSender<Need>,
    mailboxes: Arc<Mailboxes>,
}

/// Each answering shard's inbox of link outcomes, by partition, and the
/// link's health they are told of.
#[derive(Debug, Default)]
pub struct Mailboxes(Mutex<Boxes>);

#[derive(Debug, Default)]
struct Boxes {
    inboxes: HashMap<u32, mpsc::UnboundedSender<Event>>,
    health: LinkHealth,
}

impl Mailboxes {
    fn boxes(&self) -> std::sync::MutexGuard<'_, Boxes> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `event` to the shard of `partition`; dropped when none
    /// answers for it here any more (its requests' outcomes are moot).
    pub fn deliver(&self, partition: u32, event: Event) {
        if let Some(inbox) = self.boxes().inboxes.get(&partition) {
            let _ = inbox.send(event);
        }
    }

    /// A request to `home` sent at `sent` was answered, or not: when that
    /// changes whether the home is cut off, every shard is told.
    pub fn reached(&self, home: &RegionName, sent: Nanos, answered: bool) {
        let mut boxes = self.boxes();
        if let Some(event) = boxes.health.outcome(home, sent, answered) {
            for inbox in boxes.inboxes.values() {
                let _ = inbox.send(event.clone());
            }
        }
    }
}

impl Link {
    /// A link whose needs go to `needs` ([`crate::global_link`]), which
    /// hands outcomes to `mailboxes`.
    pub fn new(needs: mpsc::UnboundedSender<Need>, mailboxes: Arc<Mailboxes>) -> Link {
        Link { needs, mailboxes }
    }

    /// The inbox of `partition`'s new shard: the homes cut off now, then
    /// the outcomes of its requests and the link's changes (in place of
    /// an earlier shard's of the partition).
    pub fn register(&self, partition: u32) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut boxes = self.mailboxes.boxes();
        for event in boxes.health.now() {
            let _ = tx.send(event);
        }
        boxes.inboxes.insert(partition, tx);
        rx
    }

    fn send(&self, need: Need) {
        // The task ends only with the worker; a need sent then is moot.
        let _ = self.needs.send(need);
    }

    /// Carries out `actions`.
    pub fn perform(&self, actions: Vec<Action>) {
        for action in actions {
            self.send(Need::Act(action));
        }
    }

    /// Sends `gather` to the other regions; the link task answers `reply`.
    pub fn gather(&self, gather: Gather, reply: String) {
        self.send(Need::Gather { gather, reply });
    }

    /// Sends `forward` to its home; the link task relays the answer to
    /// `reply`.
    pub fn forward(&self, forward: Forward, reply: String) {
        self.send(Need::Forward { forward, reply });
    }
}

/// Actions that wait for their turn's records to be stored
/// ([`sluice_core::region::state::When::Stored`]): the outbox carries
/// them out once they are, and drops them if they could not be.
pub struct Deferred {
    pub link: Link,
    pub actions: Vec<Action>,
}

impl Deferred {
    pub fn perform(self) {
        self.link.perform(self.actions);
    }
}
