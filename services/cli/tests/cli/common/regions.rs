//! Asking one key hard from a region until a deadline, and each region's
//! usage of it: the global limits' tests (`regions_global.rs`,
//! `regions_bucket.rs`, `regions_sliding.rs`).

use sluice_core::usage::Counts;
use sluice_core::wire::{encode_request, Encoding};
use sluice_tests::{ask, eventually, usage_of, TwoRegions, TICK};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock, which the workers on this machine use too, in ms.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// Asks `key` of policy `plan` from `tasks` concurrent askers, each one
/// ask every `pause` (none: as fast as answers come), until 300 ms before
/// `window_end` (at most 5,000 asks each); how many were allowed, how
/// many were asked, and how many got no answer or an error.
pub async fn ask_until(
    client: &async_nats::Client,
    key: &str,
    tasks: usize,
    pause: Option<Duration>,
    window_end: u64,
) -> (usize, usize, usize) {
    let body = encode_request(Some("plan"), None, Encoding::Json);
    let askers = (0..tasks).map(|_| {
        let client = client.clone();
        let body = body.clone();
        let key = key.to_string();
        tokio::spawn(async move {
            let (mut allowed, mut asked, mut failed) = (0, 0, 0);
            while asked < 5_000 && now_ms() + 300 < window_end {
                asked += 1;
                match ask(&client, &key, &body).await {
                    Ok(d) if d.allowed => allowed += 1,
                    Ok(_) => {}
                    Err(_) => failed += 1,
                }
                if let Some(p) = pause {
                    tokio::time::sleep(p).await;
                }
            }
            (allowed, asked, failed)
        })
    });
    let mut total = (0, 0, 0);
    for asker in askers.collect::<Vec<_>>() {
        let (allowed, asked, failed) = asker.await.expect("an asker");
        total = (total.0 + allowed, total.1 + asked, total.2 + failed);
    }
    total
}

/// Waits until west's usage of `key` (policy `plan`) is `expected` and
/// east's is none: usage is recorded once, where each ask was made, though
/// counts crossed the link to the home, east.
pub async fn west_usage_only(regions: &TwoRegions, key: &str, expected: Counts) {
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    eventually(Duration::from_secs(15), TICK, || async {
        let (w, e) = (
            usage_of(&west, key, "plan").await?,
            usage_of(&east, key, "plan").await?,
        );
        anyhow::ensure!(w == expected, "west: usage {w:?}, answered {expected:?}");
        anyhow::ensure!(e == Counts::default(), "east asked nothing: usage {e:?}");
        Ok(())
    })
    .await
    .unwrap();
}
