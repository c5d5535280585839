//! The config file of CONTRACT §4: what parses to what, and that every
//! refusal names the file, the field path and the reason.

use sluice_core::config::{
    format_duration, parse_duration, Config, ConfigError, Durability, DurationError, Fallback,
    FieldError, LimitTable, PolicyTable,
};
use sluice_core::policy::{Algorithm, Policy};
use sluice_core::time::Nanos;
use std::path::{Path, PathBuf};
use std::time::Duration;

const FILE: &str = "sluice.toml";

/// The example of CONTRACT §4, verbatim.
const CONTRACT_EXAMPLE: &str = r#"
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

fn parse(text: &str) -> Config {
    Config::from_toml(text, FILE).unwrap_or_else(|e| panic!("{e}"))
}

fn error(text: &str) -> ConfigError {
    match Config::from_toml(text, FILE) {
        Ok(c) => panic!("expected an error, parsed {c:?}"),
        Err(e) => e,
    }
}

/// Asserts the error's file and field, that its reason contains `reason`, and
/// that Display puts them together as `file: field: reason`.
fn assert_error(text: &str, field: &str, reason: &str) -> ConfigError {
    let e = error(text);
    assert_eq!(e.file, FILE, "{e}");
    assert_eq!(e.field, field, "{e}");
    assert!(
        e.reason.contains(reason),
        "reason {:?} does not contain {reason:?}",
        e.reason
    );
    assert_eq!(e.to_string(), format!("{FILE}: {field}: {}", e.reason));
    e
}

/// A config with one policy `p` of `algorithm` and the given limits list.
fn policy(algorithm: &str, limits: &str) -> String {
    format!("[policies.p]\nalgorithm = \"{algorithm}\"\nlimits = {limits}\n")
}

fn secs(s: u64) -> Nanos {
    Nanos::from_secs(s)
}

// --- what parses ---

#[test]
fn contract_example_parses_to_its_policies() {
    let c = parse(CONTRACT_EXAMPLE);
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
    let l = burst.limits()[0];
    assert_eq!((l.max(), l.per(), l.burst()), (100, secs(60), 20));
    assert_eq!(burst.capacity(), 20);

    assert!(c.policy("nope").is_none());
}

#[test]
fn shipped_example_config_parses_like_the_contract_example() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/sluice.toml");
    let shipped = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shipped, parse(CONTRACT_EXAMPLE));
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

// --- refusals: file, field path, reason ---

#[test]
fn bad_duration_names_the_limit_and_shows_the_accepted_form() {
    let e = assert_error(
        r#"
        [policies.login]
        algorithm = "sliding_log"
        limits = [ { max = 10, per = "1m" }, { max = 500, per = "1x" } ]
        "#,
        "policies.login.limits[1].per",
        "",
    );
    assert_eq!(
        e.to_string(),
        r#"sluice.toml: policies.login.limits[1].per: "1x" is not a duration; use an integer and a unit (ms, s, m, h, d), e.g. "10s""#
    );
}

#[test]
fn bad_durations_in_each_duration_field_are_refused() {
    for text in ["1x", "", "1.5s", "-1s", "s", "10"] {
        assert_error(
            &format!("snapshot_interval = {text:?}"),
            "snapshot_interval",
            "is not a duration; use an integer and a unit (ms, s, m, h, d)",
        );
        assert_error(
            &format!("lease_ttl = {text:?}"),
            "lease_ttl",
            "is not a duration",
        );
        assert_error(
            &policy("gcra", &format!("[ {{ max = 1, per = {text:?} }} ]")),
            "policies.p.limits[0].per",
            &format!("{text:?} is not a duration"),
        );
    }
}

#[test]
fn a_duration_written_as_a_number_is_refused() {
    assert_error(
        &policy("gcra", "[ { max = 1, per = 10 } ]"),
        "policies.p.limits[0].per",
        "10 is not a duration; use a string with an integer and a unit",
    );
    assert_error(
        "snapshot_interval = 1.5",
        "snapshot_interval",
        "1.5 is not a duration",
    );
}

