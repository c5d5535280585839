//! The regions benchmark (SPEC §12, docs/BENCHMARKS-HISTORY.md "Global limits
//! across regions"): two regions on loopback, the link between them
//! through the test harness's proxy with 50 ms added each way, one worker
//! per region. In west (not the home), `sluice bench` asks a regional
//! fixed window and a global one in alternating rounds (the budget of the
//! global one is always held: a limit no load reaches), then a global one
//! whose west decides from grants alone (`on_cut = "closed"`: no share),
//! one with alerts (each ask tallied and reported to the home), a GCRA
//! (west decides from its part) and a sliding window every ask of which
//! is decided at the home (`on_cut = "closed"`: no part). Last, both regions ask one global limit hard at once, to report what
//! was admitted against the limit. Prints one JSON object.
//!
//!     bench/regions.sh        # builds release binaries and runs this

use sluice_tests::{LinkMode, TwoRegions};
use std::process::Command;
use std::time::Duration;

const CONFIG: &str = r#"
partitions = 16
lease_ttl = "2s"
snapshot_interval = "2s"

[policies.regional]
algorithm = "fixed_window"
limits = [ { max = 1000000000, per = "1m" } ]

[policies.global]
algorithm = "fixed_window"
limits = [ { max = 1000000000, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]

[policies.granted]
algorithm = "fixed_window"
limits = [ { max = 1000000000, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
on_cut = "closed"

[policies.alerting]
algorithm = "fixed_window"
limits = [ { max = 1000000000, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
alerts = [ 90 ]

[policies.bucket]
algorithm = "gcra"
limits = [ { max = 1000000000, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]

[policies.sliding]
algorithm = "sliding_window"
limits = [ { max = 1000000000, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
on_cut = "closed"

[policies.tight]
algorithm = "fixed_window"
limits = [ { max = 2000, per = "1s" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
"#;

fn bench(
    sluice: &str,
    nats: &str,
    policy: &str,
    seconds: u32,
    keys: u32,
    prefix: &str,
) -> serde_json::Value {
    let out = Command::new(sluice)
        .args([
            "bench",
            "--key-prefix",
            prefix,
            "--nats",
            nats,
            "--policy",
            policy,
            "-d",
            &format!("{seconds}s"),
            "--warmup",
            "2s",
            "-c",
            "64",
            "-m",
            "2",
            "-k",
            &keys.to_string(),
            "--json",
            "--quiet",
        ])
        .output()
        .expect("sluice bench runs");
    assert!(
        out.status.success(),
        "sluice bench: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("sluice bench --json prints one object")
}

fn cell(v: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "throughput": v["throughput"],
        "p50_us": v["latency_us"]["p50"],
        "p99_us": v["latency_us"]["p99"],
        "allowed": v["allowed"],
        "denied": v["denied"],
        "errors": v["errors"]["total"],
    })
}

#[tokio::main]
async fn main() {
    let sluice = std::env::var("SLUICE_BIN").unwrap_or_else(|_| "target/release/sluice".into());
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let regions = TwoRegions::start(&sluice, CONFIG, 1).await;
    regions
        .link
        .set_mode(LinkMode::Delay(Duration::from_millis(50)));
    let west = regions.west.nats.url();
    let east = regions.east.nats.url();

    // The link's round trip, as an ask forwarded to the home would pay
    // it: a hello to east's workers from a link inbox in west.
    let link = async_nats::ConnectOptions::new()
        .custom_inbox_prefix(sluice_core::subject::link_inbox_prefix("west"))
        .connect(&west)
        .await
        .expect("west");
    let hello = sluice_core::subject::link_hello("east");
    let mut rtts = Vec::new();
    for _ in 0..5 {
        let t = std::time::Instant::now();
        link.request(hello.clone(), "".into())
            .await
            .expect("east's workers answer a hello across the link");
        rtts.push(t.elapsed().as_micros() as u64);
    }

    let mut cells = Vec::new();
    for round in 0..rounds {
        let mut order = [
            "regional", "global", "granted", "alerting", "bucket", "sliding",
        ];
        if round % 2 == 1 {
            order.reverse();
        }
        for policy in order {
            let v = bench(
                &sluice,
                &west,
                policy,
                10,
                10_000,
                &format!("{policy}-{round}-"),
            );
            eprintln!("round {round} {policy}: {}", cell(&v));
            cells.push(serde_json::json!({"round": round, "policy": policy, "cell": cell(&v)}));
        }
    }

    // Both regions hard on the same 10 keys of one global limit of 2000
    // per second.
    let (e, w) = std::thread::scope(|s| {
        let e = s.spawn(|| bench(&sluice, &east, "tight", 10, 10, "tight-"));
        let w = s.spawn(|| bench(&sluice, &west, "tight", 10, 10, "tight-"));
        (e.join().expect("east"), w.join().expect("west"))
    });
    let report = serde_json::json!({
        "link_delay_ms_each_way": 50,
        "link_request_us": rtts,
        "cells": cells,
        "tight": {"east": cell(&e), "west": cell(&w), "max_per_s_per_key": 2000, "keys": 10},
    });
    println!("{}", serde_json::to_string_pretty(&report).expect("json"));
}
