//! What parses to what: the contract's example, defaults, every knob and
//! algorithm, and durations written and formatted.

use super::{assert_error, parse, policy};
use sluice_core::config::{
    format_duration, parse_duration, Config, Durability, DurationError, Fallback, PolicyTable,
};
use sluice_core::policy::{Algorithm, Policy};
use sluice_core::time::Nanos;
use std::path::Path;
use std::time::Duration;

/// The example of SPEC §4, verbatim.
const SPEC_EXAMPLE: &str = r#"
partitions = 64                 # must match the NATS server's mapping
durability = "snapshot"         # or "journal"
snapshot_interval = "2s"
fallback = "closed"             # what clients/gateway do when no worker answers: "open" | "closed" | "local"

[policies.default]              # used when a request names no policy
algorithm = "sliding_window"    # fixed_window | sliding_log | sliding_window | token_bucket | gcra
limits = [ { max = 15, per = "1s" } ]

[policies.login]
algorithm = "sliding_log"
limits = [ { max = 10, per = "1m" }, { max = 500, per = "1h" } ]   # all must hold

[policies.burst]
algorithm = "token_bucket"
limits = [ { max = 100, per = "1m", burst = 20 } ]   # rate max/per, bucket size burst (default max)
"#;

fn secs(s: u64) -> Nanos {
    Nanos::from_secs(s)
}

#[test]
fn contract_example_parses_to_its_policies() {
    let c = parse(SPEC_EXAMPLE);
    assert_eq!(c.partitions, 64);
    assert_eq!(c.durability, Durability::Snapshot);
    assert_eq!(c.snapshot_interval, Duration::from_secs(2));
    assert_eq!(c.fallback, Fallback::Closed);
    assert_eq!(c.lease_ttl, Duration::from_secs(3));
    assert_eq!(
        c.policies.keys().collect::<Vec<_>>(),
        ["burst", "default", "login"]
    );

    let default = c.policy("default").unwrap();
    assert_eq!(default, &Policy::builtin_default());
    assert_eq!(default.algorithm(), Algorithm::SlidingWindow);

    let login = c.policy("login").unwrap();
    assert_eq!(login.name(), "login");
    assert_eq!(login.algorithm(), Algorithm::SlidingLog);
    let limits: Vec<_> = login
        .limits()
        .iter()
        .map(|l| (l.max(), l.per(), l.burst()))
        .collect();
    assert_eq!(limits, [(10, secs(60), 10), (500, secs(3600), 500)]);

    let burst = c.policy("burst").unwrap();
    assert_eq!(burst.algorithm(), Algorithm::TokenBucket);
    let l = &burst.limits()[0];
    assert_eq!((l.max(), l.per(), l.burst()), (100, secs(60), 20));
    assert_eq!(burst.capacity(), 20);

    assert!(c.policy("nope").is_none());
}

#[test]
fn shipped_example_config_parses_like_the_contract_example() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/sluice.toml");
    let shipped = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shipped, parse(SPEC_EXAMPLE));
}

#[test]
fn no_file_means_defaults_and_the_builtin_15_per_second_policy() {
    let c = Config::resolve(None).unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.partitions, 64);
    assert_eq!(c.durability, Durability::Snapshot);
    assert_eq!(c.snapshot_interval, Duration::from_secs(2));
    assert_eq!(c.fallback, Fallback::Closed);
    assert_eq!(c.lease_ttl, Duration::from_secs(3));
    assert_eq!(c.policies.len(), 1);
    let p = c.default_policy();
    assert_eq!(p.name(), "default");
    assert_eq!(p.algorithm(), Algorithm::SlidingWindow);
    assert_eq!(
        p.limits()
            .iter()
            .map(|l| (l.max(), l.per()))
            .collect::<Vec<_>>(),
        [(15, secs(1))]
    );
}

#[test]
fn an_empty_file_is_the_default_config() {
    assert_eq!(parse(""), Config::default());
    assert_eq!(parse("# nothing here\n"), Config::default());
}

