//! Usage history (SPEC §9) against real workers: exact sums through a
//! handover and, in journal mode, through `kill -9`; rollups that equal the
//! sums of the finer tier and retention done by JetStream; top N with exact
//! totals; bad queries refused.

use anyhow::{anyhow, bail};
use async_nats::jetstream;
use sluice_core::storage::{usage_stream, usage_subject};
use sluice_core::subject::{Verb, TOP};
use sluice_core::usage::{BucketRecord, Counts};
use sluice_core::wire::inspect::decode_admin_reply;
use sluice_core::wire::usage::{TopReply, UsageReply};
use sluice_core::wire::ErrorCode;
use sluice_tests::{ask, error_of, eventually, key_in_partition, request, serial, Stack, TICK};
use std::collections::BTreeMap;
use std::time::Duration;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// 3 per minute, so a key's fourth ask in a test is denied.
const CONFIG: &str = r#"
partitions = 8
lease_ttl = "2s"
snapshot_interval = "200ms"
{durability}
[policies.default]
algorithm = "fixed_window"
limits = [ { max = 3, per = "10m" } ]
"#;

fn config(journal: bool) -> String {
    let durability = if journal {
        r#"durability = "journal""#
    } else {
        ""
    };
    CONFIG.replace("{durability}", durability)
}

async fn usage(client: &async_nats::Client, key: &str, body: &str) -> anyhow::Result<UsageReply> {
    let msg = request(client, &Verb::Usage.client_subject(key), body.as_bytes())
        .await
        .map_err(|e| anyhow!("{e:?}"))?;
    if let Some(e) = error_of(&msg) {
        bail!("{} {}", e.code.status(), e.message);
    }
    decode_admin_reply(&msg.payload).map_err(|e| anyhow!("{e}"))
}

