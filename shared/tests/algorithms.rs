//! Scenario tests for the five algorithms, through `Policy` as callers use them.
//!
//! Time is injected: every request names its `now`. `T0` is aligned to the
//! hour, so fixed and sliding windows of a minute or an hour start at `T0`.

use sluice_core::algorithm::{fixed_window, gcra, sliding_log, sliding_window, token_bucket};
use sluice_core::policy::{Algorithm, Decision, KeyState, Limit, Policy};
use sluice_core::time::Nanos;
use std::time::Duration;

/// 2023-11-14 22:00:00 UTC: a multiple of one hour since the epoch.
const T0: u64 = 1_700_002_800 * SEC;
const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const US: u64 = 1_000;

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

/// Decides cost 1 at each time in turn; returns which were allowed.
fn allowed_at(policy: &Policy, times: &[Nanos]) -> Vec<bool> {
    let mut state = policy.new_state();
    times
        .iter()
        .map(|&t| policy.decide(&mut state, t, 1).allowed)
        .collect()
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

// --- Two per minute, requests at 00:40, 00:50, 01:10, 01:20, 01:40 ---------

fn two_per_minute_timeline(algorithm: Algorithm) -> Vec<bool> {
    let p = policy(algorithm, vec![limit(2, secs(60))]);
    let times = [
        mmss(0, 40),
        mmss(0, 50),
        mmss(1, 10),
        mmss(1, 20),
        mmss(1, 40),
    ];
    allowed_at(&p, &times)
}

#[test]
fn two_per_minute_fixed_window_allows_the_first_four_and_denies_the_fifth() {
    assert_eq!(
        two_per_minute_timeline(Algorithm::FixedWindow),
        [true, true, true, true, false]
    );
}

#[test]
fn two_per_minute_sliding_log_allows_1_and_2_denies_3_and_4_allows_5() {
    assert_eq!(
        two_per_minute_timeline(Algorithm::SlidingLog),
        [true, true, false, false, true]
    );
}

#[test]
fn two_per_minute_sliding_window_agrees_with_the_log_here() {
    // 01:10: 2·50/60 + 0 + 1 = 2.67 > 2; 01:20: 2·40/60 + 1 = 2.33;
    // 01:40: 2·20/60 + 1 = 1.67 ≤ 2.
    assert_eq!(
        two_per_minute_timeline(Algorithm::SlidingWindow),
        [true, true, false, false, true]
    );
}

#[test]
fn two_per_minute_token_bucket_and_gcra_refill_one_every_30s() {
    // Full bucket of 2 at 00:40; one token back every 30 s from then on:
    // 01:10 gets the first, 01:20 has 1/3 of the next, 01:40 has it.
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        assert_eq!(
            two_per_minute_timeline(algorithm),
            [true, true, true, false, true],
            "{algorithm}"
        );
    }
}

// --- Sliding window estimate ------------------------------------------------

#[test]
fn a_burst_bigger_than_max_is_the_reported_limit_so_remaining_never_exceeds_it() {
    // 10 per second, bucket of 50: a fresh key can take 50 at once, so the
    // limit a decision reports is 50, not 10.
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let p = policy(algorithm, vec![Limit::new(10, secs(1), Some(50)).unwrap()]);
        let mut state = p.new_state();
        let look = p.decide(&mut state, at(0), 0);
        assert_eq!((look.limit, look.remaining), (50, 50), "{algorithm:?}");
        let took = p.decide(&mut state, at(0), 30);
        assert_eq!(
            (took.allowed, took.limit, took.remaining),
            (true, 50, 20),
            "{algorithm:?}"
        );
        // A smaller burst leaves the reported limit at max.
        let p = policy(
            algorithm,
            vec![Limit::new(100, secs(60), Some(20)).unwrap()],
        );
        let look = p.decide(&mut p.new_state(), at(0), 0);
        assert_eq!((look.limit, look.remaining), (100, 20), "{algorithm:?}");
    }
}

