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
//! ([`crate::outstanding::Outstanding`]); a refund no slice of its explains gives nothing back.
//! Clients are not trusted (docs/SECURITY.md): a refund taken at its word
//! would let any of them free a key's budget.

use crate::limit::{Algorithm, Decision, Limit};
use crate::time::Nanos;

/// The longest a slice lasts: short, so unspent units come back soon and
/// a token bucket's spending is late by at most this much.
pub const LEASE: Nanos = Nanos(100_000_000);

/// The longest lease of a grant to another region (SPEC §12,
/// [`crate::region::global`]): long enough that a
/// slice asked ahead of need arrives across a WAN link (100+ ms each way)
/// with most of its lease left, short enough that units a region does not
/// spend go back within the window.
pub const REGION_LEASE: Nanos = Nanos(2_000_000_000);

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

/// The lease of a slice taken at `now`: `longest` ([`LEASE`] for a
/// client's), cut at the end of the earliest window of a fixed-window
/// policy.
pub(crate) fn lease(limits: &[Limit], algorithm: Algorithm, now: Nanos, longest: Nanos) -> Nanos {
    let mut lease = longest;
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

/// A slice as a client holds it. Times are the client's clock. (A
/// delegate region's owner holds its slices the same way, and a handover
/// carries them: `sluice_core::region::global`.)
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Slice {
    #[serde(rename = "l")]
    left: u64,
    #[serde(rename = "s")]
    spent: u64,
    #[serde(rename = "e")]
    ends: Nanos,
    #[serde(rename = "t")]
    taken_at: Nanos,
    /// The deciding limit's numbers as the grant's reply had them.
    #[serde(rename = "m")]
    limit: u64,
    #[serde(rename = "r")]
    remaining_at_grant: u64,
    #[serde(rename = "z")]
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
            wait: Nanos::ZERO,
            blocked: false,
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

    /// When the owner took it out of the count ([`Grant::taken_at`], the
    /// owner's clock): the window it was counted in.
    pub fn taken_at(&self) -> Nanos {
        self.taken_at
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
            wait: Nanos::ZERO,
            blocked: false,
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
}
