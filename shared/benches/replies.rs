//! Nanoseconds to build a reply body: the decision map every answer carries
//! (MessagePack and JSON), and a batch reply of 16 decisions; and to read a
//! request body, which the worker does for every request (a MessagePack and
//! a JSON map with both fields, and a batch of 16 items). The worker's whole
//! reply, headers included, is measured in sluice-worker's `replies` bench.
//!
//! `cargo bench -p sluice-core --bench replies -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_core::key::KeyToken;
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;
use sluice_core::wire::{
    batch, decode_request, encode_decision, encode_request, DecisionReply, Encoding, Reply,
};
use std::hint::black_box;

fn decision() -> Decision {
    Decision {
        allowed: true,
        limit: 1_000,
        remaining: 517,
        reset: Nanos(66_700_001),
        retry_after: Nanos::ZERO,
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
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
        b.iter(|| batch::encode_results(black_box(&results)))
    });
    group.finish();
}

fn requests(c: &mut Criterion) {
    let msgpack = encode_request(Some("login"), Some(3), Encoding::MsgPack);
    let json = encode_request(Some("login"), Some(3), Encoding::Json);
    let keys: Vec<String> = (0..16).map(|i| format!("user-{i}")).collect();
    let items: Vec<batch::Item<'_>> = keys
        .iter()
        .map(|k| batch::Item {
            key: KeyToken::parse(k).unwrap(),
            policy: "default".into(),
            cost: 1,
            id: None,
            act: Default::default(),
        })
        .collect();
    let batch_body = batch::encode_items(&items);
    let mut group = c.benchmark_group("request_body");
    group.throughput(Throughput::Elements(1));
    group.bench_function("decode_msgpack", |b| {
        b.iter(|| decode_request(black_box(&msgpack)).map(|r| r.cost))
    });
    group.bench_function("decode_json", |b| {
        b.iter(|| decode_request(black_box(&json)).map(|r| r.cost))
    });
    group.throughput(Throughput::Elements(16));
    group.bench_function("decode_batch_of_16", |b| {
        b.iter(|| batch::decode_items(black_box(&batch_body)).map(|items| items.len()))
    });
    group.finish();
}

criterion_group!(benches, bodies, requests);
criterion_main!(benches);
