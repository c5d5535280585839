//! Penalties decided with a clock the tests hold: every moment is exact.

use super::*;
use crate::limit::{Algorithm, Limit, Mode};
use crate::policy::{Decision, KeyState, Policy};
use crate::region::{Global, OnCut, Scope};

const S: u64 = 1_000_000_000;

/// Some moment, on a minute's boundary.
const NOW: Nanos = Nanos(1_000 * 60 * S);

fn at(secs: u64) -> Nanos {
    NOW.saturating_add(Nanos(secs * S))
}

/// `limits` (`max` per `secs` seconds) under `algorithm`, a denial
/// blocking the key for 10 s.
fn policy(algorithm: Algorithm, limits: &[(u64, u64)]) -> Policy {
    let limits = limits
        .iter()
        .map(|&(max, secs)| Limit::new(max, Duration::from_secs(secs), None).unwrap())
        .collect();
    Policy::new("login", algorithm, limits)
        .unwrap()
        .with_block_for(Duration::from_secs(10))
        .unwrap()
}

/// An ask of `cost` at `t`, which must be denied by the block ending at
/// `until`, taking nothing.
fn blocked(p: &Policy, state: &mut KeyState, t: Nanos, cost: u64, until: Nanos) -> Decision {
    let used = p.inspect(state, t);
    let d = p.decide(state, t, cost);
    assert!(!d.allowed && d.blocked && d.remaining == 0, "{d:?}");
    assert_eq!(d.retry_after, until.saturating_sub(t), "retry when it ends");
    assert_eq!(p.inspect(state, t), used, "a blocked ask takes nothing");
    assert_eq!(p.blocked_until(state, t), Some(until));
    d
}

#[test]
fn a_denial_blocks_the_key_for_block_for_and_asks_meanwhile_take_nothing() {
    let p = policy(Algorithm::FixedWindow, &[(2, 60)]);
    let mut state = p.new_state();
    for _ in 0..2 {
        let d = p.decide(&mut state, NOW, 1);
        assert!(d.allowed && !d.blocked, "{d:?}");
    }
    assert_eq!(p.blocked_until(&state, NOW), None);
    // The window would say retry in 60 s; the block says its own rest.
    let first = blocked(&p, &mut state, NOW, 1, at(10));
    assert_eq!(first.limit, 2);
    // Asks during the block do not lengthen it.
    blocked(&p, &mut state, at(4), 1, at(10));
    blocked(&p, &mut state, at(9), 2, at(10));
    assert_eq!(p.inspect(&state, at(9))[0].used, 2);
}

#[test]
fn after_the_block_asks_count_again_and_a_new_denial_blocks_again() {
    // 1 a second: room again 1 s after it is spent, long before the block ends.
    let p = policy(Algorithm::TokenBucket, &[(1, 1)]);
    let mut state = p.new_state();
    assert!(p.decide(&mut state, NOW, 1).allowed);
    blocked(&p, &mut state, NOW, 1, at(10));
    // The bucket has long refilled: still blocked.
    blocked(&p, &mut state, at(5), 1, at(10));
    let d = p.decide(&mut state, at(10), 1);
    assert!(d.allowed && !d.blocked, "the block ended: {d:?}");
    assert_eq!(p.blocked_until(&state, at(10)), None);
    assert!(
        !matches!(state, KeyState::Blocked(_)),
        "an ended block is lifted"
    );
    blocked(&p, &mut state, at(10), 1, at(20));
}

#[test]
fn a_peek_says_blocked_during_a_block_and_never_starts_one() {
    let p = policy(Algorithm::FixedWindow, &[(1, 60)]);
    let mut state = p.new_state();
    assert!(p.decide(&mut state, NOW, 1).allowed);
    let peek = p.decide(&mut state, NOW, 0);
    assert!(
        !peek.allowed && !peek.blocked,
        "full, not blocked: {peek:?}"
    );
    assert_eq!(p.blocked_until(&state, NOW), None, "a peek takes nothing");
    blocked(&p, &mut state, at(1), 1, at(11));
    blocked(&p, &mut state, at(2), 0, at(11));
}

