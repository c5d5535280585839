//! What a key costs in a worker's counters, without NATS: the 1M-keys case
//! of docs/BENCHMARKS.md ("1,000,000 active keys") in one process. 64
//! partitions sharing one key bound, policy `default` = sliding window, 10
//! per minute and 500 per hour, keys `m-0` .. `m-<n-1>` each counted once;
//! then every partition encoded as a snapshot, and the entries restored into
//! new counters.
//!
//! Allocates with mimalloc, as the `sluice` binary does, through a counter
//! of the bytes asked for: "heap" is what the counters asked the allocator
//! for, "RSS" what the process holds (the heap plus the allocator's slack).
//!
//! `cargo bench -p sluice-worker --bench memory [-- KEYS]` (default 1,000,000).

use sluice_core::ask::{counter_key, Op};
use sluice_core::policy::{Algorithm, Limit, Policy};
use sluice_core::time::Nanos;
use sluice_worker::counters::{Counters, Entry, KeyBound};
use sluice_worker::snapshot;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

struct Counting;

static BYTES: AtomicI64 = AtomicI64::new(0);
static BLOCKS: AtomicI64 = AtomicI64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const PARTITIONS: usize = 64;

/// (heap bytes, heap blocks, RSS bytes) now.
fn usage() -> (i64, i64, i64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss_kib: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (
        BYTES.load(Ordering::Relaxed),
        BLOCKS.load(Ordering::Relaxed),
        rss_kib * 1024,
    )
}

fn report(what: &str, before: (i64, i64, i64), keys: u64, took: Duration) {
    let (heap, blocks, rss) = usage();
    let per = |v: i64| v as f64 / keys.max(1) as f64;
    println!(
        "{what:<28} {keys:>9} keys  heap {:>7.1} B/key ({:>4.2} blocks/key)  RSS {:>7.1} B/key  ({:>4} MiB)  {:>6.0} ms",
        per(heap - before.0),
        per(blocks - before.1),
        per(rss - before.2),
        rss >> 20,
        took.as_secs_f64() * 1000.0,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; the first number is the key count.
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let policy = Policy::new(
        "default",
        Algorithm::SlidingWindow,
        vec![
            Limit::new(10, Duration::from_secs(60), None).unwrap(),
            Limit::new(500, Duration::from_secs(3600), None).unwrap(),
        ],
    )
    .unwrap();
    let now = Nanos::from_secs(1_800_000_000);
    let mut names: Vec<String> = Vec::with_capacity(n);
    let mut buf = String::new();
    for i in 0..n {
        counter_key(&mut buf, "default", &format!("m-{i}"));
        names.push(buf.clone());
    }
    // Partition by the key's own hash, as nats-server spreads them.
    let partition_of = |key: &str| {
        let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        (h % PARTITIONS as u64) as usize
    };

    let base = usage();
    let bound = KeyBound::new(sluice_core::config::DEFAULT_MAX_KEYS);
    let partitions: Vec<Counters> = (0..PARTITIONS)
        .map(|_| Counters::within(bound.clone()))
        .collect();
    report("empty partitions", base, 1, Duration::ZERO);
    let start = Instant::now();
    let empty = usage();
    for key in &names {
        partitions[partition_of(key)].apply(&policy, key, now, Op::Allow(1));
    }
    report("counted once", empty, n as u64, start.elapsed());
    println!("  live keys {}", bound.held());

    let start = Instant::now();
    let mut encoded = Vec::new();
    // A copy between turns holds the partition's turns back: the longest
    // is the longest pause a snapshot puts on a partition's answers.
    let mut longest_copy = Duration::ZERO;
    for p in &partitions {
        let copying = Instant::now();
        let (copy, ()) = p.copy_between_turns(|_| ()).expect("no turn in progress");
        longest_copy = longest_copy.max(copying.elapsed());
        encoded.push(snapshot::encode(&copy, &Default::default(), Nanos::ZERO).expect("encodes"));
    }
    let bytes: u64 = encoded.iter().map(|e| e.bytes).sum();
    report("+ snapshots encoded", empty, n as u64, start.elapsed());
    println!("  snapshot bytes {:.1} B/key", bytes as f64 / n as f64);
    println!(
        "  longest copy between turns (one partition's tables) {:.3} ms",
        longest_copy.as_secs_f64() * 1e3
    );

    drop(partitions);
    let start = Instant::now();
    let mut importing = Duration::ZERO;
    let restored: Vec<Counters> = encoded
        .iter()
        .map(|e| {
            let bytes: Vec<u8> = e.chunks().concat();
            let entries: Vec<Entry> = rmp_serde::from_slice(&bytes).expect("decodes");
            let c = Counters::within(bound.clone());
            let start = Instant::now();
            c.import(entries, now, |_, _| Some(&policy));
            importing += start.elapsed();
            c
        })
        .collect();
    drop(encoded);
    report(
        "restored (decode + import)",
        empty,
        n as u64,
        start.elapsed(),
    );
    println!(
        "  of which import {:.0} ms",
        importing.as_secs_f64() * 1000.0
    );
    let held: u64 = restored.iter().map(Counters::len).sum();
    println!("  restored keys {held}");
}