#[test]
fn an_overflowing_duration_is_refused() {
    assert_error(
        &policy("gcra", r#"[ { max = 1, per = "999999999999d" } ]"#),
        "policies.p.limits[0].per",
        "\"999999999999d\" is too long; the longest duration is 213503d",
    );
}

#[test]
fn zero_window_is_refused() {
    assert_error(
        &policy("fixed_window", r#"[ { max = 1, per = "0s" } ]"#),
        "policies.p.limits[0].per",
        "the window must be longer than 0",
    );
}

#[test]
fn max_zero_is_refused() {
    assert_error(
        &policy("sliding_window", r#"[ { max = 0, per = "1s" } ]"#),
        "policies.p.limits[0].max",
        "max must be at least 1",
    );
}

#[test]
fn negative_or_non_integer_max_is_refused() {
    assert_error(
        &policy("sliding_window", r#"[ { max = -5, per = "1s" } ]"#),
        "policies.p.limits[0].max",
        "must be a positive integer, found -5",
    );
    assert_error(
        &policy("sliding_window", r#"[ { max = "5", per = "1s" } ]"#),
        "policies.p.limits[0].max",
        "expected a positive integer, found a string (\"5\")",
    );
}

#[test]
fn missing_max_or_per_is_refused() {
    assert_error(
        &policy("gcra", r#"[ { per = "1s" } ]"#),
        "policies.p.limits[0].max",
        "missing",
    );
    assert_error(
        &policy("gcra", "[ { max = 1 } ]"),
        "policies.p.limits[0].per",
        "missing",
    );
}

#[test]
fn a_sliding_log_max_above_the_cap_is_refused() {
    assert_error(
        &policy(
            "sliding_log",
            r#"[ { max = 10, per = "1s" }, { max = 100001, per = "1h" } ]"#,
        ),
        "policies.p.limits[1].max",
        "capped at 100000; use sliding_window",
    );
}

#[test]
fn unknown_algorithm_is_refused_with_the_known_ones() {
    assert_error(
        &policy("leaky_bucket", r#"[ { max = 1, per = "1s" } ]"#),
        "policies.p.algorithm",
        "unknown algorithm \"leaky_bucket\"; use one of fixed_window, sliding_log, sliding_window, token_bucket, gcra",
    );
}

#[test]
fn missing_algorithm_is_refused() {
    assert_error(
        "[policies.p]\nlimits = [ { max = 1, per = \"1s\" } ]",
        "policies.p.algorithm",
        "missing; use one of fixed_window",
    );
}

#[test]
fn burst_zero_is_refused() {
    assert_error(
        &policy("token_bucket", r#"[ { max = 10, per = "1s", burst = 0 } ]"#),
        "policies.p.limits[0].burst",
        "burst must be at least 1",
    );
}

#[test]
fn burst_on_a_window_algorithm_is_refused_even_when_equal_to_max() {
    for algorithm in ["fixed_window", "sliding_log", "sliding_window"] {
        for burst in [5, 10] {
            assert_error(
                &policy(
                    algorithm,
                    &format!(r#"[ {{ max = 10, per = "1s", burst = {burst} }} ]"#),
                ),
                "policies.p.limits[0].burst",
                "burst only applies to token_bucket and gcra",
            );
        }
    }
}

#[test]
fn an_empty_limits_list_is_refused() {
    assert_error(
        &policy("gcra", "[]"),
        "policies.p.limits",
        "a policy needs at least one limit",
    );
}

#[test]
fn missing_or_malformed_limits_are_refused() {
    assert_error(
        "[policies.p]\nalgorithm = \"gcra\"",
        "policies.p.limits",
        "missing; a policy needs at least one limit",
    );
    assert_error(
        &policy("gcra", r#"{ max = 1, per = "1s" }"#),
        "policies.p.limits",
        "expected a list of limits",
    );
    assert_error(
        &policy("gcra", "[ 5 ]"),
        "policies.p.limits[0]",
        "expected a limit like { max = 10, per = \"1m\" }, found an integer (5)",
    );
}

#[test]
fn partitions_out_of_range_are_refused() {
    for n in ["0", "1025", "-1", "4294967296"] {
        assert_error(
            &format!("partitions = {n}"),
            "partitions",
            &format!("must be from 1 to 1024, found {n}"),
        );
    }
    assert_error(
        "partitions = \"64\"",
        "partitions",
        "expected an integer from 1 to 1024, found a string (\"64\")",
    );
}

#[test]
fn unknown_top_level_field_is_refused_with_a_suggestion() {
    assert_error(
        "partiton = 32",
        "partiton",
        "unknown field; did you mean \"partitions\"? (expected one of partitions, durability, snapshot_interval, fallback, lease_ttl, journal_failure, max_keys, policies, envoy, usage)",
    );
    assert_error(
        "colour = \"blue\"",
        "colour",
        "unknown field; expected one of partitions",
    );
    assert_error("[policy.login]", "policy", "did you mean \"policies\"?");
}

#[test]
fn unknown_policy_and_limit_fields_are_refused() {
    assert_error(
        "[policies.p]\nalgoritm = \"gcra\"\nlimits = [ { max = 1, per = \"1s\" } ]",
        "policies.p.algoritm",
        "unknown field; did you mean \"algorithm\"? (expected one of algorithm, limits, local_budget)",
    );
    assert_error(
        &policy("gcra", r#"[ { max = 1, per = "1s", brust = 2 } ]"#),
        "policies.p.limits[0].brust",
        "unknown field; did you mean \"burst\"? (expected one of max, per, burst)",
    );
}

#[test]
fn bad_durability_and_fallback_values_are_refused() {
    assert_error(
        "durability = \"fast\"",
        "durability",
        "\"fast\" is not a durability; use \"snapshot\" or \"journal\"",
    );
    assert_error(
        "fallback = \"maybe\"",
        "fallback",
        "\"maybe\" is not a fallback; use \"open\", \"closed\" or \"local\"",
    );
    assert_error(
        "fallback = true",
        "fallback",
        "expected a string, found a boolean (true)",
    );
}

#[test]
fn snapshot_interval_below_100ms_is_refused() {
    assert_error(
        "snapshot_interval = \"99ms\"",
        "snapshot_interval",
        "must be at least 100ms, found \"99ms\"",
    );
    assert_eq!(
        parse("snapshot_interval = \"100ms\"").snapshot_interval,
        Duration::from_millis(100)
    );
}

#[test]
fn lease_ttl_outside_1s_to_60s_or_fractional_is_refused() {
    for text in ["0s", "999ms", "61s", "2m"] {
        assert_error(
            &format!("lease_ttl = {text:?}"),
            "lease_ttl",
            &format!("must be from 1s to 1m, found {text:?}"),
        );
    }
    assert_error(
        "lease_ttl = \"1500ms\"",
        "lease_ttl",
        "must be a whole number of seconds",
    );
}

#[test]
fn invalid_policy_names_are_refused() {
    let long = "a".repeat(65);
    for (key, field) in [
        ("\"bad name\"", "policies.\"bad name\"".to_string()),
        ("\"\"", "policies.\"\"".to_string()),
        ("\"a.b\"", "policies.\"a.b\"".to_string()),
        ("\"bob@x\"", "policies.\"bob@x\"".to_string()),
        (long.as_str(), format!("policies.{long}")),
    ] {
        assert_error(
            &format!(
                "[policies.{key}]\nalgorithm = \"gcra\"\nlimits = [ {{ max = 1, per = \"1s\" }} ]"
            ),
            &field,
            "is not a valid policy name; use 1 to 64 characters from A-Z, a-z, 0-9, _ and -",
        );
    }
}

#[test]
fn policies_and_a_policy_must_be_tables() {
    assert_error("policies = 5", "policies", "expected a table of policies");
    assert_error(
        "[policies]\nlogin = \"sliding_log\"",
        "policies.login",
        "expected a policy table",
    );
}

#[test]
fn toml_syntax_errors_give_line_and_column() {
    let e = error("partitions = 64\nfallback \"open\"\n");
    assert_eq!(e.file, FILE);
    assert_eq!(e.field, "");
    assert!(
        e.reason.starts_with("line 2, column 10: invalid TOML: "),
        "{e}"
    );
    assert!(e.reason.contains("(in `fallback \"open\"`)"), "{e}");
    assert_eq!(e.to_string(), format!("{FILE}: {}", e.reason));
    assert!(!e.to_string().contains('\n'), "one line: {e}");
}

#[test]
fn duplicate_keys_are_syntax_errors() {
    let e = error("partitions = 64\npartitions = 32\n");
    assert_eq!(e.field, "");
    assert!(e.reason.starts_with("line 2, column 1: "), "{e}");
    assert!(e.reason.contains("duplicate key"), "{e}");
}

#[test]
fn an_unreadable_file_names_the_file() {
    let path = PathBuf::from("/nonexistent/sluice.toml");
    let e = Config::resolve(Some(&path)).unwrap_err();
    assert_eq!(e.file, "/nonexistent/sluice.toml");
    assert_eq!(e.field, "");
    assert!(e.reason.starts_with("cannot read the config file: "), "{e}");
}

#[test]
fn load_names_the_file_by_its_path() {
    let dir = std::env::temp_dir().join(format!("sluice-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "partitions = 0\n").unwrap();
    let e = Config::load(&path).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(e.file, path.display().to_string());
    assert_eq!(e.field, "partitions");
}

// --- one policy table as JSON (CONTRACT §7) ---

/// The example of CONTRACT §7, verbatim.
const KV_EXAMPLE: &str = r#"{"algorithm":"sliding_log","limits":[{"max":10,"per":"1m"}]}"#;

fn json_error(json: &str) -> FieldError {
    match PolicyTable::from_json(json.as_bytes()).and_then(|t| t.to_policy("p")) {
        Ok(p) => panic!("expected an error, got {p:?}"),
        Err(e) => e,
    }
}

#[test]
fn the_json_form_of_a_policy_table_reads_like_the_toml_one() {
    let table = PolicyTable::from_json(KV_EXAMPLE.as_bytes()).unwrap();
    assert_eq!(
        table,
        PolicyTable {
            algorithm: Algorithm::SlidingLog,
            limits: vec![LimitTable {
                max: 10,
                per: "1m".to_string(),
                burst: None,
            }],
            local_budget: false,
        }
    );
    let policy = table.to_policy("login").unwrap();
    let from_toml = parse(
        "[policies.login]\nalgorithm = \"sliding_log\"\nlimits = [ { max = 10, per = \"1m\" } ]",
    );
    assert_eq!(Some(&policy), from_toml.policy("login"));
    assert_eq!(serde_json::to_string(&table).unwrap(), KV_EXAMPLE);
}

#[test]
fn burst_is_written_only_when_given() {
    let json = r#"{"algorithm":"token_bucket","limits":[{"max":100,"per":"1m","burst":20}]}"#;
    let table = PolicyTable::from_json(json.as_bytes()).unwrap();
    assert_eq!(table.limits[0].burst, Some(20));
    assert_eq!(serde_json::to_string(&table).unwrap(), json);
    assert_eq!(table.to_policy("burst").unwrap().capacity(), 20);
}

#[test]
fn json_tables_are_refused_with_paths_relative_to_the_table() {
    for (json, field, reason) in [
        (
            r#"{"algorithm":"gcra","limits":[{"max":1,"per":"1s","brust":2}]}"#,
            "limits[0].brust",
            "unknown field; did you mean \"burst\"? (expected one of max, per, burst)",
        ),
        (
            r#"{"algoritm":"gcra","limits":[]}"#,
            "algoritm",
            "unknown field; did you mean \"algorithm\"? (expected one of algorithm, limits, local_budget)",
        ),
        (
            r#"{"algorithm":"sliding_log","limits":[{"max":10,"per":"1m"},{"max":500,"per":"1x"}]}"#,
            "limits[1].per",
            "\"1x\" is not a duration; use an integer and a unit (ms, s, m, h, d), e.g. \"10s\"",
        ),
        (
            r#"{"algorithm":"gcra","limits":[{"max":"5","per":"1s"}]}"#,
            "limits[0].max",
            "expected a positive integer, found a string (\"5\")",
        ),
        (
            r#"{"algorithm":"gcra","limits":[{"max":-5,"per":"1s"}]}"#,
            "limits[0].max",
            "must be a positive integer, found -5",
        ),
        (
            r#"{"algorithm":"gcra","limits":[{"per":"1s"}]}"#,
            "limits[0].max",
            "missing; e.g. max = 10",
        ),
        (
            r#"{"limits":[{"max":1,"per":"1s"}]}"#,
            "algorithm",
            "missing; use one of fixed_window, sliding_log, sliding_window, token_bucket, gcra",
        ),
        (
            r#"{"algorithm":"leaky_bucket","limits":[{"max":1,"per":"1s"}]}"#,
            "algorithm",
            "unknown algorithm \"leaky_bucket\"",
        ),
        (
            r#"{"algorithm":"fixed_window","limits":[{"max":1,"per":"1s","burst":1}]}"#,
            "limits[0].burst",
            "burst only applies to token_bucket and gcra",
        ),
        (
            r#"{"algorithm":"gcra","limits":[]}"#,
            "limits",
            "a policy needs at least one limit",
        ),
        (
            r#"{"algorithm":"gcra","limits":5}"#,
            "limits",
            "expected a list of limits, e.g. limits = [ { max = 10, per = \"1m\" } ], found an integer (5)",
        ),
        (
            r#"{"algorithm":"gcra","limits":[null]}"#,
            "limits[0]",
            "expected a limit like { max = 10, per = \"1m\" }, found null",
        ),
        (
            r#"["gcra"]"#,
            "",
            "expected a policy table like {\"algorithm\":\"gcra\",\"limits\":[{\"max\":10,\"per\":\"1m\"}]}, found an array",
        ),
    ] {
        let e = json_error(json);
        assert_eq!(e.field, field, "{json}: {e}");
        assert!(e.reason.contains(reason), "{json}: {:?} lacks {reason:?}", e.reason);
        assert!(!e.reason.contains("line 1 column"), "the path says where: {e}");
    }
    let e = json_error(r#"{"algorithm":"gcra""#);
    assert_eq!(e.field, "");
    assert!(
        e.reason.starts_with("invalid JSON: EOF while parsing"),
        "{e}"
    );
}

#[test]
fn a_json_table_under_an_invalid_name_is_refused() {
    let e = PolicyTable::from_json(KV_EXAMPLE.as_bytes())
        .unwrap()
        .to_policy("bad name")
        .unwrap_err();
    assert_eq!(e.field, "");
    assert!(e.reason.contains("is not a valid policy name"), "{e}");
    assert_eq!(
        e.clone().in_file("kv").to_string(),
        format!("kv: {}", e.reason)
    );
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
    // The JSON form of CONTRACT §7 carries it, and leaves it out when off.
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
