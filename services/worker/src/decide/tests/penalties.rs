//! Penalties (SPEC §18) through the worker: a denial blocks the key, the
//! asks meanwhile are denied `blocked` counting nothing, `rl.inspect`
//! shows the block's end and `rl.reset` lifts it; every denial of a
//! blocked key is journaled with its block's end, usage or not, so that a
//! replay blocks the key again exactly.

use super::*;

/// The tests' usual policies and `strict`: 2 a minute, a denial blocking
/// the key for 10 s.
fn strict(usage: bool) -> Fixture {
    let toml = format!(
        "{CONFIG}\n[policies.strict]\nalgorithm = \"fixed_window\"\nblock_for = \"10s\"\n\
         limits = [ {{ max = 2, per = \"1m\" }} ]\n"
    );
    let mut config = Config::from_toml(&toml, "test.toml").unwrap();
    config.usage.enabled = usage;
    Fixture::with(config, true)
}

const STRICT: &[u8] = br#"{"policy":"strict"}"#;

fn at(secs: u64) -> Nanos {
    T0.saturating_add(Nanos(secs * SEC))
}

/// The block's end `rl.inspect` shows for `key` under `strict` at `now`.
fn blocked_until(f: &Fixture, key: &str, now: Nanos) -> Option<u64> {
    match f.send(Verb::Inspect, key, STRICT, true, now).0 {
        // A key with no state under it (a reset one) shows no policy.
        Some(Answer::Inspect(reply, _)) => reply.policies.first().and_then(|p| p.blocked_until),
        other => panic!("expected an inspect reply, got {other:?}"),
    }
}

/// Asks once at `now`: the decision and the records to store.
fn ask(f: &Fixture, key: &str, now: Nanos) -> (Decision, Vec<Record>) {
    let (answer, records) = f.send(Verb::Allow, key, STRICT, true, now);
    (decision(answer.expect("answered")), records)
}

