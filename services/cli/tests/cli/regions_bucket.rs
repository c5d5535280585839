//! Global token buckets and GCRA across regions (SPEC §12,
//! `sluice_core::region::parts`) over real nats-servers on loopback: two
//! regions linked through a proxy the test controls, one bucket of 50 a
//! second (burst 50) held across both, east its home, equal weights (each
//! region's part: 25 a second, burst 25).
//!
//! The bound checked: from before a fresh key's first ask to after its
//! last answer, the two regions together admit at most what one bucket of
//! the whole limit makes, `burst + rate × elapsed` (every unit admitted
//! was taken out of some region's part first; units only move between
//! parts). Linked, they admit close to it; cut, each within its part.

use crate::common;

use sluice_core::partition::partition_of;
use sluice_tests::{serial, LinkMode, TestConfig, TwoRegions};
use std::time::Duration;

use common::regions::{ask_until, now_ms};
use common::SLUICE;

const RATE: u64 = 50;
const BURST: u64 = 50;
/// How long each case asks.
const SPAN_MS: u64 = 4_000;

fn config(base: &TestConfig, algorithm: &str) -> String {
    config_of(base, algorithm, RATE, "1s")
}

/// A bucket of `max` per `per`, burst `max`.
fn config_of(base: &TestConfig, algorithm: &str, max: u64, per: &str) -> String {
    base.toml()
        + &format!(
            r#"
[policies.plan]
algorithm = "{algorithm}"
limits = [ {{ max = {max}, per = "{per}", burst = {max} }} ]
scope = "global"
home = "east"
regions = ["east", "west"]
"#
        )
}

/// What one bucket of the whole limit makes from `from` to `to` (ms).
fn one_bucket(from: u64, to: u64) -> u64 {
    BURST + RATE * (to - from) / 1_000
}

/// Both regions ask `key` for [`SPAN_MS`], east with `east_tasks` askers
/// and west with `west_tasks`, each pausing `pause` between asks (none:
/// as fast as answers come): (east, west) (allowed, asked) and what one
/// bucket would make meanwhile.
async fn both_ask(
    regions: &TwoRegions,
    key: &str,
    (east_tasks, east_pause): (usize, Option<Duration>),
    (west_tasks, west_pause): (usize, Option<Duration>),
) -> ((usize, usize), (usize, usize), u64) {
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    let from = now_ms();
    // ask_until stops 300 ms before the end it is given.
    let end = from + SPAN_MS + 300;
    let (e, w) = tokio::join!(
        ask_until(&east, key, east_tasks, east_pause, end),
        ask_until(&west, key, west_tasks, west_pause, end)
    );
    let to = now_ms();
    assert_eq!((e.2, w.2), (0, 0), "{key}: every ask answered");
    let made = one_bucket(from, to);
    eprintln!("{key}: east {e:?}, west {w:?} (allowed, asked, failed); one bucket: {made}");
    ((e.0, e.1), (w.0, w.1), made)
}

const HARD: (usize, Option<Duration>) = (4, None);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_regions_asking_hard_admit_at_most_one_bucket_and_close_to_it() {
    let _serial = serial().await;
    for algorithm in ["token_bucket", "gcra"] {
        let regions = TwoRegions::start(SLUICE, &config(&TestConfig::new(), algorithm), 1).await;
        both_ask(&regions, &format!("warm-{algorithm}"), HARD, HARD).await;
        let key = format!("hard-{algorithm}");
        let ((east, _), (west, _), made) = both_ask(&regions, &key, HARD, HARD).await;
        let total = (east + west) as u64;
        assert!(total <= made, "{algorithm}: {east} + {west} > {made}");
        assert!(
            total * 10 >= made * 9,
            "{algorithm}: linked, {total} of {made}"
        );
        // Each region's part alone makes 25 + 25 a second.
        let part = BURST / 2 + RATE / 2 * SPAN_MS / 1_000;
        assert!(west as u64 >= part * 8 / 10, "{algorithm}: west {west}");
    }
}

/// Demand 10:1: the quiet region gets all it asks for; the busy one gets
/// what the quiet one does not use (the home by gifts, another region by
/// slices), far more than its own part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_demand_ten_to_one_the_busy_region_gets_what_the_quiet_one_leaves() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &config(&TestConfig::new(), "token_bucket"), 1).await;
    both_ask(&regions, "warm", HARD, HARD).await;
    // About 10 a second: well inside a part's 25.
    let quiet = (1, Some(Duration::from_millis(100)));
    for quiet_is_west in [true, false] {
        let key = format!("fair-{quiet_is_west}");
        let (e, w, made) = if quiet_is_west {
            both_ask(&regions, &key, HARD, quiet).await
        } else {
            both_ask(&regions, &key, quiet, HARD).await
        };
        let (quiet, busy) = if quiet_is_west { (w, e) } else { (e, w) };
        assert_eq!(quiet.0, quiet.1, "{key}: the quiet region was denied");
        assert!(busy.1 > 10 * quiet.1, "{key}: demand was 10:1 or more");
        let total = (quiet.0 + busy.0) as u64;
        assert!(total <= made, "{key}: {total} > {made}");
        let part = BURST / 2 + RATE / 2 * SPAN_MS / 1_000;
        assert!(
            busy.0 as u64 >= part * 13 / 10,
            "{key}: the busy region got {} (its part alone makes {part})",
            busy.0
        );
    }
}

