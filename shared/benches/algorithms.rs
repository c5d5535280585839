//! Cost of one decision per algorithm, on a fake clock, and the bytes a key's
//! state takes in memory and in a snapshot (printed before the benchmarks).
//!
//! `cargo bench -p sluice-core --bench algorithms -- --warm-up-time 1 --measurement-time 2`
//!
//! Then unpacking and packing a key's state, as a worker does around each
//! decision of a key it holds.
//!
//! Each iteration is one `Policy::decide` at a time 5 ms after the previous
//! one, against 100 per second: about half the requests are allowed, so both
//! paths are measured and the sliding log stays full (100 timestamps).

use criterion::{criterion_group, Criterion, Throughput};
use sluice_core::alerts::{watch, Thresholds};
use sluice_core::calendar::{Period, Zone};
use sluice_core::packed;
use sluice_core::policy::{Algorithm, KeyState, Limit, Policy};
use sluice_core::time::Nanos;
use std::hint::black_box;
use std::mem::size_of;
use std::time::Duration;

/// 2023-11-14 22:00:00 UTC.
const T0: u64 = 1_700_002_800_000_000_000;
const STEP: u64 = 5_000_000;

fn policy(algorithm: Algorithm, limits: usize) -> Policy {
    let all = [
        Limit::new(100, Duration::from_secs(1), None).unwrap(),
        Limit::new(1_000, Duration::from_secs(60), None).unwrap(),
    ];
    Policy::new(algorithm.as_str(), algorithm, all[..limits].to_vec()).unwrap()
}

fn decisions(c: &mut Criterion) {
    for algorithm in Algorithm::ALL {
        let mut group = c.benchmark_group(algorithm.as_str());
        group.throughput(Throughput::Elements(1));
        for limits in [1, 2] {
            let p = policy(algorithm, limits);
            let mut state = p.new_state();
            let mut now = T0;
            let name = if limits == 1 { "1 limit" } else { "2 limits" };
            group.bench_function(name, |b| {
                b.iter(|| {
                    now += STEP;
                    black_box(p.decide(&mut state, Nanos(now), black_box(1)))
                })
            });
        }
        group.finish();
    }
}

/// Asks that may wait (SPEC §18) against the same asks without a wait,
/// on the two algorithms that wait, with a `max_wait` of a second: one
/// ask every 5 ms against 100 a second, so an ask without a wait is
/// allowed about half the time, and one that may wait is allowed into
/// debt for a later start until a second of queue stands, then denied
/// as often as the rate refills. Both decide through
/// `Policy::decide_within` (`decide` is it with no wait).
fn waiting(c: &mut Criterion) {
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let mut group = c.benchmark_group(format!("{} waiting", algorithm.as_str()));
        group.throughput(Throughput::Elements(1));
        let p = policy(algorithm, 1)
            .with_max_wait(Duration::from_secs(1))
            .unwrap();
        for (name, within) in [("no wait", Nanos::ZERO), ("wait 1s", Nanos::from_secs(1))] {
            let mut state = p.new_state();
            let mut now = T0;
            group.bench_function(name, |b| {
                b.iter(|| {
                    now += STEP;
                    black_box(p.decide_within(&mut state, Nanos(now), black_box(1), within))
                })
            });
        }
        group.finish();
    }
}

/// A calendar window against the fixed-length one of the same nominal
/// length (SPEC §14): 100 per second beside 100 000 a day or a month, as
/// 24 h / 31 d from the epoch or as the calendar of Europe/Berlin. The
/// clock moves 5 ms a decision, so the calendar's window found last
/// answers almost every time, as it does for a live worker.
fn calendar_windows(c: &mut Criterion) {
    let mut group = c.benchmark_group("fixed_window calendar");
    group.throughput(Throughput::Elements(1));
    let per_second = Limit::new(100, Duration::from_secs(1), None).unwrap();
    let berlin = Zone::new("Europe/Berlin", "monday", 1).unwrap();
    for period in [Period::Day, Period::Month] {
        let fixed = Limit::new(100_000, period.nominal().into(), None).unwrap();
        let calendar = Limit::per_period(100_000, period, berlin.clone()).unwrap();
        for (name, quota) in [("fixed-length", fixed), ("calendar", calendar)] {
            let limits = vec![per_second.clone(), quota];
            let p = Policy::new("quota", Algorithm::FixedWindow, limits).unwrap();
            let mut state = p.new_state();
            let mut now = T0;
            group.bench_function(format!("{} {name}", period.as_str()), |b| {
                b.iter(|| {
                    now += STEP;
                    black_box(p.decide(&mut state, Nanos(now), black_box(1)))
                })
            });
        }
    }
    // What a decision pays once per window, when the clock leaves the
    // window found last: the zone arithmetic alone.
    let month = sluice_core::calendar::Calendar::new(Period::Month, berlin);
    let mut now = T0;
    group.bench_function("month find (uncached)", |b| {
        b.iter(|| {
            now += STEP;
            black_box(month.find(Nanos(now)))
        })
    });
    group.finish();
}

