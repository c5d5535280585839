//! Grouped asks (SPEC §17) through the worker: every level decided in one
//! turn, all or nothing, each level counted (and journaled) under its own
//! key, the answer naming the levels and the one that denied.

use super::*;

/// An organisation's pool of 5 a minute, each of its users 3 a minute, and
/// a team level between them for some asks; `strict_org` blocks its key
/// for 10 s once it denies.
const GROUPS: &str = r#"
    partitions = 4
    [policies.default]
    algorithm = "sliding_window"
    limits = [ { max = 15, per = "1s" } ]
    [policies.org]
    algorithm = "fixed_window"
    limits = [ { max = 5, per = "1m" } ]
    [policies.team]
    algorithm = "fixed_window"
    parent = "org"
    limits = [ { max = 4, per = "1m" } ]
    [policies.user]
    algorithm = "fixed_window"
    parent = "org"
    limits = [ { max = 3, per = "1m" } ]
    [policies.member]
    algorithm = "fixed_window"
    parent = "team"
    limits = [ { max = 3, per = "1m" } ]
    [policies.strict_org]
    algorithm = "fixed_window"
    block_for = "10s"
    limits = [ { max = 2, per = "1m" } ]
    [policies.strict_user]
    algorithm = "fixed_window"
    parent = "strict_org"
    limits = [ { max = 9, per = "1m" } ]
"#;

const USER: &[u8] = br#"{"policy":"user"}"#;

/// The answer's decision and levels: (policy, remaining) outermost first,
/// and the policy that denied.
fn grouped(answer: Answer<'_>) -> (Decision, Vec<(String, u64)>, Option<String>) {
    match answer {
        Answer::Decision {
            decision,
            grouped: Some(g),
            ..
        } => (
            decision,
            g.levels
                .iter()
                .map(|l| (l.policy.clone(), l.remaining))
                .collect(),
            g.denied_by,
        ),
        other => panic!("a grouped decision, not {other:?}"),
    }
}

/// What the records of an ask counted: (policy, key, cost).
fn counted(records: &[Record]) -> Vec<(String, String, u64)> {
    records
        .iter()
        .filter_map(|r| match r.typed().kind {
            Kind::Counted { units } => Some((r.policy().to_string(), r.key().to_string(), units)),
            _ => None,
        })
        .collect()
}

#[test]
fn users_of_one_org_share_its_pool_and_a_denial_takes_nothing_anywhere() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let (alice, bob) = (format!("{org}.alice"), format!("{org}.bob"));
    let (answer, records) = f.send(Verb::Allow, &alice, USER, true, T0);
    let (decision, levels, denied_by) = grouped(answer.unwrap());
    assert!(decision.allowed);
    assert_eq!(levels, [("org".into(), 4), ("user".into(), 2)]);
    assert_eq!(
        (decision.remaining, denied_by),
        (2, None),
        "the tightest level's"
    );
    assert_eq!(
        counted(&records),
        [
            ("org".into(), org.clone(), 1),
            ("user".into(), alice.clone(), 1)
        ],
        "each level journaled under its own key"
    );
    for _ in 0..2 {
        assert!(decision_of(&f, &alice).allowed);
    }
    // Alice has none left of her own: denied by her level, the org untouched.
    let (answer, records) = f.send(Verb::Allow, &alice, USER, true, T0);
    let (decision, levels, denied_by) = grouped(answer.unwrap());
    assert!(!decision.allowed);
    assert_eq!(denied_by.as_deref(), Some("user"));
    assert_eq!(levels, [("org".into(), 2), ("user".into(), 0)]);
    assert!(counted(&records).is_empty(), "{records:?}");
    // Bob takes the org's last two; then the org denies him with his own
    // limit left, and nothing of his is taken.
    assert!(decision_of(&f, &bob).allowed);
    assert!(decision_of(&f, &bob).allowed);
    let (answer, records) = f.send(Verb::Allow, &bob, USER, true, T0);
    let (decision, levels, denied_by) = grouped(answer.unwrap());
    assert_eq!(denied_by.as_deref(), Some("org"));
    assert_eq!(levels, [("org".into(), 0), ("user".into(), 1)]);
    assert!(!decision.allowed && decision.retry_after > Nanos::ZERO);
    assert!(counted(&records).is_empty(), "{records:?}");
    // The org's key is the same counter a plain ask of it reads.
    let org_left = match f.allow(&org, br#"{"policy":"org","cost":0}"#, T0) {
        Answer::Decision {
            decision,
            grouped: None,
            ..
        } => decision.remaining,
        other => panic!("{other:?}"),
    };
    assert_eq!(org_left, 0);
}

fn decision_of(f: &Fixture, key: &str) -> Decision {
    grouped(f.allow(key, USER, T0)).0
}

