//! Global limits across regions (SPEC §12) on a worker: the books a
//! partition's owner keeps of them, and the one task that carries their
//! messages over the link. The rules are `sluice_core::region::global`'s;
//! this is where they meet NATS.
//!
//! Decisions never wait on the link: the decision core
//! ([`crate::decide`]) decides from the books, synchronously, and hands
//! what must cross the link to this task as a [`Need`]:
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
//! The task itself is [`crate::global_link`]. Requests go out on the link
//! connection (its inbox is a link inbox, the
//! only replies the link carries). A request that gets no answer within
//! [`ASK_TIMEOUT`] is taken as lost: the books then let the key ask again,
//! and what the home may have granted stays counted there (under-admission,
//! never more than the limit).

use serde::{Deserialize, Serialize};
use sluice_core::budget::Refund;
use sluice_core::limit::Limit;
use sluice_core::region::global::{home_keeps, Delegates, Demand, ASK_TIMEOUT};
use sluice_core::region::RegionName;
use sluice_core::time::Nanos;
use sluice_core::wire;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// A partition's books of its global keys, kept with its counters.
#[derive(Debug, Default)]
pub struct Books {
    /// Keys whose home is another region.
    delegates: Option<Delegates>,
    /// Keys whose home is here: this region's own demand in the current
    /// window, and when the delegates were last asked for their shares.
    homed: HashMap<String, Homed>,
}

/// A key whose home is here, in the window that began at `window_start`.
#[derive(Debug, Default)]
struct Homed {
    window_start: Nanos,
    demand: Demand,
    reclaimed_at: Option<Nanos>,
}

/// The most keys whose home is here that a partition keeps books of; past
/// it, those of windows that are over go first, then any (a key forgotten
/// only keeps less for itself and may reclaim sooner).
const MOST_HOMED: usize = 65_536;

impl Books {
    pub fn delegates(&mut self) -> &mut Delegates {
        self.delegates.get_or_insert_with(Delegates::default)
    }

    fn homed(&mut self, key: &str, window_start: Nanos) -> &mut Homed {
        if self.homed.len() >= MOST_HOMED && !self.homed.contains_key(key) {
            self.homed.retain(|_, h| h.window_start >= window_start);
            if self.homed.len() >= MOST_HOMED {
                self.homed.clear();
            }
        }
        let homed = self.homed.entry(key.to_string()).or_default();
        if homed.window_start != window_start {
            *homed = Homed {
                window_start,
                ..Homed::default()
            };
        }
        homed
    }

    /// This region, the home, took `cost` of `key` at `now`.
    pub fn home_took(&mut self, key: &str, limit: &Limit, now: Nanos, cost: u64) {
        self.homed(key, limit.window_start(now))
            .demand
            .took(now, cost);
    }

    /// What the home keeps of `key` for itself out of a grant to another
    /// region ([`home_keeps`]).
    pub fn home_keeps(&mut self, key: &str, home_share: u64, limit: &Limit, now: Nanos) -> u64 {
        let demand = self.homed(key, limit.window_start(now)).demand;
        home_keeps(&demand, home_share, limit, now)
    }

    /// Whether to ask the delegates for `key`'s shares back now: at most
    /// every eighth of a window.
    pub fn reclaim_due(&mut self, key: &str, limit: &Limit, now: Nanos) -> bool {
        let window_start = limit.window_start(now);
        let every = limit
            .window_end(window_start)
            .saturating_sub(window_start)
            .0
            / 8;
        let homed = self.homed(key, window_start);
        if homed
            .reclaimed_at
            .is_some_and(|at| now.saturating_sub(at).0 < every)
        {
            return false;
        }
        homed.reclaimed_at = Some(now);
        true
    }

    /// Forgets `key`'s books (`rl.reset`): its share, slices and demand
    /// start again, as its counter does.
    pub fn forget(&mut self, key: &str) {
        if let Some(delegates) = self.delegates.as_mut() {
            delegates.forget(key);
        }
        self.homed.remove(key);
    }

    /// The refunds of slices whose lease ended, per counter key.
    pub fn sweep(&mut self, now: Nanos) -> Vec<(String, Refund)> {
        self.delegates
            .as_mut()
            .map(|d| d.sweep(now))
            .unwrap_or_default()
    }
}

/// A reclaim's body (MessagePack): the policy, the key token and the
/// window whose share the home asks back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reclaim {
    pub policy: String,
    pub key: String,
    pub window_start: u64,
}

/// A gift's body (MessagePack): units another region took out of its part
/// of a global bucket at `taken_at` (its clock) for the home's part
/// (`sluice_core::region::parts`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gift {
    pub policy: String,
    pub key: String,
    pub units: u64,
    pub taken_at: u64,
}

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
    pub encoding: wire::Encoding,
    pub partition: u32,
    pub policies: Vec<GatherPolicy>,
}