#[test]
fn a_file_without_a_default_policy_gets_the_builtin_one() {
    let c = parse(&policy("gcra", r#"[ { max = 5, per = "1s" } ]"#));
    assert_eq!(c.policies.len(), 2);
    assert_eq!(c.policy("default"), Some(&Policy::builtin_default()));
    assert_eq!(c.policy("p").unwrap().algorithm(), Algorithm::Gcra);
}

#[test]
fn a_file_can_replace_the_default_policy() {
    let c = parse(
        r#"
        [policies.default]
        algorithm = "fixed_window"
        limits = [ { max = 100, per = "1m" } ]
        "#,
    );
    assert_eq!(c.policies.len(), 1);
    assert_eq!(c.default_policy().algorithm(), Algorithm::FixedWindow);
    assert_eq!(c.default_policy().limits()[0].max(), 100);
}

#[test]
fn every_top_level_knob_can_be_set() {
    let c = parse(
        r#"
        partitions = 1024
        durability = "journal"
        snapshot_interval = "1500ms"
        fallback = "local"
        lease_ttl = "1m"
        "#,
    );
    assert_eq!(c.partitions, 1024);
    assert_eq!(c.durability, Durability::Journal);
    assert_eq!(c.snapshot_interval, Duration::from_millis(1500));
    assert_eq!(c.fallback, Fallback::Local);
    assert_eq!(c.lease_ttl, Duration::from_secs(60));
    assert_eq!(parse("partitions = 1").partitions, 1);
    assert_eq!(parse("fallback = \"open\"").fallback, Fallback::Open);
    assert_eq!(
        parse("lease_ttl = \"1s\"").lease_ttl,
        Duration::from_secs(1)
    );
}

#[test]
fn every_algorithm_name_is_accepted() {
    for a in Algorithm::ALL {
        let c = parse(&policy(a.as_str(), r#"[ { max = 3, per = "1s" } ]"#));
        assert_eq!(c.policy("p").unwrap().algorithm(), a);
    }
}

#[test]
fn burst_is_accepted_by_gcra_and_defaults_to_max() {
    let c = parse(&policy(
        "gcra",
        r#"[ { max = 10, per = "1s", burst = 3 } ]"#,
    ));
    assert_eq!(c.policy("p").unwrap().limits()[0].burst(), 3);
    let c = parse(&policy("token_bucket", r#"[ { max = 10, per = "1s" } ]"#));
    assert_eq!(c.policy("p").unwrap().limits()[0].burst(), 10);
}

#[test]
fn limits_can_be_written_as_an_array_of_tables() {
    let c = parse(
        r#"
        [policies.login]
        algorithm = "sliding_log"
        [[policies.login.limits]]
        max = 10
        per = "1m"
        [[policies.login.limits]]
        max = 500
        per = "1h"
        "#,
    );
    assert_eq!(c.policy("login").unwrap().limits().len(), 2);
}

#[test]
fn policy_names_may_use_letters_digits_underscore_and_dash() {
    let name = "A-z_09".repeat(10) + "abcd"; // 64 characters
    let c = parse(&format!(
        "[policies.{name}]\nalgorithm = \"gcra\"\nlimits = [ {{ max = 1, per = \"1s\" }} ]\n"
    ));
    assert!(c.policy(&name).is_some());
}

// --- durations ---

#[test]
fn durations_are_an_integer_and_a_unit() {
    let ok = [
        ("1500ms", Duration::from_millis(1500)),
        ("2s", Duration::from_secs(2)),
        ("1m", Duration::from_secs(60)),
        ("1h", Duration::from_secs(3600)),
        ("1d", Duration::from_secs(86_400)),
        ("0s", Duration::ZERO),
        ("007s", Duration::from_secs(7)),
    ];
    for (text, d) in ok {
        assert_eq!(parse_duration(text), Ok(d), "{text}");
    }
}

#[test]
fn durations_without_a_valid_integer_and_unit_are_refused_with_the_accepted_form() {
    for text in [
        "1x", "", "1.5s", "-1s", "+1s", "s", "10", " 1s", "1s ", "1 s", "1S", "1sec", "1m30s",
    ] {
        let e = parse_duration(text).unwrap_err();
        assert_eq!(e, DurationError::Invalid(text.to_string()));
        assert_eq!(
            e.to_string(),
            format!(
                "{text:?} is not a duration; use an integer and a unit (ms, s, m, h, d), e.g. \"10s\""
            )
        );
    }
}

#[test]
fn durations_too_long_for_u64_nanoseconds_are_refused() {
    for text in [
        "213504d",
        "5124095h",
        "18446744073709551616ms",
        "99999999999999999999999999s",
    ] {
        let e = parse_duration(text).unwrap_err();
        assert_eq!(e, DurationError::TooLong(text.to_string()), "{text}");
        assert!(
            e.to_string().contains("the longest duration is 213503d"),
            "{e}"
        );
    }
    assert!(parse_duration("213503d").is_ok());
}

#[test]
fn durations_format_in_the_largest_exact_unit() {
    for text in ["1500ms", "2s", "90s", "1m", "1h", "1d", "0ms"] {
        assert_eq!(format_duration(parse_duration(text).unwrap()), text);
    }
    assert_eq!(format_duration(Duration::from_secs(120)), "2m");
}

#[test]
fn journal_failure_is_unavailable_unless_set_to_answer() {
    use sluice_core::config::JournalFailure;
    assert_eq!(parse("").journal_failure, JournalFailure::Unavailable);
    assert_eq!(
        parse("journal_failure = \"answer\"").journal_failure,
        JournalFailure::Answer
    );
    assert_error(
        "journal_failure = \"ignore\"",
        "journal_failure",
        "\"ignore\" is not a journal_failure; use \"unavailable\" or \"answer\"",
    );
}

#[test]
fn max_keys_defaults_to_two_million_and_must_be_a_positive_integer() {
    use sluice_core::config::DEFAULT_MAX_KEYS;
    assert_eq!(parse("").max_keys, DEFAULT_MAX_KEYS);
    assert_eq!(DEFAULT_MAX_KEYS, 2_000_000);
    assert_eq!(parse("max_keys = 1_000").max_keys, 1_000);
    assert_error(
        "max_keys = 0",
        "max_keys",
        "must be at least 1, found 0 (the live counters one worker may hold, e.g. 2_000_000)",
    );
    assert_error(
        "max_keys = -5",
        "max_keys",
        "must be at least 1, found -5 (the live counters one worker may hold, e.g. 2_000_000)",
    );
    assert_error(
        "max_keys = \"1M\"",
        "max_keys",
        "expected an integer of at least 1, e.g. max_keys = 2_000_000, found a string (\"1M\")",
    );
}

#[test]
fn local_budget_is_off_unless_asked_for_and_only_where_it_is_exact() {
    let limits = r#"[ { max = 10, per = "1s" } ]"#;
    let config = parse(&policy("fixed_window", limits));
    assert!(!config.policies["p"].local_budget());
    for algorithm in ["fixed_window", "token_bucket", "gcra"] {
        let text = format!("{}local_budget = true\n", policy(algorithm, limits));
        assert!(parse(&text).policies["p"].local_budget(), "{algorithm}");
    }
    for algorithm in ["sliding_log", "sliding_window"] {
        let text = format!("{}local_budget = true\n", policy(algorithm, limits));
        assert_error(
            &text,
            "policies.p.local_budget",
            "local_budget needs fixed_window, token_bucket or gcra",
        );
    }
    // The JSON form of SPEC §7 carries it, and leaves it out when off.
    let table = PolicyTable::from_json(
        br#"{"algorithm":"gcra","limits":[{"max":10,"per":"1s"}],"local_budget":true}"#,
    )
    .unwrap();
    let policy = table.to_policy("p").unwrap();
    assert!(policy.local_budget());
    assert_eq!(PolicyTable::of(&policy), table);
    let off = PolicyTable::from_json(br#"{"algorithm":"gcra","limits":[{"max":10,"per":"1s"}]}"#)
        .unwrap();
    assert!(!serde_json::to_string(&off)
        .unwrap()
        .contains("local_budget"));
}
