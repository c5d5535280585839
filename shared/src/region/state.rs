//! What one partition's owner keeps of its global keys (SPEC §12), as one
//! state machine without I/O, in the manner of quinn-proto: the link's
//! outcomes come in as [`Event`]s with the time, decisions read and change
//! it on the partition's own task, and what must cross the link goes out
//! as [`Action`]s, each marked [`When`] it may leave. Nothing here sends,
//! locks or waits; the worker's link task is only its transport.
//!
//! It holds three things:
//!
//! - the **delegate** side: per key whose home is another region, its
//!   share spent, its slices and the request out ([`Delegates`]);
//! - the **home** side: per key whose home is here, this region's own
//!   demand in the window and when the delegates were last asked for
//!   their shares back ([`GlobalState::reclaim_due`]);
//! - the **reach** of each home: whether the link is cut off from it, as
//!   the transport found ([`Event::Reach`]; `on_cut = "open"` decides
//!   from it, [`GlobalState::is_cut`]), and when an ask was last forwarded
//!   to a home cut off, to probe it.
//!
//! What must outlive an owner for the limit to hold (the share a delegate
//! spent or gave back) is in the key's own counter, which snapshots, the
//! journal and handovers carry. The rest a snapshot carries as
//! [`CarriedGlobal`], read in the same copy as the counters: each key's
//! demand and the home's reclaims, so a new owner keeps and gives back
//! what the last one would have, and a delegate's slices when a handover
//! hands them on (after a crash a new owner starts without them: their
//! units stay counted at the home until their window ends). The reach of
//! the homes is the worker's, not the partition's: a new owner takes
//! every home as its worker's link finds it.

use crate::budget::{Grant, Refund};
use crate::limit::{Decision, Limit};
use crate::region::global::carry::CarriedBooks;
use crate::region::global::{home_keeps, Delegates, Demand, ASK_TIMEOUT};
use crate::region::tally::Reported;
use crate::region::RegionName;
use crate::time::Nanos;
use crate::wire::link::{Gift, Reclaim};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A partition's state of its global keys.
#[derive(Debug, Default)]
pub struct GlobalState {
    /// Keys whose home is another region.
    delegates: Delegates,
    /// Keys whose home is here.
    homed: HashMap<String, Homed>,
    /// Per home cut off: when an ask was last forwarded to it anyway
    /// (zero: not yet).
    cut: HashMap<RegionName, Nanos>,
}

/// A key whose home is here, in the window that began at `window_start`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Homed {
    #[serde(rename = "s")]
    window_start: Nanos,
    #[serde(rename = "e", default)]
    window_end: Nanos,
    #[serde(rename = "d")]
    demand: Demand,
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    reclaimed_at: Option<Nanos>,
}

/// What a snapshot carries of a partition's global state
/// ([`GlobalState::carried`]): each field left out while empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedGlobal {
    /// The delegate books of keys whose home is another region.
    #[serde(rename = "d", default, skip_serializing_if = "Vec::is_empty")]
    pub delegates: Vec<CarriedBooks>,
    /// Keys whose home is here, by counter key: their demand and reclaims
    /// in windows not over.
    #[serde(rename = "h", default, skip_serializing_if = "Vec::is_empty")]
    pub homed: Vec<(String, Homed)>,
}

/// The most keys whose home is here that a partition keeps state of; past
/// it, those of windows that are over go first, then any (a key forgotten
/// only keeps less for itself and may reclaim sooner).
const MOST_HOMED: usize = 65_536;

/// What the link did: the outcomes the transport reports back, applied
/// with [`GlobalState::on_event`].
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The home answered a request of this partition's for a slice of
    /// `counter_key` that left at `sent`, at `received`: `grant` (if any)
    /// with its `decision`. (A request that got no answer needs no event:
    /// the key asks again once [`ASK_TIMEOUT`] has passed since it left.)
    Granted {
        home: RegionName,
        counter_key: String,
        sent: Nanos,
        received: Nanos,
        grant: Option<Grant>,
        decision: Decision,
    },
    /// The link is now cut off from `home` (`cut`), or reaches it again,
    /// as every partition's requests to it found
    /// ([`crate::region::transport::LinkHealth`]); told to every partition
    /// of the worker, and to a new one when it starts.
    Reach { home: RegionName, cut: bool },
}

