//! What alert thresholds cost the worker's decision path (SPEC §14; the
//! target: at most 5 %), measured two ways that this VM's noise cannot fake:
//!
//! - **Interleaved wall time**: both variants (no alerts, `alerts = [80,
//!   100]`) live in one process over the same 10 000 keys, timed in
//!   alternating rounds, so that load, frequency and heap layout hit both
//!   alike (a criterion group that timed one variant after the other came
//!   out bimodal run to run on a quiet machine, docs/BENCHMARKS.md).
//! - **Instructions** (`bench/alert_cost.sh`): `ALERT_COST_ONLY=bare|alerts`
//!   runs one variant's decisions inside [`measured`], which the script
//!   counts with `valgrind --tool=callgrind --toggle-collect`: the same
//!   count every run, whatever else the machine does.
//!
//! The decisions: `Counters::apply` of a
//! fixed window of 1e9 an hour, so that no threshold is reached (the steady
//! state: a threshold is reached once per key and window). Results are in
//! docs/BENCHMARKS.md ("Alert thresholds").

use sluice_core::alerts::Thresholds;
use sluice_core::ask::{counter_key, Op};
use sluice_core::policy::{Algorithm, Limit, Policy};
use sluice_core::time::Nanos;
use sluice_worker::counters::Counters;
use std::hint::black_box;
use std::time::{Duration, Instant};

const KEYS: usize = 10_000;
/// Decisions per round of the interleaved timing, and rounds per variant.
const ROUND: usize = 200_000;
const ROUNDS: usize = 25;

/// One variant: a policy and its counters, filled with every key.
struct Variant {
    name: &'static str,
    policy: Policy,
    keys: Vec<String>,
    counters: Counters,
    next: usize,
}

impl Variant {
    fn new(name: &'static str, policy: Policy, now: Nanos) -> Variant {
        let mut buf = String::new();
        let keys: Vec<String> = (0..KEYS)
            .map(|i| {
                counter_key(&mut buf, policy.name(), &format!("user-{i}"));
                buf.clone()
            })
            .collect();
        let counters = Counters::new();
        for k in &keys {
            counters.apply(&policy, k, now, Op::Record(1));
        }
        Variant {
            name,
            policy,
            keys,
            counters,
            next: 0,
        }
    }
}

/// `n` decisions of `v`: what the instruction count covers.
#[inline(never)]
fn measured(v: &mut Variant, now: Nanos, n: usize) {
    for _ in 0..n {
        v.next = (v.next + 1) % KEYS;
        black_box(
            v.counters
                .apply(&v.policy, &v.keys[v.next], now, Op::Allow(1)),
        );
    }
}

fn main() {
    let limits = vec![Limit::new(1_000_000_000, Duration::from_secs(3600), None).unwrap()];
    let bare = Policy::new("quota", Algorithm::FixedWindow, limits).unwrap();
    let alerting = bare
        .clone()
        .with_alerts(Thresholds::new(&[80, 100]).unwrap())
        .unwrap();
    let now = Nanos::from_secs(1_800_000_000);
    let mut variants = [
        Variant::new("no alerts", bare, now),
        Variant::new("alerts [80, 100]", alerting, now),
    ];
    // `cargo bench` passes `--bench`; anything else a filter would be is ignored.
    if let Ok(only) = std::env::var("ALERT_COST_ONLY") {
        let n: usize = std::env::var("ALERT_COST_N")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000_000);
        let v = match only.as_str() {
            "bare" => &mut variants[0],
            "alerts" => &mut variants[1],
            other => {
                eprintln!("ALERT_COST_ONLY={other}: say `bare` or `alerts`");
                std::process::exit(2);
            }
        };
        // Every key's bucket once before the count, as in the timing.
        measured(v, now, KEYS);
        measured(v, now, n);
        println!("{}: {n} decisions", v.name);
        return;
    }
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..=ROUNDS {
        // Round 0 warms both up and is not kept; the order alternates.
        for i in [round % 2, 1 - round % 2] {
            let started = Instant::now();
            measured(&mut variants[i], now, ROUND);
            if round > 0 {
                times[i].push(started.elapsed().as_nanos() as f64 / ROUND as f64);
            }
        }
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let bare = median(&mut times[0]);
    let alerts = median(&mut times[1]);
    println!(
        "{ROUNDS} alternating rounds of {ROUND} decisions, median ns/decision: {} {bare:.1}, {} {alerts:.1}, difference {:+.1} %",
        variants[0].name,
        variants[1].name,
        (alerts / bare - 1.0) * 100.0
    );
}
