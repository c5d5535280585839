//! A grouped key's holds (SPEC §13, §17) through the worker: a reserve
//! held at every level under one hold id or at none, a settle and an
//! extend at every level, an end at every level, and each level's hold
//! replayed from the journal.

use super::*;
use sluice_core::holds::HoldId;

/// An organisation's pool of 5 units a minute with 2 slots, each user 3
/// units a minute.
const GROUPS: &str = r#"
    partitions = 4
    [policies.default]
    algorithm = "sliding_window"
    limits = [ { max = 15, per = "1s" } ]
    [policies.org]
    algorithm = "fixed_window"
    concurrency = 2
    limits = [ { max = 5, per = "1m" } ]
    [policies.user]
    algorithm = "fixed_window"
    parent = "org"
    hold_ttl = "30s"
    limits = [ { max = 3, per = "1m" } ]
"#;

/// A hold verb's answer: its decision, the hold, each level's remaining
/// (outermost first) and the level that denied.
type Held = (Decision, Option<HoldId>, Vec<u64>, Option<String>);

fn held(answer: Option<Answer<'_>>) -> Held {
    match answer {
        Some(Answer::Held {
            decision,
            held,
            grouped: Some(g),
            ..
        }) => (
            decision,
            held.map(|(id, _)| id),
            g.levels.iter().map(|l| l.remaining).collect(),
            g.denied_by,
        ),
        other => panic!("a grouped hold answer, not {other:?}"),
    }
}

/// The hold records of `records`: (key, kind) with the hold id.
fn holds_in(records: &[Record]) -> Vec<(String, &'static str, String)> {
    records
        .iter()
        .filter_map(|r| {
            let (kind, hold) = match r.typed().kind {
                Kind::HoldReserved { hold, .. } => ("reserved", hold.to_string()),
                Kind::HoldEnded { hold, .. } => ("ended", hold.to_string()),
                Kind::HoldExtended { hold, .. } => ("extended", hold.to_string()),
                _ => return None,
            };
            Some((r.key().to_string(), kind, hold))
        })
        .collect()
}

fn reserve(f: &Fixture, key: &str, cost: u64, now: Nanos) -> (Held, Vec<Record>) {
    let body = format!(r#"{{"policy":"user","cost":{cost}}}"#);
    let (answer, records) = f.send(Verb::Reserve, key, body.as_bytes(), true, now);
    (held(answer), records)
}

fn settle<'f>(
    f: &'f Fixture,
    key: &str,
    hold: HoldId,
    cost: u64,
    now: Nanos,
) -> (Option<Answer<'f>>, Vec<Record>) {
    let body = format!(r#"{{"policy":"user","hold":"{hold}","cost":{cost}}}"#);
    f.send(Verb::Settle, key, body.as_bytes(), true, now)
}

/// What is left of the limit at the org's key and at `user`'s, inspected
/// (an allow, even a peek, cannot ask a policy with `concurrency`).
fn left(f: &Fixture, org: &str, user: &str) -> (u64, u64) {
    let inspect = |key: &str, policy: &str| {
        let body = format!(r#"{{"policy":"{policy}"}}"#);
        match f.send(Verb::Inspect, key, body.as_bytes(), true, T0).0 {
            Some(Answer::Inspect(reply, _)) => {
                let p = reply.policies.iter().find(|p| p.policy == policy);
                // No counter yet: the whole limit.
                let max = if policy == "org" { 5 } else { 3 };
                p.and_then(|p| p.limits.first())
                    .map_or(max, |l| l.remaining)
            }
            other => panic!("{other:?}"),
        }
    };
    (inspect(org, "org"), inspect(user, "user"))
}

#[test]
fn a_reserve_holds_at_every_level_under_one_id_or_at_none() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let (alice, bob, cy) = (
        format!("{org}.alice"),
        format!("{org}.bob"),
        format!("{org}.cy"),
    );
    let ((decision, hold, levels, denied_by), records) = reserve(&f, &alice, 2, T0);
    let hold = hold.expect("held");
    assert!(decision.allowed && denied_by.is_none(), "{decision:?}");
    assert_eq!(
        levels,
        [1, 1],
        "org: 3 units but 1 slot left; alice: 1 unit"
    );
    assert_eq!(
        holds_in(&records),
        [
            (org.clone(), "reserved", hold.to_string()),
            (alice.clone(), "reserved", hold.to_string())
        ],
        "one hold id at each level, journaled under each level's key"
    );
    assert_eq!(left(&f, &org, &alice), (3, 1));
    // Bob takes the org's second slot and 2 more units.
    let ((_, bob_hold, _, _), _) = reserve(&f, &bob, 2, T0);
    assert!(bob_hold.is_some());
    // Cy has his own limit whole, but the org has no slot left: denied by
    // the org, nothing held or counted anywhere.
    let ((decision, hold_cy, levels, denied_by), records) = reserve(&f, &cy, 1, T0);
    assert!(!decision.allowed && hold_cy.is_none(), "{decision:?}");
    assert_eq!(denied_by.as_deref(), Some("org"));
    assert_eq!(levels, [0, 3], "the org's slots, cy's own limit untouched");
    assert!(holds_in(&records).is_empty(), "{records:?}");
    assert_eq!(left(&f, &org, &cy), (1, 3));
    // Alice settles for 1: one unit goes back at both levels, and her
    // slot at the org frees; then cy fits.
    let (answer, records) = settle(&f, &alice, hold, 1, T0);
    let (decision, none, _, _) = held(answer);
    assert!(decision.allowed && none.is_none());
    assert_eq!(
        holds_in(&records),
        [
            (org.clone(), "ended", hold.to_string()),
            (alice.clone(), "ended", hold.to_string())
        ]
    );
    assert_eq!(left(&f, &org, &alice), (2, 2));
    let ((decision, _, _, _), _) = reserve(&f, &cy, 1, T0);
    assert!(decision.allowed, "{decision:?}");
    // A settle is done once: again, the hold is unknown (404).
    match settle(&f, &alice, hold, 1, T0).0 {
        Some(Answer::Error { error, .. }) => assert_eq!(error.code, ErrorCode::UnknownHold),
        other => panic!("unknown, not {other:?}"),
    }
}

#[test]
fn a_user_over_their_own_limit_is_denied_by_their_level_and_the_org_keeps_its_slots() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let alice = format!("{org}.alice");
    let ((decision, _, _, _), _) = reserve(&f, &alice, 3, T0);
    assert!(decision.allowed);
    assert_eq!(left(&f, &org, &alice), (2, 0));
    let ((decision, hold, levels, denied_by), records) = reserve(&f, &alice, 1, T0);
    assert!(!decision.allowed && hold.is_none());
    assert_eq!(denied_by.as_deref(), Some("user"));
    assert_eq!(levels[1], 0);
    assert!(holds_in(&records).is_empty());
    assert_eq!(left(&f, &org, &alice), (2, 0), "nothing taken anywhere");
    // The org's second slot is still free for another user.
    let ((decision, _, _, _), _) = reserve(&f, &format!("{org}.bob"), 1, T0);
    assert!(decision.allowed, "{decision:?}");
}

