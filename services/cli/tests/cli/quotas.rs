//! Calendar quotas and shadow mode (SPEC §14) against real
//! workers over a real NATS server: a day quota beside a per-minute limit
//! with `reset_ms` exact to the zone's midnight (through a handover), a
//! shadow policy that flags exactly what the enforced one denies and is
//! counted as denied in usage, switching modes live keeps the counts, and
//! bad calendar or mode values are refused at every entry point.

use anyhow::{anyhow, bail};
use sluice_core::storage::POLICY_BUCKET;
use sluice_core::subject::Verb;
use sluice_core::usage::Counts;
use sluice_core::wire::{decode_reply, DecisionReply, Reply};
use sluice_tests::{error_of, eventually, request, serial, usage_of, Stack, TICK};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// `quota`: 100 a minute and 5 a day of Asia/Kolkata (UTC+05:30 all year,
/// so its midnight is computed here without a zone database); `enf` and
/// `shad`: the same sliding log, one enforced, one in shadow.
const CONFIG: &str = r#"
partitions = 8
lease_ttl = "2s"
snapshot_interval = "200ms"

[policies.default]
algorithm = "sliding_log"
limits = [ { max = 5, per = "10s" } ]

[policies.quota]
algorithm = "fixed_window"
tz = "Asia/Kolkata"
limits = [ { max = 100, per = "1m" }, { max = 5, per = "day" } ]

[policies.enf]
algorithm = "sliding_log"
limits = [ { max = 3, per = "10m" } ]

[policies.shad]
algorithm = "sliding_log"
mode = "shadow"
limits = [ { max = 3, per = "10m" } ]
"#;

const IN_FORCE: Duration = Duration::from_secs(5);

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// The next midnight in Asia/Kolkata (UTC+05:30) after `ms`, in ms.
fn next_kolkata_midnight(ms: u64) -> u64 {
    const DAY: u64 = 86_400_000;
    const OFFSET: u64 = 19_800_000;
    (ms + OFFSET) / DAY * DAY + DAY - OFFSET
}

/// One ask with its reply's headers.
async fn ask_with_headers(
    client: &async_nats::Client,
    key: &str,
    body: &str,
) -> anyhow::Result<(DecisionReply, async_nats::HeaderMap)> {
    let msg = request(client, &Verb::Allow.client_subject(key), body.as_bytes())
        .await
        .map_err(|e| anyhow!("{e:?}"))?;
    if let Some(e) = error_of(&msg) {
        bail!("{} {}", e.code.status(), e.message);
    }
    let headers = msg.headers.clone().unwrap_or_default();
    match decode_reply(&msg.payload)? {
        Reply::Decision(d) => Ok((d, headers)),
        Reply::Error(e) => bail!("{e}"),
    }
}

fn header<'h>(headers: &'h async_nats::HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(|v| v.as_str())
}

