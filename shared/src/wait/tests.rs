//! Waiting decided with a clock the tests hold: every moment is exact.

use super::*;
use crate::policy::{Decision, KeyState, Mode, Policy};

const MS: u64 = 1_000_000;

fn ms(n: u64) -> Nanos {
    Nanos(n * MS)
}

/// `max` per second with a bucket of `burst`, under `algorithm`, letting
/// asks wait up to a second.
fn policy(algorithm: Algorithm, limits: &[(u64, u64)]) -> Policy {
    let limits = limits
        .iter()
        .map(|&(max, burst)| Limit::new(max, Duration::from_secs(1), Some(burst)).unwrap())
        .collect();
    Policy::new("paced", algorithm, limits)
        .unwrap()
        .with_max_wait(Duration::from_secs(1))
        .unwrap()
}

/// Runs `test` on a fresh key of a bucket and of GCRA with `limits`
/// (`max` per second, `burst`): both must wait alike.
fn each_bucket(limits: &[(u64, u64)], test: impl Fn(Algorithm, &Policy, &mut KeyState)) {
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let p = policy(algorithm, limits);
        test(algorithm, &p, &mut p.new_state());
    }
}

const NOW: Nanos = Nanos(1_000 * 1_000_000_000);

/// Asks `cost` at [`NOW`] waiting up to `within`, which must be denied
/// without a wait and without changing `state`; returns the denial.
fn denied_taking_nothing(p: &Policy, state: &mut KeyState, cost: u64, within: Nanos) -> Decision {
    let before = state.clone();
    let denied = p.decide_within(state, NOW, cost, within);
    assert!(!denied.allowed && denied.wait == Nanos::ZERO, "{denied:?}");
    assert_eq!(*state, before, "a denial takes nothing");
    denied
}

#[test]
fn asks_at_once_start_in_arrival_order_one_interval_apart() {
    each_bucket(&[(10, 1)], |algorithm, p, state| {
        let waits: Vec<_> = (0..5)
            .map(|_| {
                let d = p.decide_within(state, NOW, 1, ms(1_000));
                assert!(
                    d.allowed && d.retry_after == Nanos::ZERO,
                    "{algorithm}: {d:?}"
                );
                d.wait
            })
            .collect();
        assert_eq!(
            waits,
            [ms(0), ms(100), ms(200), ms(300), ms(400)],
            "{algorithm}"
        );
    });
}

#[test]
fn a_waited_ask_holds_its_moment_so_a_plain_ask_then_is_denied() {
    each_bucket(&[(10, 1)], |algorithm, p, state| {
        p.decide_within(state, NOW, 1, ms(1_000));
        let waited = p.decide_within(state, NOW, 1, ms(1_000));
        assert_eq!(waited.wait, ms(100), "{algorithm}");
        // At its moment the unit is the waited ask's, not the next one's.
        let plain = p.decide(state, NOW.saturating_add(ms(100)), 1);
        assert!(!plain.allowed, "{algorithm}: {plain:?}");
        assert_eq!(plain.retry_after, ms(100), "{algorithm}");
        assert!(
            p.decide(state, NOW.saturating_add(ms(200)), 1).allowed,
            "{algorithm}"
        );
    });
}

#[test]
fn an_ask_whose_moment_is_past_its_wait_is_denied_and_takes_nothing() {
    each_bucket(&[(10, 1)], |algorithm, p, state| {
        for _ in 0..3 {
            assert!(p.decide_within(state, NOW, 1, ms(250)).allowed);
        }
        let denied = denied_taking_nothing(p, state, 1, ms(250));
        assert_eq!(denied.retry_after, ms(300), "{algorithm}");
        // The same ask with a long enough wait gets the moment it was denied.
        assert_eq!(p.decide_within(state, NOW, 1, ms(300)).wait, ms(300));
    });
}

