//! Batches and local budgets in the decision core: items decided in
//! order on their own partitions, slices granted, given back and
//! replayed.

use super::*;
/// Journal mode, usage off: `default` (100 a second) with local
/// budgets, `plain` the same without.
fn budget_fixture() -> Fixture {
    Fixture::journal(
        r#"
        partitions = 4
        [policies.default]
        algorithm = "fixed_window"
        limits = [ { max = 100, per = "1s" } ]
        local_budget = true
        [policies.plain]
        algorithm = "fixed_window"
        limits = [ { max = 100, per = "1s" } ]
        "#,
    )
}

/// A batch item of `key` under `default` (see [`budget_fixture`]).
fn hot_item(key: &str, cost: u64, budget: Budget) -> batch::Item<'_> {
    batch::Item {
        key: KeyToken::parse(key).unwrap(),
        policy: Cow::Borrowed("default"),
        cost,
        id: None,
        act: Act::Ask(budget),
    }
}

fn refund(units: u64, spent: u64, taken_at: Nanos) -> Budget {
    Budget::Refund(Refund {
        units,
        spent,
        taken_at,
    })
}

#[test]
fn a_budget_slice_is_counted_and_journaled_and_what_comes_back_is_given_back() {
    let f = budget_fixture();
    let key = key_in(1, "hot");
    let item = |policy: &'static str, cost, budget| batch::Item {
        key: KeyToken::parse(&key).unwrap(),
        policy: Cow::Borrowed(policy),
        cost,
        id: None,
        act: Act::Ask(budget),
    };
    let (results, records) = batch_of(&f, &[item("default", 1, Budget::Slice(30))], T0);
    let granted = records.clone();
    let wire::Reply::Decision(d) = &results[0] else {
        panic!("{results:?}")
    };
    let grant = d.grant.expect("a policy with local budgets grants a slice");
    assert_eq!((grant.units, d.remaining), (30, 69));
    assert_eq!(grant.taken_at, T0);
    assert_eq!(records.len(), 2, "the ask and the slice");
    assert!(!records[0].s && records[1].s && records[1].c == 30);
    // Usage: the ask is used now, the slice only as it comes back spent.
    let used = |r: &Record| crate::usage::counts_of(r).map(|c| c.used);
    assert_eq!((used(&records[0]), used(&records[1])), (Some(1), None));
    // 20 of the 30 come back, 10 were spent.
    let refund = Budget::Refund(Refund {
        units: 20,
        spent: 10,
        taken_at: grant.taken_at,
    });
    let (results, records) = batch_of(&f, &[item("default", 0, refund)], T0);
    let wire::Reply::Decision(d) = &results[0] else {
        panic!("{results:?}")
    };
    assert_eq!((d.remaining, d.grant), (89, None));
    assert_eq!(
        (records[0].c, records[0].u, records[0].g),
        (20, 10, T0.as_u64())
    );
    assert_eq!(used(&records[0]), Some(10));
    let meters = &f.decider.stats().meters;
    assert_eq!(meters.budget_slices.get(), 1);
    assert_eq!(meters.budget_sliced_units.get(), 30);
    assert_eq!(meters.budget_returned_units.get(), 20);
    // A refund record reads back as written, its turn too.
    let message = &records[..1];
    let bytes = crate::journal::encode(message).unwrap();
    let format = u64::from(crate::journal::format_of(message));
    let read = crate::journal::decode(format, &bytes).unwrap();
    assert_eq!(read[0].to_owned(), records[0]);
    assert_ne!(records[0].q, 0, "made in a turn");
    // Replayed alone, a refund of a slice not known here gives nothing back.
    let replayed = Counters::new();
    for r in &records {
        f.decider.replay(&f.policies, r, &replayed);
    }
    assert_eq!(replayed.len(), 0);
    // Replayed after its grant (a turn the snapshot does not hold), it
    // gives back what it gave back live: 89 left, as answered.
    let replayed = Counters::new();
    for r in granted.iter().chain(&records) {
        f.decider.replay(&f.policies, r, &replayed);
    }
    let peek = replayed.apply(
        f.policies.get("default").unwrap(),
        &format!("default/{key}"),
        T0,
        Op::Allow(0),
    );
    assert_eq!(peek.remaining, 89);
    // A policy without local budgets grants none; the ask is decided.
    let (results, _) = batch_of(&f, &[item("plain", 1, Budget::Slice(30))], T0);
    let wire::Reply::Decision(d) = &results[0] else {
        panic!("{results:?}")
    };
    assert_eq!((d.allowed, d.remaining, d.grant), (true, 99, None));
}