#[test]
fn sliding_window_previous_10_current_6_at_20s_estimates_12_7_and_denies() {
    let p = policy(Algorithm::SlidingWindow, vec![limit(10, secs(60))]);
    let start = mmss(1, 0).0;
    let state = KeyState::SlidingWindow(vec![sliding_window::State {
        start,
        prev: 10,
        curr: 6,
    }]);
    let now = Nanos(start + 20 * SEC);
    // 10·40/60 + 6 ≈ 12.7 > 10.
    let d = probe(&p, &state, now, 1);
    assert!(!d.allowed);
    assert_eq!(d.remaining, 0);
    // Fits once 10·(60 − e)/60 + 7 ≤ 10, i.e. at e = 42 s: 22 s from now.
    assert_eq!(d.retry_after, Nanos(22 * SEC));
    assert_retry_after_exact(&p, &state, now, 1);
    // Fully clear once the current window is the previous one and has passed.
    assert_eq!(d.reset, Nanos(100 * SEC));
}

#[test]
fn sliding_window_remaining_is_the_floor_of_max_minus_estimate() {
    let p = policy(Algorithm::SlidingWindow, vec![limit(10, secs(60))]);
    let start = mmss(1, 0).0;
    let state = KeyState::SlidingWindow(vec![sliding_window::State {
        start,
        prev: 6,
        curr: 2,
    }]);
    // 6·45/60 + 2 = 6.5 → 3.5 left → 3.
    let d = probe(&p, &state, Nanos(start + 15 * SEC), 0);
    assert!(d.allowed);
    assert_eq!(d.remaining, 3);
}

// --- Window boundaries --------------------------------------------------------

/// 10 requests at 00:59.9 and 10 at 01:00.0: how many pass?
fn allowed_across_a_boundary(algorithm: Algorithm) -> usize {
    let p = policy(algorithm, vec![limit(10, secs(60))]);
    let mut times = vec![at(59_900 * MS); 10];
    times.extend(vec![mmss(1, 0); 10]);
    allowed_at(&p, &times).into_iter().filter(|&a| a).count()
}

#[test]
fn fixed_window_lets_twice_the_limit_through_across_a_window_boundary() {
    assert_eq!(allowed_across_a_boundary(Algorithm::FixedWindow), 20);
}

#[test]
fn sliding_log_and_sliding_window_do_not_let_twice_the_limit_through_a_boundary() {
    assert_eq!(allowed_across_a_boundary(Algorithm::SlidingLog), 10);
    assert_eq!(allowed_across_a_boundary(Algorithm::SlidingWindow), 10);
}

