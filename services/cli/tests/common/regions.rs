//! Asking one key hard from a region until a deadline: the global limits'
//! tests (`regions_global.rs`, `regions_bucket.rs`).

use sluice_core::wire::{encode_request, Encoding};
use sluice_tests::ask;
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
