//! Pacing (SPEC §18, docs/PACING.md): callers that `acquire()` through the
//! Rust client, or go through the gateway's proxy, start spaced at a GCRA's
//! rate instead of being denied; the gateway's `?wait=` and `Sluice-Wait`.
//!
//! Every start is measured here, after the waits the client or the gateway
//! slept, and checked against the limit: no window of a second sees more
//! than the limit plus [`TOLERANCE`], and the starts span at least what the
//! rate needs (so a client that did not sleep fails).

use crate::common;

use axum::extract::State;
use axum::http::StatusCode;
use common::gateway::{call, header, http, Gateway};
use common::SLUICE;
use sluice_client::{Answer, Client, ClientOptions};
use sluice_core::config::Config;
use sluice_gateway::{GatewayOptions, Url};
use sluice_tests::{serial, Stack, TestConfig};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// 20 per second, one at a time (an ask every 50 ms), asks waiting up to
/// four seconds (50 callers queued are 2.5 s of queue).
const PACED: &str = r#"
[policies.paced]
algorithm = "gcra"
max_wait = "4s"
limits = [ { max = 20, per = "1s", burst = 1 } ]
"#;
const RATE: usize = 20;
const INTERVAL: Duration = Duration::from_millis(50);
/// The policy's `max_wait`.
const MAX_WAIT: Duration = Duration::from_secs(4);
/// Starts a second's window may see past the limit (docs/PACING.md,
/// "How even"): a GCRA of burst 1 hands out 21 starts within a closed second (at
/// 0 and at 1000 ms), and the callers' lateness (the answer's trip, then
/// the sleep's wake-up) varying by up to 50 ms between calls may push one
/// more into it.
const TOLERANCE: usize = 2;

fn toml() -> String {
    format!("{}{PACED}", TestConfig::new().toml())
}

fn config() -> Config {
    Config::from_toml(&toml(), "test.toml").expect("the paced config is valid")
}

async fn stack() -> Stack {
    Stack::start(SLUICE, &toml(), 2).await
}

/// A client of `stack` with batching on (the default): an ask that may
/// wait must go alone, or its batch would be refused.
async fn client(stack: &Stack) -> Client {
    let opts = ClientOptions::from_config(&config()).timeout(Duration::from_secs(2));
    Client::connect_with(&stack.nats.url(), opts).await.unwrap()
}

/// Starts (sorted) must keep to the rate: at most `RATE + TOLERANCE` in
/// any second, and spread over at least the time the rate needs.
fn assert_paced(mut starts: Vec<Instant>) {
    starts.sort();
    let n = starts.len();
    for (i, first) in starts.iter().enumerate() {
        let within = starts[i..]
            .iter()
            .take_while(|s| s.duration_since(*first) <= Duration::from_secs(1))
            .count();
        assert!(
            within <= RATE + TOLERANCE,
            "{within} starts within a second of start {i}: {:?}",
            gaps(&starts)
        );
    }
    let span = starts[n - 1].duration_since(starts[0]);
    let needed = INTERVAL * (n as u32 - 1);
    assert!(
        span + Duration::from_millis(10) >= needed,
        "{n} starts spanned {span:?}; the rate needs {needed:?}: {:?}",
        gaps(&starts)
    );
}

fn gaps(starts: &[Instant]) -> Vec<Duration> {
    starts.windows(2).map(|w| w[1] - w[0]).collect()
}

/// One call of a caller: when it asked, the wait it was answered, and
/// when `acquire` returned (when the caller began its work).
struct Call {
    asked: Instant,
    wait: Duration,
    began: Instant,
}

impl Call {
    /// Where its start (the owner's decision time plus its exact wait)
    /// lies: no earlier than `asked + wait` less the millisecond `wait_ms`
    /// was rounded up by, no later than when the caller began (`acquire`
    /// slept `wait` after the answer came, which was after the decision).
    fn start(&self) -> (Instant, Instant) {
        let earliest = self.asked + self.wait;
        (earliest - Duration::from_millis(1), self.began)
    }
}

