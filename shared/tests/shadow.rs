//! Shadow mode in the core (SPEC §14): a shadow policy
//! decides and counts exactly as the same policy enforced, answers every
//! ask allowed, and flags what enforcement denies; switching modes keeps
//! the counts.

use proptest::prelude::*;
use sluice_core::policy::{Algorithm, Limit, Mode, Policy};
use sluice_core::time::Nanos;
use std::time::Duration;

fn policy(algorithm: Algorithm, max: u64, per_ns: u64) -> Policy {
    let burst = algorithm.has_burst().then_some(max);
    let limit = Limit::new(max, Duration::from_nanos(per_ns), burst).unwrap();
    Policy::new("p", algorithm, vec![limit]).unwrap()
}

proptest! {
    /// Step by step on the same asks: the states stay equal, the shadow
    /// answer is allowed, its `shadow_denied` is enforcement's denial, and
    /// every other number is enforcement's.
    #[test]
    fn shadow_counts_as_enforcement_and_flags_its_denials(
        a in 0..Algorithm::ALL.len(),
        max in 1..=6u64,
        per in 10..=400u64,
        asks in prop::collection::vec((0..60u64, 0..=6u64, any::<bool>()), 1..60),
    ) {
        let enforce = policy(Algorithm::ALL[a], max, per);
        let shadow = enforce.clone().with_mode(Mode::Shadow);
        let (mut e_state, mut s_state) = (enforce.new_state(), shadow.new_state());
        let mut now = 1_000_000u64;
        for (gap, cost, hit) in asks {
            now += gap;
            let cost = cost.min(enforce.capacity());
            let (e, s) = if hit {
                (enforce.record(&mut e_state, Nanos(now), cost), shadow.record(&mut s_state, Nanos(now), cost))
            } else {
                (enforce.decide(&mut e_state, Nanos(now), cost), shadow.decide(&mut s_state, Nanos(now), cost))
            };
            prop_assert_eq!(&e_state, &s_state);
            prop_assert!(s.allowed);
            prop_assert_eq!(s.shadow_denied, !e.allowed);
            prop_assert!(!e.shadow_denied);
            prop_assert_eq!((s.limit, s.remaining, s.reset), (e.limit, e.remaining, e.reset));
            prop_assert_eq!(s.retry_after, Nanos::ZERO);
        }
    }
}

/// The state a policy counted in one mode goes on in the other: the mode
/// is not part of a key's state.
#[test]
fn switching_modes_keeps_the_counts() {
    let enforce = policy(Algorithm::FixedWindow, 3, 60_000_000_000);
    let shadow = enforce.clone().with_mode(Mode::Shadow);
    let now = Nanos::from_secs(1_000_020);
    let mut state = enforce.new_state();
    assert!(enforce.decide(&mut state, now, 2).allowed);
    let d = shadow.decide(&mut state, now, 2);
    assert!(d.allowed && d.shadow_denied, "{d:?}");
    assert_eq!(d.remaining, 1, "the shadow denial took nothing");
    assert!(shadow.decide(&mut state, now, 1).within_limits());
    assert!(!enforce.decide(&mut state, now, 1).allowed);
}

/// A shadow policy grants no slices: its asks all reach the owner, the only
/// one that can tell a shadow denial.
#[test]
fn a_shadow_policy_grants_no_local_budget() {
    let base = policy(Algorithm::FixedWindow, 100, 60_000_000_000)
        .with_local_budget(true)
        .unwrap();
    let now = Nanos::from_secs(1_000_020);
    let (_, grant) = base.grant(&mut base.new_state(), now, 1, 10);
    assert!(grant.is_some());
    let shadow = base.with_mode(Mode::Shadow);
    let (d, grant) = shadow.grant(&mut shadow.new_state(), now, 1, 10);
    assert!(d.allowed);
    assert_eq!(grant, None);
}