#[test]
fn with_several_limits_an_ask_starts_when_every_limit_fits() {
    // 10/s one at a time, and 2/s with a bucket of 2.
    each_bucket(&[(10, 1), (2, 2)], |algorithm, p, state| {
        assert_eq!(p.decide_within(state, NOW, 1, ms(1_000)).wait, ms(0));
        // The first limit is the later one.
        assert_eq!(p.decide_within(state, NOW, 1, ms(1_000)).wait, ms(100));
        // Now the second: its bucket of 2 is spent, one back every 500 ms.
        denied_taking_nothing(p, state, 1, ms(499));
        let third = p.decide_within(state, NOW, 1, ms(500));
        assert!(third.allowed, "{algorithm}");
        assert_eq!(third.wait, ms(500), "{algorithm}");
    });
}

#[test]
fn a_cost_of_several_units_waits_for_all_of_them() {
    each_bucket(&[(10, 5)], |algorithm, p, state| {
        let waits: Vec<_> = [5, 5, 3]
            .into_iter()
            .map(|cost| p.decide_within(state, NOW, cost, ms(1_000)).wait)
            .collect();
        assert_eq!(waits, [ms(0), ms(500), ms(800)], "{algorithm}");
        // 2 more would start at 1000 ms, 3 at 1100 ms: past the wait.
        denied_taking_nothing(p, state, 3, ms(1_000));
        assert_eq!(p.decide_within(state, NOW, 2, ms(1_000)).wait, ms(1_000));
    });
}

#[test]
fn a_peek_says_the_wait_an_ask_would_get_and_takes_nothing() {
    each_bucket(&[(10, 1)], |algorithm, p, state| {
        p.decide_within(state, NOW, 1, ms(1_000));
        let before = state.clone();
        let peek = p.decide_within(state, NOW, 0, ms(1_000));
        assert!(peek.allowed, "{algorithm}: {peek:?}");
        assert_eq!(peek.wait, ms(100), "{algorithm}");
        assert_eq!(*state, before, "{algorithm}: peeks take nothing");
        let short = denied_taking_nothing(p, state, 0, ms(50));
        assert_eq!(short.retry_after, ms(100), "{algorithm}");
        assert_eq!(p.decide_within(state, NOW, 1, ms(1_000)).wait, ms(100));
    });
}

#[test]
fn without_a_wait_nothing_changes() {
    each_bucket(&[(10, 1)], |algorithm, p, waited| {
        let mut plain = p.new_state();
        for i in 0..3 {
            let now = NOW.saturating_add(ms(40 * i));
            let a = p.decide_within(waited, now, 1, Nanos::ZERO);
            let b = p.decide(&mut plain, now, 1);
            assert_eq!(a, b, "{algorithm}");
            assert_eq!(a.wait, Nanos::ZERO);
        }
        assert_eq!(*waited, plain);
    });
}

#[test]
fn a_shadow_policy_answers_a_denial_allowed_without_a_wait() {
    let p = policy(Algorithm::Gcra, &[(10, 1)]).with_mode(Mode::Shadow);
    let mut state = p.new_state();
    assert_eq!(p.decide_within(&mut state, NOW, 1, ms(100)).wait, ms(0));
    let waited = p.decide_within(&mut state, NOW, 1, ms(100));
    assert!(
        waited.within_limits() && waited.wait == ms(100),
        "{waited:?}"
    );
    let before = state.clone();
    let past = p.decide_within(&mut state, NOW, 1, ms(100));
    assert!(past.allowed && past.shadow_denied, "{past:?}");
    assert_eq!(past.wait, Nanos::ZERO);
    assert_eq!(state, before);
}

