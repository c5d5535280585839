//! Nanoseconds to build the worker's whole decision reply: headers and body,
//! as `reply::Reply::decision` hands it to async-nats.
//!
//! `cargo bench -p sluice-worker --bench replies -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;
use sluice_core::wire::Encoding;
use sluice_worker::reply::Reply;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let allowed = Decision {
        allowed: true,
        limit: 1_000,
        remaining: 517,
        reset: Nanos(66_700_001),
        retry_after: Nanos::ZERO,
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    };
    let denied = Decision {
        allowed: false,
        remaining: 0,
        retry_after: Nanos(300_000_000),
        shadow_denied: false,
        ..allowed
    };
    let mut group = c.benchmark_group("decision_reply");
    group.throughput(Throughput::Elements(1));
    group.bench_function("allowed_msgpack", |b| {
        b.iter(|| Reply::decision(black_box(&allowed), black_box("default"), Encoding::MsgPack))
    });
    group.bench_function("denied_msgpack", |b| {
        b.iter(|| Reply::decision(black_box(&denied), black_box("default"), Encoding::MsgPack))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
