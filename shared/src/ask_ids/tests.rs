use super::*;
use crate::limit::Limit;
use crate::policy::Policy;
use std::time::Duration;

fn asked(verb: Verb, policy: &str, cost: u64) -> Asked<&str> {
    Asked { verb, policy, cost }
}

fn allowed(remaining: u64) -> FirstAnswer {
    let decision = Decision {
        allowed: true,
        limit: 10,
        remaining,
        reset: Nanos::from_secs(1),
        retry_after: Nanos::ZERO,
        shadow_denied: false,
        wait: crate::time::Nanos::ZERO,
        blocked: false,
    };
    FirstAnswer::new(decision, Nanos::ZERO)
}

#[test]
fn a_repeat_gets_the_first_decision_and_a_reuse_is_refused() {
    let mut ids = RememberedIds::default();
    let now = Nanos::from_secs(100);
    let first = asked(Verb::Allow, "login", 2);
    assert_eq!(ids.seen(ids.name("alice", "r1"), &first, now), Seen::First);
    ids.remember(
        ids.name("alice", "r1"),
        first,
        allowed(7),
        Nanos::from_secs(160),
        now,
    );

    assert_eq!(
        ids.seen(ids.name("alice", "r1"), &first, now),
        Seen::Repeat(allowed(7))
    );
    // The same id of another key is another ask.
    assert_eq!(ids.seen(ids.name("bob", "r1"), &first, now), Seen::First);
    for other in [
        asked(Verb::Hit, "login", 2),
        asked(Verb::Allow, "default", 2),
        asked(Verb::Allow, "login", 3),
    ] {
        let Seen::Reused(e) = ids.seen(ids.name("alice", "r1"), &other, now) else {
            panic!("{other:?} reuses the id");
        };
        assert_eq!((e.code, e.code.status()), (ErrorCode::IdReused, 409));
        assert!(e.message.contains("send a new id"), "{e}");
    }
}

#[test]
fn an_id_is_forgotten_when_its_ask_stops_counting() {
    let mut ids = RememberedIds::default();
    let a = asked(Verb::Allow, "p", 1);
    ids.remember(
        ids.name("k", "r1"),
        a,
        allowed(1),
        Nanos::from_secs(60),
        Nanos::from_secs(1),
    );
    assert!(matches!(
        ids.seen(ids.name("k", "r1"), &a, Nanos::from_secs(59)),
        Seen::Repeat(_)
    ));
    assert_eq!(
        ids.seen(ids.name("k", "r1"), &a, Nanos::from_secs(60)),
        Seen::First
    );
    ids.forget_ended(Nanos::from_secs(60));
    assert!(ids.is_empty());
    assert_eq!(ids.forgotten_early(), 0);
}

#[test]
fn past_the_bound_the_id_that_ends_soonest_goes_first_and_is_counted() {
    let mut ids = RememberedIds::new(2);
    let a = asked(Verb::Hit, "p", 1);
    let now = Nanos::from_secs(1);
    ids.remember(
        ids.name("k", "late"),
        a,
        allowed(1),
        Nanos::from_secs(90),
        now,
    );
    ids.remember(
        ids.name("k", "soon"),
        a,
        allowed(1),
        Nanos::from_secs(30),
        now,
    );
    ids.remember(
        ids.name("k", "new"),
        a,
        allowed(1),
        Nanos::from_secs(60),
        now,
    );
    assert_eq!(ids.len(), 2);
    assert_eq!(ids.forgotten_early(), 1);
    assert_eq!(ids.seen(ids.name("k", "soon"), &a, now), Seen::First);
    assert!(matches!(
        ids.seen(ids.name("k", "late"), &a, now),
        Seen::Repeat(_)
    ));
    assert!(matches!(
        ids.seen(ids.name("k", "new"), &a, now),
        Seen::Repeat(_)
    ));
}

