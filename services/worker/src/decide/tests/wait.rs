//! Asks that may wait (SPEC §18) through the worker: answered their wait,
//! journaled as the units they took, so that a replay or a snapshot puts
//! the next ask at the same place in the queue; refused, changing nothing,
//! past the policy's max_wait or on a policy that cannot wait.

use super::*;

/// The tests' usual policies and `paced`: one every 100 ms, asks waiting
/// up to a second.
fn paced() -> Fixture {
    Fixture::journal(&format!(
        "{CONFIG}\n[policies.paced]\nalgorithm = \"gcra\"\nmax_wait = \"1s\"\n\
         limits = [ {{ max = 10, per = \"1s\", burst = 1 }} ]\n"
    ))
}

const MS: u64 = 1_000_000;

const WAIT: &[u8] = br#"{"policy":"paced","wait_ms":1000}"#;

/// The wait of an ask of `f` at `now`, which must be allowed.
fn waited(f: &Fixture, key: &str, now: Nanos) -> Nanos {
    let d = decision(f.allow(key, WAIT, now));
    assert!(d.allowed, "{d:?}");
    d.wait
}

#[test]
fn asks_that_may_wait_are_answered_their_wait_and_journaled_as_counts() {
    let f = paced();
    let key = key_in(1, "w");
    let mut records = Vec::new();
    let mut waits = Vec::new();
    for _ in 0..3 {
        let (answer, mut recorded) = f.send(Verb::Allow, &key, WAIT, true, T0);
        waits.push(decision(answer.expect("answered")).wait);
        records.append(&mut recorded);
    }
    assert_eq!(waits, [Nanos::ZERO, Nanos(100 * MS), Nanos(200 * MS)]);
    let kinds: Vec<_> = records.iter().map(|r| r.typed().kind).collect();
    assert_eq!(kinds, vec![Kind::Counted { units: 1 }; 3]);
    assert!(records.iter().all(|r| r.at() == T0));

    // Replayed at takeover, the queue is where it was.
    let replayed = paced();
    for record in &records {
        assert!(replayed
            .decider
            .replay(&replayed.policies, record, &replayed.counters));
    }
    let counter = format!("paced/{key}");
    assert_eq!(
        replayed.counters.state(&counter),
        f.counters.state(&counter)
    );
    assert_eq!(waited(&replayed, &key, T0), Nanos(300 * MS));
    assert_eq!(waited(&f, &key, T0), Nanos(300 * MS));
}

#[test]
fn a_snapshot_keeps_the_queue() {
    let f = paced();
    let key = key_in(1, "s");
    for _ in 0..4 {
        waited(&f, &key, T0);
    }
    let entries = snapshot_entries(&f);
    let restored = paced();
    let later = Nanos(T0.as_u64() + 50 * MS);
    let kept = restored
        .counters
        .import(entries, later, |name, _| restored.policies.get(name));
    assert_eq!(kept, 1);
    // Four started at 0, 100, 200 and 300 ms: the fifth at 400 ms, which
    // is 350 ms after `later`.
    assert_eq!(waited(&restored, &key, later), Nanos(350 * MS));
}

#[test]
fn a_wait_past_max_wait_or_where_none_is_allowed_is_refused_changing_nothing() {
    let f = paced();
    let key = key_in(1, "r");
    for (verb, body, says) in [
        (
            Verb::Allow,
            &br#"{"policy":"paced","wait_ms":1001}"#[..],
            "over policy \"paced\"'s max_wait of 1000 ms",
        ),
        (Verb::Allow, br#"{"wait_ms":5}"#, "uses sliding_window"),
        (
            Verb::Hit,
            br#"{"policy":"paced","wait_ms":5}"#,
            "\"wait_ms\" is for rl.allow",
        ),
    ] {
        let (answer, records) = f.send(verb, &key, body, true, T0);
        match answer {
            Some(Answer::Error { error, .. }) => {
                assert_eq!(error.code, ErrorCode::BadRequest);
                assert!(error.message.contains(says), "{error}");
            }
            other => panic!("{says}: expected a refusal, got {other:?}"),
        }
        assert!(records.is_empty(), "{says}: nothing is journaled");
    }
    assert_eq!(f.counters.len(), 0, "no counter was touched");
    // The same ask within max_wait is admitted.
    assert_eq!(waited(&f, &key, T0), Nanos::ZERO);
}
