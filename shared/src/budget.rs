//! Local budgets for hot keys: a client decides most asks of a key it asks
//! often from a slice of the key's budget, without a round trip.
//!
//! Every decision costs a NATS round trip through the key's owner, and one
//! hot key is bounded by one owner. The classic answer (local vs
//! distributed throttling; Doorman and Google's quota servers lease
//! capacity to clients) is to hand a client a share of the budget that it
//! spends on its own. Here:
//!
//! 1. A client that sees a key asked often sends its next ask of that key
//!    with a request for a slice of up to `want` units.
//! 2. The owner decides the ask as always and, if it was allowed and the
//!    policy has `local_budget = true`, takes a slice from the key's state
//!    as if it were an ask of that size ([`crate::policy::Policy::grant`]):
//!    at most half of what is left, so the other askers keep some. The
//!    slice is counted as used, so the total of what is admitted, by the
//!    owner and by every slice, can never pass the limit.
//! 3. The client decides asks of that key from the slice ([`Slice::take`])
//!    until it is spent or its lease ([`Grant::lease`], at most [`LEASE`])
//!    ends, then gives back what it did not use ([`Slice::refund`]); the
//!    owner puts it back into the key's state
//!    ([`crate::policy::Policy::refund`]).
//!
//! ## Exactness
//!
//! - **Fixed window: exact in every window.** A slice's lease ends no
//!   later than the window it was taken in (the lease is counted on the
//!   client's clock from before the ask was sent, so it ends there before
//!   it ends at the owner), and a refund goes back only into that window.
//!   Every unit admitted in a window was counted in that window.
//! - **Token bucket and GCRA: exact in total, up to one lease late.**
//!   Every unit a client admits was taken from the bucket, which held it,
//!   when the slice was granted; a refund puts back exactly what was not
//!   used (the refill is linear up to the brim). What a slice changes is
//!   *when* a unit is admitted: up to one lease after it was taken. So the
//!   number admitted up to any instant never exceeds what the exact
//!   bucket admits, but within a span shorter than a lease, units taken
//!   just before it and spent in it come on top of what the refilled
//!   bucket gives meanwhile: at most `rate × lease` more (10 units for a
//!   limit of 100 per second and the 100 ms lease).
//! - **Sliding log and sliding window: refused** (a config error). A
//!   slice's units would be stamped with the grant's time but spent up to
//!   a lease later; a window that starts between the two no longer sees
//!   them and admits up to a slice more than its `max`.
//!
//! ## Under-admission
//!
//! A unit in a slice that nobody spends is lost to everyone until it comes
//! back (at the lease's end) or, if it never comes back, until the window
//! ends or the bucket refills. With `k` clients holding slices of at most
//! `s` units each, a window admits at least `min(demand, max) - k·s`
//! (checked by `shared/tests/budgets.rs` against the exact algorithm).
//! [`want`] keeps `s` at most 1/16 of the policy's capacity and about what
//! one lease of the key's asks needs.
//!
//! ## A client that dies holding a slice
//!
//! Its unspent units are not given back: they stay counted until the
//! window ends (fixed window) or the bucket has refilled them, at most one
//! lease's worth of that client's asks. Nothing is ever admitted twice.
//!
//! ## Refunds are checked
//!
//! An owner gives back at most what a refund's own slice held, once
//! ([`Outstanding`]); a refund no slice of its explains gives nothing back.
//! Clients are not trusted (docs/SECURITY.md): a refund taken at its word
//! would let any of them free a key's budget.

use crate::limit::{Algorithm, Decision, Limit};
use crate::time::Nanos;

/// The longest a slice lasts: short, so unspent units come back soon and
/// a token bucket's spending is late by at most this much.
pub const LEASE: Nanos = Nanos(100_000_000);

/// A slice is at most this share of a policy's capacity (1/16), so that
/// many clients can hold slices of one key at once.
pub const SHARE_OF_CAPACITY: u64 = 16;

/// Whether owners can grant slices of a key's budget under `algorithm`
/// exactly (see the module doc).
pub const fn supports(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::FixedWindow | Algorithm::TokenBucket | Algorithm::Gcra
    )
}

