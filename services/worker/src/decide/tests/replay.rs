//! Journal records replayed at takeover: counted whatever the limit, under
//! the limits in force for the key.

use super::*;
use sluice_core::region::RegionName;

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

/// Gives `key` an override of 100 a minute under `default` (whose own
/// limit is 15 a second).
fn override_a_minute(f: &mut Fixture, key: &str) {
    let mut policies = (*f.policies).clone();
    policies
        .apply(
            &format!("override.default.{key}"),
            Some(br#"{"limits":[{"max":100,"per":"1m"}]}"#),
        )
        .unwrap();
    f.policies = Arc::new(policies);
}

/// A key with an override is replayed under the override's limits, as it
/// was decided: its count lands in the override's window, not in the
/// base policy's.
#[test]
fn a_replayed_record_of_an_overridden_key_counts_under_its_override() {
    let mut f = Fixture::new();
    let key = key_in(1, "o");
    override_a_minute(&mut f, &key);
    let record = Record::new(1, "default", &key, 20, T0);
    assert!(f.decider.replay(&f.policies, &record, &f.counters));
    let later = Nanos(T0.as_u64() + 5_000_000_000);
    assert_eq!(
        f.remaining(&key, later),
        80,
        "20 of the override's 100 a minute, 5 s later"
    );
}

/// A global GCRA split into parts (`sluice_core::region::parts`) is
/// replayed in a region under that region's part, as it was decided there
/// (`Policy::counted_under`): 20 of west's 50 a minute, not of the whole
/// 100.
#[test]
fn a_replayed_record_of_a_global_bucket_counts_under_this_regions_part() {
    let mut f = Fixture::journal(
        r#"
region = "west"
[policies.plan]
algorithm = "gcra"
limits = [ { max = 100, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
"#,
    );
    let west = RegionName::new("west").unwrap();
    f.decider = f.decider.in_region(west.clone());
    let key = key_in(1, "g");
    let record = Record::new(1, "plan", &key, 20, T0);
    assert!(f.decider.replay(&f.policies, &record, &f.counters));
    let part = f.policies.get("plan").unwrap().part_in(&west).unwrap();
    let state = f.counters.state(&format!("plan/{key}")).expect("replayed");
    assert_eq!(part.inspect(&state, T0)[0].remaining, 30);
}

/// A takeover restores a key's counter under the limits it is kept under
/// (`Deciding::kept_under`): an overridden key's by its override. Judged
/// by the policy's own 1 s window, 20 of an override's 100 a minute
/// looked idle 5 s later and were dropped: the key was whole again.
#[test]
fn a_restored_counter_of_an_overridden_key_is_kept_by_its_override() {
    let mut f = Fixture::new();
    let key = key_in(1, "k");
    override_a_minute(&mut f, &key);
    for _ in 0..20 {
        f.allow(&key, b"", T0);
    }
    let entries = || {
        let mut entries = Vec::new();
        f.counters.for_each(|key, state| {
            entries.push(crate::counters::Entry {
                key: key.to_string(),
                state: state.clone(),
            })
        });
        entries
    };
    let later = Nanos(T0.as_u64() + 5_000_000_000);
    let rules = crate::shard::deciding::Deciding {
        decider: &f.decider,
        policies: &f.policies,
    };
    let restored = Counters::new();
    let kept = restored.import(entries(), later, |name, key| rules.kept_under(name, key));
    assert_eq!(kept, 1);
    let by_the_policy = Counters::new();
    let kept = by_the_policy.import(entries(), later, |name, _| f.policies.get(name));
    assert_eq!(kept, 0, "by the policy's own window it was idle");
    f.counters = restored;
    assert_eq!(
        f.remaining(&key, later),
        80,
        "20 of 100 a minute, 5 s later"
    );
}