#[test]
fn a_reset_forgets_the_keys_ids_and_only_its() {
    let mut ids = RememberedIds::default();
    let a = asked(Verb::Allow, "p", 1);
    let now = Nanos::from_secs(1);
    ids.remember(ids.name("k", "r1"), a, allowed(1), Nanos::from_secs(9), now);
    ids.remember(
        ids.name("k2", "r1"),
        a,
        allowed(1),
        Nanos::from_secs(9),
        now,
    );
    let b = asked(Verb::Allow, "q", 1);
    ids.remember(ids.name("k", "r2"), b, allowed(1), Nanos::from_secs(9), now);
    ids.forget_key("k", "p");
    assert_eq!(ids.seen(ids.name("k", "r1"), &a, now), Seen::First);
    assert!(matches!(
        ids.seen(ids.name("k2", "r1"), &a, now),
        Seen::Repeat(_)
    ));
    assert!(matches!(
        ids.seen(ids.name("k", "r2"), &b, now),
        Seen::Repeat(_)
    ));
    assert_eq!(ids.len(), 2);
}

#[test]
fn ids_travel_to_the_next_owner_with_their_answer() {
    let mut ids = RememberedIds::default();
    let a = asked(Verb::Allow, "p", 3);
    let now = Nanos::from_secs(10);
    ids.remember(
        ids.name("k", "r1"),
        a,
        allowed(4),
        Nanos::from_secs(70),
        now,
    );
    ids.remember(
        ids.name("k", "gone"),
        a,
        allowed(4),
        Nanos::from_secs(20),
        now,
    );
    let later = Nanos::from_secs(30);
    let carried = ids.carried(later);
    assert_eq!(carried.len(), 1, "an id whose time is over is not carried");
    let json = serde_json::to_string(&carried).unwrap();
    let back: Vec<CarriedId> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, carried);

    let mut next = RememberedIds::default();
    next.take_over(&back, later);
    assert_eq!(
        next.seen(next.name("k", "r1"), &a, later),
        Seen::Repeat(allowed(4))
    );
}

#[test]
fn an_ask_is_remembered_while_it_counts_and_at_most_a_day() {
    let limit = |max, secs| Limit::new(max, Duration::from_secs(secs), None).unwrap();
    let now = Nanos::from_secs(1_000_030);
    let policy = |algorithm, limits| Policy::new("p", algorithm, limits).unwrap();
    // A minute window from 1_000_020: it ends at 1_000_080.
    let fixed = policy(Algorithm::FixedWindow, vec![limit(10, 60)]);
    assert_eq!(fixed.remembered_until(now), Nanos::from_secs(1_000_080));
    let log = policy(Algorithm::SlidingLog, vec![limit(10, 60)]);
    assert_eq!(log.remembered_until(now), Nanos::from_secs(1_000_090));
    let counter = policy(Algorithm::SlidingWindow, vec![limit(10, 60)]);
    assert_eq!(counter.remembered_until(now), Nanos::from_secs(1_000_140));
    // 10 per minute with a burst of 20: an empty bucket fills in 2 minutes.
    let bucket = policy(
        Algorithm::TokenBucket,
        vec![Limit::new(10, Duration::from_secs(60), Some(20)).unwrap()],
    );
    assert_eq!(bucket.remembered_until(now), Nanos::from_secs(1_000_150));
    // The longest of several limits, cut at a day.
    let both = policy(Algorithm::Gcra, vec![limit(10, 60), limit(500, 7 * 86_400)]);
    assert_eq!(
        both.remembered_until(now),
        now.saturating_add(MAX_REMEMBERED)
    );
}

/// Two pairs of one hash are told apart by the name an entry keeps: a
/// lookup never answers one id's repeat with another's first answer.
#[test]
fn an_entry_answers_only_for_its_own_token_and_id() {
    let entry = Entry {
        name: joined(&mut String::new(), "ab", "c"),
        asked: Asked {
            verb: Verb::Allow,
            policy: Arc::from("p"),
            cost: 1,
        },
        first: allowed(1),
        until: Nanos::from_secs(9),
        seq: 0,
    };
    assert!(entry.is("ab", "c"));
    for (token, id) in [
        ("a", "bc"),
        ("abc", ""),
        ("ab", "cd"),
        ("b", "c"),
        ("ab", ""),
    ] {
        assert!(!entry.is(token, id), "{token:?} {id:?}");
    }
}

