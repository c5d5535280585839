use super::*;
use crate::config::PolicyTable;
use crate::policy::{Algorithm, Limit, PolicyError};
use crate::time::Nanos;
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

fn thresholds(p: &[i64]) -> Thresholds {
    Thresholds::new(p).unwrap()
}

fn fixed(limits: Vec<Limit>, alerts: &[i64]) -> Policy {
    Policy::new("quota", Algorithm::FixedWindow, limits)
        .unwrap()
        .with_alerts(thresholds(alerts))
        .unwrap()
}

fn per_minute(max: u64) -> Limit {
    Limit::new(max, Duration::from_secs(60), None).unwrap()
}

#[test]
fn thresholds_are_one_to_a_thousand_sorted_once() {
    assert_eq!(thresholds(&[100, 80, 80]).percents(), &[80, 100]);
    assert_eq!(thresholds(&[1, 1000]).percents(), &[1, 1000]);
    for bad in [0, 1001, -5] {
        let e = Thresholds::new(&[80, bad]).unwrap_err();
        assert_eq!(e, PolicyError::AlertThreshold(bad));
        assert!(e.to_string().contains("1 to 1000"), "{e}");
    }
}

#[test]
fn a_threshold_is_reached_at_its_share_rounded_up() {
    assert_eq!(units(10, 80), 8);
    assert_eq!(units(3, 80), 3);
    assert_eq!(units(1, 1), 1);
    assert_eq!(units(10, 150), 15);
    assert_eq!(units(u64::MAX, 1000), u64::MAX);
    let t = ThresholdUnits::new(&[per_minute(10)], thresholds(&[50, 80, 100]));
    assert_eq!(t.floors(), &[5]);
    assert_eq!(t.crossed(0, 0, 8).collect::<Vec<_>>(), vec![50, 80]);
    assert_eq!(t.crossed(0, 8, 9).count(), 0);
    assert_eq!(t.crossed(0, 9, 12).collect::<Vec<_>>(), vec![100]);
}

#[test]
fn thresholds_are_in_units_of_each_limit_and_follow_the_policy() {
    let t = ThresholdUnits::new(&[per_minute(10), per_minute(3)], thresholds(&[50, 80]));
    assert_eq!(t.floors(), &[5, 2]);
    assert_eq!(t.crossed(1, 0, 3).collect::<Vec<_>>(), vec![50, 80]);
    assert_eq!(t.crossed(0, 0, 3).count(), 0);
    assert_eq!(t.crossed(2, 0, 100).count(), 0, "no such limit");
    let policy = fixed(vec![per_minute(10), per_minute(3)], &[80, 50]);
    assert_eq!(policy.threshold_units(), &t);
    assert_eq!(policy.alerts().percents(), &[50, 80]);
    let bare = Policy::new("p", Algorithm::FixedWindow, vec![per_minute(1)]).unwrap();
    assert!(bare.threshold_units().floors().is_empty());
}

#[test]
fn only_fixed_windows_with_limits_take_alerts() {
    for algorithm in Algorithm::ALL {
        let p = Policy::new("p", algorithm, vec![per_minute(10)]).unwrap();
        let r = p.with_alerts(thresholds(&[80]));
        assert_eq!(
            r.is_ok(),
            algorithm == Algorithm::FixedWindow,
            "{algorithm}"
        );
        if let Err(e) = r {
            assert!(e.to_string().contains("alerts need fixed_window"), "{e}");
        }
    }
}

#[test]
fn each_threshold_fires_once_per_window_and_again_in_the_next() {
    let policy = fixed(vec![per_minute(10)], &[80, 100]);
    let mut state = policy.new_state();
    let t0 = Nanos::from_secs(600);
    let mut fired = Vec::new();
    for i in 0..12 {
        let (_, c) = watch(&policy, &mut state, |s| policy.decide(s, t0, 1));
        fired.extend(c.into_iter().map(|c| (i, c.threshold_pct, c.used)));
    }
    assert_eq!(fired, vec![(7, 80, 8), (9, 100, 10)]);
    let next = Nanos::from_secs(660);
    let (_, c) = watch(&policy, &mut state, |s| policy.decide(s, next, 9));
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].window_start, next);
    assert_eq!(c[0].window_end, Nanos::from_secs(720));
    assert_eq!(c[0].threshold_pct, 80);
}

#[test]
fn a_hit_past_max_reaches_thresholds_over_a_hundred() {
    let policy = fixed(vec![per_minute(10)], &[100, 200]);
    let mut state = policy.new_state();
    let now = Nanos::from_secs(60);
    let (_, c) = watch(&policy, &mut state, |s| policy.record(s, now, 25));
    let pcts: Vec<u16> = c.iter().map(|c| c.threshold_pct).collect();
    assert_eq!(pcts, vec![100, 200]);
}