/// When an [`Action`] may leave the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// With the decisions that made it.
    Now,
    /// Once the records of the turn that made it are stored, and never if
    /// they could not be: units given away must not be spent again by the
    /// next owner after a `kill -9`.
    Stored,
}

/// What must cross the link: the transport's to carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// A delegate asks the home for a slice of up to `want` units of a
    /// key; the request leaves at `sent` ([`Delegates::asked`]); its
    /// outcome comes back as [`Event::Granted`] or [`Event::NotGranted`].
    Grant {
        home: RegionName,
        partition: u32,
        policy: String,
        token: String,
        want: u64,
        sent: Nanos,
    },
    /// A delegate gives units back to the home.
    Refund {
        home: RegionName,
        partition: u32,
        policy: String,
        token: String,
        refund: Refund,
    },
    /// A hit a delegate could not count from what it holds, counted at the
    /// home; sent again while the home cannot take it, until `until` (past
    /// it, it would count in a window it was not made in).
    Hit {
        home: RegionName,
        partition: u32,
        token: String,
        body: Vec<u8>,
        until: Nanos,
    },
    /// A gift: spare units of a global bucket's part given to the home
    /// (sent on the link's `give` subject).
    Gift {
        home: RegionName,
        partition: u32,
        gift: Gift,
    },
    /// The home asks `regions` for their shares of a window back.
    Reclaim {
        regions: Vec<RegionName>,
        partition: u32,
        reclaim: Reclaim,
    },
    /// A key's reset (`rl.reset`) of a global policy, for the other
    /// `regions` it holds across; `body` is the reset's (the policy).
    Reset {
        regions: Vec<RegionName>,
        partition: u32,
        token: String,
        body: Vec<u8>,
    },
    /// What this region (`from`) spent of a key whose home is `home`, as
    /// its tally stands: the transport keeps the latest per key and sends
    /// them together until the home takes them.
    Tally {
        home: RegionName,
        partition: u32,
        from: RegionName,
        report: Reported,
    },
    /// A home's new owner of `partition` asks `regions` to report their
    /// tallies again.
    Resend {
        regions: Vec<RegionName>,
        partition: u32,
        home: RegionName,
    },
}

/// Actions made by a turn of decisions, by when they may leave.
#[derive(Debug, Default)]
pub struct Actions {
    pub now: Vec<Action>,
    pub stored: Vec<Action>,
}

impl Actions {
    pub fn push(&mut self, when: When, action: Action) {
        match when {
            When::Now => self.now.push(action),
            When::Stored => self.stored.push(action),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.now.is_empty() && self.stored.is_empty()
    }

    /// Adds `other`'s actions after these.
    pub fn append(&mut self, other: &mut Actions) {
        self.now.append(&mut other.now);
        self.stored.append(&mut other.stored);
    }
}

impl GlobalState {
    /// Applies what the link did.
    pub fn on_event(&mut self, event: Event) {
        match event {
            Event::Granted {
                counter_key,
                sent,
                received,
                grant,
                decision,
                ..
            } => {
                self.delegates
                    .answered(&counter_key, sent, received, grant.as_ref(), &decision);
            }
            Event::Reach { home, cut: true } => {
                self.cut.entry(home).or_insert(Nanos::ZERO);
            }
            Event::Reach { home, cut: false } => {
                self.cut.remove(&home);
            }
        }
    }

    /// Whether the link is cut off from `home`, as the latest
    /// [`Event::Reach`] said. Before any, a home is taken as reachable.
    pub fn is_cut(&self, home: &RegionName) -> bool {
        self.cut.contains_key(home)
    }

    /// Whether to forward an ask to `home` at `now`: while it is not cut
    /// off, always; while it is, one every [`ASK_TIMEOUT`], which tells
    /// when the link is back.
    pub fn may_forward(&mut self, home: &RegionName, now: Nanos) -> bool {
        let Some(probed) = self.cut.get_mut(home) else {
            return true;
        };
        if *probed != Nanos::ZERO && now < probed.saturating_add(ASK_TIMEOUT) {
            return false;
        }
        *probed = now;
        true
    }

