//! The hold fields of a policy (SPEC §13): what parses, what a policy
//! of only `concurrency` is, what is refused, in the file and as JSON.

use super::{assert_error, parse};
use sluice_core::config::PolicyTable;
use sluice_core::holds::{End, DEFAULT_TTL};
use sluice_core::time::Nanos;

#[test]
fn hold_fields_parse_beside_limits_and_alone() {
    let config = parse(
        r#"
        [policies.llm]
        algorithm = "token_bucket"
        limits = [ { max = 100000, per = "1m" } ]
        hold_ttl = "2m"
        on_expiry = "release"

        [policies.inflight]
        concurrency = 3
        "#,
    );
    let llm = config.policies.get("llm").unwrap().holding();
    assert_eq!(
        (llm.concurrency, llm.ttl, llm.on_expiry),
        (None, Nanos::from_secs(120), End::Release)
    );
    let inflight = config.policies.get("inflight").unwrap();
    assert!(inflight.limits().is_empty(), "no limits, only slots");
    assert_eq!(inflight.holding().concurrency, Some(3));
    assert_eq!(inflight.holding().ttl, DEFAULT_TTL);

    // Through the bucket's JSON and back, unchanged.
    for name in ["llm", "inflight"] {
        let policy = config.policies.get(name).unwrap();
        let json = serde_json::to_vec(&PolicyTable::of(policy)).unwrap();
        let again = PolicyTable::from_json(&json)
            .unwrap()
            .to_policy(name)
            .unwrap();
        assert_eq!(&again, policy, "{}", String::from_utf8_lossy(&json));
    }
    let json = serde_json::to_string(&PolicyTable::of(inflight)).unwrap();
    assert_eq!(json, r#"{"concurrency":3}"#);
}

#[test]
fn bad_hold_fields_are_refused_with_the_reason() {
    let with = |fields: &str| format!("[policies.p]\n{fields}\n");
    let limits = "algorithm = \"gcra\"\nlimits = [ { max = 1, per = \"1s\" } ]";
    assert_error(
        &with("concurrency = 0"),
        "policies.p.concurrency",
        "out of range",
    );
    assert_error(
        &with("concurrency = 1000001"),
        "policies.p.concurrency",
        "out of range",
    );
    assert_error(
        &with(&format!("{limits}\nhold_ttl = \"2h\"")),
        "policies.p.hold_ttl",
        "1 ms to 1 h",
    );
    assert_error(
        &with(&format!("{limits}\nhold_ttl = \"soon\"")),
        "policies.p.hold_ttl",
        "is not a duration",
    );
    assert_error(
        &with(&format!("{limits}\non_expiry = \"refund\"")),
        "policies.p.on_expiry",
        "\"charge\"",
    );
    assert_error(
        &with("concurrency = 2\nalgorithm = \"gcra\""),
        "policies.p.algorithm",
        "only `concurrency`",
    );
    assert_error(
        &with("hold_ttl = \"1m\""),
        "policies.p.algorithm",
        "missing",
    );
}
