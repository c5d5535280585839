//! Regions (SPEC §12) over real nats-servers on loopback:
//! two regions linked as docs/REGIONS.md says, the link through a proxy
//! the test controls (`sluice_tests::TwoRegions`). Regional limits stay in
//! their region (no ask or count crosses, a region without workers
//! answers no responders), `sluice status` shows the regions and whether
//! the link is up through a blackhole and a reset, a worker restarted in a
//! cut-off region takes its partitions, a worker refuses to start in a
//! misconfigured region. The link's security is in `regions_security.rs`.

use crate::common;

use anyhow::bail;
use futures::StreamExt;
use sluice_core::nats_config::NatsServerConfig;
use sluice_core::storage::POLICY_BUCKET;
use sluice_core::subject::{PartitionSubject, Verb, LINK_ROOT, ROOT};
use sluice_tests::{
    ask, eventually, in_region, serial, worker_command, AskError, ChildGuard, LinkMode, NatsServer,
    TestConfig, TwoRegions, EAST, PEEK, TICK, WEST,
};
use std::time::Duration;

use common::SLUICE;

/// A link subject of west's that no worker answers: its arrival from
/// east tells that what east sent before it would have arrived too.
fn marker_subject() -> String {
    format!("{LINK_ROOT}.{WEST}.test-marker")
}

/// Asks `key` (policy default: 5 per 10 s) until denied; how many were
/// allowed (bounded at 20 asks).
async fn allowed_until_denied(client: &async_nats::Client, key: &str) -> usize {
    for n in 0..20 {
        let d = ask(client, key, b"").await.expect("an answer");
        if !d.allowed {
            return n;
        }
    }
    panic!("{key}: 20 asks allowed under a limit of 5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_region_counts_its_own_asks_and_none_crosses_the_link() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &TestConfig::new().toml(), 1).await;
    let east = regions.east.nats.connect().await.unwrap();
    let west = regions.west.nats.connect().await.unwrap();

    // West listens to every ask subject, and to one link subject,
    // which tells when east's messages before it would have arrived (one
    // connection carries the link, in order).
    let mut leaked = west.subscribe(format!("{ROOT}.>")).await.unwrap();
    let mut marker = west.subscribe(marker_subject()).await.unwrap();
    west.flush().await.unwrap();
    // Interest needs a moment to cross the link: resend until it has
    // (bounded: 50 tries of 200 ms).
    let mut crossed = false;
    for _ in 0..50 {
        east.publish(marker_subject(), "ping".into()).await.unwrap();
        east.flush().await.unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), marker.next()).await {
            crossed = true;
            break;
        }
    }
    assert!(crossed, "a link subject never crossed from east to west");

    // The same key, 5 per 10 s in each region: each admits its own 5.
    assert_eq!(allowed_until_denied(&east, "alice").await, 5);
    assert_eq!(allowed_until_denied(&west, "alice").await, 5);
    let peek = ask(&west, "alice", PEEK).await.unwrap();
    assert_eq!(peek.remaining, 0);

    east.publish(marker_subject(), "after".into())
        .await
        .unwrap();
    east.flush().await.unwrap();
    let after = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let m = marker.next().await.expect("the marker subscription");
            if m.payload.as_ref() == b"after" {
                return;
            }
        }
    })
    .await;
    assert!(
        after.is_ok(),
        "the marker sent after the asks never crossed"
    );
    // West's own asks are in `leaked` (they are west's subjects): only
    // messages of east would show as more than west sent.
    let mut seen = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(50), leaked.next()).await {
        seen.push(m.subject.to_string());
    }
    let west_asks = seen
        .iter()
        .filter_map(|s| PartitionSubject::parse(s))
        .filter(|p| p.verb == Verb::Allow && p.key_token == "alice")
        .count();
    assert_eq!(
        west_asks, 7,
        "west saw {west_asks} asks for alice: its own 6 and 1 peek, none of east's ({seen:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_without_workers_answers_no_responders_never_the_other_region() {
    let _serial = serial().await;
    let mut regions = TwoRegions::start(SLUICE, &TestConfig::new().toml(), 1).await;
    regions.west.stop_workers();
    let west = regions.west.nats.connect().await.unwrap();
    let east = regions.east.nats.connect().await.unwrap();
    assert!(ask(&east, "bob", b"").await.unwrap().allowed);
    for key in ["bob", "carol", "dave"] {
        match ask(&west, key, b"").await {
            Err(AskError::NoResponders) => {}
            other => panic!("{key} in west without workers: {other:?}"),
        }
    }
}

/// `sluice status` in `region`'s stack, as text.
fn status(stack: &sluice_tests::Stack) -> String {
    stack.run(&["status", "--wait", "1s"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_regions_and_the_link_through_a_blackhole_and_a_reset() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &TestConfig::new().toml(), 1).await;
    let line = |text: &str, region: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(region))
            .unwrap_or_default()
            .to_string()
    };
    eventually(Duration::from_secs(15), TICK, || async {
        let text = status(&regions.west);
        if !line(&text, WEST).contains("this region") || !line(&text, EAST).contains("link up") {
            bail!("west's status: {text}");
        }
        anyhow::Ok(())
    })
    .await
    .unwrap();

    regions.link.set_mode(LinkMode::Blackhole);
    eventually(Duration::from_secs(15), TICK, || async {
        let text = status(&regions.west);
        if !line(&text, EAST).contains("link DOWN") {
            bail!("west's status: {text}");
        }
        anyhow::Ok(())
    })
    .await
    .unwrap();
    // West still answers its own asks at once while the link is cut.
    let west = regions.west.nats.connect().await.unwrap();
    assert!(ask(&west, "erin", b"").await.unwrap().allowed);

    regions.link.set_mode(LinkMode::Pass);
    regions.link.reset();
    eventually(Duration::from_secs(20), TICK, || async {
        let text = status(&regions.east);
        if !line(&text, WEST).contains("link up") {
            bail!("east's status: {text}");
        }
        anyhow::Ok(())
    })
    .await
    .unwrap();
}

