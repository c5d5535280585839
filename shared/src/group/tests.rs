//! Chains resolved and refused, and levels summed up: the pure part of a
//! grouped decision, with the levels' states in hand and the clock passed
//! in.

use super::*;
use crate::config::Config;
use crate::key::KeyToken;
use crate::policy::KeyState;
use std::collections::BTreeMap;

const CONFIG: &str = r#"
[policies.org]
algorithm = "fixed_window"
limits = [ { max = 5, per = "1m" } ]

[policies.team]
algorithm = "fixed_window"
parent = "org"
limits = [ { max = 3, per = "1m" } ]

[policies.user]
algorithm = "fixed_window"
parent = "team"
limits = [ { max = 2, per = "1m" } ]

[policies.member]
algorithm = "gcra"
parent = "org"
mode = "shadow"
limits = [ { max = 1, per = "1m" } ]
"#;

fn policies() -> BTreeMap<String, Policy> {
    Config::from_toml(CONFIG, "groups.toml").unwrap().policies
}

fn key(token: &str) -> KeyToken<'_> {
    KeyToken::parse(token).unwrap()
}

/// (policy, key) of each level, outermost first.
fn levels<'a>(chain: &Chain<'_, 'a>) -> Vec<(String, &'a str)> {
    chain
        .levels()
        .map(|l| (l.policy.name().to_string(), l.key.as_str()))
        .collect()
}

#[test]
fn a_chain_decides_each_level_on_the_key_cut_to_its_place() {
    let p = policies();
    let chain = resolve(|n| p.get(n), &p["user"], key("acme.eng.alice")).unwrap();
    assert_eq!(
        levels(&chain),
        [
            ("org".to_string(), "acme"),
            ("team".to_string(), "acme.eng"),
            ("user".to_string(), "acme.eng.alice")
        ]
    );
    assert!(chain.is_grouped());
    // Two levels of a key of three tokens: the parent takes the first two.
    let chain = resolve(|n| p.get(n), &p["team"], key("acme.eng.alice")).unwrap();
    assert_eq!(
        levels(&chain),
        [
            ("org".to_string(), "acme.eng"),
            ("team".to_string(), "acme.eng.alice")
        ]
    );
    // A policy without a parent decides the key alone, grouped or not.
    let chain = resolve(|n| p.get(n), &p["org"], key("acme.eng")).unwrap();
    assert_eq!(levels(&chain), [("org".to_string(), "acme.eng")]);
    assert!(!chain.is_grouped());
    assert_eq!(super::levels(|n| p.get(n), &p["user"]), Ok(3));
    assert_eq!(super::levels(|n| p.get(n), &p["org"]), Ok(1));
}

#[test]
fn a_key_with_fewer_tokens_than_levels_is_refused_saying_how_to_send_it() {
    let p = policies();
    let e = resolve(|n| p.get(n), &p["user"], key("acme.alice")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "policy \"user\" decides 3 levels (user > team > org), but key \"acme.alice\" has 2 token(s); \
         send one token per level, outermost first (rl.allow.<org>.<key> or rl.allow.<org>.<team>.<key>)"
    );
    assert_eq!(e.reply().code, crate::wire::ErrorCode::BadRequest);
}

fn with(extra: &str) -> Result<Config, String> {
    Config::from_toml(&format!("{CONFIG}{extra}"), "groups.toml").map_err(|e| e.to_string())
}

