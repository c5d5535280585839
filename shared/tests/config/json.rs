//! One policy table as JSON (SPEC §7): read like the TOML one, refused
//! with paths relative to the table.

use super::parse;
use sluice_core::config::{FieldError, LimitTable, PolicyTable};
use sluice_core::policy::Algorithm;

/// The example of SPEC §7, verbatim.
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
        PolicyTable::new(
            Algorithm::SlidingLog,
            vec![LimitTable {
                max: 10,
                per: "1m".to_string(),
                burst: None,
            }]
        )
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
            "unknown field; did you mean \"algorithm\"? (expected one of algorithm, limits, local_budget, mode, max_wait, block_for, tz, week_start, anchor_day, concurrency, hold_ttl, on_expiry, scope, home, regions, region_shares, on_cut, alerts, parent)",
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

/// The bucket's JSON takes the calendar and mode fields as the file does
/// and writes back what it read (SPEC §7, §14).
#[test]
fn calendar_and_mode_fields_round_trip_through_json() {
    let json = r#"{"algorithm":"fixed_window","limits":[{"max":10,"per":"1m"},{"max":100000,"per":"month"}],"mode":"shadow","tz":"Europe/Berlin","anchor_day":15}"#;
    let table = PolicyTable::from_json(json.as_bytes()).unwrap();
    let policy = table.to_policy("quota").unwrap();
    assert_eq!(policy.mode(), sluice_core::policy::Mode::Shadow);
    let month = policy.limits()[1].calendar().expect("a calendar limit");
    assert_eq!(month.zone().name(), "Europe/Berlin");
    assert_eq!(month.zone().anchor_day(), 15);
    assert_eq!(
        serde_json::to_string(&PolicyTable::of(&policy)).unwrap(),
        json
    );
    let e = json_error(
        r#"{"algorithm":"fixed_window","tz":"Nowhere","limits":[{"max":1,"per":"day"}]}"#,
    );
    assert_eq!(e.field, "tz");
    assert!(e.reason.contains("unknown time zone"), "{e}");
}

/// A penalty (SPEC §18) reads and writes back as the file writes it, and
/// is refused past a day with the field named.
#[test]
fn block_for_round_trips_through_json_and_is_refused_past_a_day() {
    let json = r#"{"algorithm":"fixed_window","limits":[{"max":5,"per":"1m"}],"block_for":"15m"}"#;
    let policy = PolicyTable::from_json(json.as_bytes())
        .unwrap()
        .to_policy("login")
        .unwrap();
    assert_eq!(policy.block_for(), sluice_core::time::Nanos::from_secs(900));
    assert_eq!(
        serde_json::to_string(&PolicyTable::of(&policy)).unwrap(),
        json
    );
    let e = json_error(
        r#"{"algorithm":"fixed_window","limits":[{"max":5,"per":"1m"}],"block_for":"25h"}"#,
    );
    assert_eq!(e.field, "block_for");
    assert!(e.reason.contains("at most 1d"), "{e}");
    let e =
        json_error(r#"{"algorithm":"gcra","limits":[{"max":5,"per":"1m"}],"block_for":"soon"}"#);
    assert_eq!(e.field, "block_for");
    assert!(e.reason.contains("e.g. block_for = \"5m\""), "{e}");
}
