//! The gateway's proxy mode with a `concurrency` policy (docs/GATEWAY.md,
//! SPEC §13): each proxied request holds one slot from before it is
//! forwarded until its response ends, so the upstream never sees more than
//! `concurrency` requests of a key at once, and the slot is free again
//! however the request ends: answered, the client gone mid-stream or
//! before the answer, the upstream failing mid-stream or unreachable.
//!
//! The upstream is an axum app in the test process that counts the
//! requests it is serving (a drop guard in each handler and each streamed
//! body) and keeps them until the test opens a gate; the gateway and the
//! workers are real, over a real NATS server.

use crate::common;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use common::gateway::{http, Gateway};
use common::SLUICE;
use futures::stream::{FuturesUnordered, StreamExt};
use sluice_core::config::Config;
use sluice_core::subject::Verb;
use sluice_core::wire::inspect::{decode_admin_reply, InspectReply};
use sluice_gateway::{GatewayOptions, Url};
use sluice_tests::{eventually, request, serial, Stack, TICK};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

/// Three slots per key; holds end on their own only after a minute, so a
/// slot free sooner was settled or released.
const CONFIG: &str = r#"
partitions = 8

[policies.slots]
concurrency = 3
hold_ttl = "60s"
"#;

const SLOTS: usize = 3;

/// What the upstream is serving, by key (the `X-User-Id` it was sent).
struct Upstream {
    /// Requests (or their streamed bodies) not yet done.
    in_flight: watch::Sender<BTreeMap<String, usize>>,
    /// The most ever in flight at once.
    most: Mutex<BTreeMap<String, usize>>,
    /// Held requests answer once this is true.
    gate: watch::Receiver<bool>,
    /// `/broken` fails its body when told.
    breaker: Notify,
}

