//! Global limits across regions (SPEC §12) over real
//! nats-servers on loopback: two regions linked through a proxy the test
//! controls (`sluice_tests::TwoRegions`), one fixed window of 100 per 4 s
//! held across both, east its home. Each case asks inside one window
//! (from 300 ms after it starts to 300 ms before it ends, on the same
//! clock the workers use), so what was admitted in it is the sum of what
//! the two regions answered allowed:
//!
//! - both regions asking hard: at most 100, and (linked) close to it;
//! - demand 10:1: the quiet region gets all it asks for within its share;
//! - the link blackholed, then healed: each region within its share while
//!   cut, no window over 100 while cut or healing;
//! - the home's workers stopped, then back: the other region keeps its
//!   share, and the window after the home is back holds;
//! - an owner killed with `kill -9` (journal mode) mid-window while west
//!   holds budget, in the home and then in west: nothing admitted twice;
//! - each region's usage of the key is what it answered (snapshot and
//!   journal mode);
//! - `on_cut = "open"`: while cut, each region decides as a regional limit
//!   (up to `max` each), and the window holds again once healed.

use crate::common;

use sluice_core::subject::Verb;
use sluice_core::usage::Counts;
use sluice_core::wire::{encode_request, Encoding};
use sluice_tests::{error_of, request, serial, LinkMode, TestConfig, TwoRegions};
use std::time::Duration;

use common::regions::{ask_until, now_ms, west_usage_only};
use common::SLUICE;

const MAX: usize = 100;
const WINDOW_MS: u64 = 4_000;
/// West's share of each window: half of 100, two equal regions.
const WEST_SHARE: usize = 50;

fn config(base: &TestConfig) -> String {
    base.toml()
        + r#"
[policies.plan]
algorithm = "fixed_window"
limits = [ { max = 100, per = "4s" } ]
scope = "global"
home = "east"
regions = ["east", "west"]
"#
}

/// Waits for the next window to be 300 ms old; returns when it ends.
async fn next_window() -> u64 {
    let now = now_ms();
    let start = now - now % WINDOW_MS + WINDOW_MS;
    tokio::time::sleep(Duration::from_millis(start + 300 - now)).await;
    start + WINDOW_MS
}

/// Both regions ask `key` hard through one window: (east, west) allowed.
async fn both_hard(regions: &TwoRegions, key: &str) -> (usize, usize) {
    let (e, w) = both_hard_asked(regions, key).await;
    (e.0, w.0)
}

