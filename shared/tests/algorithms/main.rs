//! Scenario tests for the five algorithms, through `Policy` as callers use them.
//!
//! Time is injected: every request names its `now`. `T0` is aligned to the
//! hour, so fixed and sliding windows of a minute or an hour start at `T0`.
//!
//! One test binary, split by what is tested: named scenarios per algorithm
//! (`scenarios.rs`) and what every algorithm promises whatever happens
//! (`promises.rs`: exact retry_after, peeks, hits, restored garbage); the
//! helpers both use are here.

mod promises;
mod scenarios;

use sluice_core::policy::{Algorithm, Decision, KeyState, Limit, Policy};
use sluice_core::time::Nanos;
use std::time::Duration;

/// 2023-11-14 22:00:00 UTC: a multiple of one hour since the epoch.
const T0: u64 = 1_700_002_800 * SEC;
const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn at(ns_after_t0: u64) -> Nanos {
    Nanos(T0 + ns_after_t0)
}

/// `mm:ss` after `T0`.
fn mmss(m: u64, s: u64) -> Nanos {
    at((m * 60 + s) * SEC)
}

fn limit(max: u64, per: Duration) -> Limit {
    Limit::new(max, per, None).unwrap()
}

fn policy(algorithm: Algorithm, limits: Vec<Limit>) -> Policy {
    Policy::new(algorithm.as_str(), algorithm, limits).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The decision `cost` would get at `now`, without touching `state`.
fn probe(policy: &Policy, state: &KeyState, now: Nanos, cost: u64) -> Decision {
    policy.decide(&mut state.clone(), now, cost)
}

/// Asserts that a denied `cost` at `now` fits after exactly `retry_after`, not 1 ns sooner.
fn assert_retry_after_exact(policy: &Policy, state: &KeyState, now: Nanos, cost: u64) {
    let d = probe(policy, state, now, cost);
    assert!(
        !d.allowed,
        "{}: expected a denial at {now:?}",
        policy.name()
    );
    let r = d.retry_after;
    assert!(
        r > Nanos::ZERO && r < Nanos::MAX,
        "{}: {d:?}",
        policy.name()
    );
    let fits = now.saturating_add(r);
    assert!(
        probe(policy, state, fits, cost).allowed,
        "{}: still denied after retry_after {r:?} ({d:?})",
        policy.name()
    );
    assert!(
        !probe(policy, state, Nanos(fits.0 - 1), cost).allowed,
        "{}: allowed 1 ns before retry_after {r:?} ({d:?})",
        policy.name()
    );
}
