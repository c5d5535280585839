//! `/metrics` of a `sluice worker --metrics-listen` process and of the
//! gateway (in this process), scraped after real traffic and read with a
//! Prometheus text parser (`prometheus-parse`) rather than by matching
//! lines: the pages must parse as exposition text, with the types they
//! declare, and the values must be right (docs/METRICS.md).

use prometheus_parse::{Sample, Scrape, Value};
use sluice_core::partition::partition_of;
use sluice_gateway::GatewayOptions;
use sluice_tests::{eventually, free_ports, serial, Stack, TestConfig, TICK};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::net::TcpListener;

/// The binary under test (its workers).
const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// The worker started with `--metrics-listen`.
const SCRAPED: &str = "t1";

/// A page, parsed: its samples, and the names a query may use of every
/// metric it declares (with `# TYPE`), samples or not: a counter's
/// `_total`, a histogram's `_bucket`, `_sum` and `_count`, a gauge's own.
struct Page {
    samples: Vec<Sample>,
    declared: BTreeSet<String>,
}

impl Page {
    async fn scrape(http: &reqwest::Client, url: &str) -> Page {
        let resp = http.get(url).send().await.expect("/metrics answers");
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let text = resp.text().await.unwrap();
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .unwrap_or_else(|e| panic!("{url} does not parse ({e}):\n{text}"));
        let declared = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .flat_map(|(name, kind)| match kind {
                "counter" if name.ends_with("_total") => vec![name.to_string()],
                "counter" => vec![format!("{name}_total")],
                "histogram" => ["_bucket", "_sum", "_count"]
                    .map(|s| format!("{name}{s}"))
                    .to_vec(),
                _ => vec![name.to_string()],
            })
            .collect();
        Page {
            samples: scrape.samples,
            declared,
        }
    }

    /// The sample of `name` whose labels include `labels`.
    fn sample(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Sample> {
        self.samples
            .iter()
            .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
    }

    /// A counter's or gauge's value (counters must be typed `counter`).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.sample(name, labels).map(|s| &s.value) {
            Some(Value::Counter(v)) if name.ends_with("_total") => *v,
            Some(Value::Gauge(v)) if !name.ends_with("_total") => *v,
            other => panic!("{name}{labels:?}: expected one counter or gauge, got {other:?}"),
        }
    }

    /// How many observations a histogram has: its `+Inf` bucket, which must
    /// equal its `_count`.
    fn observations(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let Some(Value::Histogram(buckets)) = self.sample(name, labels).map(|s| &s.value) else {
            panic!(
                "{name}{labels:?} is no histogram: {:?}",
                self.sample(name, labels)
            );
        };
        let inf = buckets
            .iter()
            .find(|b| b.less_than == f64::INFINITY)
            .expect("a +Inf bucket")
            .count;
        let count = match self
            .sample(&format!("{name}_count"), labels)
            .map(|s| &s.value)
        {
            Some(Value::Untyped(v)) => *v,
            other => panic!("{name}_count: {other:?}"),
        };
        assert_eq!(inf, count, "{name}: +Inf bucket vs _count");
        count
    }
}

/// A key of `partition` no one has asked for yet.
fn fresh_key(partition: u32, partitions: u32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|k| partition_of(k, partitions) == partition)
        .unwrap()
}

/// The partitions `worker` owns, as the lease bucket says.
async fn owned_by(stack: &Stack, worker: &str) -> usize {
    stack
        .owners()
        .await
        .values()
        .filter(|o| *o == worker)
        .count()
}