#[test]
fn a_denial_blocks_the_key_its_asks_are_denied_blocked_and_inspect_shows_it() {
    let f = strict(false);
    let key = key_in(1, "b");
    for _ in 0..2 {
        assert!(ask(&f, &key, T0).0.allowed);
    }
    assert_eq!(blocked_until(&f, &key, T0), None);
    let (denied, _) = ask(&f, &key, T0);
    assert!(!denied.allowed && denied.blocked, "{denied:?}");
    assert_eq!(
        denied.retry_after,
        Nanos(10 * SEC),
        "the block's, not the window's 60 s"
    );
    let (meanwhile, _) = ask(&f, &key, at(4));
    assert!(
        meanwhile.blocked && meanwhile.retry_after == Nanos(6 * SEC),
        "{meanwhile:?}"
    );
    let end_ms = at(10).as_millis_ceil();
    assert_eq!(blocked_until(&f, &key, at(4)), Some(end_ms));
    // The reply says so on the wire.
    let reply = wire::encode_decision(&meanwhile, "strict", Encoding::Json);
    let text = String::from_utf8(reply).unwrap();
    assert!(
        text.contains(r#""retry_after_ms":6000"#) && text.contains(r#""blocked":true"#),
        "{text}"
    );
    // The block ended; the window is still full: denied, blocked again.
    assert_eq!(blocked_until(&f, &key, at(10)), None);
    let (again, _) = ask(&f, &key, at(10));
    assert_eq!((again.blocked, again.retry_after), (true, Nanos(10 * SEC)));
    // A reset lifts the block with the counts.
    f.send(Verb::Reset, &key, STRICT, true, at(11));
    assert_eq!(blocked_until(&f, &key, at(11)), None);
    assert!(ask(&f, &key, at(11)).0.allowed);
}

#[test]
fn a_blocked_keys_denials_are_journaled_with_the_block_and_replay_keeps_it() {
    for usage in [false, true] {
        let f = strict(usage);
        let key = key_in(1, "j");
        let mut records = Vec::new();
        for t in [0, 0, 0, 3] {
            records.extend(ask(&f, &key, at(t)).1);
        }
        // A peek during the block says blocked and stores nothing.
        let (peek, none) = f.send(
            Verb::Allow,
            &key,
            br#"{"policy":"strict","cost":0}"#,
            true,
            at(4),
        );
        assert!(decision(peek.unwrap()).blocked && none.is_empty());
        let kinds: Vec<_> = records
            .iter()
            .map(|r| (r.typed().kind, r.typed().is_usage))
            .collect();
        let blocked = Kind::Denied {
            units: 1,
            blocked_until: Some(at(10)),
        };
        assert_eq!(
            kinds,
            [
                (Kind::Counted { units: 1 }, true),
                (Kind::Counted { units: 1 }, true),
                (blocked, usage),
                (blocked, usage),
            ],
            "usage recorded: {usage}"
        );
        // Replayed at takeover into fresh counters: the same block.
        let replayed = strict(usage);
        for record in &records {
            assert!(replayed
                .decider
                .replay(&replayed.policies, record, &replayed.counters));
        }
        let counter = format!("strict/{key}");
        assert_eq!(
            replayed.counters.state(&counter),
            f.counters.state(&counter)
        );
        assert_eq!(
            blocked_until(&replayed, &key, at(5)),
            Some(at(10).as_millis_ceil())
        );
        let (denied, _) = ask(&replayed, &key, at(5));
        assert_eq!((denied.blocked, denied.retry_after), (true, Nanos(5 * SEC)));
    }
}

#[test]
fn a_policy_without_block_for_journals_denials_as_before() {
    let f = strict(false);
    let key = key_in(1, "p");
    for _ in 0..15 {
        f.allow(&key, b"", T0);
    }
    let (answer, records) = f.send(Verb::Allow, &key, b"", true, T0);
    let d = decision(answer.unwrap());
    assert!(!d.allowed && !d.blocked, "{d:?}");
    assert!(records.is_empty(), "without usage a denial stores nothing");
}

#[test]
fn a_denied_reserve_blocks_the_key_and_is_journaled_with_the_block() {
    let f = strict(false);
    let key = key_in(1, "h");
    let reserve = br#"{"policy":"strict","cost":1,"ttl_ms":60000}"#;
    let mut records = Vec::new();
    for _ in 0..3 {
        records.extend(f.send(Verb::Reserve, &key, reserve, true, T0).1);
    }
    let denied = records
        .iter()
        .map(|r| r.typed().kind)
        .find(|k| matches!(k, Kind::Denied { .. }));
    assert_eq!(
        denied,
        Some(Kind::Denied {
            units: 1,
            blocked_until: Some(at(10)),
        })
    );
    let (d, _) = ask(&f, &key, at(1));
    assert_eq!((d.blocked, d.retry_after), (true, Nanos(9 * SEC)));
}

/// A handover's or a takeover's snapshot carries the block: the entries
/// as a snapshot stores them, imported by the next owner.
#[test]
fn a_snapshot_carries_the_block_to_the_next_owner() {
    let f = strict(false);
    let key = key_in(1, "s");
    for _ in 0..3 {
        ask(&f, &key, T0);
    }
    let entries = snapshot_entries(&f);
    let next = strict(false);
    let kept = next
        .counters
        .import(entries, at(2), |name, _| next.policies.get(name));
    assert_eq!(kept, 1);
    assert_eq!(
        blocked_until(&next, &key, at(2)),
        Some(at(10).as_millis_ceil())
    );
    let (d, _) = ask(&next, &key, at(2));
    assert_eq!((d.blocked, d.retry_after), (true, Nanos(8 * SEC)));
}

/// A sliding log's state lives apart from the packed ones (the table's
/// logs): blocked, it is packed with its block, and lifted it goes back.
#[test]
fn a_sliding_logs_block_starts_ends_and_keeps_its_log() {
    let toml = format!(
        "{CONFIG}\n[policies.logged]\nalgorithm = \"sliding_log\"\nblock_for = \"10s\"\n\
         limits = [ {{ max = 3, per = \"1s\" }}, {{ max = 5, per = \"1m\" }} ]\n"
    );
    let f = Fixture::journal(&toml);
    let key = key_in(1, "l");
    let body = br#"{"policy":"logged"}"#;
    let allowed = |now| decision(f.allow(&key, body, now));
    for _ in 0..3 {
        assert!(allowed(T0).allowed);
    }
    assert!(allowed(T0).blocked);
    assert!(allowed(at(5)).blocked);
    // After the block: the second's room is back, the minute's log kept 3.
    assert!(allowed(at(10)).allowed && allowed(at(10)).allowed);
    let full = allowed(at(11));
    assert!(!full.allowed && full.limit == 5, "{full:?}");
}