/// An id replaced, or forgotten by a reset and remembered again, leaves
/// its old place in the order of ends behind: that place is skipped when
/// its time comes, and forgets nothing. Stale places do not pile up.
#[test]
fn an_id_remembered_again_is_not_forgotten_at_its_old_end() {
    let mut ids = RememberedIds::new(2);
    let a = asked(Verb::Allow, "p", 1);
    let t = Nanos::from_secs;
    ids.remember(ids.name("k", "r1"), a, allowed(1), t(100), t(1));
    ids.remember(ids.name("k", "r1"), a, allowed(1), t(200), t(2));
    ids.remember(ids.name("j", "r2"), a, allowed(1), t(100), t(3));
    ids.forget_key("j", "p");
    ids.remember(ids.name("j", "r2"), a, allowed(1), t(300), t(4));
    ids.forget_ended(t(150));
    assert!(matches!(
        ids.seen(ids.name("k", "r1"), &a, t(150)),
        Seen::Repeat(_)
    ));
    assert!(matches!(
        ids.seen(ids.name("j", "r2"), &a, t(150)),
        Seen::Repeat(_)
    ));
    assert_eq!((ids.len(), ids.forgotten_early()), (2, 0));
    // The bound still forgets the soonest live id, not a stale place.
    ids.remember(ids.name("k", "r3"), a, allowed(1), t(400), t(150));
    assert_eq!(ids.seen(ids.name("k", "r1"), &a, t(150)), Seen::First);
    assert!(matches!(
        ids.seen(ids.name("j", "r2"), &a, t(150)),
        Seen::Repeat(_)
    ));
    assert_eq!(ids.forgotten_early(), 1);
    for n in 0..10_000u64 {
        ids.remember(ids.name("k", "r3"), a, allowed(1), t(400 + n), t(150));
    }
    assert!(ids.by_end.len() <= 2 * 2 + 1024, "{}", ids.by_end.len());
}

/// A first answer with a wait keeps its start as a moment: a repeat is told
/// what is left of it, and it is carried with the start only while the
/// start is to come, so that otherwise a snapshot reads as before waiting.
#[test]
fn a_first_answer_that_waits_keeps_its_start_as_a_moment() {
    let t = Nanos::from_millis;
    let waiting = Decision {
        wait: t(300),
        ..allowed(4).decision
    };
    let first = FirstAnswer::new(waiting, t(1_000));
    assert_eq!(first.start, t(1_300));
    assert_eq!(first.decision.wait, Nanos::ZERO);
    assert_eq!(first.again(t(1_100)).wait, t(200));
    assert_eq!(first.again(t(2_000)).wait, Nanos::ZERO);
    assert_eq!(
        FirstAnswer::new(allowed(4).decision, t(1)).start,
        Nanos::ZERO
    );

    let mut ids = RememberedIds::new(8);
    let a = asked(Verb::Allow, "p", 1);
    ids.remember(ids.name("k", "w"), a, first, t(5_000), t(1_000));
    let carried = ids.carried(t(1_100));
    assert!(carried[0].waits());
    let json = serde_json::to_string(&carried).unwrap();
    assert!(json.ends_with(&format!(",{}]]", t(1_300).0)), "{json}");
    let mut next = RememberedIds::new(8);
    next.take_over(
        &serde_json::from_str::<Vec<CarriedId>>(&json).unwrap(),
        t(1_100),
    );
    let Seen::Repeat(again) = next.seen(next.name("k", "w"), &a, t(1_200)) else {
        panic!("a repeat");
    };
    assert_eq!(again.again(t(1_200)).wait, t(100));

    // Once its start has come, carried as an answer without a wait: the
    // seven fields every release before waiting reads.
    let carried = ids.carried(t(1_300));
    assert!(!carried[0].waits());
    let json = serde_json::to_string(&carried).unwrap();
    let fields: Vec<Vec<serde_json::Value>> = serde_json::from_str(&json).unwrap();
    assert_eq!(fields[0].len(), 7, "{json}");
}
