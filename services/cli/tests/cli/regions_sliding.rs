//! Global sliding logs and sliding windows across regions (SPEC §12)
//! over real nats-servers on loopback: two regions linked
//! through a proxy the test controls, 100 per 10 s held across both, east
//! its home, equal weights. West decides from its part (50) on its own and
//! sends every ask beyond it to the home, which decides it from the home's
//! part exactly as it decides its own asks; with `on_cut = "closed"` there
//! are no parts and every ask of west is decided at the home.
//!
//! Each case asks a fresh key for 3 s inside one fixed window of 10 s
//! (where a sliding window's estimate is exact), so whatever the
//! algorithm, the two regions together may admit at most 100 (and,
//! linked, with enough demand, exactly 100).

use crate::common;

use sluice_core::subject::Verb;
use sluice_core::usage::Counts;
use sluice_core::wire::inspect::{InspectReply, ResetReply};
use sluice_tests::{eventually, request, serial, LinkMode, TestConfig, TwoRegions, TICK};
use std::time::Duration;

use common::regions::{ask_until, now_ms, west_usage_only};
use common::SLUICE;

const MAX: usize = 100;
const WEST_PART: usize = 50;
const SPAN_MS: u64 = 3_000;
const WINDOW_MS: u64 = 10_000;

fn config(base: &TestConfig, algorithm: &str, on_cut: &str) -> String {
    base.toml()
        + &format!(
            r#"
[policies.plan]
algorithm = "{algorithm}"
limits = [ {{ max = {MAX}, per = "10s" }} ]
scope = "global"
home = "east"
regions = ["east", "west"]
on_cut = "{on_cut}"
"#
        )
}

