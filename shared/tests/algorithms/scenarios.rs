//! Named scenarios per algorithm: two per minute, the sliding window's
//! estimate, window boundaries, a minute and an hour together, token bucket
//! and GCRA rates.

use super::{assert_retry_after_exact, at, limit, mmss, policy, probe, secs, MS, SEC, T0};
use sluice_core::algorithm::sliding_window;
use sluice_core::policy::{Algorithm, KeyState, Limit, Policy};
use sluice_core::time::Nanos;

const US: u64 = 1_000;

/// Decides cost 1 at each time in turn; returns which were allowed.
fn allowed_at(policy: &Policy, times: &[Nanos]) -> Vec<bool> {
    let mut state = policy.new_state();
    times
        .iter()
        .map(|&t| policy.decide(&mut state, t, 1).allowed)
        .collect()
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
        KeyState::Blocked(_) => unreachable!("these policies block no key"),
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