#[test]
fn each_limit_is_watched_on_its_own() {
    let policy = fixed(
        vec![
            per_minute(10),
            Limit::new(100, Duration::from_secs(3600), None).unwrap(),
        ],
        &[50],
    );
    let mut state = policy.new_state();
    let now = Nanos::from_secs(3600);
    let (_, c) = watch(&policy, &mut state, |s| policy.decide(s, now, 5));
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].limit, c[0].used), (0, 5));
    let mut t = now;
    let mut hourly = 0;
    for _ in 0..10 {
        t = t.saturating_add(Nanos::from_secs(60));
        let (_, c) = watch(&policy, &mut state, |s| policy.decide(s, t, 5));
        hourly += c.iter().filter(|c| c.limit == 1).count();
    }
    assert_eq!(hourly, 1, "50 of the hour's 100 reached once");
}

#[test]
fn more_limits_than_kept_on_the_stack_are_each_watched() {
    let limits = (1..=6).map(|i| per_minute(2 * i)).collect();
    let policy = fixed(limits, &[50]);
    let mut state = policy.new_state();
    let now = Nanos::from_secs(60);
    let mut reached = Vec::new();
    for _ in 0..6 {
        let (_, c) = watch(&policy, &mut state, |s| policy.record(s, now, 1));
        reached.extend(c.iter().map(|c| (c.limit, c.used)));
    }
    // 50 % of 2, 4, ..., 12 is reached at 1, 2, ..., 6 (hits count past max).
    assert_eq!(
        reached,
        (0..6).map(|i| (i, u64::from(i) + 1)).collect::<Vec<_>>()
    );
}

#[test]
fn a_policy_without_alerts_reports_nothing() {
    let policy = Policy::new("p", Algorithm::FixedWindow, vec![per_minute(1)]).unwrap();
    let mut state = policy.new_state();
    let (d, c) = watch(&policy, &mut state, |s| {
        policy.decide(s, Nanos::from_secs(1), 1)
    });
    assert!(d.allowed);
    assert!(c.is_empty());
}

#[test]
fn an_alert_names_its_window_and_limit_and_has_one_id() {
    let policy = fixed(vec![per_minute(10)], &[80]);
    let crossing = Crossing {
        limit: 0,
        threshold_pct: 80,
        used: 8,
        window_start: Nanos::from_secs(60),
        window_end: Nanos::from_secs(120),
    };
    let a = Alert::of(&crossing, &policy, "alice", Nanos::from_millis(61_500));
    assert_eq!(a.per, "1m");
    assert_eq!(
        (a.max, a.window_start_ms, a.window_end_ms, a.at_ms),
        (10, 60_000, 120_000, 61_500)
    );
    assert_eq!(a.msg_id(0), "quota|alice|0|80|60000");
    let json = serde_json::to_value(&a).unwrap();
    for field in [
        "key",
        "policy",
        "threshold_pct",
        "max",
        "per",
        "used",
        "window_start_ms",
        "window_end_ms",
        "at_ms",
    ] {
        assert!(json.get(field).is_some(), "{field} in {json}");
    }
}

fn fired(key: &str, window_end_ms: u64, stored: bool) -> FiredAlert {
    FiredAlert {
        alert: Alert {
            key: key.into(),
            policy: "quota".into(),
            threshold_pct: 80,
            max: 10,
            per: "1m".into(),
            used: 8,
            window_start_ms: window_end_ms - 60_000,
            window_end_ms,
            at_ms: window_end_ms - 1,
        },
        limit: 0,
        stored,
    }
}

#[test]
fn the_fired_table_fires_once_prunes_ended_windows_and_hands_on_what_is_unstored() {
    let mut table = Fired::default();
    assert!(table.fire(fired("a", 120_000, false)));
    assert!(!table.fire(fired("a", 120_000, false)));
    assert!(table.fire(fired("b", 120_000, false)));
    table.stored(&fired("a", 120_000, false).msg_id());
    table.prune(Nanos::from_secs(120));
    // "a" is stored and its window is over; "b" waits to be stored.
    assert_eq!(table.carried().len(), 1);
    let mut next = Fired::default();
    let again = next.take_over(&[fired("b", 120_000, false), fired("c", 180_000, true)]);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].alert.key, "b");
    assert!(
        !next.fire(fired("c", 180_000, false)),
        "carried alerts fire no more"
    );
}