/// The most units admitted in any window `(t − per, t]`, from (time, units) pairs.
fn most_in_any_window(admitted: &[(u64, u64)], per: u64) -> u64 {
    let mut best = 0;
    let mut sum = 0;
    let mut lo = 0;
    for hi in 0..admitted.len() {
        sum += admitted[hi].1;
        while admitted[lo].0 + per <= admitted[hi].0 {
            sum -= admitted[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

#[test]
fn sliding_window_worst_case_admits_2_max_minus_1_within_one_window() {
    // All of one window's budget in its last nanosecond, then requests every
    // 100 ms through the next window: the previous burst is forgotten
    // linearly, so the next window admits up to max − 1 more while the burst
    // is still within `per`. docs/ALGORITHMS.md, "Sliding window error".
    let max = 10;
    let per = 60 * SEC;
    let p = policy(Algorithm::SlidingWindow, vec![limit(max, secs(60))]);
    let mut state = p.new_state();
    let boundary = T0 + per;
    let mut admitted = Vec::new();
    for _ in 0..max {
        assert!(p.decide(&mut state, Nanos(boundary - 1), 1).allowed);
        admitted.push((boundary - 1, 1));
    }
    let mut t = boundary;
    while t < boundary + per - 1 {
        if p.decide(&mut state, Nanos(t), 1).allowed {
            admitted.push((t, 1));
        }
        t += 100 * MS;
    }
    if p.decide(&mut state, Nanos(boundary + per - 2), 1).allowed {
        admitted.push((boundary + per - 2, 1));
    }
    assert_eq!(most_in_any_window(&admitted, per), 2 * max - 1);
}

// --- 10 per minute and 500 per hour ------------------------------------------

fn minute_and_hour(algorithm: Algorithm) -> Policy {
    policy(algorithm, vec![limit(10, secs(60)), limit(500, secs(3600))])
}

/// What the minute limit alone would answer to a peek: its room, untouched
/// by the hour limit.
fn minute_remaining(state: &KeyState, now: Nanos, algorithm: Algorithm) -> u64 {
    let mut minute = match state {
        KeyState::FixedWindow(v) => KeyState::FixedWindow(v[..1].to_vec()),
        KeyState::SlidingLog(v) => KeyState::SlidingLog(v[..1].to_vec()),
        KeyState::SlidingWindow(v) => KeyState::SlidingWindow(v[..1].to_vec()),
        KeyState::TokenBucket(v) => KeyState::TokenBucket(v[..1].to_vec()),
        KeyState::Gcra(v) => KeyState::Gcra(v[..1].to_vec()),
    };
    policy(algorithm, vec![limit(10, secs(60))])
        .decide(&mut minute, now, 0)
        .remaining
}

/// Steady 10/min traffic (every 6 s from T0) with 20 extra requests at every
/// denial, until the hour limit denies. Returns the state, the index of that
/// request and how many were denied before it (by the minute limit). Checks
/// that no denial consumed anything.
fn steady_until_the_hour_binds(p: &Policy, algorithm: Algorithm) -> (KeyState, u64, u64) {
    let mut state = p.new_state();
    let mut minute_denials = 0;
    for i in 0.. {
        let now = at(6 * SEC * i);
        let d = p.decide(&mut state, now, 1);
        if d.allowed {
            continue;
        }
        let before = state.clone();
        for _ in 0..20 {
            assert!(!p.decide(&mut state, now, 1).allowed);
        }
        assert_eq!(state, before, "{algorithm}: denials consumed nothing");
        if d.limit == 500 {
            return (state, i, minute_denials);
        }
        minute_denials += 1;
    }
    unreachable!()
}

#[test]
fn minute_and_hour_fixed_window_hour_binds_after_50_minutes_and_denials_cost_nothing() {
    let a = Algorithm::FixedWindow;
    let p = minute_and_hour(a);
    let (mut state, first_denied, minute_denials) = steady_until_the_hour_binds(&p, a);
    assert_eq!(
        (first_denied, minute_denials),
        (500, 0),
        "denied from 50:00"
    );
    for i in 501..600 {
        assert!(!p.decide(&mut state, at(6 * SEC * i), 1).allowed);
    }
    assert_eq!(minute_remaining(&state, mmss(59, 59), a), 10);
    // A new hour window at 60:00: the minute has all its room, the hour too.
    let burst = (0..11)
        .map(|_| p.decide(&mut state, mmss(60, 0), 1).allowed)
        .collect::<Vec<_>>();
    assert_eq!(burst.iter().filter(|&&a| a).count(), 10);
}

#[test]
fn minute_and_hour_sliding_log_hour_binds_after_50_minutes_and_frees_at_60_00() {
    let a = Algorithm::SlidingLog;
    let p = minute_and_hour(a);
    let (mut state, first_denied, minute_denials) = steady_until_the_hour_binds(&p, a);
    assert_eq!(
        (first_denied, minute_denials),
        (500, 0),
        "denied from 50:00"
    );
    for i in 501..599 {
        assert!(!p.decide(&mut state, at(6 * SEC * i), 1).allowed);
    }
    let d = p.decide(&mut state, mmss(59, 54), 1);
    assert!(!d.allowed);
    // The request at 00:00 stops counting at 60:00.
    assert_eq!(d.retry_after, Nanos(6 * SEC));
    assert_retry_after_exact(&p, &state, mmss(59, 54), 1);
    // Nothing of the last 10 minutes of denials is in the minute log.
    assert_eq!(minute_remaining(&state, mmss(59, 59), a), 10);
    assert!(p.decide(&mut state, mmss(60, 0), 1).allowed);
    // One hour slot came free, so one passed, and the minute still has 9.
    assert!(!p.decide(&mut state, mmss(60, 0), 1).allowed);
    assert_eq!(minute_remaining(&state, mmss(60, 0), a), 9);
    // From now on the steady traffic passes again, each as an old one expires.
    for i in 601..700 {
        assert!(p.decide(&mut state, at(6 * SEC * i), 1).allowed, "{i}");
    }
}

#[test]
fn minute_and_hour_sliding_window_hour_binds_later_and_frees_at_60_07_2() {
    // At exactly the minute's rate the estimate overshoots by a fraction once
    // per minute (it assumes the previous minute's 10 were spread evenly, but
    // one of them is only just leaving), so 9 of every 10 pass after the
    // first minute and the hour binds at 55:30 instead of 50:00.
    let a = Algorithm::SlidingWindow;
    let p = minute_and_hour(a);
    let (mut state, first_denied, minute_denials) = steady_until_the_hour_binds(&p, a);
    assert_eq!((first_denied, minute_denials), (555, 55));
    for i in first_denied + 1..599 {
        assert!(!p.decide(&mut state, at(6 * SEC * i), 1).allowed);
    }
    // Next hour window: 500·(3600 − e)/3600 + 1 ≤ 500 from e = 7.2 s.
    let d = p.decide(&mut state, mmss(59, 54), 1);
    assert_eq!(d.retry_after, Nanos(13_200 * MS));
    assert_retry_after_exact(&p, &state, mmss(59, 54), 1);
    assert_eq!(minute_remaining(&state, mmss(59, 59), a), 10);
    assert!(!p.decide(&mut state, mmss(60, 6), 1).allowed);
    assert!(p.decide(&mut state, mmss(60, 12), 1).allowed);
    // The previous minute is empty (its requests were all denied), so the
    // minute limit has room for 9 more right away.
    assert_eq!(minute_remaining(&state, mmss(60, 12), a), 9);
}

#[test]
fn minute_and_hour_token_bucket_and_gcra_hour_binds_after_2995_requests_then_500_per_hour() {
    // The hour bucket (500, refilled 500/h) loses 10 − 8.33 per minute under
    // 10/min: request i (at 6i s) passes while ⌈i/6⌉ ≤ 499, so the first
    // denial is i = 2995 (4:59:30); after that exactly 500 per hour pass.
    for a in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let p = minute_and_hour(a);
        let (mut state, first_denied, minute_denials) = steady_until_the_hour_binds(&p, a);
        assert_eq!((first_denied, minute_denials), (2995, 0), "{a}");
        // The 20 denied extras left the minute bucket alone: it is full.
        assert_eq!(minute_remaining(&state, at(6 * SEC * 2995), a), 10, "{a}");
        let passed = (2996..=3594)
            .filter(|&i| p.decide(&mut state, at(6 * SEC * i), 1).allowed)
            .count();
        assert_eq!(
            passed, 500,
            "{a}: one hour of steady traffic after the bind"
        );
    }
}

// --- Token bucket and GCRA ---------------------------------------------------------

#[test]
fn token_bucket_bursts_then_refills_at_the_rate() {
    let p = policy(
        Algorithm::TokenBucket,
        vec![Limit::new(100, secs(60), Some(20)).unwrap()],
    );
    let mut state = p.new_state();
    let now = mmss(0, 0);
    for n in 0..20 {
        let d = p.decide(&mut state, now, 1);
        assert!(d.allowed);
        assert_eq!(d.remaining, 19 - n);
    }
    let d = p.decide(&mut state, now, 1);
    assert!(!d.allowed);
    // One token every 600 ms; full again after 20 of them.
    assert_eq!(d.retry_after, Nanos(600 * MS));
    assert_eq!(d.reset, Nanos(12 * SEC));
    assert_retry_after_exact(&p, &state, now, 1);
    assert_retry_after_exact(&p, &state, now, 5);
    assert_eq!(probe(&p, &state, at(3 * SEC), 0).remaining, 5);
    let refilled = at(12 * SEC);
    let burst = (0..21)
        .filter(|_| p.decide(&mut state, refilled, 1).allowed)
        .count();
    assert_eq!(burst, 20);
}

/// Requests every `gap` ns for `span` ns (both ends included) against
/// `max` per second: how many pass?
fn allowed_at_steady_gap(algorithm: Algorithm, max: u64, gap: u64, span: u64) -> usize {
    let p = policy(algorithm, vec![limit(max, secs(1))]);
    let mut state = p.new_state();
    (0..=span / gap)
        .filter(|i| p.decide(&mut state, at(i * gap), 1).allowed)
        .count()
}

#[test]
fn gcra_at_10_000_per_second_is_exact_over_10s_of_requests_every_50us() {
    for a in [Algorithm::Gcra, Algorithm::TokenBucket] {
        assert_eq!(
            allowed_at_steady_gap(a, 10_000, 50 * US, 10 * SEC),
            10_000 + 100_000,
            "{a}"
        );
    }
}

#[test]
fn gcra_at_1_000_000_per_second_is_exact_over_1s_of_requests_every_500ns() {
    for a in [Algorithm::Gcra, Algorithm::TokenBucket] {
        assert_eq!(
            allowed_at_steady_gap(a, 1_000_000, 500, SEC),
            1_000_000 + 1_000_000,
            "{a}"
        );
    }
}

#[test]
fn gcra_and_token_bucket_with_a_fractional_interval_never_drift() {
    // 3 per second: T = 333 333 333⅓ ns. After the burst of 2, the k-th next
    // unit is due at exactly ⌈k·T⌉; after a million of them (3.9 days) still
    // to the nanosecond.
    for a in [Algorithm::Gcra, Algorithm::TokenBucket] {
        let p = policy(a, vec![Limit::new(3, secs(1), Some(2)).unwrap()]);
        let mut state = p.new_state();
        assert!(p.decide(&mut state, at(0), 2).allowed);
        for k in 1..=1_000_000u64 {
            let due = (k * SEC).div_ceil(3);
            let early = p.decide(&mut state, at(due - 1), 1);
            assert!(!early.allowed, "{a}: unit {k} early");
            assert_eq!(early.retry_after, Nanos(1), "{a}: unit {k}");
            assert!(p.decide(&mut state, at(due), 1).allowed, "{a}: unit {k}");
        }
    }
}

#[test]
fn gcra_bursts_then_spaces_by_the_emission_interval() {
    let p = policy(
        Algorithm::Gcra,
        vec![Limit::new(10, secs(1), Some(4)).unwrap()],
    );
    let mut state = p.new_state();
    let burst = (0..5)
        .filter(|_| p.decide(&mut state, at(0), 1).allowed)
        .count();
    assert_eq!(burst, 4);
    let d = p.decide(&mut state, at(0), 1);
    assert_eq!(d.retry_after, Nanos(100 * MS));
    assert_eq!(d.reset, Nanos(400 * MS));
    assert!(p.decide(&mut state, at(100 * MS), 1).allowed);
    assert!(!p.decide(&mut state, at(199 * MS), 1).allowed);
}

// --- retry_after is exact --------------------------------------------------------

/// A small deterministic generator, so the scenarios below are reproducible.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

#[test]
fn retry_after_is_exact_for_every_algorithm_single_and_multi_limit() {
    // Waiting retry_after makes the same request fit, waiting 1 ns less does
    // not, for every algorithm, cost and limit mix; checked at every denial
    // of a random-ish load with hits mixed in.
    let shapes: Vec<Vec<Limit>> = vec![
        vec![limit(7, secs(10))],
        vec![limit(3, Duration::from_millis(1_000))],
        vec![limit(5, secs(1)), limit(20, secs(7))],
        vec![limit(10, secs(60)), limit(500, secs(3600))],
    ];
    for algorithm in Algorithm::ALL {
        for limits in &shapes {
            let p = policy(algorithm, limits.clone());
            let mut rng = Lcg(algorithm as u64 * 31 + limits.len() as u64);
            let mut state = p.new_state();
            let mut now = T0 + rng.next(60 * SEC);
            let mut denials = 0;
            for _ in 0..3_000 {
                now += rng.next(2 * SEC);
                let cost = 1 + rng.next(p.capacity());
                if rng.next(20) == 0 {
                    p.record(&mut state, Nanos(now), cost);
                    continue;
                }
                if !probe(&p, &state, Nanos(now), cost).allowed {
                    assert_retry_after_exact(&p, &state, Nanos(now), cost);
                    denials += 1;
                }
                p.decide(&mut state, Nanos(now), cost);
            }
            assert!(denials > 50, "{algorithm} {limits:?}: {denials} denials");
        }
    }
}

#[test]
fn retry_after_of_a_peek_is_for_one_unit() {
    let p = policy(Algorithm::SlidingLog, vec![limit(3, secs(10))]);
    let mut state = p.new_state();
    for s in 0..3 {
        p.decide(&mut state, at(s * SEC), 1);
    }
    let d = p.decide(&mut state, at(5 * SEC), 0);
    assert!(!d.allowed);
    // The 00:00 unit stops counting at 00:10.
    assert_eq!(d.retry_after, Nanos(5 * SEC));
}

// --- Peeks and hits -------------------------------------------------------------------

#[test]
fn peeking_never_changes_what_later_decisions_answer() {
    for algorithm in Algorithm::ALL {
        let p = policy(algorithm, vec![limit(5, secs(3)), limit(12, secs(20))]);
        let mut rng = Lcg(7 + algorithm as u64);
        let mut plain = p.new_state();
        let mut peeked = p.new_state();
        let mut now = T0;
        for _ in 0..2_000 {
            let cost = 1 + rng.next(p.capacity());
            let prev = now;
            now += rng.next(SEC);
            // Peeks anywhere since the previous request, in any order.
            for _ in 0..rng.next(4) {
                let t = prev + rng.next(now - prev + 1);
                p.decide(&mut peeked, Nanos(t), 0);
            }
            assert_eq!(
                p.decide(&mut plain, Nanos(now), cost),
                p.decide(&mut peeked, Nanos(now), cost),
                "{algorithm}"
            );
        }
    }
}

#[test]
fn a_peek_answers_whether_one_unit_fits_and_takes_nothing() {
    for algorithm in Algorithm::ALL {
        let p = policy(algorithm, vec![limit(2, secs(60))]);
        let mut state = p.new_state();
        let d = p.decide(&mut state, at(0), 0);
        assert!(d.allowed, "{algorithm}");
        assert_eq!(d.remaining, 2, "{algorithm}");
        assert!(p.decide(&mut state, at(0), 1).allowed);
        assert!(p.decide(&mut state, at(0), 0).allowed);
        assert!(p.decide(&mut state, at(0), 1).allowed);
        let d = p.decide(&mut state, at(0), 0);
        assert!(!d.allowed, "{algorithm}");
        assert_eq!(d.remaining, 0, "{algorithm}");
    }
}

#[test]
fn sliding_log_remembers_a_hit_past_the_limit() {
    let p = policy(Algorithm::SlidingLog, vec![limit(5, secs(60))]);
    let mut state = p.new_state();
    let d = p.record(&mut state, at(0), 8);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Nanos(60 * SEC));
    // Bounded: only the newest `max` timestamps are kept.
    let KeyState::SlidingLog(logs) = &state else {
        unreachable!()
    };
    assert_eq!(logs[0].log.len(), 5);
    assert!(!p.decide(&mut state, at(60 * SEC - 1), 1).allowed);
    assert!(p.decide(&mut state, at(60 * SEC), 1).allowed);
}

#[test]
fn token_bucket_and_gcra_remember_a_hit_as_debt() {
    for a in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let p = policy(a, vec![limit(10, secs(1))]);
        let mut state = p.new_state();
        // 30 used from a bucket of 10: 21 tokens must come back before one
        // more fits, at 10 per second.
        let d = p.record(&mut state, at(0), 30);
        assert!(!d.allowed, "{a}");
        assert_eq!(d.remaining, 0, "{a}");
        assert_eq!(d.retry_after, Nanos(2_100 * MS), "{a}");
        assert_eq!(d.reset, Nanos(3 * SEC), "{a}");
        assert!(!p.decide(&mut state, at(2_100 * MS - 1), 1).allowed, "{a}");
        assert!(p.decide(&mut state, at(2_100 * MS), 1).allowed, "{a}");
    }
}

#[test]
fn fixed_window_remembers_a_hit_until_the_window_ends() {
    let p = policy(Algorithm::FixedWindow, vec![limit(10, secs(60))]);
    let mut state = p.new_state();
    let d = p.record(&mut state, mmss(0, 30), 25);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Nanos(30 * SEC));
    assert!(!p.decide(&mut state, at(60 * SEC - 1), 1).allowed);
    assert!(p.decide(&mut state, mmss(1, 0), 1).allowed);
}