/// A slice granted by a key's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Units taken for the client (0: none were left to slice).
    pub units: u64,
    /// How long the client may spend them, counted from when it sent the
    /// ask that brought them.
    pub lease: Nanos,
    /// When the owner took them (its clock); sent back with the refund, so
    /// that a fixed window's units go back only into their own window.
    pub taken_at: Nanos,
}

/// The lease of a slice taken at `now`: [`LEASE`], cut at the end of the
/// earliest window of a fixed-window policy.
pub(crate) fn lease(limits: &[Limit], algorithm: Algorithm, now: Nanos) -> Nanos {
    let mut lease = LEASE;
    if algorithm == Algorithm::FixedWindow {
        for limit in limits {
            let end = limit.window_end(limit.window_start(now));
            lease = lease.min(end.saturating_sub(now));
        }
    }
    lease
}

/// How many units to ask for when a key is asked `asks_per_lease` times a
/// lease at `cost` each: what one lease needs, at least one ask's cost, at
/// most [`SHARE_OF_CAPACITY`] of the policy's `capacity` (and never less
/// than the ask's cost: a slice that cannot pay for one ask is useless).
pub fn want(asks_per_lease: u64, cost: u64, capacity: u64) -> u64 {
    let cap = (capacity / SHARE_OF_CAPACITY).max(cost);
    asks_per_lease.saturating_mul(cost).clamp(cost, cap)
}

/// A slice as a client holds it. Times are the client's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    left: u64,
    spent: u64,
    ends: Nanos,
    taken_at: Nanos,
    /// The deciding limit's numbers as the grant's reply had them.
    limit: u64,
    remaining_at_grant: u64,
    resets_at: Nanos,
}

/// What a client gives back when a slice ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refund {
    /// Units not spent.
    pub units: u64,
    /// Units spent: the usage history counts them when they come back.
    pub spent: u64,
    /// [`Grant::taken_at`].
    pub taken_at: Nanos,
}

impl Slice {
    /// The slice of `grant`, whose ask was sent at `sent` and answered at
    /// `received`, with `decision` (the limit, what was left after the ask
    /// and the slice, and when the limit resets). The lease counts from
    /// `sent`, so it ends here no later than at the owner; the reset from
    /// `received`, so an answer's `reset` is never too early (as a
    /// worker's, rounded up).
    pub fn new(grant: &Grant, sent: Nanos, received: Nanos, decision: &Decision) -> Slice {
        Slice {
            left: grant.units,
            spent: 0,
            ends: sent.saturating_add(grant.lease),
            taken_at: grant.taken_at,
            limit: decision.limit,
            remaining_at_grant: decision.remaining,
            resets_at: received.saturating_add(decision.reset),
        }
    }

    /// Spends `cost` units at `now` if the lease lasts and they are left:
    /// the decision to answer with (allowed; `remaining` counts what is
    /// left of this slice on top of what the owner had left, an estimate).
    /// `None` sends the ask to the owner.
    pub fn take(&mut self, cost: u64, now: Nanos) -> Option<Decision> {
        if self.expired(now) || cost > self.left || cost == 0 {
            return None;
        }
        self.left -= cost;
        self.spent += cost;
        Some(Decision {
            allowed: true,
            limit: self.limit,
            remaining: self.remaining_at_grant.saturating_add(self.left),
            reset: Nanos(self.resets_at.0.saturating_sub(now.0)),
            retry_after: Nanos::ZERO,
            shadow_denied: false,
        })
    }

    /// The lease has ended: nothing more may be spent from it.
    pub fn expired(&self, now: Nanos) -> bool {
        now >= self.ends
    }

    /// Units not spent yet.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// What to give back when the slice ends (once nothing more is spent
    /// from it).
    pub fn refund(&self) -> Refund {
        Refund {
            units: self.left,
            spent: self.spent,
            taken_at: self.taken_at,
        }
    }
}

/// How long an owner remembers a slice it granted, waiting for it to come
/// back: a minute. A client gives a slice back within about two leases (at
/// its end, or at the sweep after it), or at once when the partition moved
/// and its first try met the old owner; one that stalls longer gets nothing
/// back for it, which only leaves its units counted. Memory is bounded by
/// [`MOST_OUTSTANDING`] whatever this is.
pub const GRANT_KEPT: Nanos = Nanos(60_000_000_000);