#[test]
fn a_refund_gives_back_only_what_its_own_slice_held_and_only_once() {
    let f = budget_fixture();
    let key = key_in(1, "hot");
    let item = |cost, budget| hot_item(&key, cost, budget);
    let outcomes = |items: &[batch::Item<'_>]| -> Vec<Result<u64, ErrorCode>> {
        batch_of(&f, items, T0)
            .0
            .iter()
            .map(|r| match r {
                wire::Reply::Decision(d) => Ok(d.remaining),
                wire::Reply::Error(e) => Err(e.code),
            })
            .collect()
    };
    let meters = &f.decider.stats().meters;
    // Never granted: nothing goes back (a client freeing a key's
    // budget would be a reset without the admin role).
    assert_eq!(
        outcomes(&[item(1, Budget::None), item(0, refund(50, 0, T0))]),
        [Ok(99), Ok(99)]
    );
    assert_eq!(meters.budget_unmatched_units.get(), 50);
    let (results, _) = batch_of(&f, &[item(1, Budget::Slice(30))], T0);
    let wire::Reply::Decision(d) = &results[0] else {
        panic!("{results:?}")
    };
    let taken_at = d.grant.expect("a slice").taken_at;
    assert_eq!(d.remaining, 68);
    // More than the slice held: refused whole, nothing changes.
    let (results, records) = batch_of(&f, &[item(0, refund(25, 10, taken_at))], T0);
    let wire::Reply::Error(e) = &results[0] else {
        panic!("{results:?}")
    };
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("holds 30"), "{e}");
    assert!(records.is_empty());
    // Its own slice: the 20 unspent go back, once.
    assert_eq!(outcomes(&[item(0, refund(20, 10, taken_at))]), [Ok(88)]);
    assert_eq!(outcomes(&[item(0, refund(20, 10, taken_at))]), [Ok(88)]);
    assert_eq!(meters.budget_returned_units.get(), 20);
    assert_eq!(meters.budget_unmatched_units.get(), 70);
    // A reset forgets its key's slices: one granted before it gives
    // nothing back into the counts after it.
    let (results, _) = batch_of(&f, &[item(1, Budget::Slice(30))], T0);
    let wire::Reply::Decision(d) = &results[0] else {
        panic!("{results:?}")
    };
    let taken_at = d.grant.expect("a slice").taken_at;
    let (answer, _) = f.send(Verb::Reset, &key, b"", true, T0);
    assert!(matches!(answer, Some(Answer::Reset(..))), "{answer:?}");
    assert_eq!(outcomes(&[item(5, Budget::None)]), [Ok(95)]);
    assert_eq!(outcomes(&[item(0, refund(30, 0, taken_at))]), [Ok(95)]);
}

#[test]
fn a_journal_replay_remembers_the_slices_not_back_yet() {
    let old = budget_fixture();
    let key = key_in(1, "hot");
    let item = |cost, budget| hot_item(&key, cost, budget);
    let later = Nanos(T0.0 + 1_000_000);
    let mut journal = Vec::new();
    for (now, want) in [(T0, 30), (later, 10)] {
        let (results, records) = batch_of(&old, &[item(1, Budget::Slice(want))], now);
        assert!(matches!(&results[0], wire::Reply::Decision(d) if d.grant.is_some()));
        journal.extend(records);
    }
    let (_, records) = batch_of(&old, &[item(0, refund(10, 0, later))], later);
    journal.extend(records);

    // The next owner, from the journal alone (no snapshot).
    let new = budget_fixture();
    for record in &journal {
        new.decider.replay(&new.policies, record, &new.counters);
    }
    let remaining = |items: &[batch::Item<'_>]| match &batch_of(&new, items, later).0[0] {
        wire::Reply::Decision(d) => d.remaining,
        other => panic!("{other:?}"),
    };
    // Every record was made in a turn no snapshot holds, so replay gives
    // the second slice back as it was: 2 asks and the first slice counted.
    assert_eq!(remaining(&[item(0, Budget::None)]), 100 - 32);
    // The first slice comes back there; the second was back already.
    assert_eq!(remaining(&[item(0, refund(20, 10, T0))]), 100 - 12);
    assert_eq!(remaining(&[item(0, refund(10, 0, later))]), 100 - 12);

    // Records of a journal written before turns were numbered may also be
    // in the snapshot: replay gives nothing back for them.
    let unnumbered = budget_fixture();
    for record in &journal {
        let record = Record {
            q: 0,
            ..record.clone()
        };
        unnumbered
            .decider
            .replay(&unnumbered.policies, &record, &unnumbered.counters);
    }
    let remaining = |items: &[batch::Item<'_>]| match &batch_of(&unnumbered, items, later).0[0] {
        wire::Reply::Decision(d) => d.remaining,
        other => panic!("{other:?}"),
    };
    assert_eq!(remaining(&[item(0, Budget::None)]), 100 - 42);
    assert_eq!(remaining(&[item(0, refund(20, 10, T0))]), 100 - 22);
    assert_eq!(remaining(&[item(0, refund(10, 0, later))]), 100 - 22);
}

#[test]
fn budget_fields_that_do_not_go_together_are_refused_and_change_nothing() {
    let f = Fixture::new();
    let key = key_in(1, "bad");
    let item = |cost, budget| batch::Item {
        key: KeyToken::parse(&key).unwrap(),
        policy: Cow::Borrowed("default"),
        cost,
        id: None,
        act: Act::Ask(budget),
    };
    let refund = Budget::Refund(Refund {
        units: 5,
        spent: 0,
        taken_at: T0,
    });
    let (results, records) = batch_of(&f, &[item(0, Budget::Slice(3)), item(1, refund)], T0);
    for r in &results {
        let wire::Reply::Error(e) = r else {
            panic!("{r:?}")
        };
        assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    }
    assert!(records.is_empty());
    assert_eq!(f.remaining(&key, T0), 15);
}

