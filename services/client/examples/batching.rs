//! Measures batching: the same load with batching off and on, printing
//! throughput, latency percentiles and how many NATS requests were sent.
//!
//! Start `sluice dev`, then:
//!
//! ```text
//! cargo run --release -p sluice-client --example batching -- [CONCURRENCY] [ASKS] [KEYS]
//! ```
//!
//! The policy is `default`; use many keys (the default, 100 000) so that
//! the limits don't matter, or few to see hot keys.

use sluice_client::{Client, ClientOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let concurrency: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(256);
    let asks: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let keys: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let url = std::env::var("SLUICE_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    println!("{asks} asks over {keys} keys, {concurrency} in flight, one connection");
    for batching in [false, true, false, true] {
        let opts = ClientOptions::default()
            .batching(batching)
            .deny_cache(false)
            .timeout(Duration::from_secs(2));
        let client = Client::connect_with(&url, opts).await?;
        let (took, mut latencies) = run(&client, concurrency, asks, keys).await;
        latencies.sort_unstable();
        let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
        let s = client.stats();
        println!(
            "batching {:<5}: {:>7.0} asks/s  p50 {:>8.2?}  p99 {:>8.2?}  requests {:>7} ({:.2} asks/request, {} batches)  fallbacks {}",
            batching,
            asks as f64 / took.as_secs_f64(),
            pct(0.50),
            pct(0.99),
            s.round_trips,
            s.asks as f64 / s.round_trips.max(1) as f64,
            s.batches,
            s.fallbacks(),
        );
    }
    Ok(())
}

async fn run(
    client: &Client,
    concurrency: usize,
    asks: usize,
    keys: usize,
) -> (Duration, Vec<Duration>) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= asks {
                    return latencies;
                }
                let key = format!("bench-{}", (i * 7919) % keys);
                let t = Instant::now();
                let _ = client.allow(&key).await;
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut all = Vec::with_capacity(asks);
    for t in tasks {
        all.extend(t.await.expect("the task runs"));
    }
    (started.elapsed(), all)
}