/// The most slices an owner remembers for one partition (given back ones
/// included, until [`GRANT_KEPT`] after their grant); past it the oldest is
/// forgotten (its refund then gives nothing back). A slice lives about two
/// leases, so this is room for ~10,000 grants a second per partition; it
/// bounds what a flood of slice requests can make a worker hold (with the
/// longest keys, ~1.5 MiB a partition).
pub const MOST_OUTSTANDING: usize = 4_096;

/// The slices an owner granted and has not had back, per counter key: a
/// refund gives back at most what its own slice held, once.
///
/// Without it a refund was taken at its word, and any client could hand
/// back units it never held: a key's budget freed at will, an admin's
/// reset (CONTRACT §10) by another name. A slice is known by its key and
/// [`Grant::taken_at`] (grants to several clients in one batch share it
/// and add up); it is forgotten when it is all back, after [`GRANT_KEPT`],
/// and when its key is reset. Snapshots carry the slices not back yet to
/// the partition's next owner ([`Outstanding::carried`],
/// [`Outstanding::take_over`]), and in journal mode the replayed journal
/// brings those granted since ([`Outstanding::replayed_grant`]). In
/// snapshot mode one granted after the last snapshot before a crash is
/// unknown there, and its refund gives nothing back (its units stay
/// counted until the window ends or the bucket refills them, as if the
/// client had died holding it).
#[derive(Debug, Default)]
pub struct Outstanding {
    by_key: std::collections::HashMap<std::sync::Arc<str>, Vec<Held>>,
    /// Every slice granted in the last [`GRANT_KEPT`], oldest first:
    /// `(taken_at, key)`.
    order: std::collections::VecDeque<(Nanos, std::sync::Arc<str>)>,
}

#[derive(Clone, Copy, Debug)]
struct Held {
    taken_at: Nanos,
    units: u64,
}

/// A slice not back yet, as a snapshot carries it to the partition's next
/// owner (so a handover does not turn its refund away).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldSlice {
    /// The counter key (`policy/token`).
    #[serde(rename = "k")]
    pub key: String,
    /// [`Grant::taken_at`], ns since the epoch.
    #[serde(rename = "t")]
    pub taken_at: u64,
    /// Units not back yet.
    #[serde(rename = "u")]
    pub units: u64,
}

/// The most slices a snapshot carries (the newest): a manifest stays well
/// under nats-server's default 1 MiB max payload with the longest keys.
pub const MOST_CARRIED: usize = 1_024;

/// What a snapshot may carry of the slices held `before` its counters were
/// encoded and `after`, while decisions went on: those in both, each with
/// the smaller count. A slice granted meanwhile may be missing from the
/// counters, one given back meanwhile may be back in them: carried, either
/// could be given back where it was never taken, or twice; left out, its
/// refund gives nothing back, which is safe.
pub fn carried_through(before: Vec<HeldSlice>, after: &[HeldSlice]) -> Vec<HeldSlice> {
    let after: std::collections::HashMap<(&str, u64), u64> = after
        .iter()
        .map(|h| ((h.key.as_str(), h.taken_at), h.units))
        .collect();
    before
        .into_iter()
        .filter_map(|mut h| {
            let units = *after.get(&(h.key.as_str(), h.taken_at))?;
            h.units = h.units.min(units);
            Some(h)
        })
        .collect()
}

/// What of a refund an owner takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returned {
    /// A slice this owner granted: all its unspent units go back.
    Known,
    /// No slice of this owner's explains it (granted by an earlier owner
    /// and not carried to this one, longer ago than [`GRANT_KEPT`], or
    /// never): nothing goes back. What
    /// was spent of it is still usage, as a hit's would be.
    Unknown,
}

/// A refund that claims more than its slice holds: refused whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a refund of {claimed} units (spent and unspent) for the slice taken at {taken_at} ns, \
     which holds {held}: nothing was given back; a client gives back what its own slice held, once"
)]
pub struct Overclaim {
    pub claimed: u64,
    pub held: u64,
    pub taken_at: u64,
}