/// Asks each key `asks[key]` times and hits it once with cost 2; returns
/// what usage must show: used = allowed asks + 2, denied = the rest.
async fn count(
    client: &async_nats::Client,
    keys: &[String],
    asks: usize,
) -> BTreeMap<String, Counts> {
    let mut want = BTreeMap::new();
    for key in keys {
        let mut c = Counts::default();
        for _ in 0..asks {
            let d = ask(client, key, b"").await.expect("an ask is answered");
            if d.allowed {
                c.used += 1;
            } else {
                c.denied += 1;
            }
        }
        client
            .publish(Verb::Hit.client_subject(key), r#"{"cost":2}"#.into())
            .await
            .unwrap();
        c.used += 2;
        want.insert(key.clone(), c);
    }
    client.flush().await.unwrap();
    want
}

fn add_all(into: &mut BTreeMap<String, Counts>, more: BTreeMap<String, Counts>) {
    for (k, c) in more {
        into.entry(k).or_default().add(c);
    }
}

/// Waits until every key's usage over the last hour is `want` (a hit is
/// published, so its count may land a moment after the asks).
async fn assert_usage(client: &async_nats::Client, want: &BTreeMap<String, Counts>) {
    for (key, want) in want {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let last = match usage(client, key, "").await {
                Ok(reply) if reply.total() == *want => {
                    assert_eq!(reply.step_ms, 60_000);
                    assert!(reply.complete_to_ms > 0);
                    break;
                }
                Ok(reply) => format!("{:?}", reply.total()),
                Err(e) => format!("{e:#}"),
            };
            assert!(
                std::time::Instant::now() < deadline,
                "usage of {key}: want {want:?}, last {last}"
            );
            tokio::time::sleep(TICK).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_exact_across_a_handover_and_top_names_the_hottest_keys() {
    let _serial = serial().await;
    // No periodic flush: what a worker counted reaches the next owner only
    // through its flush at handover.
    let handover_only = config(false).replace(
        r#"snapshot_interval = "200ms""#,
        r#"snapshot_interval = "5m""#,
    );
    let mut stack = Stack::start(SLUICE, &handover_only, 2).await;
    let client = stack.clients(1).await.remove(0);
    let keys: Vec<String> = (0..8)
        .map(|p| key_in_partition(p, stack.partitions))
        .collect();
    let mut want = count(&client, &keys, 2).await;
    assert_usage(&client, &want).await;

    // One worker hands its partitions over; the other continues every
    // minute where it left off.
    let leaving = stack.worker_ids().remove(0);
    stack.stop_worker(&leaving);
    eventually(Duration::from_secs(15), TICK, || async {
        for key in &keys {
            usage(&client, key, "").await?;
        }
        anyhow::Ok(())
    })
    .await
    .expect("every partition answers usage again");
    add_all(&mut want, count(&client, &keys, 3).await);
    // Every key: 2 asks allowed, a hit of 2 (over the limit of 3), 3 asks
    // denied, another hit of 2.
    assert!(want.values().all(|c| *c == Counts { used: 6, denied: 3 }));
    assert_usage(&client, &want).await;

    // One key much hotter than the rest; top 3 by used and by denied.
    let hot = &keys[5];
    for _ in 0..4 {
        client
            .publish(Verb::Hit.client_subject(hot), r#"{"cost":10}"#.into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    let top = eventually(Duration::from_secs(10), TICK, || async {
        let msg = request(&client, TOP, br#"{"n":3}"#)
            .await
            .map_err(|e| anyhow!("{e:?}"))?;
        let reply: TopReply = serde_json::from_slice(&msg.payload)?;
        if reply.keys.first().map(|k| k.used) == Some(46) {
            Ok(reply)
        } else {
            Err(anyhow!("{reply:?}"))
        }
    })
    .await
    .expect("the hot key's hits show in top");
    assert_eq!(top.keys.len(), 3);
    assert_eq!(
        (top.keys[0].key.as_str(), top.keys[0].denied),
        (hot.as_str(), 3)
    );
    assert!(top.keys[1..]
        .iter()
        .all(|k| k.used == 6 && k.policy == "default"));
    let msg = request(&client, TOP, br#"{"n":1000,"by":"denied"}"#)
        .await
        .unwrap();
    let by_denied: TopReply = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(by_denied.keys.len(), 8, "every key was denied");

    // The command shows the same numbers.
    let shown = stack.run(&["usage", &keys[0], "--json"]);
    let shown: UsageReply = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown.total(), Counts { used: 6, denied: 3 });
    let table = stack.run(&["usage", &keys[0]]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("total") && l.ends_with(" 6            3")),
        "{table}"
    );
    let top = stack.run(&["usage", "--top", "2"]);
    assert!(
        top.lines().nth(2).is_some_and(|l| l.contains(hot.as_str())),
        "{top}"
    );
}

/// The config with tiers of 1, 2, 4 and 8 seconds, the finest kept
/// `finest_keep`.
fn seconds_tiers(finest_keep: &str) -> String {
    format!(
        "{}\n[usage]\ntiers = [{{ step = \"1s\", keep = \"{finest_keep}\" }}, {{ step = \"2s\", keep = \"2m\" }}, {{ step = \"4s\", keep = \"2m\" }}, {{ step = \"8s\", keep = \"2m\" }}]\n",
        config(false)
    )
}

/// `rl.top` over a fixed range: the keys and totals, best first.
async fn top_of_range(
    client: &async_nats::Client,
    body: &str,
) -> anyhow::Result<Vec<(String, u64)>> {
    let msg = request(client, TOP, body.as_bytes())
        .await
        .map_err(|e| anyhow!("{e:?}"))?;
    if let Some(e) = error_of(&msg) {
        bail!("{} {}", e.code.status(), e.message);
    }
    let reply: TopReply = serde_json::from_slice(&msg.payload)?;
    Ok(reply.keys.into_iter().map(|k| (k.key, k.used)).collect())
}

/// `rl.top` reads lists ranked per bucket and kept between queries (the
/// worker's usage::top_cache): its answers stay exact while the buckets of
/// its range end, become final, are rolled up and ranked ahead, and count
/// what comes after. Tiers of seconds, so that all of it happens in
/// seconds; every answer after the first exact one is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_stays_exact_while_its_buckets_become_final_and_roll_up() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &seconds_tiers("2m"), 2).await;
    let client = stack.clients(1).await.remove(0);
    let from_ms = now_ms() - 1_000;
    let body = format!(
        r#"{{"from_ms":{from_ms},"to_ms":{},"n":5}}"#,
        from_ms + 600_000
    );
    let keys: Vec<String> = (0..12).map(|i| format!("ranked-{i}")).collect();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for round in 0..2u64 {
        // Costs with ties, so that the order of equal totals is checked.
        for (i, key) in keys.iter().enumerate() {
            let cost = (i as u64 * 7 + round * 5) % 4 + 1;
            client
                .publish(
                    Verb::Hit.client_subject(key),
                    format!(r#"{{"cost":{cost}}}"#).into(),
                )
                .await
                .unwrap();
            *want.entry(key.clone()).or_default() += cost;
        }
        client.flush().await.unwrap();
        let totals = want.iter().map(|(k, used)| {
            let counts = Counts {
                used: *used,
                denied: 0,
            };
            (k.clone(), counts)
        });
        let expected: Vec<(String, u64)> = sluice_core::usage::top(totals, 5, Default::default())
            .into_iter()
            .map(|(k, c)| (k, c.used))
            .collect();
        eventually(Duration::from_secs(10), TICK, || async {
            let got = top_of_range(&client, &body).await?;
            if got == expected {
                Ok(())
            } else {
                Err(anyhow!("top {got:?}, want {expected:?}"))
            }
        })
        .await
        .expect("the hits show in top");
        // Past the grace period and the 8 s buckets' rollup.
        let until = now_ms() + 12_000;
        let mut answers = 0;
        while now_ms() < until {
            let got = top_of_range(&client, &body).await.unwrap();
            assert_eq!(got, expected, "round {round}, answer {answers}");
            answers += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(answers > 20, "{answers} answers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_survives_kill_9_in_journal_mode() {
    let _serial = serial().await;
    // No flush before the kill: what usage shows after it comes from the
    // journal alone.
    let never_flushed = config(true).replace(
        r#"snapshot_interval = "200ms""#,
        r#"snapshot_interval = "5m""#,
    );
    let mut stack = Stack::start(SLUICE, &never_flushed, 1).await;
    let client = stack.clients(1).await.remove(0);
    let keys: Vec<String> = (0..4)
        .map(|p| key_in_partition(p * 2, stack.partitions))
        .collect();
    // Counted (the owner's memory shows it once journaled: a hit nobody
    // waits for could still be in flight), then killed.
    let mut want = count(&client, &keys, 2).await;
    assert_usage(&client, &want).await;
    add_all(&mut want, count(&client, &keys, 3).await);
    assert_usage(&client, &want).await;
    let id = stack.worker_ids().remove(0);
    stack.kill_worker(&id);
    stack.start_workers(1).await;
    // The new owner answers before the journal's usage is in its ledger
    // (it is added right after); a query meanwhile waits for it, so the
    // first total it answers is already the whole one.
    for (key, want) in &want {
        let first = eventually(Duration::from_secs(15), TICK, || usage(&client, key, ""))
            .await
            .expect("the new owner answers usage");
        assert_eq!(
            first.total(),
            *want,
            "the first usage of {key} after the takeover"
        );
    }
    assert_usage(&client, &want).await;
    // And once more, on top of what was replayed.
    add_all(&mut want, count(&client, &keys, 1).await);
    assert_usage(&client, &want).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_usage_queries_are_refused_with_a_reason() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &config(false), 1).await;
    let client = stack.clients(1).await.remove(0);
    let key = key_in_partition(1, stack.partitions);
    for (body, code, says) in [
        (r#"{"from_ms":10,"to_ms":5}"#, 400, "after"),
        (r#"{"step":"2m"}"#, 400, "1m, 5m, 1h, 1d"),
        (r#"{"policy":"nope"}"#, 404, "nope"),
        (r#"{"cost":1}"#, 400, "unknown field"),
    ] {
        let e = usage(&client, &key, body).await.unwrap_err().to_string();
        assert!(
            e.starts_with(&code.to_string()) && e.contains(says),
            "{body}: {e}"
        );
    }
    for (body, says) in [(r#"{"n":1001}"#, "1 to 1000"), (r#"{"by":"cost"}"#, "by")] {
        let msg = request(&client, TOP, body.as_bytes()).await.unwrap();
        let e = error_of(&msg).expect("an error reply");
        assert_eq!(e.code, ErrorCode::BadRequest, "{body}");
        assert!(e.message.contains(says), "{body}: {}", e.message);
    }
    // A key of more tokens than a grouped key has (SPEC §17).
    let e = usage(&client, "a.b.c.d", "").await.unwrap_err().to_string();
    assert!(e.starts_with("400"), "{e}");
}

/// Tiers of 1, 2, 4 and 8 seconds: every coarser record equals the sum of
/// the finer records in it, and the finest are gone once they are older
/// than it keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollups_are_the_sums_of_the_finer_tier_and_old_buckets_are_dropped() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, &seconds_tiers("5s"), 1).await;
    let client = stack.clients(1).await.remove(0);
    let key = key_in_partition(3, stack.partitions);
    let started_ms = now_ms();
    // Hits spread over about 10 s, several per second.
    let mut sent = 0;
    while now_ms() < started_ms + 10_000 {
        client
            .publish(Verb::Hit.client_subject(&key), "".into())
            .await
            .unwrap();
        sent += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.flush().await.unwrap();
    let js = jetstream::new(client.clone());
    let read = |step: &'static str, bucket: u64| stored_used(&js, step, 3, bucket, &key);
    // Every 8 s bucket the hits fell in, once rolled up, holds what its
    // two 4 s, four 2 s buckets hold; all of them together hold every hit.
    let first8 = started_ms - started_ms % 8_000;
    let last8 = (started_ms + 10_000) - (started_ms + 10_000) % 8_000;
    let buckets8: Vec<u64> = (first8..=last8).step_by(8_000).collect();
    let total8 = eventually(
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let mut total = 0;
            for &b in &buckets8 {
                total += read("8s", b).await;
            }
            if total == sent {
                Ok(total)
            } else {
                Err(anyhow!("{total} of {sent} rolled up into 8 s buckets"))
            }
        },
    )
    .await
    .expect("every hit reaches the coarsest tier");
    assert_eq!(total8, sent);
    for &b in &buckets8 {
        let eight = read("8s", b).await;
        let fours = read("4s", b).await + read("4s", b + 4_000).await;
        let mut twos = 0;
        for i in 0..4 {
            twos += read("2s", b + i * 2_000).await;
        }
        assert_eq!((eight, fours, twos), (eight, eight, eight), "bucket {b}");
    }
    // The 1 s tier keeps 5 s: its records of the first seconds are gone.
    let first1 = started_ms - started_ms % 1_000;
    eventually(
        Duration::from_secs(20),
        Duration::from_millis(500),
        || async {
            let left = read("1s", first1).await + read("1s", first1 + 1_000).await;
            if left == 0 {
                Ok(())
            } else {
                Err(anyhow!("{left} hits still in the first two 1 s buckets"))
            }
        },
    )
    .await
    .expect("records older than their tier keeps are dropped by JetStream");
    // The series at 1 s now starts from the 2 s tier for what 1 s no
    // longer holds, and says so.
    let reply = usage(
        &client,
        &key,
        &format!(r#"{{"from_ms":{started_ms},"step":"1s"}}"#),
    )
    .await
    .unwrap();
    assert!(reply.parts.len() >= 2, "{:?}", reply.parts);
    assert_eq!(reply.parts.last().unwrap().step_ms, 1_000);
    assert_eq!(reply.total().used, sent);
}

/// What the stored record of `bucket` of `partition` in tier `step` says
/// `key` used (0 without a record).
async fn stored_used(
    js: &jetstream::Context,
    step: &str,
    partition: u32,
    bucket: u64,
    key: &str,
) -> u64 {
    let stream = js.get_stream(usage_stream(step)).await.unwrap();
    match stream
        .direct_get_last_for_subject(usage_subject(step, partition, bucket))
        .await
    {
        Ok(m) => {
            BucketRecord::decode(&m.payload)
                .unwrap()
                .counts("default", key)
                .used
        }
        Err(_) => 0,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A partition-minute whose record outgrows nats-server's `max_payload`
/// (the server's default 1 MiB here; `sluice nats-config` sets 8 MiB)
/// cannot be stored: the worker says so with what to do, and the counts
/// stay in memory, where queries still find them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_record_over_max_payload_is_refused_loudly_and_its_counts_kept() {
    let _serial = serial().await;
    let one_partition = config(false).replace("partitions = 8", "partitions = 1");
    let stack = Stack::start_with_nats(SLUICE, &one_partition, 1, |nats| {
        nats.max_payload = 1 << 20;
    })
    .await;
    let client = stack.clients(1).await.remove(0);
    // ~49 bytes a key in the record: 25,000 keys are ~1.2 MB. All in one
    // minute: start well before its end.
    let into_minute = now_ms() % 60_000;
    if into_minute > 40_000 {
        tokio::time::sleep(Duration::from_millis(60_000 - into_minute)).await;
    }
    let keys: Vec<String> = (0..25_000)
        .map(|i| format!("customer-account-{i:07}-with-a-longer-name"))
        .collect();
    for key in &keys {
        client
            .publish(Verb::Hit.client_subject(key), "".into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    let worker = stack.worker_ids().remove(0);
    let hint = "raise nats-server's max_payload";
    eventually(Duration::from_secs(20), TICK, || async {
        match stack.worker_log(&worker).contains(hint) {
            true => Ok(()),
            false => Err(anyhow!("no warning naming max_payload yet")),
        }
    })
    .await
    .unwrap();
    for key in [&keys[0], &keys[12_345], &keys[24_999]] {
        let reply = usage(&client, key, "").await.unwrap();
        assert_eq!(reply.total(), Counts { used: 1, denied: 0 }, "{key}");
    }
}
