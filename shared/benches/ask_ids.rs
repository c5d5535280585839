//! What remembering ask ids costs (SPEC §16): the lookup of an ask's id
//! and the remembering of an admitted one, on a partition that remembers
//! as many as it may by default (`max_ids`), and the memory one remembered id takes (printed before
//! the timings: resident memory grown by remembering 200,000 ids of
//! 16-byte keys and 36-byte UUID-like ids, divided by 200,000).
//!
//! `cargo bench -p sluice-core --bench ask_ids -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion};
use sluice_core::ask_ids::{Asked, FirstAnswer, RememberedIds, Seen, DEFAULT_MAX_IDS};
use sluice_core::policy::Decision;
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use std::hint::black_box;

fn asked() -> Asked<&'static str> {
    Asked {
        verb: Verb::Allow,
        policy: "default",
        cost: 1,
    }
}

fn decision() -> Decision {
    Decision {
        allowed: true,
        limit: 15,
        remaining: 14,
        reset: Nanos::from_secs(1),
        retry_after: Nanos::ZERO,
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    }
}

fn key(i: usize) -> String {
    format!("user-{i:011}")
}

fn id(i: usize) -> String {
    format!("{i:08x}-0000-4000-8000-000000000000")
}

/// Resident memory in bytes (Linux), or 0.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn filled(n: usize, now: Nanos) -> RememberedIds {
    let mut ids = RememberedIds::new(n.max(1));
    for i in 0..n {
        let until = Nanos(now.0 + 60_000_000_000 + i as u64);
        ids.remember(
            ids.name(&key(i), &id(i)),
            asked(),
            FirstAnswer::new(decision(), now),
            until,
            now,
        );
    }
    ids
}

fn memory_per_id() {
    const N: usize = 200_000;
    let before = rss();
    let ids = filled(N, Nanos::from_secs(1_000));
    let after = rss();
    println!(
        "ask_ids: {} ids remembered, {} bytes of resident memory each",
        ids.len(),
        after.saturating_sub(before) / N as u64
    );
}

fn bench(c: &mut Criterion) {
    memory_per_id();
    let now = Nanos::from_secs(1_000);
    let mut ids = filled(DEFAULT_MAX_IDS, now);
    let a = asked();
    let (k, i) = (key(7), id(7));
    c.bench_function("ask_ids/seen_repeat", |b| {
        b.iter(|| {
            matches!(
                ids.seen(ids.name(black_box(&k), black_box(&i)), &a, now),
                Seen::Repeat(_)
            )
        })
    });
    let (k, i) = (key(usize::MAX / 2), id(1));
    c.bench_function("ask_ids/seen_first", |b| {
        b.iter(|| {
            matches!(
                ids.seen(ids.name(black_box(&k), black_box(&i)), &a, now),
                Seen::First
            )
        })
    });
    let mut n = DEFAULT_MAX_IDS;
    c.bench_function("ask_ids/remember_at_the_bound", |b| {
        b.iter(|| {
            n += 1;
            let until = Nanos(now.0 + 60_000_000_000 + n as u64);
            ids.remember(
                ids.name(&key(n), &id(n)),
                asked(),
                FirstAnswer::new(decision(), now),
                until,
                now,
            );
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