#[test]
fn a_denial_by_any_of_several_limits_blocks_and_reports_that_limit() {
    let p = policy(Algorithm::SlidingWindow, &[(5, 1), (3, 60)]);
    let mut state = p.new_state();
    for _ in 0..3 {
        assert!(p.decide(&mut state, NOW, 1).allowed);
    }
    let d = blocked(&p, &mut state, NOW, 1, at(10));
    assert_eq!(d.limit, 3, "the limit that denied");
    // Both limits go on counting nothing during the block.
    let used: Vec<_> = p.inspect(&state, at(5)).iter().map(|l| l.used).collect();
    assert_eq!(used, [0, 3]);
}

#[test]
fn a_waiting_ask_of_a_blocked_key_is_denied() {
    let p = policy(Algorithm::Gcra, &[(1, 1)])
        .with_max_wait(Duration::from_secs(30))
        .unwrap();
    let mut state = p.new_state();
    assert!(p.decide(&mut state, NOW, 1).allowed);
    // Its moment would come in 1 s; allowed for it.
    let waits = p.decide_within(&mut state, NOW, 1, Nanos(30 * S));
    assert!(waits.allowed && waits.wait > Nanos::ZERO, "{waits:?}");
    // Past its wait: denied, and the key blocked.
    let d = p.decide_within(&mut state, NOW, 1, Nanos(S / 2));
    assert!(!d.allowed && d.blocked, "{d:?}");
    let d = p.decide_within(&mut state, at(5), 1, Nanos(30 * S));
    assert!(!d.allowed && d.blocked && d.wait == Nanos::ZERO, "{d:?}");
    assert_eq!(d.retry_after, Nanos(5 * S));
}

#[test]
fn a_shadow_policy_answers_a_block_allowed_and_keeps_it_as_enforcement_would() {
    let p = policy(Algorithm::FixedWindow, &[(1, 60)]).with_mode(Mode::Shadow);
    let mut state = p.new_state();
    assert!(p.decide(&mut state, NOW, 1).within_limits());
    for t in [NOW, at(5)] {
        let d = p.decide(&mut state, t, 1);
        assert!(d.allowed && d.shadow_denied && d.blocked, "{d:?}");
        assert_eq!(d.retry_after, Nanos::ZERO);
    }
    assert_eq!(p.blocked_until(&state, at(5)), Some(at(10)));
    assert_eq!(p.inspect(&state, at(5))[0].used, 1, "nothing taken");
}

#[test]
fn a_block_lasts_past_the_counters_idle_expiry() {
    let p = policy(Algorithm::TokenBucket, &[(1, 1)]);
    let mut state = p.new_state();
    p.decide(&mut state, NOW, 1);
    p.decide(&mut state, NOW, 1);
    assert_eq!(p.idle_expiry(&mut state, at(2)), Nanos(8 * S));
    assert_eq!(p.idle_expiry(&mut state, at(10)), Nanos::ZERO);
}

#[test]
fn forgetting_the_state_or_dropping_block_for_lifts_the_block() {
    let p = policy(Algorithm::FixedWindow, &[(1, 60)]);
    let mut state = p.new_state();
    p.decide(&mut state, NOW, 1);
    blocked(&p, &mut state, NOW, 1, at(10));
    // A reset forgets the key's state: a fresh one is not blocked.
    let mut fresh = p.new_state();
    assert!(p.decide(&mut fresh, at(1), 1).allowed);
    // The same policy without a block_for decides by its counters alone.
    let lenient = p.clone().with_block_for(Duration::ZERO).unwrap();
    assert_eq!(lenient.blocked_until(&state, at(1)), None);
    let d = lenient.decide(&mut state, at(1), 1);
    assert!(!d.allowed && !d.blocked, "{d:?}");
    assert_eq!(
        d.retry_after,
        Nanos(59 * S),
        "the window's, not the block's"
    );
    assert!(!matches!(state, KeyState::Blocked(_)));
}