#[test]
fn an_extend_moves_every_level_and_an_unsettled_hold_ends_at_every_level() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let alice = format!("{org}.alice");
    let ((_, hold, _, _), _) = reserve(&f, &alice, 2, T0);
    let hold = hold.unwrap();
    let later = T0.saturating_add(Nanos(20 * SEC));
    let body = format!(r#"{{"policy":"user","hold":"{hold}","ttl_ms":30000}}"#);
    let (answer, records) = f.send(Verb::Extend, &alice, body.as_bytes(), true, later);
    let (_, extended, _, _) = held(answer);
    assert_eq!(extended, Some(hold));
    let moved: Vec<_> = holds_in(&records)
        .into_iter()
        .map(|(k, kind, _)| (k, kind))
        .collect();
    assert_eq!(
        moved,
        [(org.clone(), "extended"), (alice.clone(), "extended")]
    );
    // Past the first ttl but not the extended one: still held at both.
    let at_35s = T0.saturating_add(Nanos(35 * SEC));
    let mut log = f.decider.turn_log(f.owned());
    f.decider
        .end_holds(&f.policies, f.owned(), at_35s, &mut log);
    assert!(holds_in(&log.finish(f.decider.stats(), &f.shard)).is_empty());
    // Past the extended end: it ends (charged, the default) at both.
    let at_51s = T0.saturating_add(Nanos(51 * SEC));
    let mut log = f.decider.turn_log(f.owned());
    f.decider
        .end_holds(&f.policies, f.owned(), at_51s, &mut log);
    let mut ended: Vec<_> = holds_in(&log.finish(f.decider.stats(), &f.shard))
        .into_iter()
        .map(|(k, kind, _)| (k, kind))
        .collect();
    ended.sort();
    assert_eq!(ended, [(org.clone(), "ended"), (alice.clone(), "ended")]);
}

#[test]
fn every_levels_hold_is_replayed_from_the_journal() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let alice = format!("{org}.alice");
    let ((_, hold, _, _), records) = reserve(&f, &alice, 2, T0);
    let hold = hold.unwrap();
    let next = Fixture::journal(GROUPS);
    for record in &records {
        assert!(
            next.decider.replay(&next.policies, record, &next.counters),
            "{record:?}"
        );
    }
    assert_eq!(left(&next, &org, &alice), (3, 1), "both levels counted");
    let (answer, _) = settle(&next, &alice, hold, 0, T0);
    let (decision, _, levels, _) = held(answer);
    assert!(decision.allowed);
    assert_eq!(
        levels,
        [2, 3],
        "the hold given back at both: the org's slots bound"
    );
    assert_eq!(left(&next, &org, &alice), (5, 3));
}

#[test]
fn a_repeated_grouped_reserve_names_the_same_hold_and_holds_nothing_more() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let alice = format!("{org}.alice");
    let body = br#"{"policy":"user","cost":2,"id":"job-7"}"#;
    let (first, _) = f.send(Verb::Reserve, &alice, body, true, T0);
    let (_, hold, _, _) = held(first);
    let (again, records) = f.send(Verb::Reserve, &alice, body, true, T0);
    assert!(matches!(again, Some(Answer::Held { repeat: true, .. })));
    let (decision, same, levels, denied_by) = held(again);
    assert!(decision.allowed && denied_by.is_none());
    assert_eq!(same, hold, "the same hold");
    assert_eq!(
        levels,
        [1, 1],
        "each level as it stands: one slot, one unit"
    );
    assert!(holds_in(&records).is_empty(), "{records:?}");
    assert_eq!(left(&f, &org, &alice), (3, 1), "held once");
}