impl Upstream {
    fn most(&self, key: &str) -> usize {
        self.most.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

/// Counts one request of a key in flight until dropped.
struct Serving(Arc<Upstream>, String);

impl Serving {
    fn start(upstream: &Arc<Upstream>, headers: &HeaderMap) -> Serving {
        let key = headers
            .get("x-user-id")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        upstream.in_flight.send_modify(|live| {
            let n = live.entry(key.clone()).or_default();
            *n += 1;
            let mut most = upstream.most.lock().unwrap();
            let m = most.entry(key.clone()).or_default();
            *m = (*m).max(*n);
        });
        Serving(upstream.clone(), key)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|live| {
            *live.get_mut(&self.1).unwrap() -= 1;
        });
    }
}

/// How many requests of `key` the upstream is serving.
fn serving(live: &BTreeMap<String, usize>, key: &str) -> usize {
    live.get(key).copied().unwrap_or(0)
}

/// `/held`: answers when the gate opens. `/quick`: at once, after a
/// little work. `/stream`: one chunk, then nothing until dropped.
/// `/broken`: one chunk, then an error once the breaker is notified.
async fn serve(State(upstream): State<Arc<Upstream>>, uri: Uri, headers: HeaderMap) -> Response {
    let serving = Serving::start(&upstream, &headers);
    match uri.path() {
        "/held" => {
            let mut gate = upstream.gate.clone();
            let _ = gate.wait_for(|open| *open).await;
            drop(serving);
            "done".into_response()
        }
        "/quick" => {
            // Work that takes a while, so that requests overlap.
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(serving);
            "done".into_response()
        }
        "/stream" => {
            let chunks = futures::stream::once(async { Ok::<_, std::io::Error>("first") })
                .chain(futures::stream::pending())
                .map(move |chunk| {
                    let _ = &serving;
                    chunk
                });
            Body::from_stream(chunks).into_response()
        }
        "/broken" => {
            let breaking = upstream.clone();
            let chunks = futures::stream::once(async { Ok("first") })
                .chain(futures::stream::once(async move {
                    breaking.breaker.notified().await;
                    Err(std::io::Error::other("the upstream broke"))
                }))
                .map(move |chunk| {
                    let _ = &serving;
                    chunk
                });
            Body::from_stream(chunks).into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn start_upstream(gate: watch::Receiver<bool>) -> (SocketAddr, Arc<Upstream>) {
    let state = Arc::new(Upstream {
        in_flight: watch::channel(BTreeMap::new()).0,
        most: Mutex::default(),
        gate,
        breaker: Notify::new(),
    });
    let app = axum::Router::new()
        .fallback(serve)
        .with_state(state.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, state)
}

async fn gateway(stack: &Stack, upstream: SocketAddr) -> Gateway {
    let config = Config::from_toml(CONFIG, "slots.toml").unwrap();
    let mut opts = GatewayOptions::new(stack.nats.url(), config);
    opts.upstream = Some(Url::parse(&format!("http://{upstream}")).unwrap());
    opts.proxy_policy = "slots".into();
    Gateway::start_with(opts).await
}

/// The key's live holds as its owner reports them.
async fn live_holds(nats: &async_nats::Client, key: &str) -> anyhow::Result<u32> {
    let msg = request(
        nats,
        &Verb::Inspect.client_subject(key),
        br#"{"policy":"slots"}"#,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let shown: InspectReply = decode_admin_reply(&msg.payload).map_err(anyhow::Error::msg)?;
    Ok(shown
        .policies
        .iter()
        .filter_map(|p| p.holds.as_ref())
        .map(|h| h.live)
        .sum())
}

/// Every slot of `key` is free well before the holds' 60 s ttl.
async fn slots_free(nats: &async_nats::Client, key: &str, after: &str) {
    eventually(Duration::from_secs(10), TICK, || async {
        let live = live_holds(nats, key).await?;
        anyhow::ensure!(live == 0, "{live} holds still live");
        Ok(())
    })
    .await
    .unwrap_or_else(|e| panic!("the slots are free after {after}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_proxied_request_holds_a_slot_until_its_response_ends() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 2).await;
    let nats = stack.clients(1).await.remove(0);
    let (open, gate) = watch::channel(false);
    let (upstream_addr, upstream) = start_upstream(gate).await;
    let gw = gateway(&stack, upstream_addr).await;
    let http = http();
    let get = |path: &str, key: &str| {
        let call = http.get(gw.url(path)).header("X-User-Id", key).send();
        async move { call.await.map(|r| r.status().as_u16()) }
    };

    // Eight at once, three slots: three reach the upstream and wait there,
    // five are refused without reaching it.
    let mut calls: FuturesUnordered<_> = (0..8).map(|_| get("/held", "tenant")).collect();
    let mut refused = Vec::new();
    for _ in 0..5 {
        refused.push(calls.next().await.unwrap().unwrap());
    }
    assert_eq!(refused, [429; 5], "the requests past the slots are refused");
    let mut in_flight = upstream.in_flight.subscribe();
    in_flight
        .wait_for(|live| serving(live, "tenant") == SLOTS)
        .await
        .unwrap();
    assert_eq!(live_holds(&nats, "tenant").await.unwrap(), 3);
    // Another key has slots of its own.
    assert_eq!(get("/quick", "other").await.unwrap(), 200);
    let _ = open.send(true);
    let answered: Vec<u16> = calls.map(|r| r.unwrap()).collect().await;
    assert_eq!(answered, [200; 3]);
    slots_free(&nats, "tenant", "their responses ended").await;

    // Churn: 60 requests, 10 at a time; the upstream never serves more
    // than three of the key's at once, and some get through each time.
    let mut served = 0;
    for _ in 0..6 {
        let wave: Vec<u16> = (0..10)
            .map(|_| get("/quick", "tenant"))
            .collect::<FuturesUnordered<_>>()
            .map(|r| r.unwrap())
            .collect()
            .await;
        assert!(wave.iter().all(|s| *s == 200 || *s == 429), "{wave:?}");
        served += wave.iter().filter(|s| **s == 200).count();
    }
    assert!(served >= 6, "slots are given back between waves: {served}");
    assert_eq!(
        upstream.most("tenant"),
        SLOTS,
        "never more than three of the key's requests at the upstream"
    );
    slots_free(&nats, "tenant", "the waves").await;

    // The client goes away mid-stream: the slot is released.
    let response = http
        .get(gw.url("/stream"))
        .header("X-User-Id", "streamer")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut response = response;
    let first = response.chunk().await.unwrap().expect("a first chunk");
    assert_eq!(&first[..], b"first");
    assert_eq!(live_holds(&nats, "streamer").await.unwrap(), 1);
    drop(response);
    slots_free(&nats, "streamer", "the client left mid-stream").await;

    // The upstream fails mid-stream: the client sees the body cut, the
    // slot is given back.
    let mut response = http
        .get(gw.url("/broken"))
        .header("X-User-Id", "breaker")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let first = response.chunk().await.unwrap().expect("a first chunk");
    assert_eq!(&first[..], b"first");
    assert_eq!(live_holds(&nats, "breaker").await.unwrap(), 1);
    upstream.breaker.notify_one();
    assert!(response.chunk().await.is_err(), "the body is cut short");
    slots_free(&nats, "breaker", "the upstream failed mid-stream").await;
    gw.stop().await;

    // The upstream cannot be reached: 502, the slot released.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = gateway(&stack, closed).await;
    let status = http
        .get(gw.url("/x"))
        .header("X-User-Id", "nobody")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 502);
    slots_free(&nats, "nobody", "a 502").await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_before_the_answer_releases_its_slot() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 1).await;
    let nats = stack.clients(1).await.remove(0);
    let (_never_open, gate) = watch::channel(false);
    let (upstream_addr, upstream) = start_upstream(gate).await;
    let gw = gateway(&stack, upstream_addr).await;
    let call = http()
        .get(gw.url("/held"))
        .header("X-User-Id", "impatient")
        .send();
    let mut in_flight = upstream.in_flight.subscribe();
    tokio::select! {
        r = call => panic!("the upstream never answers /held: {r:?}"),
        // Reached the upstream: the client gives up (the call is dropped).
        r = in_flight.wait_for(|live| serving(live, "impatient") == 1) => { r.unwrap(); }
    }
    slots_free(&nats, "impatient", "the client left before the answer").await;
    // The gateway dropped its request to the upstream too.
    in_flight
        .wait_for(|live| serving(live, "impatient") == 0)
        .await
        .unwrap();
    gw.stop().await;
}