    /// Whether a delegate holds slices with units left (what only a
    /// handover carries).
    pub fn holds_slices(&self) -> bool {
        self.delegates.holds_slices()
    }

    /// The keys whose home is another region.
    pub fn delegates(&mut self) -> &mut Delegates {
        &mut self.delegates
    }

    /// What a snapshot copied at `now` carries; the slices only when
    /// `handover` (a handover's final copy, after which its owner spends
    /// nothing: [`CarriedBooks`]).
    pub fn carried(&self, now: Nanos, handover: bool) -> CarriedGlobal {
        let mut homed: Vec<(String, Homed)> = self
            .homed
            .iter()
            .filter(|(_, h)| now < h.window_end)
            .map(|(key, h)| (key.clone(), h.clone()))
            .collect();
        homed.sort_by(|a, b| a.0.cmp(&b.0));
        CarriedGlobal {
            delegates: self.delegates.carried(now, handover),
            homed,
        }
    }

    /// A new owner takes over what a snapshot carried, once its counters
    /// are restored; the slices only `with_slices` (the first owner after
    /// the handover that carried them: [`CarriedBooks`]).
    pub fn take_over(&mut self, carried: &CarriedGlobal, with_slices: bool) {
        self.delegates.take_over(&carried.delegates, with_slices);
        for (key, homed) in &carried.homed {
            if self.homed.len() >= MOST_HOMED {
                break;
            }
            self.homed
                .entry(key.clone())
                .or_insert_with(|| homed.clone());
        }
    }

    fn homed(&mut self, key: &str, limit: &Limit, now: Nanos) -> &mut Homed {
        let window_start = limit.window_start(now);
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
                window_end: limit.window_end(window_start),
                ..Homed::default()
            };
        }
        homed
    }

    /// This region, the home, took `cost` of `key` at `now`.
    pub fn home_took(&mut self, key: &str, limit: &Limit, now: Nanos, cost: u64) {
        self.homed(key, limit, now).demand.took(now, cost);
    }

    /// What the home keeps of `key` for itself out of a grant to another
    /// region ([`home_keeps`]).
    pub fn home_keeps(&mut self, key: &str, home_share: u64, limit: &Limit, now: Nanos) -> u64 {
        let demand = self.homed(key, limit, now).demand;
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
        let homed = self.homed(key, limit, now);
        if homed
            .reclaimed_at
            .is_some_and(|at| now.saturating_sub(at).0 < every)
        {
            return false;
        }
        homed.reclaimed_at = Some(now);
        true
    }

    /// Forgets `key` (`rl.reset`): its share, slices and demand start
    /// again, as its counter does.
    pub fn forget(&mut self, key: &str) {
        self.delegates.forget(key);
        self.homed.remove(key);
    }

    /// The refunds of slices whose lease ended, per counter key.
    pub fn sweep(&mut self, now: Nanos) -> Vec<(String, Refund)> {
        self.delegates.sweep(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str) -> RegionName {
        RegionName::new(name).unwrap()
    }

    /// While a home is cut off, one ask a second goes to it; while it is
    /// reachable, every one.
    #[test]
    fn a_cut_off_home_is_probed_once_a_second() {
        let mut state = GlobalState::default();
        let east = region("east");
        assert!(state.may_forward(&east, Nanos(5)));
        assert!(state.may_forward(&east, Nanos(6)));
        state.on_event(Event::Reach {
            home: east.clone(),
            cut: true,
        });
        let second = ASK_TIMEOUT.0;
        assert!(state.may_forward(&east, Nanos(100)), "the first probe");
        assert!(!state.may_forward(&east, Nanos(100 + second - 1)));
        assert!(state.may_forward(&east, Nanos(100 + second)));
        state.on_event(Event::Reach {
            home: east.clone(),
            cut: false,
        });
        assert!(state.may_forward(&east, Nanos(100 + second + 1)));
    }
}