/// What alert thresholds cost a decision (SPEC §14; the target: at most 5 %): a
/// fixed window of two limits decided bare, through
/// [`sluice_core::alerts::watch`] without thresholds (the branch every
/// policy pays), and with `alerts = [80, 100]` (a copy of each limit's
/// window and count, and the comparisons; the maxima are out of reach, as
/// for all but one decision per threshold and window).
fn alert_thresholds(c: &mut Criterion) {
    let mut group = c.benchmark_group("fixed_window alerts");
    group.throughput(Throughput::Elements(1));
    let limits = vec![
        Limit::new(1_000_000_000, Duration::from_secs(1), None).unwrap(),
        Limit::new(1_000_000_000, Duration::from_secs(3600), None).unwrap(),
    ];
    let bare = Policy::new("quota", Algorithm::FixedWindow, limits).unwrap();
    let alerting = bare
        .clone()
        .with_alerts(Thresholds::new(&[80, 100]).unwrap())
        .unwrap();
    let mut state = bare.new_state();
    let mut now = T0;
    group.bench_function("decide", |b| {
        b.iter(|| {
            now += STEP;
            black_box(bare.decide(&mut state, Nanos(now), black_box(1)))
        })
    });
    for (name, p) in [
        ("watch, no alerts", &bare),
        ("watch, alerts [80, 100]", &alerting),
    ] {
        let mut state = p.new_state();
        let mut now = T0;
        group.bench_function(name, |b| {
            b.iter(|| {
                now += STEP;
                black_box(watch(p, &mut state, |s| {
                    p.decide(s, Nanos(now), black_box(1))
                }))
            })
        });
    }
    group.finish();
}

/// Bytes of a key's state in memory: the enum, its `Vec` of per-limit
/// states, and each sliding log's ring buffer (allocated capacity).
fn memory_bytes(state: &KeyState) -> usize {
    fn vec_heap<T>(v: &Vec<T>) -> usize {
        v.capacity() * size_of::<T>()
    }
    size_of::<KeyState>()
        + match state {
            KeyState::FixedWindow(v) => vec_heap(v),
            KeyState::SlidingLog(v) => {
                vec_heap(v) + v.iter().map(|s| s.log.capacity() * 8).sum::<usize>()
            }
            KeyState::SlidingWindow(v) => vec_heap(v),
            KeyState::TokenBucket(v) => vec_heap(v),
            KeyState::Gcra(v) => vec_heap(v),
            KeyState::Blocked(b) => size_of_val(&**b) + memory_bytes(&b.counters),
        }
}

/// A key's state after a second of the benchmark's traffic (a full log).
fn busy_state(p: &Policy) -> KeyState {
    let mut state = p.new_state();
    for i in 1..=200 {
        p.decide(&mut state, Nanos(T0 + i * STEP), 1);
    }
    state
}

fn print_state_sizes() {
    println!("State bytes per key (after 1 s at 2x the rate; 100/s, and 100/s + 1000/min):");
    println!(
        "| algorithm | limits | memory | packed | rmp_serde::to_vec | rmp_serde::to_vec_named |"
    );
    println!("|---|---|---|---|---|---|");
    for algorithm in Algorithm::ALL {
        for limits in [1, 2] {
            let state = busy_state(&policy(algorithm, limits));
            println!(
                "| {algorithm} | {limits} | {} | {} | {} | {} |",
                memory_bytes(&state),
                packed::packed_len(&state),
                rmp_serde::to_vec(&state).unwrap().len(),
                rmp_serde::to_vec_named(&state).unwrap().len(),
            );
        }
    }
    println!();
}

/// What a worker does around each decision of a key it holds packed
/// (`services/worker/src/counters/table.rs`): unpack the state into a
/// reused one, and pack it again; two limits, a busy key.
fn packing(c: &mut Criterion) {
    let mut group = c.benchmark_group("unpack and pack");
    group.throughput(Throughput::Elements(1));
    for algorithm in Algorithm::ALL {
        let mut bytes = Vec::new();
        packed::pack(&busy_state(&policy(algorithm, 2)), &mut bytes);
        let mut state = KeyState::Gcra(Vec::new());
        let mut out = Vec::with_capacity(bytes.len());
        group.bench_function(algorithm.as_str(), |b| {
            b.iter(|| {
                assert!(packed::unpack_into(black_box(&bytes), &mut state));
                out.clear();
                packed::pack(&state, &mut out);
                black_box(out.len())
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    decisions,
    waiting,
    calendar_windows,
    alert_thresholds,
    packing
);

fn main() {
    print_state_sizes();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
