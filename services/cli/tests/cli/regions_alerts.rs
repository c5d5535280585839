//! Alerts of a global policy (SPEC §14 across the regions of §12)
//! over two real regions on loopback (`sluice_tests::TwoRegions`):
//! a threshold fires when what **both regions spent** in the window
//! reaches it, not when the home's count does (which holds west's share
//! from the window's start), exactly once, in the home region's stream;
//! and through a `kill -9` of either region's owner in journal mode.

use crate::common;

use futures::StreamExt;
use sluice_client::alerts::{alerts, Start};
use sluice_core::alerts::Alert;
use sluice_core::wire::{encode_request, Encoding};
use sluice_tests::{ask, eventually, serial, TestConfig, TwoRegions, TICK};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::SLUICE;

/// 100 an hour across both regions, east the home (west's share 50),
/// alerts at 25, 50 and 90 %.
fn config(base: &TestConfig) -> String {
    config_of(base, 100, "[ 25, 50, 90 ]")
}

/// `max` an hour across both regions, east the home, with `alerts`.
fn config_of(base: &TestConfig, max: u64, alerts: &str) -> String {
    base.toml()
        + &format!(
            r#"
[policies.plan]
algorithm = "fixed_window"
limits = [ {{ max = {max}, per = "1h" }} ]
scope = "global"
home = "east"
regions = ["east", "west"]
alerts = {alerts}
"#
        )
}

fn hour() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    since.as_secs() / 3600
}

/// Asks `key` of `plan` until `n` were allowed. A region may be denied
/// for a while with units of the window still unspent (slices lent to
/// the other region ahead of need, or held by an owner that was killed,
/// come back at their lease's end or by a reclaim): after a denial it
/// asks again 100 ms later, for at most 20 s.
async fn allow(client: &async_nats::Client, key: &str, n: usize) {
    let body = encode_request(Some("plan"), None, Encoding::Json);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut allowed = 0;
    while allowed < n {
        assert!(
            Instant::now() < deadline,
            "{key}: {allowed} of {n} allowed in 20 s"
        );
        if ask(client, key, &body).await.expect("an answer").allowed {
            allowed += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Every alert of `plan` a region's stream holds.
async fn stored(client: &async_nats::Client) -> anyhow::Result<Vec<Alert>> {
    let mut read = alerts(client, Some("plan"), Start::All, false).await?;
    let mut all = Vec::new();
    while let Some(a) = read.next().await {
        all.push(a?);
    }
    Ok(all)
}

/// Waits until east's stream holds `key`'s alerts at `thresholds` (in
/// that order) and nothing more; returns them.
async fn wait_for(east: &async_nats::Client, key: &str, thresholds: &[u16]) -> Vec<Alert> {
    eventually(Duration::from_secs(20), TICK, || async {
        let all: Vec<Alert> = stored(east)
            .await?
            .into_iter()
            .filter(|a| a.key == key)
            .collect();
        let got: Vec<u16> = all.iter().map(|a| a.threshold_pct).collect();
        anyhow::ensure!(got == thresholds, "east's alerts of {key}: {got:?}");
        Ok(all)
    })
    .await
    .unwrap()
}

/// The same ask done in one region and the other: both regions' spending
/// adds up to each threshold, each alert once, in the home's stream.
async fn thresholds_follow_what_both_regions_spent(base: &TestConfig, key: &str) {
    let regions = TwoRegions::start(SLUICE, &config(base), 1).await;
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    let started = hour();

    // West spends 20 of its share, east 1: 21 spent. The home's count is
    // already 51 (west's share counted when the window opened), where a
    // regional policy's 25 and 50 % would have fired.
    allow(&west, key, 20).await;
    allow(&east, key, 1).await;
    // Four more from west: 25 % of what both spent.
    allow(&west, key, 4).await;
    let first = wait_for(&east, key, &[25]).await;
    assert_eq!(first[0].used, 25, "{first:?}");
    assert_eq!((first[0].max, first[0].per.as_str()), (100, "1h"));

    // East to 50 in all, then west to 70 and east to 90.
    allow(&east, key, 25).await;
    wait_for(&east, key, &[25, 50]).await;
    allow(&west, key, 20).await;
    allow(&east, key, 20).await;
    if hour() != started {
        println!("the hour's window ended during the test; nothing more to check");
        return;
    }
    let all = wait_for(&east, key, &[25, 50, 90]).await;
    assert_eq!(all[1].used, 50, "{all:?}");
    assert_eq!(all[2].used, 90, "{all:?}");
    // Published by the home only.
    let west_alerts = stored(&west).await.unwrap();
    assert!(west_alerts.is_empty(), "west's stream: {west_alerts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_keys_alerts_follow_what_every_region_spent_once_each() {
    let _serial = serial().await;
    thresholds_follow_what_both_regions_spent(&TestConfig::new(), "acme").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_mode_alerts_follow_what_every_region_spent_once_each() {
    let _serial = serial().await;
    thresholds_follow_what_both_regions_spent(&TestConfig::new().journal(), "globex").await;
}

/// A `kill -9` of the key's owner in west, then in east (journal mode):
/// the tallies come back from the journal and the reports, and each
/// threshold still fires once, not before the count reaches it. (1,000 an
/// hour with alerts at 2 and 5 %, 20 and 50 units: the slices a killed
/// owner held stay counted at the home until the window ends, which must
/// leave room for the asks after it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_in_either_region_keeps_each_alert_once() {
    let _serial = serial().await;
    let config = config_of(&TestConfig::new().journal(), 1_000, "[ 2, 5 ]");
    let mut regions = TwoRegions::start(SLUICE, &config, 1).await;
    let key = "initech";
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    let started = hour();

    allow(&west, key, 15).await;
    // West's only worker killed, a new one started: its tally of the 15
    // comes back from west's journal, and 5 more reach 2 % (20).
    let old = regions.west.worker_ids()[0].clone();
    regions.west.kill_worker(&old);
    regions.west.start_workers(1).await;
    allow(&west, key, 5).await;
    // The replay after a kill -9 counts each record once (the snapshot
    // says the last turn its copy holds): `used` is exactly what was spent.
    let first = wait_for(&east, key, &[2]).await;
    assert_eq!(first[0].used, 20, "{first:?}");

    // East's owner killed: its tally comes back from its snapshot and
    // journal, west reports again, and 5 % fires once, at 50.
    allow(&east, key, 10).await;
    let old = regions.east.worker_ids()[0].clone();
    regions.east.kill_worker(&old);
    regions.east.start_workers(1).await;
    allow(&east, key, 20).await;
    if hour() != started {
        println!("the hour's window ended during the test; nothing more to check");
        return;
    }
    let all = wait_for(&east, key, &[2, 5]).await;
    assert_eq!(all[1].used, 50, "{all:?}");
}
