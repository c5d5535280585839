//! Holds (SPEC §13): reserve now, settle later, and limits on requests
//! in flight.
//!
//! A language model's request costs what its answer used, known only after
//! it; counting afterwards lets through the request that crosses the limit
//! (Envoy's `apply_on_stream_done`). A hold decides at the start like an
//! allow of the expected cost, which is counted at once; the settle replaces
//! it by the real cost: what was held and not used goes back into the key's
//! state (as a budget slice's refund does, [`crate::budget`]), what was used
//! beyond it is counted like a hit. A hold nobody settles ends by itself at
//! its deadline on the owner's clock: charged (it stays counted, the
//! default: a client that never settles gets nothing for free) or released
//! (given back), as the policy's `on_expiry` says.
//!
//! A reserve may wait for its start (SPEC §18) as an ask may: on a token
//! bucket or GCRA policy with a `max_wait`, a reserve that will fit within
//! its wait is kept now for the earliest moment it fits, its cost taken at
//! once, and its ttl runs from that start. It waits for the rate limits
//! only: a reserve refused a concurrency slot is denied at once.
//!
//! A policy's `concurrency = N` caps the holds of a key live at once,
//! whatever their cost: a slot is taken by the reserve and free again when
//! the hold ends, settled or expired, so a client that dies holding one
//! blocks it for at most its ttl. A reserve is all or nothing over the
//! rate limits and the slots: refused by either, it takes from neither.
//!
//! Every algorithm can hold a cost: what it takes back is what it counted,
//! where it counted it. Fixed window, sliding window: out of the window the
//! hold was counted in, while that window still counts (after it, nothing
//! goes back, and nothing needs to). Sliding log: the entries stamped at the
//! reserve. Token bucket and GCRA: the tokens, as a slice's refund. The
//! settled cost stays stamped at the reserve's time, when the work was
//! admitted.
//!
//! The owner keeps its holds in the table it keeps budget slices in
//! ([`crate::outstanding::Outstanding`]), which goes through snapshots, the
//! journal and takeovers with the counters.

pub mod hold;

pub use hold::{End, Hold, HoldId, Holding, DEFAULT_TTL, MAX_CONCURRENCY, MAX_TTL};

use crate::outstanding::{Outstanding, TooManyHolds};
use crate::policy::{Decision, KeyState, Policy};
use crate::time::Nanos;

/// The most one hold may hold or a settle charge (SPEC §13).
pub const MAX_COST: u64 = 1_000_000_000;

/// What settling a hold of `held` units for a real `cost` does to the key's
/// state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// Less was used than held: this much goes back (a refund).
    Refund(u64),
    /// More was used than held: this much more is counted, like a hit
    /// (recorded even past the limit: the work is done).
    Charge(u64),
    /// Exactly what was held: nothing changes.
    Even,
}

impl Settlement {
    pub fn of(held: u64, cost: u64) -> Settlement {
        match cost.cmp(&held) {
            std::cmp::Ordering::Less => Settlement::Refund(held - cost),
            std::cmp::Ordering::Greater => Settlement::Charge(cost - held),
            std::cmp::Ordering::Equal => Settlement::Even,
        }
    }
}

/// Why a reserve, settle or extend is refused before anything is decided.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    #[error("cost {0} is out of range: a hold holds and a settle charges 0 to {MAX_COST}")]
    Cost(u64),
    #[error("ttl_ms {0} is out of range: a hold lives 1 ms to 1 h (3600000 ms) at a time; extend it to keep it longer")]
    Ttl(u64),
    #[error("hold {0:?} is not a hold id (32 hex digits, as the reserve's reply gave it)")]
    Id(String),
}

/// The ttl of a reserve or extend: `ttl_ms` if given, else the policy's
/// `hold_ttl`; 1 ms to [`MAX_TTL`].
pub fn ttl(ttl_ms: Option<u64>, policy_ttl: Nanos) -> Result<Nanos, HoldError> {
    let Some(ms) = ttl_ms else {
        return Ok(policy_ttl);
    };
    let ttl = Nanos(ms.saturating_mul(1_000_000));
    if ms == 0 || ttl > MAX_TTL {
        return Err(HoldError::Ttl(ms));
    }
    Ok(ttl)
}

/// A reserve's or settle's cost, checked.
pub fn cost(cost: u64) -> Result<u64, HoldError> {
    if cost > MAX_COST {
        return Err(HoldError::Cost(cost));
    }
    Ok(cost)
}

/// A hold id as a client sent it, checked.
pub fn id(text: &str) -> Result<HoldId, HoldError> {
    HoldId::parse(text).ok_or_else(|| HoldError::Id(text.chars().take(64).collect()))
}