#[test]
fn a_replayed_start_keeps_the_later_end() {
    let p = policy(Algorithm::FixedWindow, &[(1, 60)]);
    let mut state = p.new_state();
    state.block(at(10));
    state.block(at(5));
    assert_eq!(state.blocked_at(NOW), Some(at(10)));
    state.block(at(12));
    assert_eq!(state.blocked_at(NOW), Some(at(12)));
    let KeyState::Blocked(b) = &state else {
        panic!("blocked: {state:?}")
    };
    assert!(!matches!(b.counters, KeyState::Blocked(_)), "never nested");
}

#[test]
fn states_with_and_without_a_block_round_trip_through_snapshots_and_packing() {
    let p = policy(Algorithm::SlidingWindow, &[(2, 60), (5, 3600)]);
    let mut plain = p.new_state();
    p.decide(&mut plain, NOW, 2);
    let mut blocked = plain.clone();
    p.decide(&mut blocked, NOW, 1);
    assert!(matches!(blocked, KeyState::Blocked(_)));
    for state in [&plain, &blocked] {
        let bytes = rmp_serde::to_vec(state).unwrap();
        assert_eq!(rmp_serde::from_slice::<KeyState>(&bytes).unwrap(), *state);
        let mut packed = Vec::new();
        crate::packed::pack(state, &mut packed);
        assert_eq!(crate::packed::unpack(&packed).as_ref(), Some(state));
        let mut scratch = crate::packed::Scratch::default();
        assert_eq!(scratch.unpack(&packed), Some(&mut state.clone()));
    }
    // A state without a block is written as before blocks were, and
    // what was written then reads the same: older snapshots decode.
    let KeyState::SlidingWindow(windows) = &plain else {
        panic!("{plain:?}")
    };
    let before = rmp_serde::to_vec(&Before::SlidingWindow(windows.clone())).unwrap();
    assert_eq!(rmp_serde::to_vec(&plain).unwrap(), before);
    assert_eq!(rmp_serde::from_slice::<KeyState>(&before).unwrap(), plain);
}

/// [`KeyState`] as it was before blocks.
#[derive(Serialize)]
#[allow(dead_code)]
enum Before {
    FixedWindow(Vec<crate::algorithm::fixed_window::State>),
    SlidingLog(Vec<crate::algorithm::sliding_log::State>),
    SlidingWindow(Vec<crate::algorithm::sliding_window::State>),
    TokenBucket(Vec<crate::algorithm::token_bucket::State>),
    Gcra(Vec<crate::algorithm::gcra::State>),
}

#[test]
fn block_for_is_refused_past_a_day_on_global_policies_and_with_local_budgets() {
    let p = || policy(Algorithm::FixedWindow, &[(1, 60)]);
    let long = p().with_block_for(Duration::from_secs(24 * 3600 + 1));
    assert_eq!(long.unwrap_err(), PolicyError::BlockForTooLong);
    assert!(p().with_block_for(MAX_BLOCK_FOR).is_ok());
    let budget = p().with_local_budget(true).unwrap_err();
    assert_eq!(budget, PolicyError::BlockWithBudget);
    assert!(
        budget.to_string().contains("remove one of them"),
        "{budget}"
    );
    let regions: Vec<String> = ["east", "west"].map(String::from).to_vec();
    let shares: Vec<(String, i64)> = regions.iter().cloned().map(|r| (r, 1)).collect();
    let global = Global::new("east", &regions, &shares, OnCut::Reserved).unwrap();
    let e = p().with_scope(Scope::Global(global)).unwrap_err();
    assert_eq!(e, PolicyError::GlobalNotYet("block_for".to_string()));
}
