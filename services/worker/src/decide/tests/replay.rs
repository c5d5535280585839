//! Journal records replayed at takeover: counted whatever the limit, under
//! the limits in force for the key.

use super::*;

#[test]
fn a_replayed_record_counts_whatever_the_limit() {
    let f = Fixture::new();
    let key = key_in(1, "r");
    let record = Record::new(1, "default", &key, 20, T0);
    assert!(f.decider.replay(&f.policies, &record, &f.counters));
    assert_eq!(f.remaining(&key, T0), 0);
    let gone = Record {
        p: "retired".into(),
        ..record
    };
    assert!(!f.decider.replay(&f.policies, &gone, &f.counters));
}

/// A key with an override is replayed under the override's limits, as it
/// was decided: its count lands in the override's window, not in the
/// base policy's.
#[test]
fn a_replayed_record_of_an_overridden_key_counts_under_its_override() {
    let mut f = Fixture::new();
    let key = key_in(1, "o");
    let mut policies = (*f.policies).clone();
    policies
        .apply(
            &format!("override.default.{key}"),
            Some(br#"{"limits":[{"max":100,"per":"1m"}]}"#),
        )
        .unwrap();
    f.policies = Arc::new(policies);
    let record = Record::new(1, "default", &key, 20, T0);
    assert!(f.decider.replay(&f.policies, &record, &f.counters));
    let later = Nanos(T0.as_u64() + 5_000_000_000);
    assert_eq!(
        f.remaining(&key, later),
        80,
        "20 of the override's 100 a minute, 5 s later"
    );
}