/// A reserve, checked, as the owner decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub cost: u64,
    pub ttl: Nanos,
    /// Drawn by the owner for the hold, if it is kept.
    pub id: HoldId,
    /// The policy's `on_expiry`.
    pub end: End,
    /// The policy's `concurrency`, if any.
    pub concurrency: Option<u32>,
    /// How long it may wait for its start (SPEC §18; zero: now or never),
    /// at most the policy's `max_wait` ([`crate::ask::admit_wait`]).
    pub within: Nanos,
}

/// What a reserve came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserved {
    /// Allowed: the hold is kept and its cost counted.
    Held { decision: Decision, hold: Hold },
    /// Denied by a rate limit or for want of a slot: nothing was taken.
    Denied(Decision),
}

/// Decides `r` for the counter `key`: its state under `policy` (whose
/// limits may be none: a policy of only `concurrency`) and its holds in
/// `table`. All or nothing: refused for a slot, the limits are not asked;
/// refused by a limit, no slot is taken. Kept for a later start (the
/// decision's `wait`), the hold ends its ttl after that start. Refused whole, with nothing
/// changed, when the partition keeps [`crate::outstanding::MOST_HOLDS`]
/// holds already.
pub fn reserve(
    policy: &Policy,
    state: &mut KeyState,
    table: &mut Outstanding,
    key: &str,
    now: Nanos,
    r: &Reservation,
) -> Result<Reserved, TooManyHolds> {
    table.hold_room()?;
    let live = table.holds_of(key, now).slots;
    if let Some(denied) = no_slot(r.concurrency, live, table, key, now) {
        return Ok(Reserved::Denied(denied));
    }
    let decision = if policy.limits().is_empty() {
        None
    } else {
        let decision = policy.decide_within(state, now, r.cost, r.within);
        if !decision.allowed {
            return Ok(Reserved::Denied(decision));
        }
        Some(decision)
    };
    let start = now.saturating_add(decision.map_or(Nanos::ZERO, |d| d.wait));
    let hold = Hold {
        id: r.id,
        taken_at: now,
        units: r.cost,
        ends_at: start.saturating_add(r.ttl),
        end: r.end,
        slot: r.concurrency.is_some(),
    };
    table.hold(key, hold)?;
    let decision = with_slots(decision, r.concurrency, live + 1, table, key, now);
    Ok(Reserved::Held { decision, hold })
}

/// Whether [`reserve`] would keep `r` at `now`, taking nothing: its
/// denial (for want of a slot or by a limit) as the reserve would give
/// it, or an allowed decision with the start it would get (the kept
/// hold's own decision is the reserve's). A grouped reserve (SPEC §17)
/// checks every level so first, and reserves at each only when every
/// one admits it.
pub fn check_reserve(
    policy: &Policy,
    state: &mut KeyState,
    table: &Outstanding,
    key: &str,
    now: Nanos,
    r: &Reservation,
) -> Decision {
    let live = table.holds_of(key, now).slots;
    if let Some(denied) = no_slot(r.concurrency, live, table, key, now) {
        return denied;
    }
    let decision =
        (!policy.limits().is_empty()).then(|| policy.check_within(state, now, r.cost, r.within));
    match decision {
        Some(d) if !d.allowed => d,
        _ => with_slots(decision, r.concurrency, live + 1, table, key, now),
    }
}

/// The denial of a reserve of `key` when its `live` slots are all taken.
fn no_slot(
    concurrency: Option<u32>,
    live: u32,
    table: &Outstanding,
    key: &str,
    now: Nanos,
) -> Option<Decision> {
    let n = concurrency.filter(|&n| live >= n)?;
    let free_at = table.first_slot_end(key, now).unwrap_or(now);
    Some(slots(n, live, Nanos(free_at.0 - now.0)))
}

/// A settle, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    pub id: HoldId,
    /// The real cost.
    pub cost: u64,
    /// The policy's `concurrency`, if any.
    pub concurrency: Option<u32>,
}

/// Settles the live hold `s.id` of `key` for its real cost: the hold and
/// what a peek answers after it, or `None` (an unknown, ended or expired
/// hold: nothing changes).
pub fn settle(
    policy: &Policy,
    state: &mut KeyState,
    table: &mut Outstanding,
    key: &str,
    now: Nanos,
    s: &Settle,
) -> Option<(Decision, Hold)> {
    let Settle {
        id,
        cost,
        concurrency,
    } = *s;
    let hold = table.settle(key, id, now)?;
    let decision = (!policy.limits().is_empty()).then(|| match Settlement::of(hold.units, cost) {
        Settlement::Refund(n) => policy.refund(state, now, n, hold.taken_at),
        Settlement::Charge(n) => policy.record(state, now, n),
        Settlement::Even => policy.decide(state, now, 0),
    });
    Some((
        peek_with_slots(decision, concurrency, table, key, now),
        hold,
    ))
}