/// One global policy of a [`Gather`].
#[derive(Clone, Debug, PartialEq)]
pub struct GatherPolicy {
    pub policy: String,
    pub kept: sluice_core::region::report::Kept,
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

/// What the home answered to a forwarded ask, as the link task tells the
/// asking region's owner (`sluice-link.<region>.p.<n>.answered`,
/// MessagePack), so that it records the ask's usage where it was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    pub policy: String,
    pub key: String,
    pub cost: u64,
    pub allowed: bool,
}

/// What a region reports of its tallies to a home's owner
/// (`sluice-link.<home>.p.<n>.tally`, MessagePack): who it is and what it
/// spent of each key so far (`sluice_core::region::tally`). Answered with
/// an empty batch of results once taken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TallyBatch {
    pub from: String,
    pub reports: Vec<sluice_core::region::tally::Reported>,
}

/// A home's new owner asks for the tallies again
/// (`sluice-link.<region>.p.<n>.resend`, MessagePack).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resend {
    pub home: String,
}

/// What must cross the link, from a decision or a sweep.
pub enum Need {
    /// A delegate asks the home for a slice of up to `want` units; the
    /// request left at `sent` ([`Delegates::asked`]).
    Grant {
        home: RegionName,
        partition: u32,
        policy: String,
        token: String,
        want: u64,
        sent: Nanos,
        /// The partition's books, for the answer.
        books: Arc<Mutex<Books>>,
    },
    /// A key's reset (`rl.reset`) of a global policy, for the other
    /// `regions` it holds across.
    Reset {
        regions: Vec<RegionName>,
        partition: u32,
        token: String,
        /// The reset's body: the policy.
        body: Vec<u8>,
    },
    /// A delegate gives units back to the home.
    Refund {
        home: RegionName,
        partition: u32,
        policy: String,
        token: String,
        refund: Refund,
    },
    /// A hit a delegate could not count from its budget, counted at the
    /// home: sent again while the home cannot take it, until `until` (the
    /// end of the window it was made in; past it, it would count in a
    /// window it was not made in).
    Hit {
        home: RegionName,
        partition: u32,
        token: String,
        body: Vec<u8>,
        until: Nanos,
    },
    /// Units of a global bucket's part given to the home.
    Give {
        home: RegionName,
        partition: u32,
        gift: Gift,
    },
    /// An inspect to complete with the other regions' state; the answer
    /// goes to `reply`.
    Gather { gather: Gather, reply: String },
    /// An ask forwarded to the home; its answer goes to `reply`.
    Forward {
        forward: Forward,
        /// The asker's inbox.
        reply: String,
    },
    /// The home asks `regions` for their shares of a window back.
    Reclaim {
        regions: Vec<RegionName>,
        partition: u32,
        reclaim: Reclaim,
    },
    /// What this region (`from`) spent of a key whose home is `home`, as
    /// its tally stands: the link task keeps the latest per key and sends
    /// them together until the home takes them.
    Tally {
        home: RegionName,
        partition: u32,
        from: RegionName,
        report: sluice_core::region::tally::Reported,
    },
    /// A home's new owner of `partition` asks `regions` to report their
    /// tallies again.
    Resend {
        regions: Vec<RegionName>,
        partition: u32,
        home: RegionName,
    },
}

/// Where decisions send their [`Need`]s: this worker's region and the
/// link task, and what the link task found of each home.
#[derive(Clone, Debug)]
pub struct Link {
    pub region: RegionName,
    needs: mpsc::UnboundedSender<Need>,
    homes: Arc<Homes>,
}

/// Whether each home region answers this worker's requests for slices:
/// a home is cut off (the link down, or no owner answering there) when the
/// latest request that got an outcome, by when it was sent, got no answer
/// or a refusal; reachable when that one was answered. By send time, so
/// that a request sent before the link came back, which times out after
/// a later one was answered, does not mark it cut again. Before any
/// request, a home is taken as reachable. `on_cut = "open"` decides from
/// it (SPEC §12).
#[derive(Debug, Default)]
pub struct Homes {
    /// Per home: when the latest answered and the latest unanswered
    /// requests were sent.
    sent: Mutex<HashMap<RegionName, (Nanos, Nanos)>>,
    /// Per home cut off: when an ask was last forwarded to it anyway.
    probed: Mutex<HashMap<RegionName, Nanos>>,
}

impl Homes {
    /// A request to `home` sent at `sent` was answered (`true`) or not.
    pub fn answered(&self, home: &RegionName, sent: Nanos, answered: bool) {
        let mut homes = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let (ok, failed) = homes.entry(home.clone()).or_default();
        let latest = if answered { ok } else { failed };
        *latest = (*latest).max(sent);
    }