#[test]
fn three_levels_decide_each_on_the_key_cut_to_its_place() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let dana = format!("{org}.eng.dana");
    let (answer, records) = f.send(
        Verb::Allow,
        &dana,
        br#"{"policy":"member","cost":2}"#,
        true,
        T0,
    );
    let (decision, levels, _) = grouped(answer.unwrap());
    assert!(decision.allowed);
    assert_eq!(
        levels,
        [("org".into(), 3), ("team".into(), 2), ("member".into(), 1)]
    );
    assert_eq!(
        counted(&records),
        [
            ("org".into(), org.clone(), 2),
            ("team".into(), format!("{org}.eng"), 2),
            ("member".into(), dana.clone(), 2)
        ]
    );
    // 2 more fit the org (3 left) and the team (2) but not the member (1).
    let (decision, _, denied_by) = grouped(f.allow(&dana, br#"{"policy":"member","cost":2}"#, T0));
    assert_eq!(
        (decision.allowed, denied_by.as_deref()),
        (false, Some("member"))
    );
}

#[test]
fn a_hit_counts_at_every_level_and_a_peek_at_none() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let carol = format!("{org}.carol");
    let (_, records) = f.send(
        Verb::Hit,
        &carol,
        br#"{"policy":"user","cost":4}"#,
        false,
        T0,
    );
    assert_eq!(
        counted(&records),
        [
            ("org".into(), org.clone(), 4),
            ("user".into(), carol.clone(), 4)
        ],
        "a hit counts whether or not it fits"
    );
    let (answer, records) = f.send(
        Verb::Allow,
        &carol,
        br#"{"policy":"user","cost":0}"#,
        true,
        T0,
    );
    let (decision, levels, denied_by) = grouped(answer.unwrap());
    assert!(records.is_empty());
    assert_eq!(levels, [("org".into(), 1), ("user".into(), 0)]);
    assert_eq!(
        (decision.allowed, denied_by.as_deref()),
        (false, Some("user"))
    );
}

#[test]
fn a_chain_that_does_not_fit_the_key_is_refused_with_the_reason() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let refused = |token: &str, body: &[u8]| match f.allow(token, body, T0) {
        Answer::Error { error, .. } => error,
        other => panic!("refused, not {other:?}"),
    };
    let e = refused(&org, br#"{"policy":"user"}"#);
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("has 1 token(s)"), "{e}");
    let e = refused(&format!("{org}.eng"), br#"{"policy":"member"}"#);
    assert!(
        e.message.contains("decides 3 levels (member > team > org)"),
        "{e}"
    );
    // A cost no level could ever hold is refused as for a plain ask.
    let e = refused(&format!("{org}.zed"), br#"{"policy":"user","cost":4}"#);
    assert!(e.message.contains("can never be allowed"), "{e}");
}

#[test]
fn the_level_that_denies_starts_its_own_penalty_only() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let (eve, fay) = (format!("{org}.eve"), format!("{org}.fay"));
    let body = br#"{"policy":"strict_user"}"#;
    assert!(grouped(f.allow(&eve, body, T0)).0.allowed);
    assert!(grouped(f.allow(&fay, body, T0)).0.allowed);
    let (decision, _, denied_by) = grouped(f.allow(&eve, body, T0));
    assert_eq!(denied_by.as_deref(), Some("strict_org"));
    assert!(decision.blocked, "{decision:?}");
    // The org is blocked for 10 s from its denial: its users are denied as
    // blocked meanwhile, whatever their own levels hold.
    let later = T0.saturating_add(Nanos(5 * SEC));
    let (decision, _, denied_by) = grouped(f.allow(&fay, body, later));
    assert!(decision.blocked && !decision.allowed, "{decision:?}");
    assert_eq!(denied_by.as_deref(), Some("strict_org"));
}

#[test]
fn a_waiting_ask_starts_when_every_level_has_room_and_every_level_must_wait() {
    let toml = format!(
        "{GROUPS}\n[policies.paced_org]\nalgorithm = \"gcra\"\nmax_wait = \"1s\"\n\
         limits = [ {{ max = 10, per = \"1s\", burst = 1 }} ]\n\
         [policies.paced_user]\nalgorithm = \"gcra\"\nparent = \"paced_org\"\nmax_wait = \"1s\"\n\
         limits = [ {{ max = 100, per = \"1s\", burst = 1 }} ]\n\
         [policies.eager_user]\nalgorithm = \"gcra\"\nparent = \"org\"\nmax_wait = \"1s\"\n\
         limits = [ {{ max = 100, per = \"1s\", burst = 1 }} ]\n"
    );
    let f = Fixture::journal(&toml);
    let org = key_in(f.partition, "acme");
    let body = br#"{"policy":"paced_user","wait_ms":500}"#;
    let first = grouped(f.allow(&format!("{org}.a"), body, T0)).0;
    assert!(first.allowed && first.wait == Nanos::ZERO, "{first:?}");
    // Another user: its own level has room now, the org's only in 100 ms.
    let (second, levels, _) = grouped(f.allow(&format!("{org}.b"), body, T0));
    assert!(second.allowed, "{second:?}");
    assert_eq!(second.wait, Nanos::from_millis(100), "{levels:?}");
    // A level that cannot wait (a fixed window) refuses the wait.
    match f.allow(
        &format!("{org}.c"),
        br#"{"policy":"eager_user","wait_ms":500}"#,
        T0,
    ) {
        Answer::Error { error, .. } => assert_eq!(error.code, ErrorCode::BadRequest, "{error}"),
        other => panic!("refused, not {other:?}"),
    }
}

#[test]
fn a_repeated_grouped_ask_counts_nothing_and_tells_each_level_as_it_stands() {
    let f = Fixture::journal(GROUPS);
    let org = key_in(f.partition, "acme");
    let alice = format!("{org}.alice");
    let body = br#"{"policy":"user","id":"req-1"}"#;
    let (first, levels, _) = grouped(f.allow(&alice, body, T0));
    assert!(first.allowed);
    assert_eq!(levels, [("org".into(), 4), ("user".into(), 2)]);
    assert!(decision_of(&f, &format!("{org}.bob")).allowed);
    let (answer, records) = f.send(Verb::Allow, &alice, body, true, T0);
    let answer = answer.unwrap();
    assert!(matches!(answer, Answer::Decision { repeat: true, .. }));
    let (again, levels, denied_by) = grouped(answer);
    assert_eq!(again, first, "the first decision");
    assert_eq!(
        (levels, denied_by),
        (vec![("org".into(), 3), ("user".into(), 2)], None),
        "each level now, bob's ask included"
    );
    assert!(counted(&records).is_empty(), "{records:?}");
}