impl Outstanding {
    /// Remembers `units` granted for `key` at `taken_at` (the owner's now).
    pub fn granted(&mut self, key: &str, taken_at: Nanos, units: u64) {
        self.expire(taken_at);
        if units == 0 {
            return;
        }
        // One copy of the key, shared by the map and the order.
        let key: std::sync::Arc<str> = match self.by_key.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => key.into(),
        };
        let held = self.by_key.entry(key.clone()).or_default();
        if let Some(h) = held.iter_mut().find(|h| h.taken_at == taken_at) {
            h.units = h.units.saturating_add(units);
            return;
        }
        held.push(Held { taken_at, units });
        self.order.push_back((taken_at, key));
        while self.order.len() > MOST_OUTSTANDING {
            self.forget_oldest();
        }
    }

    /// Takes `refund` of `key` back at `now`: whether its unspent units go
    /// back, or why it is refused (then nothing changes).
    pub fn refund(
        &mut self,
        key: &str,
        refund: &Refund,
        now: Nanos,
    ) -> Result<Returned, Overclaim> {
        self.expire(now);
        let Some(units) = self.held_mut(key, refund.taken_at) else {
            return Ok(Returned::Unknown);
        };
        let claimed = refund.units.saturating_add(refund.spent);
        if claimed > *units {
            return Err(Overclaim {
                claimed,
                held: *units,
                taken_at: refund.taken_at.as_u64(),
            });
        }
        *units -= claimed;
        self.drop_empty(key);
        Ok(Returned::Known)
    }

    /// A grant that a journal replays after a takeover (journal mode):
    /// remembered, unless the restored snapshot carried that slice already
    /// (its count then stands: it may have been partly given back since).
    pub fn replayed_grant(&mut self, key: &str, taken_at: Nanos, units: u64) {
        if self.held_mut(key, taken_at).is_none() {
            self.granted(key, taken_at, units);
        }
    }

    /// A refund that a journal replays: what it claimed is not held any
    /// more. Both replays err low (a record may also be in the restored
    /// snapshot): what is remembered never exceeds what a slice holds, so
    /// a later refund is refused rather than given back twice.
    pub fn replayed_refund(&mut self, key: &str, taken_at: Nanos, claimed: u64) {
        if let Some(units) = self.held_mut(key, taken_at) {
            *units = units.saturating_sub(claimed);
            self.drop_empty(key);
        }
    }

    /// The units still held of the slice of `key` taken at `taken_at`.
    fn held_mut(&mut self, key: &str, taken_at: Nanos) -> Option<&mut u64> {
        let held = self.by_key.get_mut(key)?;
        let h = held.iter_mut().find(|h| h.taken_at == taken_at)?;
        Some(&mut h.units)
    }

    /// Forgets the slices of `key` that are all back.
    fn drop_empty(&mut self, key: &str) {
        self.retain(key, |h| h.units > 0);
    }

    /// Keeps the slices of `key` that `keep` says to (and the key only
    /// while it holds one).
    fn retain(&mut self, key: &str, keep: impl FnMut(&Held) -> bool) {
        if let Some(held) = self.by_key.get_mut(key) {
            held.retain(keep);
            if held.is_empty() {
                self.by_key.remove(key);
            }
        }
    }

    /// Forgets every slice of `key` (it was reset: what they held was
    /// counted in a state that is gone).
    pub fn forget(&mut self, key: &str) {
        self.by_key.remove(key);
    }

    /// The slices granted less than [`GRANT_KEPT`] before `now` and not all
    /// back, the newest [`MOST_CARRIED`], for the next owner.
    pub fn carried(&mut self, now: Nanos) -> Vec<HeldSlice> {
        self.expire(now);
        let mut held: Vec<HeldSlice> = self
            .by_key
            .iter()
            .flat_map(|(key, held)| {
                held.iter().map(|h| HeldSlice {
                    key: key.to_string(),
                    taken_at: h.taken_at.as_u64(),
                    units: h.units,
                })
            })
            .collect();
        if held.len() > MOST_CARRIED {
            held.sort_unstable_by_key(|h| std::cmp::Reverse(h.taken_at));
            held.truncate(MOST_CARRIED);
        }
        held
    }

    /// Takes over the slices the previous owner `carried` (those still
    /// within [`GRANT_KEPT`] at `now`).
    pub fn take_over(&mut self, carried: &[HeldSlice], now: Nanos) {
        let mut carried: Vec<&HeldSlice> = carried.iter().collect();
        carried.sort_unstable_by_key(|h| h.taken_at);
        for h in carried {
            if Nanos(h.taken_at).saturating_add(GRANT_KEPT) > now {
                self.granted(&h.key, Nanos(h.taken_at), h.units);
            }
        }
    }

    /// Slices held.
    pub fn len(&self) -> usize {
        self.by_key.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    fn expire(&mut self, now: Nanos) {
        while self
            .order
            .front()
            .is_some_and(|&(taken_at, _)| taken_at.saturating_add(GRANT_KEPT) <= now)
        {
            self.forget_oldest();
        }
    }

    /// Forgets the oldest slice in `order` (if its key still holds it: one
    /// given back, or reset, is gone already).
    fn forget_oldest(&mut self) {
        if let Some((taken_at, key)) = self.order.pop_front() {
            self.retain(&key, |h| h.taken_at != taken_at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn fixed(max: u64, per: Duration) -> Policy {
        Policy::new(
            "p",
            Algorithm::FixedWindow,
            vec![Limit::new(max, per, None).unwrap()],
        )
        .unwrap()
        .with_local_budget(true)
        .unwrap()
    }

    #[test]
    fn only_algorithms_that_give_back_exactly_have_budgets() {
        for algorithm in Algorithm::ALL {
            let limit = Limit::new(10, Duration::from_secs(1), None).unwrap();
            let policy = Policy::new("p", algorithm, vec![limit]).unwrap();
            assert_eq!(
                policy.with_local_budget(true).is_ok(),
                supports(algorithm),
                "{algorithm}"
            );
        }
    }

    #[test]
    fn a_fixed_window_lease_ends_with_its_window() {
        let policy = fixed(1000, Duration::from_secs(1));
        let mut state = policy.new_state();
        let now = Nanos(5_000 * MS + 950 * MS);
        let (decision, grant) = policy.grant(&mut state, now, 1, 100);
        let grant = grant.unwrap();
        assert_eq!(grant.units, 100);
        assert_eq!(grant.lease, Nanos(50 * MS));
        assert_eq!(decision.remaining, 1000 - 101);
        let later = Nanos(5_000 * MS);
        let (_, grant) = policy.grant(&mut state, later, 1, 100);
        assert_eq!(grant.unwrap().lease, LEASE);
    }

    #[test]
    fn a_grant_takes_at_most_half_of_what_is_left_and_a_refund_gives_it_back() {
        let policy = fixed(10, Duration::from_secs(1));
        let mut state = policy.new_state();
        let now = Nanos(1_000_000 * MS);
        let (d, g) = policy.grant(&mut state, now, 2, 100);
        assert_eq!((g.unwrap().units, d.remaining), (4, 4));
        let (d, g) = policy.grant(&mut state, now, 1, 100);
        assert_eq!((g.unwrap().units, d.remaining), (1, 2));
        let peek = policy.refund(&mut state, now, 4, now);
        assert_eq!(peek.remaining, 6);
        // A refund into a window that has ended gives nothing back.
        let next = Nanos(now.0 + 1_000 * MS);
        policy.decide(&mut state, next, 10);
        assert_eq!(policy.refund(&mut state, next, 1, now).remaining, 0);
    }

    #[test]
    fn no_slice_without_local_budget_or_for_a_denied_ask() {
        let policy = fixed(3, Duration::from_secs(1))
            .with_local_budget(false)
            .unwrap();
        let mut state = policy.new_state();
        assert_eq!(policy.grant(&mut state, Nanos(1), 1, 5).1, None);
        let policy = fixed(3, Duration::from_secs(1));
        let mut state = policy.new_state();
        policy.decide(&mut state, Nanos(1), 3);
        let (d, g) = policy.grant(&mut state, Nanos(1), 1, 5);
        assert!(!d.allowed);
        assert_eq!(g, None);
    }

    #[test]
    fn a_slice_is_spent_until_empty_or_its_lease_ends() {
        let grant = Grant {
            units: 3,
            lease: Nanos(100),
            taken_at: Nanos(7),
        };
        let reply = Decision {
            allowed: true,
            limit: 50,
            remaining: 20,
            reset: Nanos(1000),
            retry_after: Nanos::ZERO,
            shadow_denied: false,
        };
        let mut slice = Slice::new(&grant, Nanos(10), Nanos(12), &reply);
        let d = slice.take(2, Nanos(50)).unwrap();
        assert_eq!((d.remaining, d.reset, d.limit), (21, Nanos(962), 50));
        assert_eq!(slice.take(2, Nanos(60)), None, "only one unit is left");
        assert!(
            slice.take(1, Nanos(110)).is_none(),
            "the lease ended at 110"
        );
        assert_eq!(
            slice.refund(),
            Refund {
                units: 1,
                spent: 2,
                taken_at: Nanos(7)
            }
        );
    }

    #[test]
    fn want_is_one_lease_of_asks_within_a_share_of_capacity() {
        assert_eq!(want(50, 1, 10_000), 50);
        assert_eq!(want(5_000, 1, 10_000), 625);
        assert_eq!(want(0, 2, 10_000), 2);
        assert_eq!(want(50, 4, 8), 4, "never less than one ask");
    }

    fn refund(units: u64, spent: u64, taken_at: u64) -> Refund {
        Refund {
            units,
            spent,
            taken_at: Nanos(taken_at),
        }
    }

    #[test]
    fn a_refund_gives_back_at_most_its_own_slice_once() {
        let mut held = Outstanding::default();
        held.granted("p/k", Nanos(100), 10);
        let over = held.refund("p/k", &refund(8, 3, 100), Nanos(150));
        assert_eq!(
            over,
            Err(Overclaim {
                claimed: 11,
                held: 10,
                taken_at: 100
            })
        );
        assert_eq!(held.len(), 1, "a refused refund changes nothing");
        assert_eq!(
            held.refund("p/k", &refund(7, 3, 100), Nanos(150)),
            Ok(Returned::Known)
        );
        assert!(held.is_empty());
        assert_eq!(
            held.refund("p/k", &refund(7, 3, 100), Nanos(160)),
            Ok(Returned::Unknown),
            "the same slice again gives nothing back"
        );
    }

    #[test]
    fn a_refund_no_grant_explains_gives_nothing_back() {
        let mut held = Outstanding::default();
        held.granted("p/k", Nanos(100), 10);
        for (key, taken_at) in [("p/other", 100), ("p/k", 99), ("q/k", 100)] {
            assert_eq!(
                held.refund(key, &refund(1, 0, taken_at), Nanos(150)),
                Ok(Returned::Unknown),
                "{key} at {taken_at}"
            );
        }
        assert_eq!(held.len(), 1);
    }

    #[test]
    fn slices_granted_together_add_up_and_come_back_apart() {
        let mut held = Outstanding::default();
        held.granted("p/k", Nanos(100), 4);
        held.granted("p/k", Nanos(100), 6);
        held.granted("p/k", Nanos(200), 5);
        assert_eq!(held.len(), 2);
        assert_eq!(
            held.refund("p/k", &refund(2, 2, 100), Nanos(300)),
            Ok(Returned::Known)
        );
        assert_eq!(
            held.refund("p/k", &refund(6, 0, 100), Nanos(300)),
            Ok(Returned::Known)
        );
        assert_eq!(
            held.refund("p/k", &refund(1, 0, 100), Nanos(300)),
            Ok(Returned::Unknown)
        );
        assert_eq!(
            held.refund("p/k", &refund(0, 5, 200), Nanos(300)),
            Ok(Returned::Known)
        );
        assert!(held.is_empty());
    }

    #[test]
    fn slices_are_forgotten_after_a_while_on_reset_and_past_the_bound() {
        let mut held = Outstanding::default();
        held.granted("p/k", Nanos(0), 10);
        let late = Nanos(GRANT_KEPT.0);
        assert_eq!(
            held.refund("p/k", &refund(10, 0, 0), late),
            Ok(Returned::Unknown)
        );
        held.granted("p/k", late, 10);
        held.forget("p/k");
        assert_eq!(
            held.refund("p/k", &refund(1, 0, late.0), late),
            Ok(Returned::Unknown)
        );
        assert_eq!(held.len(), 0);
        for i in 0..=MOST_OUTSTANDING as u64 {
            held.granted(&format!("p/{i}"), Nanos(late.0 + i), 1);
        }
        assert_eq!(held.len(), MOST_OUTSTANDING);
        assert_eq!(
            held.refund("p/0", &refund(1, 0, late.0), late),
            Ok(Returned::Unknown),
            "the oldest went first"
        );
        assert_eq!(
            held.refund("p/1", &refund(1, 0, late.0 + 1), late),
            Ok(Returned::Known)
        );
    }

    #[test]
    fn the_next_owner_takes_over_the_slices_not_back_yet() {
        let mut old = Outstanding::default();
        old.granted("p/a", Nanos(100), 10);
        old.granted("p/a", Nanos(200), 5);
        old.granted("p/b", Nanos(150), 7);
        assert_eq!(
            old.refund("p/a", &refund(3, 2, 100), Nanos(300)),
            Ok(Returned::Known)
        );
        old.granted("p/gone", Nanos(0), 1);
        assert_eq!(
            old.refund("p/gone", &refund(1, 0, 0), Nanos(300)),
            Ok(Returned::Known)
        );
        let mut carried = old.carried(Nanos(300));
        carried.sort_by_key(|h| h.taken_at);
        let slice = |key: &str, taken_at, units| HeldSlice {
            key: key.into(),
            taken_at,
            units,
        };
        assert_eq!(
            carried,
            [
                slice("p/a", 100, 5),
                slice("p/b", 150, 7),
                slice("p/a", 200, 5)
            ]
        );
        // Through the manifest's JSON and back.
        let carried: Vec<HeldSlice> =
            serde_json::from_slice(&serde_json::to_vec(&carried).unwrap()).unwrap();
        let mut new = Outstanding::default();
        new.take_over(&carried, Nanos(400));
        // The journal replays the grants and a refund after the snapshot:
        // a carried slice keeps its count, a refund takes off what it took.
        new.replayed_grant("p/a", Nanos(100), 10);
        new.replayed_grant("p/c", Nanos(300), 4);
        new.replayed_refund("p/c", Nanos(300), 1);
        assert_eq!(
            new.refund("p/c", &refund(4, 0, 300), Nanos(400)),
            Err(Overclaim {
                claimed: 4,
                held: 3,
                taken_at: 300
            })
        );
        assert_eq!(
            new.refund("p/a", &refund(6, 0, 100), Nanos(400)),
            Err(Overclaim {
                claimed: 6,
                held: 5,
                taken_at: 100
            })
        );
        assert_eq!(
            new.refund("p/a", &refund(5, 0, 100), Nanos(400)),
            Ok(Returned::Known)
        );
        assert_eq!(
            new.refund("p/b", &refund(7, 0, 150), Nanos(400)),
            Ok(Returned::Known)
        );
        // Too old by the time the next owner starts: not taken over.
        let mut late = Outstanding::default();
        late.take_over(&carried, Nanos(150 + GRANT_KEPT.0));
        assert_eq!(
            late.len(),
            1,
            "only the slice taken at 200 is recent enough"
        );
        // At most the newest MOST_CARRIED.
        let mut many = Outstanding::default();
        for i in 0..MOST_CARRIED as u64 + 10 {
            many.granted(&format!("p/{i}"), Nanos(1_000 + i), 1);
        }
        let carried = many.carried(Nanos(2_000));
        assert_eq!(carried.len(), MOST_CARRIED);
        assert!(carried.iter().all(|h| h.taken_at >= 1_010));
    }

    #[test]
    fn a_snapshot_carries_only_what_held_from_before_its_encoding_to_after() {
        let slice = |key: &str, taken_at, units| HeldSlice {
            key: key.into(),
            taken_at,
            units,
        };
        let before = vec![slice("p/a", 1, 10), slice("p/b", 2, 5), slice("p/c", 3, 4)];
        // Meanwhile: a came back in part, b all, d was granted.
        let after = [slice("p/a", 1, 6), slice("p/c", 3, 4), slice("p/d", 4, 9)];
        assert_eq!(
            carried_through(before, &after),
            [slice("p/a", 1, 6), slice("p/c", 3, 4)]
        );
    }
}