/// East with `east_tasks` askers and west with `west_tasks` ask `key` as
/// fast as they are answered for [`SPAN_MS`]: (east, west) (allowed,
/// asked).
async fn ask_both(
    regions: &TwoRegions,
    key: &str,
    east_tasks: usize,
    west_tasks: usize,
) -> ((usize, usize), (usize, usize)) {
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();
    // Inside one fixed window of 10 s, which a sliding window's estimate
    // weighs by (across a boundary it admits a little more, by design).
    let into = now_ms() % WINDOW_MS;
    if into + SPAN_MS + 500 > WINDOW_MS {
        tokio::time::sleep(Duration::from_millis(WINDOW_MS - into + 100)).await;
    }
    // ask_until stops 300 ms before the end it is given.
    let end = now_ms() + SPAN_MS + 300;
    let (e, w) = tokio::join!(
        ask_until(&east, key, east_tasks, None, end),
        ask_until(&west, key, west_tasks, None, end)
    );
    eprintln!("{key}: east {e:?}, west {w:?} (allowed, asked, failed)");
    assert_eq!((e.2, w.2), (0, 0), "{key}: every ask answered");
    ((e.0, e.1), (w.0, w.1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_regions_asking_hard_admit_exactly_max() {
    let _serial = serial().await;
    for algorithm in ["sliding_log", "sliding_window"] {
        let config = config(&TestConfig::new(), algorithm, "reserved");
        let regions = TwoRegions::start(SLUICE, &config, 1).await;
        ask_both(&regions, &format!("warm-{algorithm}"), 4, 4).await;
        let ((east, _), (west, _)) = ask_both(&regions, &format!("hard-{algorithm}"), 4, 4).await;
        assert_eq!(east + west, MAX, "{algorithm}: east {east} + west {west}");
        assert!(west >= WEST_PART, "{algorithm}: west {west} has its part");
    }
}

/// West alone asks past its part: the rest is decided at the home, which
/// admits it from its own part, so west gets all 100; with `on_cut =
/// "closed"` (no parts) every ask is decided at the home. West's usage is
/// what it answered, forwarded asks included; the home records none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_past_a_regions_part_are_decided_at_the_home() {
    let _serial = serial().await;
    for on_cut in ["reserved", "closed"] {
        let config = config(&TestConfig::new(), "sliding_log", on_cut);
        let regions = TwoRegions::start(SLUICE, &config, 1).await;
        ask_both(&regions, "warm", 4, 4).await;
        let key = format!("alone-{on_cut}");
        let (_, (west, asked)) = ask_both(&regions, &key, 0, 4).await;
        assert_eq!(west, MAX, "{on_cut}: west alone gets the whole limit");
        let expected = Counts {
            used: west as u64,
            denied: (asked - west) as u64,
        };
        west_usage_only(&regions, &key, expected).await;
    }
}

/// The link blackholed: west decides from its part alone (asks past it
/// are denied once the home is taken as cut off, after the first one's
/// second without an answer), east from the home's part; the sum stays
/// within 100. Healed, west's asks reach the home again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_link_keeps_each_region_within_its_part() {
    let _serial = serial().await;
    let config = config(&TestConfig::new(), "sliding_log", "reserved");
    let regions = TwoRegions::start(SLUICE, &config, 1).await;
    ask_both(&regions, "warm", 4, 4).await;
    regions.link.set_mode(LinkMode::Blackhole);
    let ((east, _), (west, _)) = ask_both(&regions, "cut", 4, 4).await;
    assert_eq!(west, WEST_PART, "cut: west decides from its part");
    assert_eq!(east, MAX - WEST_PART, "cut: east decides from the home's");
    regions.link.set_mode(LinkMode::Pass);
    // West's next forward finds the home (one a second while cut).
    eventually(Duration::from_secs(10), TICK, || async {
        let (_, (west, _)) = ask_both(&regions, &format!("healed-{}", now_ms()), 0, 1).await;
        anyhow::ensure!(west > WEST_PART, "west alone got {west}");
        Ok(())
    })
    .await
    .unwrap();
}

/// Through `sluice-client` with batching (its default): an ask past
/// west's part in a batch is answered "ask it alone" (a batch cannot wait
/// on the link for one item), and the client asks it alone, so it is
/// decided at the home as a plain ask is: west alone still gets 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batching_client_asks_past_the_part_alone_and_the_home_decides() {
    let _serial = serial().await;
    // A log: exact in any 3 s, wherever the 10 s windows fall.
    let config = config(&TestConfig::new(), "sliding_log", "reserved");
    let regions = TwoRegions::start(SLUICE, &config, 1).await;
    ask_both(&regions, "warm", 4, 4).await;
    let west_config = format!("region = \"west\"\n{config}");
    let parsed = sluice_core::config::Config::from_toml(&west_config, "west.toml").unwrap();
    let options = sluice_client::ClientOptions::from_config(&parsed)
        .timeout(Duration::from_secs(2))
        .budgets(false);
    let client = sluice_client::Client::connect_with(&regions.west.nats.url(), options)
        .await
        .expect("the client connects");
    let end = now_ms() + SPAN_MS;
    let askers: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let (mut allowed, mut errors) = (0, 0);
                for _ in 0..2_000 {
                    if now_ms() >= end {
                        break;
                    }
                    match client.ask("batched", "plan", 1).await {
                        Ok(answer) if answer.allowed => allowed += 1,
                        Ok(_) => {}
                        Err(_) => errors += 1,
                    }
                }
                (allowed, errors)
            })
        })
        .collect();
    let (mut allowed, mut errors) = (0, 0);
    for asker in askers {
        let (a, e) = asker.await.unwrap();
        allowed += a;
        errors += e;
    }
    assert_eq!(errors, 0, "every ask answered");
    assert_eq!(allowed, MAX, "west alone, batched, gets the whole limit");
}

/// `rl.inspect` and `rl.reset` of a global key act on its global state
/// (SPEC §12): west alone spends the whole limit (its part and the
/// home's); an inspect asked in west shows 100 used over both regions, 50
/// in each; a reset asked in west says it went to east, and once east has
/// forgotten its state west alone gets the whole limit again. With the
/// link blackholed, an inspect shows east as not reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_reset_in_one_region_act_on_the_key_in_every_region() {
    let _serial = serial().await;
    let config = config(&TestConfig::new(), "sliding_log", "reserved");
    let regions = TwoRegions::start(SLUICE, &config, 1).await;
    ask_both(&regions, "warm", 4, 4).await;
    let (_, (west, _)) = ask_both(&regions, "reset-me", 0, 4).await;
    assert_eq!(west, MAX, "west alone spends the whole limit");
    let west_nats = regions.west.nats.connect().await.unwrap();
    let east_nats = regions.east.nats.connect().await.unwrap();
    let body = br#"{"policy":"plan"}"#;
    let inspect = |nats: async_nats::Client| async move {
        let reply = request(&nats, &Verb::Inspect.client_subject("reset-me"), body)
            .await
            .unwrap();
        let reply: InspectReply = serde_json::from_slice(&reply.payload).unwrap();
        reply.policies.into_iter().find(|p| p.policy == "plan")
    };
    let global = inspect(west_nats.clone()).await.expect("plan");
    assert_eq!((global.limits[0].max, global.limits[0].used), (100, 100));
    let by_region: Vec<(String, bool, u64)> = global
        .regions
        .expect("each region's")
        .iter()
        .map(|r| (r.region.clone(), r.reached, r.limits[0].used))
        .collect();
    assert_eq!(
        by_region,
        [
            ("east".to_string(), true, 50),
            ("west".to_string(), true, 50)
        ]
    );
    let reply = request(&west_nats, &Verb::Reset.client_subject("reset-me"), body)
        .await
        .unwrap();
    let reply: ResetReply = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(reply.reset, ["plan"], "west forgot its part");
    assert_eq!(reply.regions, ["east"], "and sent the reset to east");
    // Asked in east this time: the global state, nothing used anywhere.
    eventually(Duration::from_secs(10), TICK, || async {
        let global = inspect(east_nats.clone()).await.expect("plan");
        anyhow::ensure!(global.limits[0].used == 0, "not reset yet: {global:?}");
        Ok(())
    })
    .await
    .unwrap();
    let (_, (west, _)) = ask_both(&regions, "reset-me", 0, 4).await;
    assert_eq!(west, MAX, "after the reset, the whole limit again");

    regions.link.set_mode(LinkMode::Blackhole);
    let cut = inspect(west_nats.clone()).await.expect("plan");
    let east = &cut.regions.expect("each region's")[0];
    assert_eq!((east.region.as_str(), east.reached), ("east", false));
    assert_eq!(cut.limits[0].used, 50, "west's part alone");
}