/// Spawns one worker of `region` against `nats`; waits for it to exit on
/// its own and returns its log.
fn refused_worker(nats: &NatsServer, region: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, in_region(region, &TestConfig::new().toml())).unwrap();
    let log = dir.path().join("worker.log");
    let cmd = worker_command(SLUICE.as_ref(), &nats.url(), &config, Some("stray"));
    let mut worker = ChildGuard::spawn_logged("stray", cmd, &log).unwrap();
    let status = worker
        .wait_within(Duration::from_secs(30))
        .unwrap()
        .expect("the worker exits on its own");
    assert!(!status.success());
    std::fs::read_to_string(&log).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_a_server_of_another_region_or_of_none() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &TestConfig::new().toml(), 1).await;
    let log = refused_worker(&regions.east.nats, WEST);
    assert!(
        log.contains("region is \"west\" but its NATS server's JetStream domain is \"east\""),
        "{log}"
    );
    let plain = NatsServer::start(&NatsServerConfig::new(16).render()).unwrap();
    let log = refused_worker(&plain, WEST);
    assert!(log.contains("has no JetStream domain"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_a_link_that_carries_regional_subjects() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &TestConfig::new().toml(), 1).await;
    // A third region linked to east by hand, without the deny lists.
    let config = regions.third_region("north", None, None);
    let text: String = config
        .render()
        .lines()
        .filter(|l| !l.contains("deny_"))
        .map(|l| format!("{l}\n"))
        .collect();
    let north = NatsServer::start(&text).unwrap();
    eventually(Duration::from_secs(20), TICK, || async {
        let leafz = regions.east.nats.monitoring_get("/leafz")?;
        let v: serde_json::Value = serde_json::from_str(&leafz)?;
        if v["leafnodes"].as_u64() != Some(2) {
            bail!("east's links: {leafz}\nnorth's log: {}", north.log_tail(30));
        }
        anyhow::Ok(())
    })
    .await
    .unwrap();
    let log = refused_worker(&north, "north");
    assert!(
        log.contains("the link between the regions carries regional subjects"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_restarted_in_a_cut_off_region_takes_its_partitions() {
    let _serial = serial().await;
    // Journal mode: frank's asks are stored before they are answered.
    let config = TestConfig::new().journal().toml();
    let mut regions = TwoRegions::start(SLUICE, &config, 1).await;
    let west = regions.west.nats.connect().await.unwrap();
    assert_eq!(allowed_until_denied(&west, "frank").await, 5);

    // The link cut both ways at the socket (blackhole), then west's only
    // worker killed: a new one must take every partition from west's own
    // JetStream, and find frank's count in west's own journal.
    regions.link.set_mode(LinkMode::Blackhole);
    let old = regions.west.worker_ids()[0].clone();
    regions.west.kill_worker(&old);
    regions.west.start_workers(1).await;
    let peek = ask(&west, "frank", PEEK).await.unwrap();
    assert_eq!(peek.remaining, 0, "west restored frank's count by itself");
    assert!(ask(&west, "grace", b"").await.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_region_fields_are_refused_by_policy_set_and_by_workers_from_the_bucket() {
    let _serial = serial().await;
    let regions = TwoRegions::start(SLUICE, &TestConfig::new().toml(), 1).await;
    let west = &regions.west;
    let out = west.command(&[
        "policy",
        "set",
        "plan",
        "--algorithm",
        "fixed_window",
        "--limit",
        "100/1m",
        "--scope",
        "global",
        "--home",
        "north",
        "--regions",
        "east,west",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("home: home \"north\" is not one of the policy's regions"),
        "{stderr}"
    );

    // Written into the bucket by hand: the workers refuse it with the
    // reason and keep deciding without it.
    let js = async_nats::jetstream::new(west.nats.connect().await.unwrap());
    let bucket = js.get_key_value(POLICY_BUCKET).await.unwrap();
    let bad = br#"{"algorithm":"fixed_window","limits":[{"max":100,"per":"1m"}],"scope":"global","home":"east","regions":["east","west"],"region_shares":{"west":0}}"#;
    bucket.put("plan", bad.to_vec().into()).await.unwrap();
    eventually(Duration::from_secs(10), TICK, || async {
        let status = west.run(&["status", "--wait", "1s"]);
        if !status.contains("refused policy value \"plan\"")
            || !status.contains("region_shares.west")
        {
            bail!("{status}");
        }
        anyhow::Ok(())
    })
    .await
    .unwrap();
    let client = west.nats.connect().await.unwrap();
    match ask(&client, "ivan", br#"{"policy":"plan"}"#).await {
        Err(AskError::Reply(e)) => assert_eq!(e.code.status(), 404, "{e:?}"),
        other => panic!("an ask of the refused policy: {other:?}"),
    }
}