/// The link blackholed: each region decides from its own part (at most
/// what the part makes), so the sum stays within one bucket; healed, the
/// regions share again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_link_keeps_each_region_within_its_part() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &config(&TestConfig::new(), "gcra"), 1).await;
    both_ask(&regions, "warm", HARD, HARD).await;
    regions.link.set_mode(LinkMode::Blackhole);
    let from = now_ms();
    let ((east, _), (west, _), made) = both_ask(&regions, "cut", HARD, HARD).await;
    let part = one_bucket(from, now_ms()) / 2 + 1;
    assert!(
        (east + west) as u64 <= made,
        "cut: {east} + {west} > {made}"
    );
    assert!(west as u64 <= part, "cut: west {west} over its part {part}");
    assert!(west as u64 >= part * 8 / 10, "cut: west decides ({west})");
    assert!(east as u64 >= part * 8 / 10, "cut: east decides ({east})");
    regions.link.set_mode(LinkMode::Pass);
    let ((east, _), (west, _), made) = both_ask(&regions, "healed", HARD, HARD).await;
    assert!(
        (east + west) as u64 <= made,
        "healed: {east} + {west} > {made}"
    );
}

/// Journal mode: the key's owner killed with `kill -9` while both regions
/// ask, in the home and then in west; the next owner replays the key's
/// part (not the whole bucket) from the journal, so nothing is admitted
/// twice and the two regions stay within one bucket. A GCRA of 100 a
/// minute: it refills little while the partition changes hands, so a
/// part lost in the handover (its burst admitted again) would show. (That
/// the replay is under the part's limit: the worker's
/// `decide::tests::replay`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_in_either_region_admits_nothing_twice() {
    const SLOW: u64 = 100;
    let _serial = serial().await;
    let journal = config_of(&TestConfig::new().journal(), "gcra", SLOW, "1m");
    let mut regions = TwoRegions::start(SLUICE, &journal, 2).await;
    both_ask(&regions, "warm", HARD, HARD).await;
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    for round in 0..2 {
        let key = format!("kill-{round}");
        let from = now_ms();
        let end = from + SPAN_MS + 300;
        let pause = Some(Duration::from_millis(5));
        let asking = tokio::spawn({
            let (east, west, key) = (east.clone(), west.clone(), key.clone());
            async move {
                tokio::join!(
                    ask_until(&east, &key, 2, pause, end),
                    ask_until(&west, &key, 2, pause, end)
                )
            }
        });
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        // Round 0 kills one of the home's owners, round 1 one of west's.
        let stack = if round == 0 {
            &mut regions.east
        } else {
            &mut regions.west
        };
        let owners = stack.owners().await;
        let victim = owners[&partition_of(&key, stack.partitions)].clone();
        stack.kill_worker(&victim);
        let (e, w) = asking.await.expect("the askers");
        let made = SLOW + SLOW * (now_ms() - from) / 60_000;
        eprintln!("{key}: east {e:?}, west {w:?} (allowed, asked, failed); one bucket: {made}");
        assert!(
            (e.0 + w.0) as u64 <= made,
            "round {round}: east {} + west {} > {made}",
            e.0,
            w.0
        );
        stack.spawn_worker();
    }
}

/// A fixed window of several limits (100 per 4 s and 1,000 a minute) is
/// split into parts as a bucket is (a window of one limit shares itself
/// out at the home, `regions_global.rs`): both regions asking hard inside
/// one 4 s window admit at most its 100, and close to it (west's part 50,
/// slices of the home's beyond).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_several_limits_is_split_and_holds_each() {
    let _serial = serial().await;
    let config = TestConfig::new().toml()
        + r#"
[policies.plan]
algorithm = "fixed_window"
limits = [ { max = 100, per = "4s" }, { max = 1000, per = "1m" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
"#;
    let regions = TwoRegions::start(SLUICE, &config, 1).await;
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    for round in 0..2 {
        // The next 4 s window, 300 ms in (minutes start with one).
        let now = now_ms();
        let start = now - now % 4_000 + 4_000;
        tokio::time::sleep(Duration::from_millis(start + 300 - now)).await;
        let end = start + 4_000;
        let key = format!("windows-{round}");
        let (e, w) = tokio::join!(
            ask_until(&east, &key, 4, None, end),
            ask_until(&west, &key, 4, None, end)
        );
        eprintln!("{key}: east {e:?}, west {w:?} (allowed, asked, failed)");
        assert_eq!((e.2, w.2), (0, 0), "{key}: every ask answered");
        let total = e.0 + w.0;
        assert!(total <= 100, "{key}: east {} + west {} > 100", e.0, w.0);
        if round > 0 {
            assert!(total >= 90, "{key}: linked, {total} of 100");
            assert!(w.0 >= 45, "{key}: west {} has its part", w.0);
        }
    }
}
