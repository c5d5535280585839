//! Refusals: each names the file, the field path and the reason, and says
//! what to write instead.

use super::{assert_error, error, parse, policy, FILE};
use sluice_core::config::Config;
use std::path::PathBuf;
use std::time::Duration;

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
        r#"sluice.toml: policies.login.limits[1].per: "1x" is not a duration; use an integer and a unit (ms, s, m, h, d), e.g. "10s", or (fixed_window only) a calendar period: "day", "week" or "month""#
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
        "unknown field; did you mean \"partitions\"? (expected one of partitions, durability, snapshot_interval, fallback, lease_ttl, journal_failure, max_keys, max_ids, region, alert_retention, policies, envoy, usage)",
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
        "unknown field; did you mean \"algorithm\"? (expected one of algorithm, limits, local_budget, mode, max_wait, block_for, tz, week_start, anchor_day, concurrency, hold_ttl, on_expiry, scope, home, regions, region_shares, on_cut, alerts, parent)",
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

/// Calendar periods and modes (SPEC §14): each bad value is
/// refused at its field with the reason, in the file as in the bucket's
/// JSON (`json.rs`), whose reader is the same.
#[test]
fn calendar_and_mode_fields_are_refused_with_the_reason() {
    let calendar = |extra: &str, limits: &str| {
        format!("[policies.p]\nalgorithm = \"fixed_window\"\n{extra}\nlimits = {limits}\n")
    };
    let month = r#"[ { max = 100, per = "month" } ]"#;
    let minute = r#"[ { max = 10, per = "1m" } ]"#;
    for (text, field, reason) in [
        (
            calendar(r#"tz = "Mars/Olympus""#, month),
            "policies.p.tz",
            "unknown time zone \"Mars/Olympus\"; use an IANA zone name",
        ),
        (
            calendar("anchor_day = 0", month),
            "policies.p.anchor_day",
            "anchor_day must be from 1 to 31",
        ),
        (
            calendar("anchor_day = 32", month),
            "policies.p.anchor_day",
            "anchor_day must be from 1 to 31",
        ),
        (
            calendar(
                r#"week_start = "someday""#,
                r#"[ { max = 1, per = "week" } ]"#,
            ),
            "policies.p.week_start",
            "unknown week_start \"someday\"",
        ),
        (
            policy("sliding_window", month),
            "policies.p.limits[0].per",
            "calendar periods (day, week, month) only apply to fixed_window, not sliding_window",
        ),
        (
            policy("token_bucket", r#"[ { max = 10, per = "day" } ]"#),
            "policies.p.limits[0].per",
            "only apply to fixed_window",
        ),
        (
            calendar(r#"tz = "Europe/Berlin""#, minute),
            "policies.p.tz",
            "tz only applies to limits with a calendar period",
        ),
        (
            calendar(r#"week_start = "sunday""#, month),
            "policies.p.week_start",
            "week_start only applies to limits with per = \"week\"",
        ),
        (
            calendar("anchor_day = 15", r#"[ { max = 1, per = "day" } ]"#),
            "policies.p.anchor_day",
            "anchor_day only applies to limits with per = \"month\"",
        ),
        (
            calendar(r#"mode = "dry_run""#, minute),
            "policies.p.mode",
            "unknown mode \"dry_run\"; use \"enforce\" or \"shadow\"",
        ),
        (
            calendar("mode = true", minute),
            "policies.p.mode",
            "expected a string, \"enforce\" or \"shadow\", found a boolean (true)",
        ),
        (
            calendar("", r#"[ { max = 1, per = "fortnight" } ]"#),
            "policies.p.limits[0].per",
            "or (fixed_window only) a calendar period: \"day\", \"week\" or \"month\"",
        ),
    ] {
        assert_error(&text, field, reason);
    }
}
