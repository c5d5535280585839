//! Threshold alerts (SPEC §14): which thresholds a decision made a
//! key's counts reach, the message that says so, and the table an owner
//! keeps of the alerts it fired, so that each goes out once.
//!
//! Why here: deciding which thresholds an ask crossed is part of deciding
//! the ask, and "exactly one message per key, policy, limit, threshold and
//! window" is a rule about counts and windows, not about NATS. The worker
//! runs [`watch`] around every update of a policy with alerts, keeps what
//! fired in a [`Fired`] table that travels with its counters (snapshots,
//! handovers), and publishes each [`Alert`] with its [`Alert::msg_id`] as
//! `Nats-Msg-Id`, so that a retry or a new owner publishing it again is
//! dropped by the stream (docs/USAGE.md, "Alerts").
//!
//! A policy's thresholds are turned into units of each of its limits when
//! it is built ([`ThresholdUnits`]), so that the decisions that reach none
//! (all but a few per key and window) pay one comparison per limit.
//!
//! Only fixed windows take alerts ([`crate::policy::Policy::with_alerts`]):
//! a threshold is a share of a window's `max`, reached once per window.
//! Token buckets and GCRA refill continuously and sliding windows slide,
//! so neither has a window whose count fills up and then starts over.

use crate::algorithm::fixed_window;
pub use crate::limit::{units, ThresholdUnits, Thresholds, THRESHOLD_RANGE};
use crate::policy::{KeyState, Limit, Policy};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One threshold one decision made a key's count reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crossing {
    /// The limit's position in its policy.
    pub limit: u32,
    pub threshold_pct: u16,
    /// The count in the window after the decision.
    pub used: u64,
    pub window_start: Nanos,
    pub window_end: Nanos,
}

/// Limits whose counts [`watch`] keeps on the stack (more spill to the heap).
const INLINE_LIMITS: usize = 4;

/// Runs `f` (one decision of `policy`) on a key's `state` and returns what
/// it returned with the thresholds it made the key's counts reach.
///
/// A policy without alerts costs one test. One with alerts costs a copy of
/// each limit's window start and count before `f`, and after it one
/// comparison per limit with the units of its lowest threshold, computed
/// when the policy was built ([`ThresholdUnits`]): that is all for every
/// decision but the few per key and window that reach a threshold, which
/// alone look at each threshold and allocate. Inlined, so that neither
/// pays a call of its own.
#[inline]
pub fn watch<R>(
    policy: &Policy,
    state: &mut KeyState,
    f: impl FnOnce(&mut KeyState) -> R,
) -> (R, Vec<Crossing>) {
    let n = policy.threshold_units().floors().len();
    if n == 0 {
        (f(state), Vec::new())
    } else if n <= INLINE_LIMITS {
        let mut before = [(0u64, 0u64); INLINE_LIMITS];
        watch_with(policy, state, f, &mut before[..n])
    } else {
        watch_with(policy, state, f, &mut vec![(0, 0); n])
    }
}

/// [`watch`] of a policy with alerts, the counts before `f` kept in
/// `before` (one pair per limit).
#[inline]
fn watch_with<R>(
    policy: &Policy,
    state: &mut KeyState,
    f: impl FnOnce(&mut KeyState) -> R,
    before: &mut [(u64, u64)],
) -> (R, Vec<Crossing>) {
    // A state of another algorithm (restored from an earlier config)
    // starts fresh in the run: a count of 0 before. A blocked key's
    // counters are inside its block (SPEC §18), and counted on after it.
    if let KeyState::FixedWindow(windows) = state.counters() {
        for (b, w) in before.iter_mut().zip(windows) {
            *b = (w.start, w.count);
        }
    }
    let out = f(state);
    let KeyState::FixedWindow(windows) = state.counters() else {
        return (out, Vec::new());
    };
    // Below each limit's lowest threshold (most decisions): nothing reached.
    let floors = policy.threshold_units().floors();
    if windows
        .iter()
        .zip(floors)
        .all(|(w, &floor)| w.count < floor)
    {
        return (out, Vec::new());
    }
    (out, crossings(policy, windows, before))
}

/// The thresholds reached by counts that went from `before` to `windows`
/// ([`watch`], once a count is at a lowest threshold).
#[cold]
#[inline(never)]
fn crossings(
    policy: &Policy,
    windows: &[fixed_window::State],
    before: &[(u64, u64)],
) -> Vec<Crossing> {
    let watched = policy.threshold_units();
    let mut crossings = Vec::new();
    for (i, ((limit, w), &(start, count))) in
        policy.limits().iter().zip(windows).zip(before).enumerate()
    {
        // A window that began in this decision started from nothing.
        let was = if start == w.start { count } else { 0 };
        for pct in watched.crossed(i, was, w.count) {
            crossings.push(Crossing {
                limit: i as u32,
                threshold_pct: pct,
                used: w.count,
                window_start: Nanos(w.start),
                window_end: limit.window_end(Nanos(w.start)),
            });
        }
    }
    crossings
}