/// Several limits in one global policy (300 per 10 s and 100 a minute):
/// each is split into parts, and the tightest decides: west alone gets its
/// part of the minute's 100 (50) and the rest at the home, 100 in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_are_each_split_and_the_tightest_decides() {
    let _serial = serial().await;
    let config = config(&TestConfig::new(), "sliding_log", "reserved").replace(
        r#"limits = [ { max = 100, per = "10s" } ]"#,
        r#"limits = [ { max = 300, per = "10s" }, { max = 100, per = "1m" } ]"#,
    );
    assert!(config.contains(r#"per = "1m""#), "{config}");
    let regions = TwoRegions::start(SLUICE, &config, 1).await;
    ask_both(&regions, "warm", 4, 4).await;
    let (_, (west, asked)) = ask_both(&regions, "two-limits", 0, 4).await;
    assert_eq!(west, MAX, "the minute's 100, its part and the home's");
    assert!(asked > MAX, "west asked {asked}");
    let west_nats = regions.west.nats.connect().await.unwrap();
    let body = br#"{"policy":"plan"}"#;
    let reply = request(
        &west_nats,
        &Verb::Inspect.client_subject("two-limits"),
        body,
    )
    .await
    .unwrap();
    let reply: InspectReply = serde_json::from_slice(&reply.payload).unwrap();
    let used: Vec<(u64, u64)> = reply.policies[0]
        .limits
        .iter()
        .map(|l| (l.max, l.used))
        .collect();
    assert_eq!(
        used,
        [(300, 100), (100, 100)],
        "both limits, over both regions"
    );
}

/// Shadow mode (SPEC §14) across regions: the parts and the home
/// decide as enforced, every ask is answered allowed, those enforcement
/// would deny flagged `shadow_denied` and counted as denied in the usage
/// of the region asked. West alone: 100 within the limit (its part, then
/// the home's), the rest shadow-denied, also those decided at the home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_policy_in_shadow_answers_allowed_and_flags_what_it_would_deny() {
    let _serial = serial().await;
    let config = config(&TestConfig::new(), "sliding_log", "reserved")
        .replace("on_cut = ", "mode = \"shadow\"\non_cut = ");
    let regions = TwoRegions::start(SLUICE, &config, 1).await;
    ask_both(&regions, "warm", 4, 4).await;
    let west = regions.west.nats.connect().await.unwrap();
    let body = br#"{"policy":"plan"}"#;
    let end = now_ms() + SPAN_MS;
    let (mut within, mut flagged, mut asked) = (0u64, 0u64, 0u64);
    while now_ms() < end && asked < 2_000 {
        let d = sluice_tests::ask(&west, "shadowed", body)
            .await
            .expect("answered");
        asked += 1;
        assert!(d.allowed, "a shadow policy answers every ask allowed");
        match d.shadow_denied {
            true => flagged += 1,
            false => within += 1,
        }
    }
    assert_eq!(within, MAX as u64, "enforced, 100 would pass");
    assert!(flagged > 0, "and the rest is flagged ({asked} asked)");
    let expected = Counts {
        used: within,
        denied: flagged,
    };
    west_usage_only(&regions, "shadowed", expected).await;
}
