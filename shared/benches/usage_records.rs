//! Milliseconds to add to a busy partition's usage record: a flush adds
//! what was counted since the last one (1,000 new keys) to the stored
//! minute (30,000 keys, a flood's partition-minute), and a rollup sums five
//! such minutes. `map` is the way it was done before `RecordSum`: every
//! count inserted into a map of maps (kept here as the reference).
//!
//! `cargo bench -p sluice-core --bench usage_records -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion};
use sluice_core::usage::{add_to_record, visit_record, BucketRecord, Counts, RecordSum};
use std::collections::BTreeMap;
use std::hint::black_box;

/// A minute record of `n` keys named like a flood's, from `first` on.
fn minute(first: usize, n: usize) -> Vec<u8> {
    let mut r = BucketRecord {
        v: sluice_core::format::USAGE,
        ..Default::default()
    };
    let keys = r.keys.entry("default".into()).or_default();
    for i in first..first + n {
        keys.insert(format!("flood1-{i}"), Counts { used: 1, denied: 0 });
    }
    r.encode()
}

/// The sum as it was built before: a map of maps, then encoded.
fn map_sum(records: &[&[u8]], more: &[(&str, String, Counts)]) -> Vec<u8> {
    let mut keys: BTreeMap<&str, BTreeMap<&str, Counts>> = BTreeMap::new();
    for r in records {
        visit_record(r, |p, k, c| {
            keys.entry(p).or_default().entry(k).or_default().add(c)
        })
        .unwrap();
    }
    for (p, k, c) in more {
        keys.entry(p).or_default().entry(k).or_default().add(*c);
    }
    #[derive(serde::Serialize)]
    struct Record<'a> {
        v: u32,
        w: u64,
        keys: BTreeMap<&'a str, BTreeMap<&'a str, Counts>>,
    }
    let record = Record {
        v: sluice_core::format::USAGE,
        w: 0,
        keys,
    };
    rmp_serde::to_vec_named(&record).unwrap()
}

fn records(c: &mut Criterion) {
    let stored = minute(0, 30_000);
    // A flush's new keys come in the order they were counted (a hash map's).
    let more: Vec<(&str, String, Counts)> = (0..1_000)
        .map(|i| {
            (
                "default",
                format!("flood1-{}", 30_000 + (i * 7919) % 1_000),
                Counts { used: 1, denied: 0 },
            )
        })
        .collect();
    let more_refs = || more.iter().map(|(p, k, c)| (*p, k.as_str(), *c));
    let fives: Vec<Vec<u8>> = (0..5).map(|m| minute(m * 30_000, 30_000)).collect();
    let five_refs: Vec<&[u8]> = fives.iter().map(Vec::as_slice).collect();
    assert_eq!(
        add_to_record(Some(&stored), 0, more_refs()).unwrap(),
        map_sum(&[&stored], &more)
    );

    let mut group = c.benchmark_group("usage_record");
    group.sample_size(20);
    group.bench_function("flush_30k_plus_1k/sum", |b| {
        b.iter(|| black_box(add_to_record(Some(&stored), 0, more_refs()).unwrap()))
    });
    group.bench_function("flush_30k_plus_1k/map", |b| {
        b.iter(|| black_box(map_sum(&[&stored], &more)))
    });
    group.bench_function("rollup_5x30k/sum", |b| {
        b.iter(|| {
            let mut sum = RecordSum::new(0);
            for r in &five_refs {
                sum.add_encoded(r).unwrap();
            }
            black_box(sum.encode())
        })
    });
    group.bench_function("rollup_5x30k/map", |b| {
        b.iter(|| black_box(map_sum(&five_refs, &[])))
    });
    group.finish();
}

criterion_group!(benches, records);
criterion_main!(benches);