#[test]
fn the_config_refuses_bad_thresholds_with_the_field() {
    let table = |alerts: &str| {
        PolicyTable::from_json(
            format!(r#"{{"algorithm":"fixed_window","limits":[{{"max":10,"per":"1m"}}],"alerts":{alerts}}}"#)
                .as_bytes(),
        )
        .and_then(|t| t.to_policy("quota"))
    };
    assert_eq!(table("[80,100]").unwrap().alerts().percents(), &[80, 100]);
    for bad in ["[0]", "[1001]", "[80,-1]"] {
        let e = table(bad).unwrap_err();
        assert_eq!(e.field, "alerts", "{bad}");
        assert!(e.reason.contains("1 to 1000"), "{}", e.reason);
    }
    let e = PolicyTable::from_json(
        br#"{"algorithm":"gcra","limits":[{"max":10,"per":"1m"}],"alerts":[80]}"#,
    )
    .unwrap()
    .to_policy("quota")
    .unwrap_err();
    assert_eq!(e.field, "alerts");
    let e = PolicyTable::from_json(br#"{"concurrency":3,"alerts":[80]}"#)
        .unwrap()
        .to_policy("slots")
        .unwrap_err();
    assert!(e.reason.contains("alerts need limits"), "{}", e.reason);
    let p = table("[100,80]").unwrap();
    assert_eq!(
        PolicyTable::of(&p).alerts,
        vec![80, 100],
        "written back as set"
    );
}

proptest! {
    /// The u64 fast path of `units` is the exact ceiling, as u128 says.
    #[test]
    fn units_is_the_exact_ceiling(max in any::<u64>(), pct in 1u16..=1000) {
        let exact = (u128::from(max) * u128::from(pct)).div_ceil(100).max(1);
        prop_assert_eq!(u128::from(units(max, pct)), exact.min(u128::from(u64::MAX)));
    }

    /// Counting up from nothing in one window, by any steps, reaches each
    /// threshold exactly once if the final count gets there, never if not.
    #[test]
    fn counting_up_reaches_each_threshold_once(
        max in 1u64..500,
        pcts in proptest::collection::vec(1i64..=1000, 1..5),
        steps in proptest::collection::vec(0u64..50, 1..60),
    ) {
        let t = thresholds(&pcts);
        let watched = ThresholdUnits::new(&[per_minute(max)], t.clone());
        let mut count = 0u64;
        let mut seen: HashMap<u16, usize> = HashMap::new();
        for s in steps {
            let next = count + s;
            for p in watched.crossed(0, count, next) {
                *seen.entry(p).or_default() += 1;
            }
            count = next;
        }
        for &p in t.percents() {
            let expected = usize::from(units(max, p) <= count);
            prop_assert_eq!(seen.get(&p).copied().unwrap_or(0), expected, "{}% of {}", p, max);
        }
    }

    /// Decisions over several windows: per (limit, threshold, window) at most
    /// one crossing, and one exactly when that window's count got there.
    #[test]
    fn decisions_reach_each_threshold_at_most_once_per_window(
        asks in proptest::collection::vec((0u64..200_000, 1u64..4, any::<bool>()), 1..150),
    ) {
        let policy = fixed(vec![per_minute(10), Limit::new(30, Duration::from_secs(180), None).unwrap()], &[50, 100, 150]);
        let mut state = policy.new_state();
        let mut asks = asks;
        asks.sort_by_key(|a| a.0);
        let mut per_window: HashMap<(u32, u16, Nanos), usize> = HashMap::new();
        let mut counts: HashMap<(u32, Nanos), u64> = HashMap::new();
        for (ms, cost, hit) in asks {
            let now = Nanos::from_millis(ms);
            let (_, c) = watch(&policy, &mut state, |s| if hit { policy.record(s, now, cost) } else { policy.decide(s, now, cost) });
            for c in c {
                *per_window.entry((c.limit, c.threshold_pct, c.window_start)).or_default() += 1;
            }
            if let KeyState::FixedWindow(w) = &state {
                for (i, w) in w.iter().enumerate() {
                    counts.insert((i as u32, Nanos(w.start)), w.count);
                }
            }
        }
        for n in per_window.values() {
            prop_assert_eq!(*n, 1);
        }
        for ((limit, start), count) in counts {
            let max = policy.limits()[limit as usize].max();
            for &p in policy.alerts().percents() {
                let fired = per_window.contains_key(&(limit, p, start));
                prop_assert_eq!(fired, units(max, p) <= count);
            }
        }
    }
}

/// SPEC §18: a block neither fires a threshold nor, when it is lifted,
/// makes the count it held look new.
#[test]
fn a_block_and_its_end_cross_no_threshold_again() {
    let p = fixed(vec![per_minute(4)], &[50])
        .with_block_for(Duration::from_secs(10))
        .unwrap();
    let mut state = p.new_state();
    let t = Nanos::from_secs(6_000);
    let crossed =
        |state: &mut KeyState, at: Nanos| watch(&p, state, |s| p.decide(s, at, 1)).1.len();
    let fired: Vec<usize> = (0..4).map(|_| crossed(&mut state, t)).collect();
    assert_eq!(fired, [0, 1, 0, 0], "50% is reached by the second unit");
    assert_eq!(crossed(&mut state, t), 0, "the denial that blocks");
    assert!(matches!(state, KeyState::Blocked(_)));
    // The block ended: a hit counts on from the 4 units the block held.
    let later = Nanos::from_secs(6_011);
    let hit = watch(&p, &mut state, |s| p.record(s, later, 1)).1;
    assert!(hit.is_empty(), "50% was reached before the block: {hit:?}");
    let KeyState::FixedWindow(windows) = &state else {
        panic!("no longer blocked: {state:?}")
    };
    assert_eq!(windows[0].count, 5);
}