#[test]
fn sliding_window_remembers_a_hit_into_the_next_window() {
    let p = policy(Algorithm::SlidingWindow, vec![limit(10, secs(60))]);
    let mut state = p.new_state();
    let d = p.record(&mut state, mmss(0, 10), 30);
    // Next window: 30·(60 − e)/60 + 1 ≤ 10 from e = 42 s, i.e. at 01:42.
    assert_eq!(d.retry_after, Nanos(92 * SEC));
    assert_eq!(d.reset, Nanos(110 * SEC));
    assert!(!p.decide(&mut state, at(102 * SEC - 1), 1).allowed);
    assert!(p.decide(&mut state, mmss(1, 42), 1).allowed);
}

#[test]
fn a_hit_counts_in_every_limit_even_when_one_would_deny() {
    let p = policy(
        Algorithm::FixedWindow,
        vec![limit(3, secs(60)), limit(100, secs(3600))],
    );
    let mut state = p.new_state();
    p.record(&mut state, at(0), 3);
    p.record(&mut state, at(0), 3);
    let d = p.decide(&mut state, at(0), 0);
    assert!(!d.allowed);
    let KeyState::FixedWindow(w) = &state else {
        unreachable!()
    };
    assert_eq!((w[0].count, w[1].count), (6, 6));
}