/// A stack of two workers, the second ([`SCRAPED`]) serving `/metrics`,
/// `/livez` and `/readyz`, and a gateway served from this process.
struct Served {
    stack: Stack,
    /// `http://ADDR` of the scraped worker's `--metrics-listen`.
    worker: String,
    /// `http://ADDR` of the gateway.
    gateway: String,
    http: reqwest::Client,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Served {
    async fn start(config: &TestConfig) -> Served {
        let mut stack = Stack::start(SLUICE, &config.toml(), 1).await;
        let listen = format!("127.0.0.1:{}", free_ports(1).unwrap()[0]);
        stack
            .start_workers_with(1, &["--metrics-listen", &listen])
            .await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway = format!("http://{}", listener.local_addr().unwrap());
        let mut opts = GatewayOptions::new(stack.nats.url(), config.config());
        opts.timeout = Duration::from_secs(2);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(sluice_gateway::serve(listener, opts, async move {
            let _ = stopped.await;
        }));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        Served {
            stack,
            worker: format!("http://{listen}"),
            gateway,
            http,
            stop,
            task,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_gateway_metrics_parse_and_count_what_happened() {
    let _serial = serial().await;
    let config = TestConfig::new().journal();
    let served = Served::start(&config).await;
    let (mut stack, http) = (served.stack, served.http);
    let worker_url = format!("{}/metrics", served.worker);
    let gateway_url = served.gateway;

    // Keys the scraped worker owns; what the stack's settling asked is in
    // the counts already, so the test compares before and after.
    let owners = stack.owners().await;
    let mine = *owners.iter().find(|(_, o)| *o == SCRAPED).unwrap().0;
    let alice = fresh_key(mine, stack.partitions, "alice");
    let bob = fresh_key(mine, stack.partitions, "bob");
    let before = Page::scrape(&http, &worker_url).await;

    // `default` is 5 per 10 s: 5 allowed, 1 denied; `tenper` allows 2.
    for _ in 0..6 {
        http.get(format!("{gateway_url}/v1/allow/{alice}"))
            .send()
            .await
            .unwrap();
    }
    for _ in 0..2 {
        http.get(format!("{gateway_url}/v1/allow/{bob}?policy=tenper"))
            .send()
            .await
            .unwrap();
    }

    // Decisions are counted before their replies are sent, but the latency
    // of a batch only once its last reply is published.
    let latency = "sluice_worker_decision_duration_seconds";
    let observed = eventually(Duration::from_secs(10), TICK, || async {
        let page = Page::scrape(&http, &worker_url).await;
        let (was, is) = (
            before.observations(latency, &[]),
            page.observations(latency, &[]),
        );
        anyhow::ensure!(is > was, "{latency}: {was} then {is} observations");
        Ok(page)
    })
    .await;
    let after = observed.expect("the decision latency is observed");
    let decisions = "sluice_worker_decisions_total";
    for (outcome, policy, more) in [
        ("allowed", "default", 5.0),
        ("denied", "default", 1.0),
        ("allowed", "tenper", 2.0),
        ("denied", "tenper", 0.0),
        ("error", "", 0.0),
    ] {
        let labels = [("outcome", outcome), ("policy", policy)];
        assert_eq!(
            after.value(decisions, &labels) - before.value(decisions, &labels),
            more,
            "{decisions}{labels:?}"
        );
    }
    let appends = "sluice_worker_journal_append_duration_seconds";
    assert!(after.observations(appends, &[]) > before.observations(appends, &[]));
    assert_eq!(after.value("sluice_worker_journal_errors_total", &[]), 0.0);
    assert_eq!(
        after.value("sluice_worker_configured_partitions", &[]),
        f64::from(stack.partitions)
    );
    for nothing_failed in [
        "sluice_worker_usage_flush_failures_total",
        "sluice_worker_alert_publish_failures_total",
        "sluice_worker_format_refusals_total",
    ] {
        assert_eq!(after.value(nothing_failed, &[]), 0.0, "{nothing_failed}");
    }
    assert!(after.value("sluice_worker_keys", &[]) >= 2.0);

    // Partitions held: the page, `sluice status` and the lease bucket agree.
    let held = owned_by(&stack, SCRAPED).await;
    assert_eq!(after.value("sluice_worker_partitions", &[]), held as f64);
    let status: serde_json::Value = serde_json::from_str(&stack.run(&[
        "status",
        "--json",
        "--config",
        stack.config_path().to_str().unwrap(),
    ]))
    .unwrap();
    let reported = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker"] == SCRAPED)
        .map(|w| w["partitions"].as_array().unwrap().len());
    assert_eq!(reported, Some(held), "{status:#}");
    let leases = "sluice_worker_lease_events_total";
    assert!(after.value(leases, &[("event", "acquired")]) >= held as f64);
    assert_eq!(after.value(leases, &[("event", "lost")]), 0.0);
    assert!(after.observations("sluice_worker_takeover_duration_seconds", &[]) >= held as f64);

    // A snapshot of what was counted follows within the snapshot interval.
    let snapshots = eventually(Duration::from_secs(10), TICK, || async {
        let page = Page::scrape(&http, &worker_url).await;
        let n = page.observations("sluice_worker_snapshot_duration_seconds", &[]);
        let sizes = page.observations("sluice_worker_snapshot_bytes", &[]);
        anyhow::ensure!(n > 0.0 && sizes == n, "{n} snapshots, {sizes} sizes");
        Ok(())
    })
    .await;
    assert!(snapshots.is_ok(), "{snapshots:?}");

    // The gateway saw the same asks.
    let gw = Page::scrape(&http, &format!("{gateway_url}/metrics")).await;
    let requests = "sluice_gateway_requests_total";
    assert_eq!(
        gw.value(requests, &[("route", "allow"), ("outcome", "allowed")]),
        7.0
    );
    assert_eq!(
        gw.value(requests, &[("route", "allow"), ("outcome", "denied")]),
        1.0
    );
    assert_eq!(
        gw.value("sluice_gateway_decisions_total", &[("source", "worker")]),
        8.0
    );
    assert_eq!(
        gw.observations(
            "sluice_gateway_request_duration_seconds",
            &[("route", "allow")]
        ),
        8.0
    );
    assert_eq!(gw.value("sluice_gateway_nats_connected", &[]), 1.0);

    // A hold kept by the scraped worker shows once its partition's next
    // snapshot holds it.
    assert_eq!(after.value("sluice_worker_holds", &[]), 0.0);
    let carol = fresh_key(mine, stack.partitions, "carol");
    let reserved = http
        .post(format!("{gateway_url}/v1/reserve/{carol}"))
        .body(r#"{"policy":"tenper","cost":1,"ttl_ms":600000}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(reserved.status(), 200, "{:?}", reserved.text().await);
    let holds = eventually(Duration::from_secs(10), TICK, || async {
        let live = Page::scrape(&http, &worker_url)
            .await
            .value("sluice_worker_holds", &[]);
        anyhow::ensure!(live == 1.0, "{live} holds");
        Ok(())
    })
    .await;
    assert!(holds.is_ok(), "{holds:?}");

    // A third worker: the scraped one hands some partitions over.
    // (It may have handed one over already while the stack settled.)
    let handed = after.observations("sluice_worker_handover_duration_seconds", &[]);
    let had = held;
    stack.start_workers(1).await;
    let held = owned_by(&stack, SCRAPED).await;
    assert!(held < had, "{SCRAPED} still holds {held} partitions");
    // The shard counts its handover just after it released the lease.
    let handed_over = eventually(Duration::from_secs(10), TICK, || async {
        let page = Page::scrape(&http, &worker_url).await;
        let partitions = page.value("sluice_worker_partitions", &[]);
        let handovers = page.observations("sluice_worker_handover_duration_seconds", &[]);
        let released = page.value(leases, &[("event", "released")]);
        anyhow::ensure!(
            partitions == held as f64
                && handovers - handed >= (had - held) as f64
                && released == handovers,
            "{partitions} partitions held (lease bucket: {held}), {handovers} handovers \
             ({handed} before), {released} leases released"
        );
        Ok(())
    })
    .await;
    assert!(handed_over.is_ok(), "{handed_over:?}");

    every_metric_queried_is_exported(&[&after, &gw]);
    let _ = served.stop.send(());
    served.task.await.unwrap().unwrap();
}

/// The metric names (`sluice_...`) in `text`: the rules' and the
/// dashboard's queries (recording rules are `sluice:...`, not metrics).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("sluice_") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        names.insert(name);
    }
    names
}

/// Every metric deploy/prometheus/sluice-rules.yml and
/// deploy/grafana/sluice.json name is one the live `pages` (a worker's
/// and a gateway's) declare, so no alert or panel waits on a metric that
/// does not exist.
fn every_metric_queried_is_exported(pages: &[&Page]) {
    let root = sluice_tests::workspace_root();
    for file in [
        "deploy/prometheus/sluice-rules.yml",
        "deploy/grafana/sluice.json",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let names = metric_names(&text);
        assert!(names.len() > 15, "{file} names {names:?}");
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !pages.iter().any(|p| p.declared.contains(*n)))
            .collect();
        assert!(
            missing.is_empty(),
            "{file} queries metrics no page exports: {missing:?}"
        );
    }
}

/// `GET` of `url`: its status and JSON body.
async fn probe(http: &reqwest::Client, url: &str) -> (u16, serde_json::Value) {
    let resp = http.get(url).send().await.expect("the probe answers");
    let status = resp.status().as_u16();
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert_eq!(content_type, "application/json", "{url}");
    let text = resp.text().await.expect("a body");
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text}"));
    (status, body)
}

/// Waits until `url` answers `status` with a body whose `status` is
/// `said` (and whose `why`, if `why` is given, contains it).
async fn probe_until(http: &reqwest::Client, url: &str, status: u16, said: &str, why: &str) {
    let waited = eventually(Duration::from_secs(20), TICK, || async {
        let (got, body) = probe(http, url).await;
        anyhow::ensure!(
            got == status
                && body["status"] == said
                && body["why"].as_str().unwrap_or_default().contains(why),
            "{url}: {got} {body}"
        );
        Ok(())
    })
    .await;
    assert!(waited.is_ok(), "{waited:?}");
}

/// `/livez` and `/readyz` (docs/OPERATIONS.md, "Readiness"): a worker
/// (on its metrics listener) and a gateway are ready while connected to
/// NATS, the worker with its heartbeat stored and the gateway with a
/// worker answering; not ready, saying why, while NATS is down (live all
/// along), and ready again once it is back; a gateway without workers is
/// not ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_gateway_say_when_they_are_live_and_ready() {
    let _serial = serial().await;
    let config = TestConfig::new();
    let served = Served::start(&config).await;
    let (mut stack, http) = (served.stack, served.http);
    let (worker, gateway) = (served.worker, served.gateway);
    for base in [&worker, &gateway] {
        assert_eq!(
            probe(&http, &format!("{base}/livez")).await,
            (200, serde_json::json!({"status": "live"}))
        );
        probe_until(&http, &format!("{base}/readyz"), 200, "ready", "").await;
    }

    stack.nats.stop().expect("nats-server stops");
    let down = "not connected to NATS";
    for base in [&worker, &gateway] {
        probe_until(&http, &format!("{base}/readyz"), 503, "not ready", down).await;
        assert_eq!(probe(&http, &format!("{base}/livez")).await.0, 200);
    }
    stack.nats.restart().expect("nats-server starts again");
    for base in [&worker, &gateway] {
        probe_until(&http, &format!("{base}/readyz"), 200, "ready", "").await;
    }

    stack.kill_worker("t0");
    stack.kill_worker(SCRAPED);
    let none = "no worker answered: no responders";
    probe_until(&http, &format!("{gateway}/readyz"), 503, "not ready", none).await;
    let _ = served.stop.send(());
    served.task.await.unwrap().unwrap();
}
