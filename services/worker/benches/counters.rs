//! The cost of one counted decision in a partition's cache: sluice's
//! `Counters::apply` (one owner task per partition; `get` the key's bucket,
//! mutate its slot in place) against moka's `and_compute_with` (per-key lock; the
//! value is cloned out and put back). 10 000 live keys, sliding window,
//! fake time. (What alert thresholds cost it: `alert_cost.rs`.)
//! Results are in docs/BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use moka::ops::compute::Op as MokaOp;
use sluice_core::ask::{counter_key, Op};
use sluice_core::policy::{KeyState, Policy};
use sluice_core::time::Nanos;
use sluice_worker::counters::Counters;

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

criterion_group!(benches, bench);
criterion_main!(benches);