/// The message of one alert, published on `rl.alert.<policy>.<key>` and
/// kept in the stream `SLUICE_ALERTS` (SPEC §14).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// The key token (SPEC §1), as `rl.inspect` shows it.
    pub key: String,
    pub policy: String,
    pub threshold_pct: u16,
    /// The limit's `max` and `per` (as the config writes it: `"1m"`, `"month"`).
    pub max: u64,
    pub per: String,
    /// The key's count in the window when the threshold was reached.
    pub used: u64,
    pub window_start_ms: u64,
    pub window_end_ms: u64,
    /// When the ask that reached it was decided.
    pub at_ms: u64,
}

impl Alert {
    /// The alert of `crossing`, reached by the key `token` of `policy` at `now`.
    pub fn of(crossing: &Crossing, policy: &Policy, token: &str, now: Nanos) -> Alert {
        let limit: Option<&Limit> = policy.limits().get(crossing.limit as usize);
        Alert {
            key: token.to_string(),
            policy: policy.name().to_string(),
            threshold_pct: crossing.threshold_pct,
            max: limit.map_or(0, Limit::max),
            per: limit.map(Limit::per_text).unwrap_or_default(),
            used: crossing.used,
            window_start_ms: crossing.window_start.as_u64() / 1_000_000,
            window_end_ms: crossing.window_end.as_u64() / 1_000_000,
            at_ms: now.as_u64() / 1_000_000,
        }
    }

    /// The message body (JSON).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an alert is plain JSON")
    }

    /// A message body read back; the reason when it is no alert.
    pub fn from_json(body: &[u8]) -> Result<Alert, String> {
        serde_json::from_slice(body).map_err(|e| format!("not an alert: {e}"))
    }

    /// What makes it one: the key, policy, limit, threshold and window. The
    /// same text whoever publishes it, so the stream keeps it once.
    pub fn msg_id(&self, limit: u32) -> String {
        format!(
            "{}|{}|{limit}|{}|{}",
            self.policy, self.key, self.threshold_pct, self.window_start_ms
        )
    }
}

/// An alert an owner fired, as a snapshot's manifest carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FiredAlert {
    #[serde(rename = "a")]
    pub alert: Alert,
    /// The limit's position in its policy (part of [`Alert::msg_id`]).
    #[serde(rename = "l")]
    pub limit: u32,
    /// The stream acknowledged it.
    #[serde(rename = "s", default)]
    pub stored: bool,
}

impl FiredAlert {
    pub fn msg_id(&self) -> String {
        self.alert.msg_id(self.limit)
    }
}

/// The alerts a partition's owner fired in windows not over yet: a
/// threshold reached again in the same window (after a refund or a settle
/// gave units back, or a replay counted it again) fires nothing, and what
/// the stream has not acknowledged is published again by whoever owns the
/// partition next.
#[derive(Debug, Default)]
pub struct Fired {
    by_id: HashMap<String, FiredAlert>,
}

impl Fired {
    /// Keeps `alert` unless it already fired: whether it is new (and must
    /// be published).
    pub fn fire(&mut self, alert: FiredAlert) -> bool {
        match self.by_id.entry(alert.msg_id()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(alert);
                true
            }
        }
    }

    /// The stream acknowledged the alert of `msg_id`.
    pub fn stored(&mut self, msg_id: &str) {
        if let Some(a) = self.by_id.get_mut(msg_id) {
            a.stored = true;
        }
    }

    /// Forgets the alerts whose windows ended by `now` (no decision can
    /// reach their thresholds again); those not stored yet stay until
    /// they are.
    pub fn prune(&mut self, now: Nanos) {
        let now_ms = now.as_u64() / 1_000_000;
        self.by_id
            .retain(|_, a| !a.stored || a.alert.window_end_ms > now_ms);
    }

    /// Every alert kept, for a snapshot, in a stable order.
    pub fn carried(&self) -> Vec<FiredAlert> {
        let mut all: Vec<FiredAlert> = self.by_id.values().cloned().collect();
        all.sort_by(|a, b| {
            (a.alert.at_ms, a.msg_id().as_str()).cmp(&(b.alert.at_ms, b.msg_id().as_str()))
        });
        all
    }

    /// At takeover: keeps what the last owner fired and returns those the
    /// stream may not hold yet, to be published again.
    pub fn take_over(&mut self, carried: &[FiredAlert]) -> Vec<FiredAlert> {
        let mut again = Vec::new();
        for a in carried {
            if self.fire(a.clone()) && !a.stored {
                again.push(a.clone());
            }
        }
        again
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests;
