//! What several test modules of sluice-cli share, one module per topic;
//! what every test crate shares (the stack, asks, load, configs) is in the
//! `sluice-tests` harness.

pub mod client;
pub mod gateway;
pub mod nats;
pub mod regions;

/// The binary under test.
pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// The policies of the holds' tests (`holds.rs`, `holds_batched.rs`):
/// three slots in flight, and 10,000 tokens an hour by token bucket and
/// by sliding log.
pub const HOLDS_CONFIG: &str = r#"
partitions = 8
lease_ttl = "2s"
snapshot_interval = "200ms"

[policies.inflight]
concurrency = 3

[policies.llm]
algorithm = "token_bucket"
limits = [ { max = 10000, per = "1h" } ]

[policies.exact]
algorithm = "sliding_log"
limits = [ { max = 10000, per = "1h" } ]
"#;

/// The [`sluice_tests::TestConfig`] with an organisation's pool of
/// `org_max` an hour and each user `user_max` an hour of it (sliding logs:
/// exact, with no window edge for a test to cross): the groups' tests
/// through the gateway and the client (`gateway_groups.rs`,
/// `client_groups.rs`), then `more` (other policies).
pub fn groups_toml(org_max: u64, user_max: u64, more: &str) -> String {
    format!(
        r#"{}
[policies.org]
algorithm = "sliding_log"
limits = [ {{ max = {org_max}, per = "1h" }} ]

[policies.user]
algorithm = "sliding_log"
parent = "org"
limits = [ {{ max = {user_max}, per = "1h" }} ]
{more}"#,
        sluice_tests::TestConfig::new().toml()
    )
}

/// Asks each `(key token, policy, asks)` that many times, in order, each
/// ask answered (allowed or denied): the traffic of a group's members
/// that `groups.rs` and `gateway_ui.rs` rank.
pub async fn ask_each(nats: &async_nats::Client, asks: &[(&str, &str, usize)]) {
    for (key, policy, n) in asks {
        let body = format!(r#"{{"policy":"{policy}"}}"#);
        for _ in 0..*n {
            sluice_tests::ask(nats, key, body.as_bytes())
                .await
                .unwrap_or_else(|e| panic!("{key} under {policy}: {e:?}"));
        }
    }
}
