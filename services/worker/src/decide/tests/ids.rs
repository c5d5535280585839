//! Idempotent asks (SPEC §16): an ask named by an id counts once, is
//! refused when the id names another ask, and is remembered only while
//! it counts, through a journal replay and a snapshot's carried state.

use super::batch_holds::holds_fixture;
use super::*;
use crate::kept::Carried;

/// The answer to `rl.<verb>.<key>` with `body`, and whether it was a repeat.
fn asked(
    f: &Fixture,
    verb: Verb,
    key: &str,
    body: &str,
    now: Nanos,
) -> (Answer<'static>, Vec<Record>) {
    let (answer, records) = f.send(verb, key, body.as_bytes(), true, now);
    let answer = answer.expect("answered");
    // Answers borrow the fixture's policy names; keep only what tests read.
    let owned = match answer {
        Answer::Decision {
            decision,
            repeat,
            encoding,
            grouped,
            ..
        } => Answer::Decision {
            decision,
            policy: "",
            repeat,
            encoding,
            grouped,
        },
        Answer::Error { error, encoding } => Answer::Error { error, encoding },
        other => panic!("a decision or an error, not {other:?}"),
    };
    (owned, records)
}

fn repeat_of(answer: &Answer<'_>) -> (Decision, bool) {
    match answer {
        Answer::Decision {
            decision, repeat, ..
        } => (*decision, *repeat),
        other => panic!("a decision, not {other:?}"),
    }
}