/// Applies the end of `hold` (reached unsettled) to the key's state:
/// released, what it held goes back; charged, nothing changes.
pub fn end(policy: &Policy, state: &mut KeyState, now: Nanos, hold: &Hold) {
    if hold.end == End::Release && !policy.limits().is_empty() {
        policy.refund(state, now, hold.units, hold.taken_at);
    }
}

/// What a peek answers for `key`: its limits (if any) and its slots.
pub fn peek(
    policy: &Policy,
    state: &mut KeyState,
    table: &Outstanding,
    key: &str,
    now: Nanos,
    concurrency: Option<u32>,
) -> Decision {
    let decision = (!policy.limits().is_empty()).then(|| policy.decide(state, now, 0));
    peek_with_slots(decision, concurrency, table, key, now)
}

fn peek_with_slots(
    decision: Option<Decision>,
    concurrency: Option<u32>,
    table: &Outstanding,
    key: &str,
    now: Nanos,
) -> Decision {
    let live = table.holds_of(key, now).slots;
    let mut d = with_slots(decision, concurrency, live, table, key, now);
    if concurrency.is_some_and(|n| live >= n) {
        d.allowed = false;
    }
    d
}

/// `decision` of the limits, combined with the slots when the policy has
/// `concurrency`: the tighter of the two is the one reported.
fn with_slots(
    decision: Option<Decision>,
    concurrency: Option<u32>,
    live: u32,
    table: &Outstanding,
    key: &str,
    now: Nanos,
) -> Decision {
    let Some(n) = concurrency else {
        return decision.expect("a policy has limits, concurrency or both");
    };
    let free_at = table.first_slot_end(key, now).unwrap_or(now);
    let of_slots = slots(n, live, Nanos(free_at.0.saturating_sub(now.0)));
    match decision {
        Some(d) if d.remaining <= of_slots.remaining => d,
        Some(d) => Decision {
            allowed: d.allowed,
            wait: d.wait,
            ..of_slots
        },
        None => Decision {
            allowed: true,
            ..of_slots
        },
    }
}

/// The slots of a policy with `concurrency = n`, `live` of them taken:
/// `reset` is when the first taken one frees (0 when none is taken).
fn slots(n: u32, live: u32, first_free: Nanos) -> Decision {
    let remaining = u64::from(n.saturating_sub(live));
    let full = remaining == 0;
    Decision {
        allowed: !full,
        limit: u64::from(n),
        remaining,
        reset: if live > 0 { first_free } else { Nanos::ZERO },
        retry_after: if full { first_free } else { Nanos::ZERO },
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_32_hex_digits_both_ways() {
        let id = HoldId::new(0x0123_4567_89ab_cdef_0000_0000_0000_002a);
        let text = id.to_string();
        assert_eq!(text, "0123456789abcdef000000000000002a");
        assert_eq!(HoldId::parse(&text), Some(id));
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"0123456789abcdef000000000000002a\""
        );
        for bad in [
            "",
            "2a",
            &"g".repeat(32),
            &"a".repeat(33),
            "+123456789abcdef000000000000002a",
        ] {
            assert_eq!(HoldId::parse(bad), None, "{bad:?}");
        }
        assert!(serde_json::from_str::<HoldId>("\"nope\"").is_err());
    }

    #[test]
    fn a_settle_gives_back_charges_or_changes_nothing() {
        assert_eq!(Settlement::of(100, 30), Settlement::Refund(70));
        assert_eq!(Settlement::of(100, 130), Settlement::Charge(30));
        assert_eq!(Settlement::of(100, 100), Settlement::Even);
        assert_eq!(Settlement::of(0, 0), Settlement::Even);
    }

    #[test]
    fn costs_ttls_and_ids_out_of_range_are_refused_with_the_reason() {
        assert_eq!(cost(MAX_COST), Ok(MAX_COST));
        assert_eq!(cost(MAX_COST + 1), Err(HoldError::Cost(MAX_COST + 1)));
        assert_eq!(ttl(None, DEFAULT_TTL), Ok(DEFAULT_TTL));
        assert_eq!(ttl(Some(1), DEFAULT_TTL), Ok(Nanos(1_000_000)));
        assert_eq!(ttl(Some(3_600_000), DEFAULT_TTL), Ok(MAX_TTL));
        assert_eq!(
            ttl(Some(3_600_001), DEFAULT_TTL),
            Err(HoldError::Ttl(3_600_001))
        );
        assert_eq!(ttl(Some(0), DEFAULT_TTL), Err(HoldError::Ttl(0)));
        assert_eq!(
            ttl(Some(u64::MAX), DEFAULT_TTL),
            Err(HoldError::Ttl(u64::MAX))
        );
        let e = id("x").unwrap_err();
        assert!(e.to_string().contains("32 hex digits"), "{e}");
    }
}