// --- Restored garbage -------------------------------------------------------------------

fn garbage_states(policy: &Policy) -> Vec<KeyState> {
    let n = policy.limits().len();
    let big = [0, 1, 7, T0, T0 * 2, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    let mut out = Vec::new();
    for (i, &a) in big.iter().enumerate() {
        for &b in &big[i % 3..] {
            let c = big[(i * 5 + 3) % big.len()];
            out.push(match policy.algorithm() {
                Algorithm::FixedWindow => {
                    KeyState::FixedWindow(vec![fixed_window::State { start: a, count: b }; n])
                }
                Algorithm::SlidingLog => KeyState::SlidingLog(vec![
                    sliding_log::State {
                        log: [b, a, c, a, b, 0, u64::MAX].into_iter().collect(),
                    };
                    n
                ]),
                Algorithm::SlidingWindow => KeyState::SlidingWindow(vec![
                    sliding_window::State {
                        start: a,
                        prev: b,
                        curr: c,
                    };
                    n
                ]),
                Algorithm::TokenBucket => KeyState::TokenBucket(vec![
                    token_bucket::State {
                        at: a,
                        used: b,
                        frac: c,
                    };
                    n
                ]),
                Algorithm::Gcra => KeyState::Gcra(vec![gcra::State { tat: a, frac: b }; n]),
            });
        }
    }
    // Another algorithm's state, and the wrong number of limits.
    out.push(KeyState::Gcra(vec![gcra::State { tat: 5, frac: 5 }; 3]));
    out.push(KeyState::FixedWindow(vec![]));
    out
}

#[test]
fn restored_garbage_states_never_panic() {
    let limit_sets = [
        vec![Limit::new(1, Duration::from_nanos(1), None).unwrap()],
        vec![limit(10, secs(60)), limit(500, secs(3600))],
        vec![Limit::new(100_000, Duration::MAX, None).unwrap()],
        vec![Limit::new(3, Duration::from_nanos(u64::MAX), None).unwrap()],
    ];
    let times = [0, 1, T0, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    for algorithm in Algorithm::ALL {
        let mut sets = limit_sets.to_vec();
        if algorithm != Algorithm::SlidingLog {
            sets.push(vec![Limit::new(
                u64::MAX,
                Duration::from_nanos(u64::MAX),
                None,
            )
            .unwrap()]);
        }
        if algorithm.has_burst() {
            sets.push(vec![Limit::new(u64::MAX, secs(1), Some(u64::MAX)).unwrap()]);
            sets.push(vec![Limit::new(1, Duration::MAX, Some(u64::MAX)).unwrap()]);
        }
        for limits in sets {
            let p = policy(algorithm, limits);
            let most = p.limits().iter().map(|l| l.max().max(l.burst())).max();
            let most = most.unwrap_or(0);
            for state in garbage_states(&p) {
                for &t in &times {
                    for cost in [0, 1, p.capacity()] {
                        let mut s = state.clone();
                        let d = p.decide(&mut s, Nanos(t), cost);
                        assert!(d.remaining <= most);
                        assert!(
                            d.remaining <= d.limit,
                            "remaining {} over limit {}",
                            d.remaining,
                            d.limit
                        );
                        p.decide(&mut s, Nanos(t / 2), cost);
                        p.record(&mut s.clone(), Nanos(t), cost);
                        p.idle_expiry(&mut s, Nanos(t));
                    }
                }
            }
        }
    }
}

#[test]
fn a_clock_step_back_is_treated_as_the_states_time() {
    // The window algorithms and the token bucket know their state's time; an
    // earlier `now` neither reopens old windows nor refills backwards.
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
    ] {
        let p = policy(algorithm, vec![limit(2, secs(60))]);
        let mut state = p.new_state();
        assert!(p.decide(&mut state, mmss(1, 30), 2).allowed);
        let d = p.decide(&mut state, mmss(0, 30), 1);
        assert!(!d.allowed, "{algorithm}");
        // Counted from the real (earlier) now, so waiting it is enough.
        assert_retry_after_exact(&p, &state, mmss(0, 30), 1);
    }
}

#[test]
fn idle_expiry_is_when_the_state_is_as_good_as_new() {
    for algorithm in Algorithm::ALL {
        let p = policy(algorithm, vec![limit(4, secs(10)), limit(9, secs(45))]);
        let mut state = p.new_state();
        for i in 0..7 {
            p.decide(&mut state, at(i * 3 * SEC), 1);
        }
        let now = at(20 * SEC);
        let idle = p.idle_expiry(&mut state.clone(), now);
        let later = now.saturating_add(idle);
        let fresh = p.new_state();
        for cost in 1..=4 {
            assert_eq!(
                probe(&p, &state, later, cost),
                probe(&p, &fresh, later, cost),
                "{algorithm}"
            );
        }
        assert!(idle > Nanos::ZERO, "{algorithm}");
        assert_eq!(
            p.idle_expiry(&mut state.clone(), Nanos(later.0 - 1)),
            Nanos(1)
        );
    }
}