/// 50 callers on 5 clients acquire through 3 workers at [`RATE`] for
/// `run`, each asking again as soon as it begins, so about 2.5 s of queue
/// stands the whole time and the policy's `max_wait` (4 s) covers it.
/// Every call, as its caller saw it; panics on a denial.
async fn pace_callers(run: Duration) -> Vec<Call> {
    const CALLERS: usize = 50;
    const CLIENTS: usize = 5;
    let stack = Stack::start(SLUICE, &toml(), 3).await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&stack).await);
    }
    let go = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let begun = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (client, go) = (clients[i % CLIENTS].clone(), go.clone());
            tokio::spawn(async move {
                go.wait().await;
                let mut calls = Vec::new();
                // Bounded: each call returns within its wait (4 s) plus the
                // client's timeout, and none starts after `run`.
                while begun.elapsed() < run {
                    let asked = Instant::now();
                    let answer = client.acquire("partner", "paced", 1, MAX_WAIT).await;
                    let answer = answer.expect("decided");
                    assert!(
                        answer.allowed,
                        "denied after {:?}: {answer:?}",
                        begun.elapsed()
                    );
                    let began = Instant::now();
                    calls.push(Call {
                        asked,
                        wait: answer.wait,
                        began,
                    });
                }
                calls
            })
        })
        .collect();
    let mut calls = Vec::new();
    for caller in callers {
        calls.extend(caller.await.expect("no caller was denied"));
    }
    calls
}

/// SPEC §18's pacing as the issue asks it: 50 callers on 5 clients acquire
/// through 3 workers at a 20/s GCRA for 5 s ([`pace_callers`]): nobody is
/// denied, every call gets a start of its own, and the moments the
/// callers begin keep to the rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_that_acquire_start_at_the_rate_and_none_is_denied() {
    let _serial = serial().await;
    let mut calls = pace_callers(Duration::from_secs(5)).await;
    // 50 at once, then one more each time a start comes: the rate's 20 a
    // second for 5 s past the first 50, give or take the last second's.
    let n = calls.len();
    assert!((50 + 80..=50 + 110).contains(&n), "{n} calls");
    assert_own_starts(&mut calls);
    assert_paced(calls.iter().map(|c| c.began).collect());
}

