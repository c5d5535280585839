//! Groups (SPEC §17) against real workers over a real NATS server: the
//! users of one organisation asking at once through three workers share
//! its pool exactly, every denial names the level that denied, and a key
//! with fewer tokens than its policy has levels is refused with the
//! reason. Asks go as any client sends them, to `rl.allow.<org>.<key>`,
//! through the server's mapping.

use crate::common::SLUICE;
use sluice_tests::{ask, serial, AskError, Stack, TestConfig};

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
