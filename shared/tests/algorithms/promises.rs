//! What every algorithm promises whatever happens: retry_after is exact, a
//! peek takes nothing, a hit is remembered, restored garbage never panics,
//! a clock step back is harmless, idle expiry is exact.

use super::{assert_retry_after_exact, at, limit, mmss, policy, probe, secs, MS, SEC, T0};
use sluice_core::algorithm::{fixed_window, gcra, sliding_log, sliding_window, token_bucket};
use sluice_core::policy::{Algorithm, KeyState, Limit, Policy};
use sluice_core::time::Nanos;
use std::time::Duration;

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
