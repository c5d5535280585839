//! Groups (SPEC §17) against real workers over a real NATS server: the
//! users of one organisation asking at once through three workers share
//! its pool exactly, every denial names the level that denied; in journal
//! mode a `kill -9` of the group's owner keeps every level's count; and a
//! key with fewer tokens than its policy has levels is refused with the
//! reason. Asks go as any client sends them, to `rl.allow.<org>.<key>`,
//! through the server's mapping; then `sluice check acme/alice` and the
//! other key commands, which take a key path; a group's top (`rl.top`
//! with `group`) ranks its members alone.

use crate::common::SLUICE;
use sluice_core::partition::partition_of;
use sluice_core::subject::TOP;
use sluice_core::wire::usage::TopReply;
use sluice_tests::{ask, error_of, eventually, request, serial, AskError, Stack, TestConfig, TICK};
use std::time::Duration;

/// An organisation's pool of 50 an hour (a sliding log: exact, with no
/// window edge for the test to cross), each user 5 an hour of it.
const GROUPS: &str = r#"
[policies.org]
algorithm = "sliding_log"
limits = [ { max = 50, per = "1h" } ]

[policies.user]
algorithm = "sliding_window"
parent = "org"
limits = [ { max = 5, per = "1h" } ]
"#;

const USERS: usize = 20;
const ASKS_EACH: usize = 4;
const POOL: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_users_of_one_org_asking_at_once_share_its_pool_exactly() {
    let _serial = serial().await;
    let toml = format!("{}{GROUPS}", TestConfig::new().toml());
    let stack = Stack::start(SLUICE, &toml, 3).await;
    let nats = stack.nats.connect().await.unwrap();
    let go = std::sync::Arc::new(tokio::sync::Barrier::new(USERS));
    let users: Vec<_> = (0..USERS)
        .map(|u| {
            let (nats, go) = (nats.clone(), go.clone());
            tokio::spawn(async move {
                go.wait().await;
                let mut answers = Vec::new();
                for _ in 0..ASKS_EACH {
                    let key = format!("acme.user-{u}");
                    answers.push(ask(&nats, &key, br#"{"policy":"user"}"#).await);
                }
                answers
            })
        })
        .collect();
    let (mut allowed, mut denied) = (0, 0);
    for user in users {
        for answer in user.await.unwrap() {
            let reply = answer.expect("every ask is decided");
            let levels: Vec<&str> = reply.levels.iter().map(|l| l.policy.as_str()).collect();
            assert_eq!(levels, ["org", "user"], "{reply:?}");
            assert_eq!(reply.policy, "user");
            if reply.allowed {
                allowed += 1;
                assert_eq!(reply.denied_by, None);
            } else {
                denied += 1;
                // No user asks more than its own 5: only the pool denies.
                assert_eq!(reply.denied_by.as_deref(), Some("org"), "{reply:?}");
                assert!(reply.retry_after_ms > 0, "{reply:?}");
            }
        }
    }
    assert_eq!(allowed, POOL, "the org's pool, exactly");
    assert_eq!(denied, USERS * ASKS_EACH - POOL);

    // The pool is the org's own key, as a plain ask under `org` reads it.
    let org = ask(&nats, "acme", br#"{"policy":"org","cost":0}"#)
        .await
        .unwrap();
    assert_eq!((org.remaining, org.allowed), (0, false));
    assert!(org.levels.is_empty(), "a plain ask has no levels: {org:?}");
    // Another organisation is untouched.
    let other = ask(&nats, "globex.user-0", br#"{"policy":"user"}"#)
        .await
        .unwrap();
    assert!(other.allowed, "{other:?}");
    assert_eq!(other.levels[0].remaining, 49);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_fewer_tokens_than_levels_is_refused_with_the_reason() {
    let _serial = serial().await;
    let toml = format!("{}{GROUPS}", TestConfig::new().toml());
    let stack = Stack::start(SLUICE, &toml, 1).await;
    let nats = stack.nats.connect().await.unwrap();
    match ask(&nats, "alice", br#"{"policy":"user"}"#).await {
        Err(AskError::Reply(e)) => {
            assert_eq!(e.code.status(), 400);
            assert!(e.message.contains("user > org"), "{e}");
            assert!(e.message.contains("rl.allow.<org>.<key>"), "{e}");
        }
        other => panic!("refused, not {other:?}"),
    }
    // More tokens than a grouped key has match no mapping: the error says so.
    match ask(&nats, "a.b.c.d", br#"{"policy":"user"}"#).await {
        Err(AskError::Reply(e)) => assert!(e.message.contains("up to three"), "{e}"),
        other => panic!("refused, not {other:?}"),
    }
}

/// Journal mode with snapshots far apart: after a `kill -9` the new owner
/// has only the journal to go by.
fn journal_toml() -> String {
    let config = TestConfig::new().snapshot_interval("60s").journal();
    format!("{}{GROUPS}", config.toml())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_levels_count_survives_a_kill_of_the_groups_owner_in_journal_mode() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, &journal_toml(), 2).await;
    let nats = stack.clients(1).await.remove(0);
    let owners = stack.owners().await;
    let victim = stack.worker_ids().remove(0);
    // An organisation whose partition the victim owns.
    let org = (0..)
        .map(|i| format!("org{i}"))
        .find(|o| owners.get(&partition_of(o, stack.partitions)) == Some(&victim))
        .unwrap();
    let user = |u: usize| format!("{org}.user-{u}");
    // 5 users x 3: 15 of the pool's 50; user-0 takes 2 more (5 of 5).
    for u in 0..5 {
        for _ in 0..3 {
            assert!(
                ask(&nats, &user(u), br#"{"policy":"user"}"#)
                    .await
                    .unwrap()
                    .allowed
            );
        }
    }
    for _ in 0..2 {
        assert!(
            ask(&nats, &user(0), br#"{"policy":"user"}"#)
                .await
                .unwrap()
                .allowed
        );
    }
    stack.kill_worker(&victim);
    let peek = br#"{"policy":"user","cost":0}"#;
    let one = user(1);
    let after = eventually(Duration::from_secs(15), TICK, || ask(&nats, &one, peek))
        .await
        .unwrap_or_else(|e| panic!("the group never answered again: {e:#}"));
    let left: Vec<(&str, u64)> = after
        .levels
        .iter()
        .map(|l| (l.policy.as_str(), l.remaining))
        .collect();
    assert_eq!(left, [("org", 33), ("user", 2)], "{after:?}");
    let full = ask(&nats, &user(0), br#"{"policy":"user"}"#).await.unwrap();
    assert_eq!(full.denied_by.as_deref(), Some("user"), "{full:?}");
    assert_eq!(
        full.levels[0].remaining, 33,
        "a denial takes nothing: {full:?}"
    );
}

/// `sluice check acme/alice --policy user` and the other key commands take
/// a key path; the levels and `denied_by` are printed; `--one-key` keeps a
/// '/' inside a plain key; four tokens are refused with the way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_commands_take_org_slash_key_and_print_the_levels() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &crate::common::groups_toml(3, 2, ""), 1).await;
    let config = stack.config_path().to_str().unwrap().to_string();
    let run = |args: &[&str]| stack.run(&[args, &["--config", &config]].concat());
    for _ in 0..2 {
        let out = run(&["check", "acme/alice", "--policy", "user"]);
        assert!(out.starts_with("allowed  policy=user"), "{out}");
        assert!(out.contains("\n  level org "), "{out}");
        assert!(out.contains("\n  level user "), "{out}");
    }
    run(&["check", "acme/bob", "--policy", "user"]);
    let out = run(&["check", "acme/bob", "--policy", "user"]);
    assert!(out.starts_with("denied  policy=user"), "{out}");
    assert!(out.contains(" denied_by=org\n"), "{out}");
    let json = run(&["check", "acme/bob", "--policy", "user", "--json"]);
    let reply: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(reply["denied_by"], "org", "{reply}");
    assert_eq!(reply["levels"][1]["remaining"], 1, "bob's own: {reply}");

    // A grouped key's own state, usage and reset; the org's pool is `acme`.
    let json = run(&["inspect", "acme/alice", "--policy", "user", "--json"]);
    let seen: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(seen["key"], "acme.alice", "{seen}");
    run(&["usage", "acme/alice", "--policy", "user", "--json"]);
    assert!(run(&["reset", "acme", "--policy", "org"]).contains("reset under org"));
    let out = run(&["check", "acme/bob", "--policy", "user"]);
    assert!(out.starts_with("allowed"), "{out}");

    // A '/' inside a plain key: --one-key.
    let out = run(&["check", "a/b", "--one-key"]);
    assert!(out.starts_with("allowed  policy=default"), "{out}");
    assert!(!out.contains("level"), "{out}");
    let json = run(&["inspect", "a/b", "--one-key", "--json"]);
    assert!(json.contains(r#""key":"a%2Fb""#), "{json}");
    let refused = stack.command(&["check", "a/b/c/d", "--config", &config]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("at most 3") && why.contains("--one-key"),
        "{why}"
    );
}

/// `sluice policy override user acme/vip` overrides the user level of one
/// grouped key, that key's own (`acme.vip`); exported and applied back, the
/// override is the same key's, not a plain key `acme.vip` (`acme%2Evip`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_of_a_grouped_key_is_set_exported_and_applied_as_that_key() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &crate::common::groups_toml(30, 2, ""), 1).await;
    let nats = stack.nats.connect().await.unwrap();
    let config = stack.config_path().to_str().unwrap().to_string();
    let run = |args: &[&str]| stack.run(&[args, &["--config", &config]].concat());
    let out = run(&["policy", "override", "user", "acme/vip", "--limit", "10/1h"]);
    assert!(out.contains("override.user.acme.vip set"), "{out}");
    let user_limit = || async {
        let d = ask(&nats, "acme.vip", br#"{"policy":"user","cost":0}"#).await?;
        match d.levels.get(1) {
            Some(l) if l.remaining == 10 => Ok(()),
            _ => Err(anyhow::anyhow!("not in force yet: {d:?}")),
        }
    };
    eventually(Duration::from_secs(10), TICK, user_limit)
        .await
        .expect("the override is in force");
    let exported = run(&["policy", "export"]);
    assert!(exported.contains("acme.vip"), "{exported}");
    run(&["policy", "unoverride", "user", "acme/vip"]);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &exported).unwrap();
    run(&["policy", "apply", file.path().to_str().unwrap()]);
    assert_eq!(run(&["policy", "export"]), exported);
    eventually(Duration::from_secs(10), TICK, user_limit)
        .await
        .expect("applied back, the override is the grouped key's");
}

/// `rl.top` of one group (`group`) ranks its members alone, of two and
/// three tokens under any policy, and not the group's own key nor another
/// group's; by used and by denied, with a policy too; `sluice usage --top
/// --group` prints the same. A group that is not one key token is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_top_ranks_its_members_and_nothing_else() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &crate::common::groups_toml(100, 3, ""), 2).await;
    let nats = stack.nats.connect().await.unwrap();
    crate::common::ask_each(
        &nats,
        &[
            ("acme.alice", "user", 4),
            ("acme.bob", "user", 1),
            ("acme.eng.carol", "tenper", 2),
            ("acmeco.dave", "user", 2),
            ("acme", "tenper", 5),
        ],
    )
    .await;
    let top = |body: &'static str| {
        let nats = nats.clone();
        async move {
            let msg = request(&nats, TOP, body.as_bytes()).await.unwrap();
            if let Some(e) = error_of(&msg) {
                return Err(e);
            }
            let reply: TopReply = serde_json::from_slice(&msg.payload).unwrap();
            Ok(reply
                .keys
                .into_iter()
                .map(|k| (k.key_token, k.policy, k.used, k.denied))
                .collect::<Vec<_>>())
        }
    };
    let row = |k: &str, p: &str, used, denied| (k.to_string(), p.to_string(), used, denied);
    let members = vec![
        row("acme.alice", "user", 3, 1),
        row("acme.eng.carol", "tenper", 2, 0),
        row("acme.bob", "user", 1, 0),
    ];
    assert_eq!(top(r#"{"n":10,"group":"acme"}"#).await.unwrap(), members);
    assert_eq!(
        top(r#"{"n":10,"group":"acme","by":"denied"}"#)
            .await
            .unwrap(),
        members[..1]
    );
    assert_eq!(
        top(r#"{"n":10,"group":"acme","policy":"user"}"#)
            .await
            .unwrap(),
        [members[0].clone(), members[2].clone()]
    );
    // Without the group the group's own key leads: its pool under org (4
    // used: alice's 3 and bob's 1) and its plain asks.
    let all = top(r#"{"n":2}"#).await.unwrap();
    assert_eq!(all[0], row("acme", "tenper", 5, 0), "{all:?}");
    assert_eq!(all[1], row("acme", "org", 4, 1), "{all:?}");
    for bad in [r#"{"group":"acme.eng"}"#, r#"{"group":"a b"}"#] {
        let e = top(bad).await.unwrap_err();
        assert_eq!(e.code.status(), 400, "{bad}: {e}");
    }

    let shown = stack.run(&["usage", "--top", "5", "--group", "acme"]);
    let lines: Vec<&str> = shown.lines().collect();
    assert!(
        lines[0].starts_with("top 3 members of acme by used"),
        "{shown}"
    );
    assert!(lines[2].contains("acme/alice"), "{shown}");
    assert!(lines[3].contains("acme/eng/carol"), "{shown}");
    let refused = stack.command(&["usage", "--top", "5", "--group", "acme/eng"]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("first token"), "{why}");
}