#[test]
fn a_missing_parent_a_loop_and_a_fourth_level_are_refused_in_a_config() {
    let e = with("[policies.x]\nalgorithm = \"gcra\"\nparent = \"nope\"\nlimits = [ { max = 1, per = \"1s\" } ]\n")
        .unwrap_err();
    assert!(e.contains("policies.x.parent"), "{e}");
    assert!(
        e.contains("names parent \"nope\", which is not configured"),
        "{e}"
    );

    let looped = "[policies.a]\nalgorithm = \"gcra\"\nparent = \"b\"\nlimits = [ { max = 1, per = \"1s\" } ]\n\
                  [policies.b]\nalgorithm = \"gcra\"\nparent = \"a\"\nlimits = [ { max = 1, per = \"1s\" } ]\n";
    let e = with(looped).unwrap_err();
    assert!(e.contains("loop (a > b > a)"), "{e}");

    let deep = "[policies.seat]\nalgorithm = \"gcra\"\nparent = \"user\"\nlimits = [ { max = 1, per = \"1s\" } ]\n";
    let e = with(deep).unwrap_err();
    assert!(
        e.contains("more than 3 levels (seat > user > team > org > ...)"),
        "{e}"
    );

    let own = "[policies.me]\nalgorithm = \"gcra\"\nparent = \"me\"\nlimits = [ { max = 1, per = \"1s\" } ]\n";
    let e = with(own).unwrap_err();
    assert!(
        e.contains("policies.me.parent") && e.contains("its own parent"),
        "{e}"
    );
}

#[test]
fn a_level_with_local_budgets_is_refused_and_so_is_a_grouped_key_under_one() {
    let budget = "[policies.pool]\nalgorithm = \"gcra\"\nlocal_budget = true\nlimits = [ { max = 9, per = \"1s\" } ]\n\
                  [policies.seat]\nalgorithm = \"gcra\"\nparent = \"pool\"\nlimits = [ { max = 1, per = \"1s\" } ]\n";
    let e = with(budget).unwrap_err();
    assert!(e.contains("policy \"pool\" is a level of \"seat\""), "{e}");
    assert!(e.contains("local_budget = true"), "{e}");

    let e = with("[policies.c]\nalgorithm = \"gcra\"\nparent = \"org\"\nlocal_budget = true\nlimits = [ { max = 1, per = \"1s\" } ]\n")
        .unwrap_err();
    assert!(e.contains("policies.c.parent"), "{e}");

    let config = with("[policies.pool]\nalgorithm = \"gcra\"\nlocal_budget = true\nlimits = [ { max = 9, per = \"1s\" } ]\n").unwrap();
    let p = config.policies;
    let e = resolve(|n| p.get(n), &p["pool"], key("acme.alice")).unwrap_err();
    assert!(
        e.to_string().contains("key \"acme.alice\" is grouped"),
        "{e}"
    );
    assert!(resolve(|n| p.get(n), &p["pool"], key("alice")).is_ok());
}

#[test]
fn a_chain_broken_after_load_is_refused_at_the_ask() {
    let mut p = policies();
    p.remove("team");
    let e = resolve(|n| p.get(n), &p["user"], key("acme.eng.alice")).unwrap_err();
    assert!(
        matches!(&e, ChainError::MissingParent { policy, parent } if policy == "user" && parent == "team"),
        "{e}"
    );
}

/// The pure two steps a grouped ask takes: every level checked, then, if
/// every one admits it, taken at each.
fn ask(chain: &Chain<'_, '_>, states: &mut [KeyState], now: Nanos, cost: u64) -> Combined {
    let checked: Vec<Decision> = chain
        .levels()
        .zip(states.iter_mut())
        .map(|(l, s)| l.policy.check_within(s, now, cost, Nanos::ZERO))
        .collect();
    let combined = combine(&checked).unwrap();
    if combined.denied_by.is_some() {
        return combined;
    }
    let taken: Vec<Decision> = chain
        .levels()
        .zip(states.iter_mut())
        .map(|(l, s)| l.policy.decide(s, now, cost))
        .collect();
    combine(&taken).unwrap()
}