/// [`both_hard`]: (east, west) (allowed, asked).
async fn both_hard_asked(regions: &TwoRegions, key: &str) -> ((usize, usize), (usize, usize)) {
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    let end = next_window().await;
    let (e, w) = tokio::join!(
        ask_until(&east, key, 4, None, end),
        ask_until(&west, key, 4, None, end)
    );
    assert_eq!((e.2, w.2), (0, 0), "{key}: every ask answered");
    eprintln!("{key}: east {e:?}, west {w:?} (allowed, asked, failed)");
    ((e.0, e.1), (w.0, w.1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_regions_asking_hard_admit_at_most_max_and_close_to_it() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &config(&TestConfig::new()), 1).await;
    // One window for the link's interest to settle and the owners to
    // begin; then three measured ones.
    both_hard(&regions, "warm").await;
    for round in 0..3 {
        let (east, west) = both_hard(&regions, &format!("hard-{round}")).await;
        let total = east + west;
        assert!(
            total <= MAX,
            "round {round}: east {east} + west {west} > {MAX}"
        );
        assert!(
            total >= MAX - 5,
            "round {round}: east {east} + west {west}: linked, close to {MAX}"
        );
        assert!(
            west >= WEST_SHARE - 5,
            "round {round}: west got {west} of its share"
        );
    }
}

/// Usage (SPEC §9) is recorded once, where each ask was made, in
/// snapshot and in journal mode: west asks alone through a window (its
/// share, then slices the home grants it) and then sends hits that no
/// longer fit (forwarded to the home, counted there); west's usage is
/// what it answered, and the home, which asked nothing, has none, though
/// the slices, the hits and west's books crossed the link and count there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_regions_usage_is_what_it_answered() {
    const HITS: u64 = 5;
    let _serial = serial().await;
    for base in [TestConfig::new(), TestConfig::new().journal()] {
        let regions = TwoRegions::start(SLUICE, &config(&base), 1).await;
        both_hard(&regions, "warm").await;
        let west = regions.west.nats.connect().await.unwrap();
        let end = next_window().await;
        let (allowed, asked, failed) = ask_until(&west, "counted", 4, None, end).await;
        assert_eq!(failed, 0);
        assert!(
            allowed > WEST_SHARE,
            "west got slices beyond its share: {allowed}"
        );
        let hit = encode_request(Some("plan"), None, Encoding::Json);
        for _ in 0..HITS {
            let answer = request(&west, &Verb::Hit.client_subject("counted"), &hit).await;
            assert!(error_of(&answer.unwrap()).is_none(), "a hit is counted");
        }
        let expected = Counts {
            used: allowed as u64 + HITS,
            denied: (asked - allowed) as u64,
        };
        west_usage_only(&regions, "counted", expected).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_demand_ten_to_one_the_quiet_region_gets_all_it_asks() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &config(&TestConfig::new()), 1).await;
    both_hard(&regions, "warm").await;
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    for (round, quiet_is_west) in [(0, true), (1, false)] {
        let key = format!("fair-{round}");
        let end = next_window().await;
        // The quiet region asks about 10 a second (~34 in the window, well
        // inside its share of 50); the busy one as fast as it is answered.
        let quiet = Some(Duration::from_millis(100));
        let (e, w) = if quiet_is_west {
            tokio::join!(
                ask_until(&east, &key, 4, None, end),
                ask_until(&west, &key, 1, quiet, end)
            )
        } else {
            tokio::join!(
                ask_until(&east, &key, 1, quiet, end),
                ask_until(&west, &key, 4, None, end)
            )
        };
        let (quiet, busy) = if quiet_is_west { (w, e) } else { (e, w) };
        assert_eq!(
            quiet.0, quiet.1,
            "round {round}: the quiet region was denied ({} of {} allowed)",
            quiet.0, quiet.1
        );
        assert!(
            busy.1 > 10 * quiet.1,
            "round {round}: demand was 10:1 or more"
        );
        let total = quiet.0 + busy.0;
        assert!(total <= MAX, "round {round}: {total} > {MAX}");
        assert!(total >= MAX - 10, "round {round}: only {total} admitted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_link_keeps_each_region_within_its_share_and_healing_breaks_no_window() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &config(&TestConfig::new()), 1).await;
    both_hard(&regions, "warm").await;

    regions.link.set_mode(LinkMode::Blackhole);
    for round in 0..2 {
        let (east, west) = both_hard(&regions, &format!("cut-{round}")).await;
        assert!(
            west <= WEST_SHARE,
            "cut round {round}: west {west} over its share"
        );
        assert!(
            east <= MAX - WEST_SHARE,
            "cut round {round}: east {east} over its room"
        );
        assert!(
            west >= WEST_SHARE - 5,
            "cut round {round}: west decides from its share ({west})"
        );
        assert!(
            east >= MAX - WEST_SHARE - 5,
            "cut round {round}: east decides ({east})"
        );
    }

    // Healing mid-window: the link comes back while both ask.
    regions.link.set_mode(LinkMode::Pass);
    let (east, west) = both_hard(&regions, "healing").await;
    assert!(east + west <= MAX, "healing: east {east} + west {west}");
    let (east, west) = both_hard(&regions, "healed").await;
    assert!(east + west <= MAX, "healed: east {east} + west {west}");
    assert!(east + west >= MAX - 5, "healed: east {east} + west {west}");
}

/// `on_cut = "open"`: a region cut off from the home decides as a
/// regional limit (each region up to `max` a window, so up to 2 × `max`
/// over both, as documented), and once the link is back the window holds
/// again across both (the window it heals in, at most 2 × `max`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cut_open_decides_each_region_as_a_regional_limit_while_cut() {
    let _serial = serial().await;
    let open = config(&TestConfig::new()) + "on_cut = \"open\"\n";
    let regions = TwoRegions::start(SLUICE, &open, 1).await;
    both_hard(&regions, "warm").await;

    regions.link.set_mode(LinkMode::Blackhole);
    for round in 0..2 {
        let (east, west) = both_hard(&regions, &format!("open-{round}")).await;
        assert!(
            east <= MAX && west <= MAX,
            "open round {round}: east {east}, west {west}"
        );
        assert!(
            west >= MAX - 5,
            "open round {round}: west decides as a regional limit ({west})"
        );
        assert!(east >= MAX - 5, "open round {round}: east decides ({east})");
    }

    regions.link.set_mode(LinkMode::Pass);
    // The window the link heals in: west's regional count and the slices
    // it is granted again both count (west may pass `max` on its own),
    // never more than 2 × `max` over both.
    let (east, west) = both_hard(&regions, "open-healing").await;
    assert!(east + west <= 2 * MAX, "healing: east {east}, west {west}");
    let (east, west) = both_hard(&regions, "open-healed").await;
    assert!(east + west <= MAX, "healed: east {east} + west {west}");
    assert!(east + west >= MAX - 5, "healed: east {east} + west {west}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_link_and_the_home_down_keep_the_bound() {
    let _serial = serial().await;
    let mut regions = TwoRegions::start(SLUICE, &config(&TestConfig::new()), 1).await;
    both_hard(&regions, "warm").await;

    regions.link.reset();
    let (east, west) = both_hard(&regions, "reset").await;
    assert!(
        east + west <= MAX,
        "after a reset: east {east} + west {west}"
    );

    regions.east.stop_workers();
    let west_nats = regions.west.nats.connect().await.unwrap();
    for round in 0..2 {
        let end = next_window().await;
        let (west, asked, failed) =
            ask_until(&west_nats, &format!("down-{round}"), 4, None, end).await;
        assert_eq!(failed, 0, "west answers with the home down");
        assert!(asked > WEST_SHARE, "west asked {asked}");
        assert!(
            (WEST_SHARE - 5..=WEST_SHARE).contains(&west),
            "home down, round {round}: west admitted {west}, its share is {WEST_SHARE}"
        );
    }
    regions.east.spawn_worker();
    // The home's new owner begins: one window to settle, then the bound.
    both_hard(&regions, "back-warm").await;
    let (east, west) = both_hard(&regions, "back").await;
    assert!(east + west <= MAX, "home back: east {east} + west {west}");
    assert!(
        east + west >= MAX - 5,
        "home back: east {east} + west {west}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_in_either_region_while_west_holds_budget_admits_nothing_twice() {
    let _serial = serial().await;
    let mut regions = TwoRegions::start(SLUICE, &config(&TestConfig::new().journal()), 2).await;
    both_hard(&regions, "warm").await;
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    for round in 0..2 {
        let key = format!("kill-{round}");
        let end = next_window().await;
        let asking = tokio::spawn({
            let (east, west, key) = (east.clone(), west.clone(), key.clone());
            async move {
                tokio::join!(
                    ask_until(&east, &key, 2, Some(Duration::from_millis(5)), end),
                    ask_until(&west, &key, 2, Some(Duration::from_millis(5)), end)
                )
            }
        });
        tokio::time::sleep(Duration::from_millis(600)).await;
        // Round 0 kills one of the home's owners, round 1 one of west's.
        let stack = if round == 0 {
            &mut regions.east
        } else {
            &mut regions.west
        };
        let victim = stack.worker_ids()[0].clone();
        stack.kill_worker(&victim);
        let (e, w) = asking.await.expect("the askers");
        eprintln!("{key}: east {e:?}, west {w:?} (allowed, asked, failed)");
        assert!(
            e.0 + w.0 <= MAX,
            "round {round}: east {} + west {}",
            e.0,
            w.0
        );
        stack.spawn_worker();
    }
}
