//! The cost of one counted decision in a partition's cache: sluice's
//! `Counters::apply` (one owner task per partition; `get` the key's bucket,
//! mutate its slot in place) against moka's `and_compute_with` (per-key lock; the
//! value is cloned out and put back). 10 000 live keys, sliding window,
//! fake time. Also what alert thresholds cost that decision ([`alerts`]).
//! Results are in docs/BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use moka::ops::compute::Op as MokaOp;
use sluice_core::alerts::Thresholds;
use sluice_core::ask::{counter_key, Op};
use sluice_core::policy::{Algorithm, KeyState, Limit, Policy};
use sluice_core::time::Nanos;
use sluice_worker::counters::Counters;
use std::time::Duration;

const KEYS: usize = 10_000;

fn keys(policy: &Policy) -> Vec<String> {
    let mut buf = String::new();
    (0..KEYS)
        .map(|i| {
            counter_key(&mut buf, policy.name(), &format!("user-{i}"));
            buf.clone()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let policy = Policy::builtin_default();
    let keys = keys(&policy);
    let now = Nanos::from_secs(1_800_000_000);
    let mut group = c.benchmark_group("partition_cache");
    group.throughput(Throughput::Elements(1));

    let counters = Counters::new();
    for k in &keys {
        counters.apply(&policy, k, now, Op::Allow(1));
    }
    let mut i = 0;
    group.bench_function("counters_apply_owner_task", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            counters.apply(&policy, &keys[i], now, Op::Allow(0))
        })
    });

    let cache: moka::sync::Cache<String, KeyState> = moka::sync::Cache::builder().build();
    for k in &keys {
        cache.insert(k.clone(), policy.new_state());
    }
    let mut j = 0;
    group.bench_function("moka_and_compute_with", |b| {
        b.iter_batched(
            || {
                j = (j + 1) % KEYS;
                j
            },
            |j| {
                let mut decision = None;
                cache
                    .entry_by_ref(keys[j].as_str())
                    .and_compute_with(|entry| {
                        let mut state = entry
                            .map(|e| e.into_value())
                            .unwrap_or_else(|| policy.new_state());
                        decision = Some(policy.decide(&mut state, now, 0));
                        MokaOp::Put(state)
                    });
                decision
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// What alert thresholds cost the worker's decision path (issue 37, at
/// most 5 %): `Counters::apply` of a fixed window (1e9 an hour, so no
/// threshold is reached: the steady state) over 10 000 live keys, without
/// alerts and with `alerts = [80, 100]`, interleaved in one group so that
/// both see the same load.
fn alerts(c: &mut Criterion) {
    let limits = vec![Limit::new(1_000_000_000, Duration::from_secs(3600), None).unwrap()];
    let bare = Policy::new("quota", Algorithm::FixedWindow, limits).unwrap();
    let alerting = bare
        .clone()
        .with_alerts(Thresholds::new(&[80, 100]).unwrap())
        .unwrap();
    let now = Nanos::from_secs(1_800_000_000);
    let mut group = c.benchmark_group("alert_thresholds");
    group.throughput(Throughput::Elements(1));
    for (name, policy) in [
        ("counters_apply_no_alerts", &bare),
        ("counters_apply_alerts_80_100", &alerting),
    ] {
        let keys = keys(policy);
        let counters = Counters::new();
        for k in &keys {
            counters.apply(policy, k, now, Op::Record(1));
        }
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                counters.apply(policy, &keys[i], now, Op::Allow(1))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench, alerts);
criterion_main!(benches);
