//! Asks that may wait (SPEC §18) through the worker: answered their wait,
//! journaled as the units they took, so that a replay or a snapshot puts
//! the next ask at the same place in the queue; refused, changing nothing,
//! past the policy's max_wait or on a policy that cannot wait.

use super::*;
use crate::kept::Carried;

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

/// The decision an ask of `body` at `now` got, and whether it was a repeat.
fn asked_at(f: &Fixture, key: &str, body: &[u8], now: Nanos) -> (Decision, bool) {
    match f.allow(key, body, now) {
        Answer::Decision {
            decision, repeat, ..
        } => (decision, repeat),
        other => panic!("a decision, not {other:?}"),
    }
}

/// A repeat of an ask admitted for a later start (SPEC §16, §18) is told
/// the wait left until the same start, zero once it has come, and counts
/// nothing; so after a journal replay or a snapshot's carried ids, and
/// the id is remembered while the ask counts from its start on.
#[test]
fn a_repeat_of_an_ask_that_waits_is_told_what_is_left_of_its_wait() {
    let f = paced();
    let key = key_in(1, "again");
    let body = br#"{"policy":"paced","wait_ms":1000,"id":"w-1"}"#;
    assert_eq!(waited(&f, &key, T0), Nanos::ZERO, "the bucket's one now");
    let (answer, records) = f.send(Verb::Allow, &key, body, true, T0);
    let first = decision(answer.expect("answered"));
    assert_eq!(first.wait, Nanos(100 * MS));
    let at = |ms: u64| Nanos(T0.as_u64() + ms * MS);

    let (again, repeat) = asked_at(&f, &key, body, at(30));
    assert!(repeat);
    assert_eq!(again.wait, Nanos(70 * MS));
    assert_eq!(
        (again.remaining, again.limit),
        (first.remaining, first.limit)
    );
    // Past its start, and past when an ask at once would be forgotten
    // (100 ms at this rate): still a repeat, starting now.
    let (again, repeat) = asked_at(&f, &key, body, at(150));
    assert!(repeat);
    assert_eq!(again.wait, Nanos::ZERO);

    // The journal's id record keeps the start: a new owner answers the same.
    let named = records.iter().find_map(|r| r.i.as_ref()).expect("an id");
    assert_eq!(named.start, at(100).as_u64());
    let replayed = paced();
    for record in &records {
        replayed
            .decider
            .replay(&replayed.policies, record, &replayed.counters);
    }
    assert_eq!(
        asked_at(&replayed, &key, body, at(40)),
        (again_at(&first, 60), true)
    );

    // So do the ids a snapshot carries, while the start is to come; after
    // it, the id is carried as an ask without a wait (format 4's form).
    let carried = Carried::read(&f.counters, at(10), false);
    assert!(carried.ids.iter().all(|c| c.waits()));
    let next = paced();
    carried.take_over(&next.counters, at(10), false);
    assert_eq!(
        asked_at(&next, &key, body, at(20)),
        (again_at(&first, 80), true)
    );
    let carried = Carried::read(&f.counters, at(120), false);
    assert!(carried.ids.iter().all(|c| !c.waits()), "{carried:?}");

    // Counted once: the next ask queues behind the first two.
    assert_eq!(waited(&f, &key, T0), Nanos(200 * MS));
}

/// `first` as a repeat gets it with `ms` left of its wait.
fn again_at(first: &Decision, ms: u64) -> Decision {
    Decision {
        wait: Nanos(ms * MS),
        ..*first
    }
}

/// A hold verb's reply on its own subject, decoded.
fn hold_reply(f: &Fixture, verb: Verb, key: &str, body: &str, now: Nanos) -> wire::Reply {
    let (answer, _) = f.send(verb, key, body.as_bytes(), true, now);
    let reply = crate::reply::Reply::of(&answer.expect("answered"), "w");
    wire::decode_reply(&reply.payload).unwrap()
}

/// A reserve that may wait (SPEC §13, §18) is kept for its start, in the
/// same queue as asks, answered `wait_ms`, its hold ending its ttl after
/// the start; past its wait it is denied, keeping nothing; a wait the
/// policy does not take, or on a settle, is refused; its repeat is told
/// what is left of its wait and names the same hold.
#[test]
fn a_reserve_that_may_wait_is_kept_for_its_start() {
    let f = paced();
    let key = key_in(1, "hold");
    let reserve = r#"{"policy":"paced","wait_ms":1000,"ttl_ms":5000}"#;
    let mut records = Vec::new();
    for n in 0..3u64 {
        let (answer, mut recorded) = f.send(Verb::Reserve, &key, reserve.as_bytes(), true, T0);
        records.append(&mut recorded);
        let reply = crate::reply::Reply::of(&answer.expect("answered"), "w");
        let wire::Reply::Decision(d) = wire::decode_reply(&reply.payload).unwrap() else {
            panic!("a decision");
        };
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.wait_ms, 100 * n);
        assert_eq!(d.hold.expect("a hold").expires_ms, 100 * n + 5_000);
    }
    // Asks queue behind the holds, here and at a new owner from the journal.
    let replayed = paced();
    for record in &records {
        replayed
            .decider
            .replay(&replayed.policies, record, &replayed.counters);
    }
    assert_eq!(waited(&replayed, &key, T0), Nanos(300 * MS));

    let short = r#"{"policy":"paced","wait_ms":350}"#;
    let wire::Reply::Decision(d) = hold_reply(&f, Verb::Reserve, &key, short, T0) else {
        panic!("a decision");
    };
    assert!(d.allowed && d.hold.is_some(), "the start at 300 ms: {d:?}");
    let before = f.counters.state(&format!("paced/{key}"));
    let wire::Reply::Decision(d) = hold_reply(&f, Verb::Reserve, &key, short, T0) else {
        panic!("a decision");
    };
    assert!(!d.allowed && d.hold.is_none() && d.wait_ms == 0, "{d:?}");
    assert_eq!(f.counters.state(&format!("paced/{key}")), before);

    let settle =
        r#"{"policy":"paced","hold":"0123456789abcdef0123456789abcdef","cost":1,"wait_ms":5}"#;
    for (verb, body, says) in [
        (
            Verb::Reserve,
            r#"{"policy":"paced","wait_ms":1001}"#,
            "max_wait of 1000 ms",
        ),
        (Verb::Reserve, r#"{"wait_ms":5}"#, "cannot admit"),
        (Verb::Settle, settle, "takes no \"wait_ms\""),
    ] {
        let wire::Reply::Error(e) = hold_reply(&f, verb, &key, body, T0) else {
            panic!("{body}: refused");
        };
        assert!(e.message.contains(says), "{body}: {e}");
    }
    assert_eq!(f.counters.state(&format!("paced/{key}")), before);

    // Named: its repeat names the same hold, with what is left of the wait.
    let named = r#"{"policy":"paced","wait_ms":1000,"id":"job-1"}"#;
    let first = hold_reply(&f, Verb::Reserve, &key, named, T0);
    let again = hold_reply(
        &f,
        Verb::Reserve,
        &key,
        named,
        Nanos(T0.as_u64() + 100 * MS),
    );
    let (wire::Reply::Decision(first), wire::Reply::Decision(again)) = (first, again) else {
        panic!("decisions");
    };
    assert_eq!((first.wait_ms, again.wait_ms), (400, 300));
    assert!(again.repeat);
    assert_eq!(first.hold.unwrap().hold, again.hold.unwrap().hold);
}