#[test]
fn a_batch_decides_its_own_partition_in_order_and_refuses_the_others() {
    let f = Fixture::new();
    let mine = key_in(1, "b");
    let theirs = key_in(3, "b");
    let item = |key: &'static str, policy: &'static str, cost| batch::Item {
        key: KeyToken::parse(key).unwrap(),
        policy: Cow::Borrowed(policy),
        cost,
        id: None,
        act: Default::default(),
    };
    let mine: &'static str = Box::leak(mine.into_boxed_str());
    let theirs: &'static str = Box::leak(theirs.into_boxed_str());
    let body = batch::encode_items(&[
        item(mine, "default", 10),
        item(theirs, "default", 1),
        item(mine, "default", 6),
        item(mine, "nope", 1),
        item(mine, "default", 5),
    ]);
    let subject = batch_subject(f.partition);
    let mut log = f.decider.turn_log(f.owned());
    let answer = f.decider.message(
        &f.policies,
        Message {
            subject: &subject,
            body: &body,
            wants_reply: true,
        },
        f.owned(),
        T0,
        &mut log,
    );
    let records = log.finish(f.decider.stats(), &f.shard);
    let Some(Answer::Batch(Ok(results))) = answer else {
        panic!("expected batch results, got {answer:?}");
    };
    let codes: Vec<Option<ErrorCode>> = results
        .iter()
        .map(|r| match r {
            wire::Reply::Error(e) => Some(e.code),
            wire::Reply::Decision(_) => None,
        })
        .collect();
    assert_eq!(
        codes,
        [
            None,
            Some(ErrorCode::Unavailable),
            None,
            Some(ErrorCode::UnknownPolicy),
            None
        ]
    );
    let allowed: Vec<bool> = results
        .iter()
        .filter_map(|r| match r {
            wire::Reply::Decision(d) => Some(d.allowed),
            wire::Reply::Error(_) => None,
        })
        .collect();
    // 10 fits, 6 more does not (in item order), 5 more does.
    assert_eq!(allowed, [true, false, true]);
    assert_eq!(records.iter().map(|r| r.c).collect::<Vec<_>>(), [10, 5]);
    assert_eq!(f.remaining(mine, T0), 0);
    assert_eq!(f.counters.len(), 1, "another partition's key was counted");

    // A body that is no batch: one error for the batch, nothing counted.
    let mut log = f.decider.turn_log(f.owned());
    let answer = f.decider.message(
        &f.policies,
        Message {
            subject: &subject,
            body: b"\x91",
            wants_reply: true,
        },
        f.owned(),
        T0,
        &mut log,
    );
    assert!(matches!(answer, Some(Answer::Batch(Err(ref e))) if e.code == ErrorCode::BadRequest));
    assert!(log.finish(f.decider.stats(), &f.shard).is_empty());
    // A batch nobody waits for is not decided.
    let mut log = f.decider.turn_log(f.owned());
    let answer = f.decider.message(
        &f.policies,
        Message {
            subject: &subject,
            body: &body,
            wants_reply: false,
        },
        f.owned(),
        T0,
        &mut log,
    );
    assert!(answer.is_none());
    assert_eq!(f.remaining(mine, T0), 0);
}

#[test]
fn a_worker_batch_decides_each_item_on_its_partition() {
    let f = Fixture::new();
    let other = Counters::new();
    let other_stats = ShardStats::default();
    let a: &'static str = Box::leak(key_in(1, "w").into_boxed_str());
    let b: &'static str = Box::leak(key_in(2, "w").into_boxed_str());
    let body = batch::encode_items(&[
        batch::Item {
            key: KeyToken::parse(a).unwrap(),
            policy: Cow::Borrowed("default"),
            cost: 2,
            id: None,
            act: Default::default(),
        },
        batch::Item {
            key: KeyToken::parse(b).unwrap(),
            policy: Cow::Borrowed("default"),
            cost: 3,
            id: None,
            act: Default::default(),
        },
    ]);
    let answered = |p: u32| match p {
        1 => Some(f.owned()),
        2 => Some(Owned {
            partition: 2,
            counters: &other,
            stats: &other_stats,
            usage: None,
        }),
        _ => None,
    };
    let (answer, records, _) = f.decider.batch(&f.policies, &body, T0, &answered);
    assert!(matches!(answer, Answer::Batch(Ok(ref r)) if r.len() == 2));
    assert_eq!(
        records.iter().map(|r| (r.n, r.c)).collect::<Vec<_>>(),
        [(1, 2), (2, 3)]
    );
    assert_eq!(f.shard.changes(), 1);
    assert_eq!(other_stats.changes(), 1);
    assert_eq!(other.len(), 1);
}