#[test]
fn a_denial_at_any_level_takes_nothing_at_any_level() {
    let p = policies();
    let alice = resolve(|n| p.get(n), &p["user"], key("acme.eng.alice")).unwrap();
    let fresh = |c: &Chain| c.levels().map(|l| l.policy.new_state()).collect::<Vec<_>>();
    let mut states = fresh(&alice);
    let now = Nanos::from_secs(1);
    // user 2, team 3, org 5: the user's own limit denies the third.
    for remaining in [1, 0] {
        let c = ask(&alice, &mut states, now, 1);
        assert!(c.decision.allowed);
        assert_eq!(c.decision.remaining, remaining);
    }
    let denied = ask(&alice, &mut states, now, 1);
    assert_eq!(denied.denied_by, Some(2), "{denied:?}");
    assert!(!denied.decision.allowed && denied.decision.retry_after > Nanos::ZERO);
    // Nothing was taken at the team or the org by the denial.
    let team = &p["team"];
    let mut team_state = states[1].clone();
    assert_eq!(
        team.check_within(&mut team_state, now, 1, Nanos::ZERO)
            .remaining,
        1
    );

    // A cost that fits the user's level but not the team's: the team denies.
    let mut bob_states = fresh(&alice);
    let c = ask(&alice, &mut bob_states, now, 2);
    assert!(c.decision.allowed);
    let c = ask(&alice, &mut bob_states, now, 1);
    assert_eq!(c.denied_by, Some(2), "the user has none left: {c:?}");
    let mut carol = vec![
        bob_states[0].clone(),
        bob_states[1].clone(),
        p["user"].new_state(),
    ];
    let c = ask(&alice, &mut carol, now, 2);
    assert_eq!(c.denied_by, Some(1), "team has 1 of 3 left: {c:?}");
    let mut org_left = carol[0].clone();
    assert_eq!(
        p["org"]
            .check_within(&mut org_left, now, 1, Nanos::ZERO)
            .remaining,
        3
    );
}

#[test]
fn a_shadow_level_that_would_deny_allows_and_says_so() {
    let p = policies();
    let chain = resolve(|n| p.get(n), &p["member"], key("acme.dana")).unwrap();
    let mut states: Vec<KeyState> = chain.levels().map(|l| l.policy.new_state()).collect();
    let now = Nanos::from_secs(1);
    assert!(!ask(&chain, &mut states, now, 1).decision.shadow_denied);
    let c = ask(&chain, &mut states, now, 1);
    assert!(c.decision.allowed && c.decision.shadow_denied, "{c:?}");
    assert_eq!(c.denied_by, None);
}

fn decision(allowed: bool, remaining: u64, retry_after_ms: u64) -> Decision {
    Decision {
        allowed,
        limit: 10,
        remaining,
        reset: Nanos::from_millis(1000),
        retry_after: Nanos::from_millis(retry_after_ms),
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    }
}

#[test]
fn the_answer_is_the_most_restrictive_levels() {
    assert_eq!(combine(&[]), None);
    let allowed = combine(&[
        decision(true, 7, 0),
        decision(true, 2, 0),
        decision(true, 2, 0),
    ])
    .unwrap();
    assert_eq!((allowed.decision.remaining, allowed.denied_by), (2, None));
    let waited = combine(&[
        Decision {
            wait: Nanos::from_millis(30),
            ..decision(true, 0, 0)
        },
        decision(true, 4, 0),
    ])
    .unwrap();
    assert_eq!(waited.decision.wait, Nanos::from_millis(30));
    // The level that will deny longest names the denial.
    let denied = combine(&[
        decision(false, 0, 100),
        decision(true, 3, 0),
        decision(false, 0, 900),
    ])
    .unwrap();
    assert_eq!(denied.denied_by, Some(2));
    assert_eq!(denied.decision.retry_after, Nanos::from_millis(900));
    let tie = combine(&[decision(false, 0, 500), decision(false, 0, 500)]).unwrap();
    assert_eq!(tie.denied_by, Some(0), "the outermost of equals");
}

#[test]
fn a_check_takes_nothing_and_says_what_the_ask_would_get() {
    let p = policies();
    let org = &p["org"];
    let mut state = org.new_state();
    let now = Nanos::from_secs(1);
    for _ in 0..3 {
        let checked = org.check_within(&mut state, now, 4, Nanos::ZERO);
        assert!(checked.allowed);
        assert_eq!(checked.remaining, 5);
    }
    org.decide(&mut state, now, 4);
    let checked = org.check_within(&mut state, now, 2, Nanos::ZERO);
    let decided = org.clone().decide(&mut state.clone(), now, 2);
    assert_eq!(checked, decided);
    assert!(!checked.allowed);
}