#[test]
fn max_wait_is_for_buckets_and_at_most_a_minute() {
    let limit = || vec![Limit::new(10, Duration::from_secs(1), None).unwrap()];
    for algorithm in Algorithm::ALL {
        let p = Policy::new("p", algorithm, limit()).unwrap();
        let set = p.clone().with_max_wait(Duration::from_secs(1));
        assert_eq!(set.is_ok(), algorithm.has_burst(), "{algorithm}");
        if !algorithm.has_burst() {
            let e = set.unwrap_err().to_string();
            assert!(e.contains("needs token_bucket or gcra"), "{e}");
            // Zero is every policy's: asks never wait.
            assert!(p.with_max_wait(Duration::ZERO).is_ok());
        }
    }
    let p = Policy::new("p", Algorithm::Gcra, limit()).unwrap();
    assert!(p.clone().with_max_wait(MAX_WAIT).is_ok());
    let e = p.with_max_wait(MAX_WAIT + Duration::from_millis(1));
    assert_eq!(e.unwrap_err(), PolicyError::MaxWaitTooLong);
    assert!(PolicyError::MaxWaitTooLong
        .to_string()
        .contains("at most 1m"));
}

#[test]
fn an_ask_may_wait_up_to_the_policy_max_wait() {
    let p = policy(Algorithm::TokenBucket, &[(10, 1)]);
    assert_eq!(crate::ask::admit_wait(&p, 0), Ok(Nanos::ZERO));
    assert_eq!(crate::ask::admit_wait(&p, 1_000), Ok(ms(1_000)));
    let e = crate::ask::admit_wait(&p, 1_001).unwrap_err();
    assert_eq!(e.code, crate::wire::ErrorCode::BadRequest);
    assert!(
        e.message
            .contains("over policy \"paced\"'s max_wait of 1000 ms"),
        "{e}"
    );
    let never = Policy::new("never", Algorithm::Gcra, p.limits().to_vec()).unwrap();
    let e = crate::ask::admit_wait(&never, 1).unwrap_err();
    assert!(e.message.contains("max_wait of 0 ms"), "{e}");
    let window = Policy::builtin_default();
    let e = crate::ask::admit_wait(&window, 1).unwrap_err();
    assert!(e.message.contains("uses sliding_window"), "{e}");
}

#[test]
fn a_global_policy_cannot_wait_yet() {
    use crate::region::{Global, OnCut, Scope};
    let regions = ["east".to_string(), "west".to_string()];
    let global = || Scope::Global(Global::new("east", &regions, &[], OnCut::Reserved).unwrap());
    let e = policy(Algorithm::Gcra, &[(10, 1)]).with_scope(global());
    assert_eq!(
        e.unwrap_err(),
        PolicyError::GlobalNotYet("max_wait".to_string())
    );
    // Whichever comes first.
    let p = Policy::new(
        "p",
        Algorithm::Gcra,
        policy(Algorithm::Gcra, &[(10, 1)]).limits().to_vec(),
    );
    let p = p.unwrap().with_scope(global()).unwrap();
    assert!(p.with_max_wait(Duration::from_secs(1)).is_err());
}

#[test]
fn a_policy_table_sets_max_wait_and_refuses_it_with_the_field_named() {
    use crate::config::PolicyTable;
    let table = |algorithm: &str, max_wait: &str| {
        let json = format!(
            r#"{{"algorithm":"{algorithm}","limits":[{{"max":10,"per":"1s"}}],"max_wait":"{max_wait}"}}"#
        );
        PolicyTable::from_json(json.as_bytes())
            .unwrap()
            .to_policy("paced")
    };
    let p = table("gcra", "2s").unwrap();
    assert_eq!(p.max_wait(), ms(2_000));
    let back = PolicyTable::of(&p);
    assert_eq!(back.max_wait.as_deref(), Some("2s"));
    assert_eq!(back.to_policy("paced").unwrap(), p);
    for (algorithm, max_wait, says) in [
        ("sliding_window", "1s", "needs token_bucket or gcra"),
        ("token_bucket", "61s", "at most 1m"),
        ("gcra", "soon", "max_wait = \"2s\""),
    ] {
        let e = table(algorithm, max_wait).unwrap_err();
        assert_eq!(e.field, "max_wait", "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
    assert_eq!(table("sliding_log", "0s").unwrap().max_wait(), Nanos::ZERO);
}