#[test]
fn a_repeat_counts_nothing_and_gets_the_first_decision() {
    let f = Fixture::new();
    let key = key_in(1, "id");
    let body = r#"{"cost":2,"id":"req-1"}"#;
    let (first, records) = asked(&f, Verb::Allow, &key, body, T0);
    let (first, repeat) = repeat_of(&first);
    assert!(first.allowed && !repeat);
    assert_eq!(first.remaining, 13);
    assert_eq!(records.len(), 2, "the count and the id: {records:?}");
    assert_eq!(records[1].i.as_ref().map(|n| n.id.as_str()), Some("req-1"));

    let later = Nanos(T0.0 + SEC / 10);
    let (again, records) = asked(&f, Verb::Allow, &key, body, later);
    assert_eq!(repeat_of(&again), (first, true));
    assert!(records.is_empty(), "a repeat stores nothing: {records:?}");
    assert_eq!(f.remaining(&key, later), 13, "counted once");
    let stats = f.decider.stats();
    assert_eq!(stats.meters.ask_repeats.get(), 1);

    // Another id is another ask.
    let (other, _) = asked(&f, Verb::Allow, &key, r#"{"cost":2,"id":"req-2"}"#, later);
    assert_eq!(repeat_of(&other).0.remaining, 11);
}

#[test]
fn the_same_id_for_another_ask_is_refused_and_counts_nothing() {
    let f = Fixture::new();
    let key = key_in(1, "reuse");
    asked(&f, Verb::Allow, &key, r#"{"id":"r"}"#, T0);
    for (verb, body) in [
        (Verb::Allow, r#"{"id":"r","cost":2}"#),
        (Verb::Allow, r#"{"id":"r","policy":"login"}"#),
        (Verb::Hit, r#"{"id":"r"}"#),
    ] {
        let (answer, records) = asked(&f, verb, &key, body, T0);
        let Answer::Error { error, .. } = answer else {
            panic!("{body} reuses the id: {answer:?}");
        };
        assert_eq!(error.code, ErrorCode::IdReused, "{error}");
        assert!(records.is_empty());
    }
    assert_eq!(f.remaining(&key, T0), 14);
    let login = f.allow(&key, br#"{"policy":"login","cost":0}"#, T0);
    assert_eq!(decision(login).remaining, 3, "login counted nothing");
}

#[test]
fn a_denied_ask_is_not_remembered_and_its_repeat_is_decided_afresh() {
    let f = Fixture::new();
    let key = key_in(1, "full");
    asked(&f, Verb::Allow, &key, r#"{"cost":15}"#, T0);
    let (denied, records) = asked(&f, Verb::Allow, &key, r#"{"id":"late"}"#, T0);
    assert!(!repeat_of(&denied).0.allowed);
    assert!(records.iter().all(|r| r.i.is_none()), "{records:?}");
    // Two windows on, the key has room: the same id is a first ask.
    let later = Nanos(T0.0 + 2 * SEC);
    let (allowed, _) = asked(&f, Verb::Allow, &key, r#"{"id":"late"}"#, later);
    assert_eq!(repeat_of(&allowed), (repeat_of(&allowed).0, false));
    assert!(repeat_of(&allowed).0.allowed);
}

#[test]
fn an_id_is_forgotten_once_its_ask_stops_counting() {
    let f = Fixture::new();
    let key = key_in(1, "old");
    let body = r#"{"id":"x"}"#;
    asked(&f, Verb::Hit, &key, body, T0);
    // A sliding window of 1 s weighs the ask until the end of the window
    // after its own: at T0 + 1.9 s it is a repeat, at T0 + 2 s a new hit.
    let (still, _) = asked(&f, Verb::Hit, &key, body, Nanos(T0.0 + 19 * SEC / 10));
    assert!(repeat_of(&still).1);
    let (new, records) = asked(&f, Verb::Hit, &key, body, Nanos(T0.0 + 2 * SEC));
    assert!(!repeat_of(&new).1);
    assert_eq!(records.len(), 2, "counted and remembered again");
}

#[test]
fn a_reset_forgets_the_ids_of_the_keys_asks() {
    let f = Fixture::new();
    let key = key_in(1, "reset");
    let body = r#"{"id":"again"}"#;
    asked(&f, Verb::Allow, &key, body, T0);
    f.send(Verb::Reset, &key, b"", true, T0);
    let (after, _) = asked(&f, Verb::Allow, &key, body, T0);
    assert_eq!(repeat_of(&after), (repeat_of(&after).0, false));
    assert_eq!(f.remaining(&key, T0), 14);
}

/// A new owner that replays the journal remembers the ids the old one
/// did, and one that takes a snapshot over remembers what it carried:
/// either way the retry is a repeat, counted once.
#[test]
fn ids_outlive_the_owner_through_the_journal_and_the_snapshot() {
    let f = Fixture::new();
    let key = key_in(1, "crash");
    let body = r#"{"cost":3,"id":"retry-me"}"#;
    let (first, records) = asked(&f, Verb::Allow, &key, body, T0);
    let first = repeat_of(&first).0;

    let replayed = Fixture::new();
    for record in &records {
        assert!(replayed
            .decider
            .replay(&replayed.policies, record, &replayed.counters));
    }
    assert_eq!(
        replayed.remaining(&key, T0),
        12,
        "the id's record counts nothing"
    );
    let (again, _) = asked(&replayed, Verb::Allow, &key, body, T0);
    let (decision, repeat) = repeat_of(&again);
    assert!(repeat);
    assert_eq!(
        (decision.remaining, decision.limit),
        (first.remaining, first.limit)
    );
    assert_eq!(replayed.remaining(&key, T0), 12);

    let carried = Carried::read(&f.counters, T0, false);
    assert_eq!(carried.ids.len(), 1);
    let next = Fixture::new();
    carried.take_over(&next.counters, T0, false);
    let (again, _) = asked(&next, Verb::Allow, &key, body, T0);
    assert!(repeat_of(&again).1);
}

#[test]
fn a_batch_item_with_an_id_counts_once() {
    let f = Fixture::new();
    let key = key_in(1, "b");
    let item = batch::Item {
        key: sluice_core::key::KeyToken::parse(&key).unwrap(),
        policy: Cow::Borrowed("default"),
        cost: 4,
        id: Some(Cow::Borrowed("item-1")),
        act: Act::default(),
    };
    let (results, _) = batch_of(&f, &[item.clone(), item.clone()], T0);
    let [wire::Reply::Decision(a), wire::Reply::Decision(b)] = &results[..] else {
        panic!("{results:?}");
    };
    assert!(!a.repeat && b.repeat);
    assert_eq!((a.remaining, b.remaining), (11, 11));
    assert_eq!(f.remaining(&key, T0), 11);
}

/// A hold verb's reply on its own subject, decoded: the decision reply
/// and its hold ticket.
fn hold_verb(
    f: &Fixture,
    verb: Verb,
    key: &str,
    body: &str,
    now: Nanos,
) -> (DecisionReply, Vec<Record>) {
    let (answer, records) = f.send(verb, key, body.as_bytes(), true, now);
    let reply = crate::reply::Reply::of(&answer.expect("answered"), "w");
    match wire::decode_reply(&reply.payload).unwrap() {
        wire::Reply::Decision(d) => (d, records),
        wire::Reply::Error(e) => panic!("{body}: {e}"),
    }
}

/// SPEC §16 on holds: a reserve sent twice with its id keeps one hold and
/// names it both times; a settle sent twice is answered twice (not a 404
/// for the hold the first one ended), charging once; both survive a
/// replay of the journal.
#[test]
fn a_reserve_and_a_settle_with_ids_are_done_once() {
    let f = holds_fixture();
    let key = key_in(1, "hold");
    let reserve = r#"{"policy":"llm","cost":400,"id":"job-1"}"#;
    let (first, mut records) = hold_verb(&f, Verb::Reserve, &key, reserve, T0);
    let (again, none) = hold_verb(&f, Verb::Reserve, &key, reserve, T0);
    assert!(none.is_empty());
    assert!(!first.repeat && again.repeat);
    let (ticket, again_ticket) = (first.hold.unwrap(), again.hold.unwrap());
    assert_eq!(ticket.hold, again_ticket.hold, "the same hold");
    assert_eq!(f.remaining(&key, T0), 15, "default untouched");
    let peek = |f: &Fixture| {
        let (d, _) = hold_verb(f, Verb::Reserve, &key, r#"{"policy":"llm","cost":0}"#, T0);
        d.remaining
    };
    assert_eq!(peek(&f), 9_600, "400 held once");

    let settle = format!(
        r#"{{"policy":"llm","hold":"{}","cost":100,"id":"job-1-done"}}"#,
        ticket.hold
    );
    let (settled, more) = hold_verb(&f, Verb::Settle, &key, &settle, T0);
    records.extend(more);
    let (resettled, _) = hold_verb(&f, Verb::Settle, &key, &settle, T0);
    assert!(!settled.repeat && resettled.repeat, "{resettled:?}");
    assert_eq!(peek(&f), 9_900, "charged 100 once");

    // A new owner from the journal: both ids are remembered.
    let next = holds_fixture();
    for record in &records {
        next.decider.replay(&next.policies, record, &next.counters);
    }
    assert_eq!(peek(&next), 9_900);
    let (again, _) = hold_verb(&next, Verb::Reserve, &key, reserve, T0);
    assert!(again.repeat);
    assert_eq!(again.hold.unwrap().hold, ticket.hold);
    let (again, _) = hold_verb(&next, Verb::Settle, &key, &settle, T0);
    assert!(again.repeat);
    assert_eq!(peek(&next), 9_900);
}