    /// Whether `home` is cut off from this worker, as its latest request
    /// found.
    pub fn is_cut(&self, home: &RegionName) -> bool {
        let homes = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        homes.get(home).is_some_and(|(ok, failed)| failed > ok)
    }

    /// Whether to forward an ask to `home` at `now`: while it is not cut
    /// off, always; while it is, one a second ([`ASK_TIMEOUT`]), which
    /// tells when the link is back.
    pub fn may_forward(&self, home: &RegionName, now: Nanos) -> bool {
        if !self.is_cut(home) {
            return true;
        }
        let mut probed = self.probed.lock().unwrap_or_else(|e| e.into_inner());
        let last = probed.entry(home.clone()).or_default();
        if now < last.saturating_add(ASK_TIMEOUT) {
            return false;
        }
        *last = now;
        true
    }
}

impl Link {
    /// A link of `region` whose needs go to `needs` ([`crate::global_link`]),
    /// which tells `homes` how its requests went.
    pub fn new(region: RegionName, needs: mpsc::UnboundedSender<Need>, homes: Arc<Homes>) -> Link {
        Link {
            region,
            needs,
            homes,
        }
    }

    /// Whether `home` is cut off from this worker ([`Homes`]).
    pub fn is_cut(&self, home: &RegionName) -> bool {
        self.homes.is_cut(home)
    }

    /// Whether to forward an ask to `home` now ([`Homes::may_forward`]).
    pub fn may_forward(&self, home: &RegionName, now: Nanos) -> bool {
        self.homes.may_forward(home, now)
    }

    pub fn send(&self, need: Need) {
        // The task ends only with the worker; a need sent then is moot.
        let _ = self.needs.send(need);
    }
}

/// Decodes a reclaim's body; the error says what is wrong.
pub fn decode_reclaim(body: &[u8]) -> Result<Reclaim, wire::ErrorReply> {
    rmp_serde::from_slice(body).map_err(|e| {
        wire::ErrorReply::bad_request(format!(
            "a reclaim is a MessagePack map of policy, key and window_start: {e}"
        ))
    })
}

/// Decodes a forwarded ask's answer note; the error says what is wrong.
pub fn decode_answered(body: &[u8]) -> Result<Answered, wire::ErrorReply> {
    rmp_serde::from_slice(body).map_err(|e| {
        wire::ErrorReply::bad_request(format!(
            "an answered note is a MessagePack map of policy, key, cost and allowed: {e}"
        ))
    })
}

/// Decodes a tally report's body; the error says what is wrong.
pub fn decode_tally(body: &[u8]) -> Result<TallyBatch, wire::ErrorReply> {
    rmp_serde::from_slice(body).map_err(|e| {
        wire::ErrorReply::bad_request(format!(
            "a tally report is a MessagePack map of from and reports: {e}"
        ))
    })
}

/// Decodes a resend request's body; the error says what is wrong.
pub fn decode_resend(body: &[u8]) -> Result<Resend, wire::ErrorReply> {
    rmp_serde::from_slice(body).map_err(|e| {
        wire::ErrorReply::bad_request(format!(
            "a resend request is a MessagePack map of home: {e}"
        ))
    })
}

/// Decodes a gift's body; the error says what is wrong.
pub fn decode_gift(body: &[u8]) -> Result<Gift, wire::ErrorReply> {
    rmp_serde::from_slice(body).map_err(|e| {
        wire::ErrorReply::bad_request(format!(
            "a gift is a MessagePack map of policy, key, units and taken_at: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A home is reachable until a request to it goes unanswered, cut off
    /// from then until one is answered again; each home on its own.
    #[test]
    fn a_home_is_cut_off_from_an_unanswered_request_to_a_later_answered_one() {
        let homes = Homes::default();
        let (east, south) = (
            RegionName::new("east").unwrap(),
            RegionName::new("south").unwrap(),
        );
        assert!(!homes.is_cut(&east), "before any request");
        homes.answered(&east, Nanos(10), false);
        assert!(homes.is_cut(&east));
        assert!(!homes.is_cut(&south));
        homes.answered(&east, Nanos(20), false);
        assert!(homes.is_cut(&east));
        homes.answered(&east, Nanos(30), true);
        assert!(!homes.is_cut(&east));
        // A request sent before the link came back times out after.
        homes.answered(&east, Nanos(25), false);
        assert!(!homes.is_cut(&east), "a late timeout of an earlier request");
        homes.answered(&east, Nanos(40), false);
        assert!(homes.is_cut(&east));
    }
}