/// Asks `key` under `quota` once; checks that `reset_ms` names the next
/// Kolkata midnight as seen from before and after the ask, and the
/// RateLimit-Reset header agrees. `None` if midnight passed meanwhile.
async fn ask_quota(
    client: &async_nats::Client,
    key: &str,
    body: &str,
) -> Option<(DecisionReply, async_nats::HeaderMap)> {
    let before = now_ms();
    let (d, headers) = ask_with_headers(client, key, body).await.unwrap();
    let after = now_ms();
    let midnight = next_kolkata_midnight(before);
    if midnight != next_kolkata_midnight(after) {
        return None;
    }
    assert!(
        (midnight - after - 1..=midnight - before + 1).contains(&d.reset_ms),
        "reset_ms {} is not the time to Kolkata's midnight ({}..={})",
        d.reset_ms,
        midnight - after,
        midnight - before
    );
    let reset_s = header(&headers, "RateLimit-Reset").unwrap();
    assert_eq!(reset_s, d.reset_ms.div_ceil(1000).to_string());
    Some((d, headers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_quota_beside_a_minute_limit_resets_at_the_zones_midnight_through_a_handover() {
    let _serial = serial().await;
    let mut stack = Stack::start(SLUICE, CONFIG, 2).await;
    let client = stack.clients(1).await.remove(0);
    let quota = r#"{"policy":"quota"}"#;
    for used in 1..=5u64 {
        let Some((d, _)) = ask_quota(&client, "alice", quota).await else {
            println!("Kolkata's midnight passed during the test; nothing more to check");
            return;
        };
        assert!(d.allowed);
        // The day quota has the least left, so it decides.
        assert_eq!((d.limit, d.remaining), (5, 5 - used));
    }
    let Some((d, headers)) = ask_quota(&client, "alice", quota).await else {
        return;
    };
    assert!(!d.allowed);
    assert_eq!((d.limit, d.remaining), (5, 0));
    assert_eq!(d.retry_after_ms, d.reset_ms, "denied until midnight");
    assert_eq!(
        header(&headers, "Retry-After").unwrap(),
        d.retry_after_ms.div_ceil(1000).to_string()
    );

    // Every worker stops (each writes its last snapshot) and a new one
    // takes over: the day's count is what it was.
    stack.stop_workers();
    stack.start_workers(1).await;
    let peek = r#"{"policy":"quota","cost":0}"#;
    if let Some((d, _)) = ask_quota(&client, "alice", peek).await {
        assert!(!d.allowed);
        assert_eq!((d.limit, d.remaining), (5, 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_flags_what_enforcement_denies_counts_it_denied_and_switching_keeps_counts() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 2).await;
    let client = stack.clients(1).await.remove(0);

    // The same asks under both policies, one key each side of them.
    let mut enforced = Counts::default();
    for cost in [1u64, 2, 1, 1, 3, 0, 1, 2] {
        let (e, e_headers) = ask_with_headers(
            &client,
            "bob",
            &format!(r#"{{"policy":"enf","cost":{cost}}}"#),
        )
        .await
        .unwrap();
        let (s, s_headers) = ask_with_headers(
            &client,
            "bob",
            &format!(r#"{{"policy":"shad","cost":{cost}}}"#),
        )
        .await
        .unwrap();
        assert!(s.allowed, "a shadow policy never denies: {s:?}");
        assert_eq!(s.shadow_denied, !e.allowed, "cost {cost}: {e:?} / {s:?}");
        assert!(!e.shadow_denied);
        assert_eq!((s.limit, s.remaining), (e.limit, e.remaining));
        assert_eq!(s.retry_after_ms, 0);
        assert_eq!(
            header(&s_headers, "Sluice-Shadow"),
            (!e.allowed).then_some("denied")
        );
        assert_eq!(header(&e_headers, "Sluice-Shadow"), None);
        assert_eq!(header(&s_headers, "Retry-After"), None);
        if e.allowed {
            enforced.used += cost;
        } else {
            enforced.denied += cost;
        }
    }
    assert!(enforced.denied > 0 && enforced.used > 0, "{enforced:?}");
    // Usage counts the shadow denials as denied, exactly as enforced.
    eventually(Duration::from_secs(15), TICK, || async {
        let (e, s) = (
            usage_of(&client, "bob", "enf").await?,
            usage_of(&client, "bob", "shad").await?,
        );
        anyhow::ensure!(e == enforced && s == enforced, "enf {e:?}, shad {s:?}");
        Ok(())
    })
    .await
    .unwrap();

    // Switched to enforce live: the key is as full as it was, so denied.
    let peek = r#"{"policy":"shad","cost":0}"#;
    let set = |mode: &str| {
        stack.run(&[
            "policy",
            "set",
            "shad",
            "--algorithm",
            "sliding_log",
            "--limit",
            "3/10m",
            "--mode",
            mode,
        ])
    };
    set("enforce");
    eventually(IN_FORCE, TICK, || async {
        let (d, _) = ask_with_headers(&client, "bob", peek).await?;
        anyhow::ensure!(!d.allowed && !d.shadow_denied && d.remaining == 0, "{d:?}");
        Ok(())
    })
    .await
    .unwrap();
    // And back to shadow: allowed again, still flagged.
    set("shadow");
    eventually(IN_FORCE, TICK, || async {
        let (d, h) = ask_with_headers(&client, "bob", peek).await?;
        anyhow::ensure!(d.allowed && d.shadow_denied && d.remaining == 0, "{d:?}");
        anyhow::ensure!(header(&h, "Sluice-Shadow") == Some("denied"));
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_fields_set_live_are_in_force_and_bad_ones_are_refused_everywhere() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 2).await;
    let client = stack.clients(1).await.remove(0);

    // `sluice policy set` with the new flags; in force within the test's
    // bound (1 s is the target, docs/CONFIG.md).
    stack.run(&[
        "policy",
        "set",
        "monthly",
        "--algorithm",
        "fixed_window",
        "--limit",
        "10/1m",
        "--limit",
        "2/month",
        "--tz",
        "Asia/Kolkata",
        "--anchor-day",
        "31",
    ]);
    let body = r#"{"policy":"monthly"}"#;
    eventually(IN_FORCE, TICK, || async {
        let peek = r#"{"policy":"monthly","cost":0}"#;
        ask_with_headers(&client, "carol", peek).await.map(|_| ())
    })
    .await
    .unwrap();
    for _ in 0..2 {
        assert!(
            ask_with_headers(&client, "carol", body)
                .await
                .unwrap()
                .0
                .allowed
        );
    }
    let (d, _) = ask_with_headers(&client, "carol", body).await.unwrap();
    assert!(!d.allowed && d.limit == 2, "the month's 2 are spent: {d:?}");
    let got = stack.run(&["policy", "get", "monthly"]);
    assert!(
        got.contains(r#""per":"month""#)
            && got.contains(r#""tz":"Asia/Kolkata""#)
            && got.contains(r#""anchor_day":31"#),
        "{got}"
    );

    // The command refuses bad values with the reason, writing nothing.
    for (flags, reason) in [
        (
            &["--limit", "1/day", "--tz", "Mars/Olympus"][..],
            "unknown time zone",
        ),
        (
            &["--limit", "1/month", "--anchor-day", "32"][..],
            "anchor_day must be from 1 to 31",
        ),
        (&["--limit", "1/1m", "--tz", "UTC"][..], "tz only applies"),
        (&["--limit", "1/1m", "--mode", "dry"][..], "unknown mode"),
    ] {
        let mut args = vec!["policy", "set", "monthly", "--algorithm", "fixed_window"];
        args.extend_from_slice(flags);
        let out = stack.command(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(reason),
            "{flags:?}: {stderr}"
        );
    }
    let out = stack.command(&[
        "policy",
        "set",
        "monthly",
        "--algorithm",
        "gcra",
        "--limit",
        "1/day",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("only apply to fixed_window"));

    // A bad value written straight into the bucket is refused by the
    // workers: the previous version stays in force, status says why.
    let js = async_nats::jetstream::new(client.clone());
    let bucket = js.get_key_value(POLICY_BUCKET).await.unwrap();
    let bad =
        r#"{"algorithm":"fixed_window","tz":"Mars/Olympus","limits":[{"max":50,"per":"day"}]}"#;
    bucket.put("monthly", bad.into()).await.unwrap();
    eventually(IN_FORCE, TICK, || async {
        let status = stack.run(&["status", "--json"]);
        anyhow::ensure!(
            status.matches("unknown time zone").count() >= 2,
            "not refused by both workers yet: {status}"
        );
        Ok(())
    })
    .await
    .unwrap();
    let (d, _) = ask_with_headers(&client, "carol", body).await.unwrap();
    assert_eq!((d.allowed, d.limit), (false, 2), "the previous version");
}
