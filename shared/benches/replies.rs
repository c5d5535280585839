//! Nanoseconds to build a reply body: the decision map every answer carries
//! (MessagePack and JSON), and a batch reply of 16 decisions. The worker's
//! whole reply, headers included, is measured in sluice-worker's `replies`
//! bench.
//!
//! `cargo bench -p sluice-core --bench replies -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;
use sluice_core::wire::{batch, encode_decision, DecisionReply, Encoding, Reply};
use std::hint::black_box;

fn decision() -> Decision {
    Decision {
        allowed: true,
        limit: 1_000,
        remaining: 517,
        reset: Nanos(66_700_001),
        retry_after: Nanos::ZERO,
    }
}

fn bodies(c: &mut Criterion) {
    let d = decision();
    let mut group = c.benchmark_group("reply_body");
    group.throughput(Throughput::Elements(1));
    group.bench_function("decision_msgpack", |b| {
        b.iter(|| encode_decision(black_box(&d), black_box("default"), Encoding::MsgPack))
    });
    group.bench_function("decision_json", |b| {
        b.iter(|| encode_decision(black_box(&d), black_box("default"), Encoding::Json))
    });
    let results: Vec<Reply> = (0..16)
        .map(|_| Reply::Decision(DecisionReply::new(&d, "default")))
        .collect();
    group.throughput(Throughput::Elements(16));
    group.bench_function("batch_of_16", |b| {
        b.iter(|| batch::encode_reply(black_box(&results)))
    });
    group.finish();
}

criterion_group!(benches, bodies);
criterion_main!(benches);
