//! The config file of SPEC §4: what parses to what, and that every
//! refusal names the file, the field path and the reason. One test binary,
//! split by what is tested: what parses (and durations), what is refused,
//! and one policy table as JSON; the helpers they share are here.

mod holding;
mod json;
mod parsing;
mod refusals;
mod regions;

use sluice_core::config::{Config, ConfigError};

const FILE: &str = "sluice.toml";

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
