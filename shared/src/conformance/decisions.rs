//! `decisions.json`: what the algorithms decide, step by step, for a
//! client that decides some asks itself (the Python client's `local`
//! fallback ports them). Each case is a policy table and a run of asks
//! and hits at given times, decided by [`Policy::decide`] /
//! [`Policy::record`] on one key's state, as a worker and the Rust
//! client's local limiter decide them.
//!
//! The runs are drawn from a fixed seed (a small xorshift, so the file is
//! the same on every machine): times step by up to a third of the
//! shortest window, costs span 0 (a peek) to the policy's capacity, and one
//! step in eight is a hit, which counts past the limit. Under a policy with
//! a `max_wait` (SPEC §18), every other ask may wait up to a random part of
//! it (`within_ns`), and is answered how long until its start (`wait_ns`).

use crate::config::PolicyTable;
use crate::policy::Policy;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionsFile {
    pub about: String,
    pub cases: Vec<DecisionCase>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionCase {
    pub name: String,
    /// The policy's table, as the config file writes it.
    pub policy: Value,
    pub steps: Vec<Step>,
}

/// One ask (`allow`, cost 0 a peek) or hit (`record`) and its decision,
/// durations in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Nanoseconds since the epoch.
    pub at: u64,
    pub op: String,
    pub cost: u64,
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub reset_ns: u64,
    pub retry_after_ns: u64,
    pub shadow_denied: bool,
    /// How long the ask may wait for its start (SPEC §18, whole
    /// milliseconds: the wire's `wait_ms`); left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub within_ns: u64,
    /// How long from `at` until its start, when allowed for a later one;
    /// left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wait_ns: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The policies run, as tables.
fn policies() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "fixed window",
            r#"{"algorithm":"fixed_window","limits":[{"max":5,"per":"10s"}]}"#,
        ),
        (
            "sliding log",
            r#"{"algorithm":"sliding_log","limits":[{"max":5,"per":"10s"}]}"#,
        ),
        (
            "sliding window",
            r#"{"algorithm":"sliding_window","limits":[{"max":7,"per":"10s"}]}"#,
        ),
        (
            "token bucket",
            r#"{"algorithm":"token_bucket","limits":[{"max":6,"per":"10s"}]}"#,
        ),
        (
            "token bucket with a burst",
            r#"{"algorithm":"token_bucket","limits":[{"max":10,"per":"1m","burst":4}]}"#,
        ),
        (
            "gcra",
            r#"{"algorithm":"gcra","limits":[{"max":6,"per":"10s"}]}"#,
        ),
        (
            "gcra with a burst",
            r#"{"algorithm":"gcra","limits":[{"max":10,"per":"1m","burst":3}]}"#,
        ),
        (
            "two limits: a second and a minute",
            r#"{"algorithm":"sliding_log","limits":[{"max":3,"per":"1s"},{"max":8,"per":"1m"}]}"#,
        ),
        (
            "two fixed windows",
            r#"{"algorithm":"fixed_window","limits":[{"max":4,"per":"2s"},{"max":9,"per":"30s"}]}"#,
        ),
        (
            "two sliding windows",
            r#"{"algorithm":"sliding_window","limits":[{"max":5,"per":"3s"},{"max":12,"per":"20s"}]}"#,
        ),
        (
            "shadow mode",
            r#"{"algorithm":"sliding_log","mode":"shadow","limits":[{"max":3,"per":"5s"}]}"#,
        ),
        (
            "gcra, asks that may wait",
            r#"{"algorithm":"gcra","max_wait":"5s","limits":[{"max":6,"per":"10s","burst":2}]}"#,
        ),
        (
            "token bucket, asks that may wait, two limits",
            r#"{"algorithm":"token_bucket","max_wait":"3s","limits":[{"max":4,"per":"2s"},{"max":10,"per":"30s","burst":6}]}"#,
        ),
    ]
}

const STEPS: usize = 30;
/// 2023-11-14T22:13:20Z, not on a window's edge.
const START: u64 = 1_700_000_000_123_456_789;

pub fn decisions_file() -> DecisionsFile {
    DecisionsFile {
        about: "Decisions of the algorithms (docs/ALGORITHMS.md) for one key under a policy: \
                each step an `allow` of `cost` (0: a peek) or a `record` (a hit) at `at` \
                nanoseconds since the epoch, in order, on the same state, and what it answers. \
                For clients that decide asks themselves."
            .into(),
        cases: policies()
            .into_iter()
            .enumerate()
            .map(|(i, (name, table))| run(name, table, i as u64 + 1))
            .collect(),
    }
}

fn run(name: &str, table: &str, seed: u64) -> DecisionCase {
    let policy: Policy = PolicyTable::from_json(table.as_bytes())
        .and_then(|t| t.to_policy("p"))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let shortest = policy.limits().iter().map(|l| l.per().0).min().unwrap_or(1);
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut state = policy.new_state();
    let mut at = START;
    let steps = (0..STEPS)
        .map(|_| {
            at += next() % (shortest / 3);
            let record = next() % 8 == 0;
            let cost = next() % (policy.capacity() + 1);
            let max_wait = policy.max_wait().0;
            // Drawn only under a policy that waits, so that the other
            // cases' runs stay as they were; whole milliseconds, as the
            // wire's `wait_ms` carries it.
            const MS: u64 = 1_000_000;
            let within = if !record && max_wait > 0 && next() % 2 == 0 {
                next() % (max_wait / MS + 1) * MS
            } else {
                0
            };
            let d = if record {
                policy.record(&mut state, Nanos(at), cost)
            } else {
                policy.decide_within(&mut state, Nanos(at), cost, Nanos(within))
            };
            Step {
                at,
                op: if record { "record" } else { "allow" }.into(),
                cost,
                allowed: d.allowed,
                limit: d.limit,
                remaining: d.remaining,
                reset_ns: d.reset.0,
                retry_after_ns: d.retry_after.0,
                shadow_denied: d.shadow_denied,
                within_ns: within,
                wait_ns: d.wait.0,
            }
        })
        .collect();
    DecisionCase {
        name: name.into(),
        policy: serde_json::from_str(table).expect("the table is JSON"),
        steps,
    }
}