/// Pacing accuracy, measured, not asserted (docs/BENCHMARKS.md, "Pacing
/// accuracy"; `bench/pacing.sh` runs it): the scenario above for 20 s, and
/// how far the callers began from their starts. Each start is known to
/// within [`Call::start`]; the starts are exactly [`INTERVAL`] apart, so
/// sorted, the k-th call's start is the first's plus k intervals, and how
/// late each caller began past that grid is its lateness (the answer's trip
/// and the sleep's wake-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: bench/pacing.sh runs it, its numbers are in docs/BENCHMARKS.md"]
async fn pacing_accuracy() {
    let _serial = serial().await;
    let mut calls = pace_callers(Duration::from_secs(20)).await;
    calls.sort_by_key(|c| c.began);
    let began: Vec<Instant> = calls.iter().map(|c| c.began).collect();
    // The grid: its origin the earliest a start can be, by the least late.
    let origin = calls
        .iter()
        .enumerate()
        .map(|(k, c)| c.began - INTERVAL * k as u32)
        .min()
        .expect("calls");
    let mut late: Vec<Duration> = (0..calls.len())
        .map(|k| began[k] - (origin + INTERVAL * k as u32))
        .collect();
    late.sort();
    let mut gaps = gaps(&began);
    gaps.sort();
    let pct = |v: &[Duration], p: usize| v[(v.len() - 1) * p / 100];
    let most_in_a_second = (0..began.len())
        .map(|i| {
            began[i..]
                .iter()
                .take_while(|b| b.duration_since(began[i]) <= Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let span = began[began.len() - 1] - began[0];
    println!(
        "pacing: {} calls over {span:?} (the rate needs {:?}); late past the grid p50 {:?} p90 {:?} p99 {:?} max {:?}; gaps min {:?} p1 {:?} p50 {:?} p99 {:?} max {:?}; most in a second {most_in_a_second} (limit {RATE})",
        calls.len(),
        INTERVAL * (calls.len() as u32 - 1),
        pct(&late, 50),
        pct(&late, 90),
        pct(&late, 99),
        late[late.len() - 1],
        gaps[0],
        pct(&gaps, 1),
        pct(&gaps, 50),
        pct(&gaps, 99),
        gaps[gaps.len() - 1],
    );
}

/// No two calls share a start: consecutive starts are at least
/// [`INTERVAL`] apart as far as the callers can tell, each known only to
/// lie within [`Call::start`]. (Sorted by the earliest each may be, two may be
/// in either order: one of the two ways must leave room for the interval.)
fn assert_own_starts(calls: &mut [Call]) {
    calls.sort_by_key(|c| c.start().0);
    for (i, pair) in calls.windows(2).enumerate() {
        let (a, b) = (pair[0].start(), pair[1].start());
        let widest =
            b.1.saturating_duration_since(a.0)
                .max(a.1.saturating_duration_since(b.0));
        assert!(
            widest >= INTERVAL,
            "calls {i} and {} may share a start: at most {widest:?} apart",
            i + 1,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_grow_in_arrival_order_until_past_the_wait_an_ask_is_denied() {
    let _serial = serial().await;
    let stack = stack().await;
    let client = client(&stack).await;
    let wait = Duration::from_millis(500);
    let mut waits = Vec::new();
    let denied: Answer = loop {
        let answer = client.ask_waiting("queue", "paced", 1, wait).await.unwrap();
        if !answer.allowed {
            break answer;
        }
        waits.push(answer.wait);
        assert!(waits.len() <= 12, "never denied: {waits:?}");
    };
    assert!(waits.windows(2).all(|w| w[0] < w[1]), "{waits:?}");
    assert!((10..=12).contains(&waits.len()), "{waits:?}");
    assert!(denied.retry_after > wait, "{denied:?}");
    assert!(denied.wait.is_zero(), "{denied:?}");

    // A denial returns at once, without sleeping, and takes nothing: the
    // next ask that may wait long enough gets the next start in line.
    let asked = Instant::now();
    let again = client.acquire("queue", "paced", 1, wait).await.unwrap();
    assert!(!again.allowed);
    assert!(asked.elapsed() < wait, "{:?}", asked.elapsed());
    let longer = client
        .ask_waiting("queue", "paced", 1, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(longer.allowed, "{longer:?}");
    let next = *waits.last().unwrap() + INTERVAL;
    assert!(longer.wait <= next, "{:?} after {waits:?}", longer.wait);

    // A wait the policy does not take is refused, with what to send.
    let e = client
        .ask_waiting("queue", "paced", 1, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(e.message().contains("max_wait"), "{e}");
    let e = client
        .ask_waiting("queue", "default", 1, wait)
        .await
        .unwrap_err();
    assert!(e.message().contains("cannot admit"), "{e}");
}

/// A reserve may wait too (SPEC §13, §18): sent alone though batching is
/// on, kept for its start in the same queue as asks, its ttl running from
/// the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_that_may_wait_is_kept_for_its_start() {
    let _serial = serial().await;
    let stack = stack().await;
    let client = client(&stack).await;
    let ttl = Some(Duration::from_secs(5));
    let mut waits = Vec::new();
    for _ in 0..3 {
        let held = client
            .reserve_waiting("holds", "paced", 1, ttl, MAX_WAIT)
            .await
            .unwrap();
        assert!(held.answer.allowed, "{held:?}");
        let ticket = held.ticket.expect("a hold");
        let after_start = Duration::from_millis(ticket.expires_ms) - held.answer.wait;
        assert!(after_start.abs_diff(Duration::from_secs(5)) <= Duration::from_millis(1));
        waits.push(held.answer.wait);
    }
    assert!(waits.windows(2).all(|w| w[1] > w[0]), "{waits:?}");
    assert!(waits[2] > INTERVAL, "{waits:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_answers_a_wait_in_a_header_and_refuses_a_bad_one() {
    let _serial = serial().await;
    let stack = stack().await;
    let gw = Gateway::start(&stack.nats.url(), config(), None).await;
    let http = http();
    let allow = |query: &str| http.get(gw.url(&format!("/v1/allow/alice?policy=paced{query}")));

    let (status, headers, body) = call(allow("&wait=1s")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header(&headers, "sluice-wait-ms"),
        None,
        "the first starts now"
    );
    assert!(body.get("wait_ms").is_none(), "{body}");
    let (status, headers, body) = call(allow("&wait=1s")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let waited: u64 = header(&headers, "sluice-wait-ms").unwrap().parse().unwrap();
    assert!((1..=50).contains(&waited), "{waited}");
    assert_eq!(body["wait_ms"], waited);
    let (status, headers, _) = call(allow("").header("Sluice-Wait", "1s")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(header(&headers, "sluice-wait-ms").is_some());
    // Without a wait, the same queue denies.
    let (status, _, _) = call(allow("")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    for (query, says) in [("&wait=5s", "max_wait"), ("&wait=250", "e.g. \"250ms\"")] {
        let (status, _, body) = call(allow(query)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(says), "{query}: {message}");
    }
    let (status, _, body) = call(allow("&wait=1s").header("Sluice-Wait", "1s")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("once"), "{body}");
    let (status, _, body) = call(http.post(gw.url("/v1/hit/alice?policy=paced&wait=1s"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A reserve may wait too, its `wait_ms` in the body (SPEC §13, §18).
    let reserve = |key: &str| {
        http.post(gw.url(&format!("/v1/reserve/{key}")))
            .body(r#"{"policy":"paced","wait_ms":1000,"ttl_ms":5000}"#)
    };
    let (status, _, _) = call(reserve("held")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers, body) = call(reserve("held")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let waited: u64 = header(&headers, "sluice-wait-ms").unwrap().parse().unwrap();
    assert!((1..=50).contains(&waited), "{waited}");
    assert_eq!(body["wait_ms"], waited);
    assert!(body["hold"].is_string(), "{body}");
    gw.stop().await;
}

/// When the upstream saw each request.
type Seen = Arc<Mutex<Vec<Instant>>>;

async fn start_upstream() -> (Url, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .fallback(|State(seen): State<Seen>| async move {
            seen.lock().unwrap().push(Instant::now());
            "ok"
        })
        .with_state(seen.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (Url::parse(&format!("http://{addr}")).unwrap(), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_paces_requests_to_its_upstream_instead_of_answering_429() {
    let _serial = serial().await;
    let stack = stack().await;
    let (upstream, seen) = start_upstream().await;
    let mut opts = GatewayOptions::new(stack.nats.url(), config());
    opts.upstream = Some(upstream);
    opts.proxy_policy = "paced".into();
    let gw = Gateway::start_with(opts).await;
    let http = http();
    const REQUESTS: usize = 12;
    let requests: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let request = http
                .get(gw.url(&format!("/partner/{i}")))
                .header("X-User-Id", "fleet");
            tokio::spawn(request.send())
        })
        .collect();
    let mut paced = 0;
    for request in requests {
        let response = request.await.unwrap().expect("the gateway answers");
        assert_eq!(response.status().as_u16(), 200, "none is answered 429");
        paced += usize::from(response.headers().contains_key("sluice-wait-ms"));
    }
    assert!(
        paced >= REQUESTS - 1,
        "{paced} of {REQUESTS} said they waited"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), REQUESTS);
    assert_paced(seen);
    gw.stop().await;
}
