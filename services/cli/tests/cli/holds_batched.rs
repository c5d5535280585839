//! Hold verbs in batches (SPEC §13) against real workers over a real NATS
//! server: reserve, settle and extend as batch items answer what the
//! verbs answer alone, errors item by item (unknown hold, bad cost or
//! ttl, unknown policy), on a partition's and a worker's batch subject;
//! concurrency limits hold with many batching clients at once. Then the
//! batching client against a stand-in worker: a hold verb without an id is
//! never sent twice when it may have been done (an unstored batch), one
//! with an id is sent again with it (SPEC §16: the owner answers the
//! repeat), and either is asked alone on its own subject when nothing was
//! done (a 503 in its slot, a batch refused whole by a worker of an
//! earlier release).

use crate::common;

use futures::StreamExt;
use serde_json::{json, Value as Json};
use sluice_client::{Client, ClientOptions, Error, Reserved};
use sluice_core::config::Config;
use sluice_core::holds::HoldId;
use sluice_core::partition::partition_of;
use sluice_core::subject::{batch_subject, worker_batch_subject, Inbound, Verb};
use sluice_core::wire::batch::{self, Act};
use sluice_core::wire::hold::encode_held;
use sluice_core::wire::{
    decode_reply, DecisionReply, Encoding, ErrorCode, ErrorReply, Reply, SLUICE_UNSTORED,
    UNSTORED_YES,
};
use sluice_tests::{a_key_per_partition, request, serial, NatsServer, Stack};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::SLUICE;

const PARTITIONS: u32 = 8;

const CONFIG: &str = common::HOLDS_CONFIG;

/// A hold verb alone on its subject: its reply as a batch result reads.
async fn alone(nats: &async_nats::Client, verb: Verb, key: &str, fields: &Json) -> Reply {
    let body = rmp_serde::to_vec_named(fields).unwrap();
    let msg = request(nats, &verb.client_subject(key), &body)
        .await
        .unwrap();
    decode_reply(&msg.payload).unwrap()
}

/// `items` as one batch on `subject`, written as any MessagePack client
/// would: the results, and the worker the reply names.
async fn batched(nats: &async_nats::Client, subject: &str, items: &[Json]) -> (Vec<Reply>, String) {
    let body = rmp_serde::to_vec_named(&json!({ "items": items })).unwrap();
    let msg = request(nats, subject, &body).await.unwrap();
    let worker = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(batch::WORKER_HEADER));
    let worker = worker.expect("a batch reply names its worker").to_string();
    let results = batch::decode_results(&msg.payload, items.len()).unwrap();
    (results, worker)
}

/// What a reply says, without what time moves (`reset_ms`) and the hold's
/// name (each reserve draws its own): to compare one verb alone with it
/// batched.
fn gist(reply: &Reply) -> String {
    match reply {
        Reply::Decision(d) => format!(
            "allowed={} limit={} remaining={} retry={} policy={} expires_ms={:?}",
            d.allowed,
            d.limit,
            d.remaining,
            d.retry_after_ms,
            d.policy,
            d.hold.as_ref().map(|t| t.expires_ms)
        ),
        Reply::Error(e) => format!("{} {}", e.code.status(), e.code.word()),
    }
}

fn hold_of(reply: &Reply) -> String {
    match reply {
        Reply::Decision(DecisionReply { hold: Some(t), .. }) => t.hold.clone(),
        other => panic!("a kept hold: {other:?}"),
    }
}

/// Two keys of one partition.
fn two_keys() -> (String, String, u32) {
    let p = partition_of("user-0", PARTITIONS);
    let mut keys = (1..)
        .map(|i| format!("user-{i}"))
        .filter(|k| partition_of(k, PARTITIONS) == p);
    (keys.next().unwrap(), keys.next().unwrap(), p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_verbs_in_a_batch_answer_as_alone_with_errors_in_their_slots() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 1).await;
    let nats = stack.clients(1).await.remove(0);
    let (a, b, p) = two_keys();
    let partition = batch_subject(p);

    // Each step alone on key `a` and as a batch of one on key `b`.
    let (mut a_hold, mut b_hold) = (String::new(), String::new());
    type Fields = fn(&str) -> Json;
    let steps: [(Verb, Fields); 9] = [
        (
            Verb::Reserve,
            |_| json!({"policy": "exact", "cost": 4000, "ttl_ms": 600_000}),
        ),
        (
            Verb::Extend,
            |h| json!({"policy": "exact", "hold": h, "ttl_ms": 1_200_000}),
        ),
        (
            Verb::Settle,
            |h| json!({"policy": "exact", "hold": h, "cost": 1500}),
        ),
        (
            Verb::Settle,
            |h| json!({"policy": "exact", "hold": h, "cost": 1500}),
        ), // settled: 404
        (Verb::Extend, |h| json!({"policy": "exact", "hold": h})), // ended: 404
        (
            Verb::Reserve,
            |_| json!({"policy": "exact", "cost": 20_000}),
        ), // over capacity: 400
        (
            Verb::Reserve,
            |_| json!({"policy": "exact", "ttl_ms": 7_200_000}),
        ), // ttl over 1 h: 400
        (Verb::Reserve, |_| json!({"policy": "nope"})),            // unknown policy: 404
        (
            Verb::Settle,
            |_| json!({"policy": "exact", "hold": "guess", "cost": 1}),
        ), // no hold id: 400
    ];
    let mut said = Vec::new();
    for (verb, fields) in steps {
        let single = alone(&nats, verb, &a, &fields(&a_hold)).await;
        let mut item = fields(&b_hold);
        item["key"] = json!(b);
        item["verb"] = json!(verb.as_str());
        let (results, _) = batched(&nats, &partition, &[item]).await;
        if verb == Verb::Reserve && a_hold.is_empty() {
            (a_hold, b_hold) = (hold_of(&single), hold_of(&results[0]));
        }
        if let (Reply::Error(one), Reply::Error(other)) = (&single, &results[0]) {
            // The same sentence, but for the key and hold it names.
            let same = one.message.replace(&a, "K").replace(&a_hold, "H");
            assert_eq!(same, other.message.replace(&b, "K").replace(&b_hold, "H"));
        }
        assert_eq!(gist(&single), gist(&results[0]), "{verb:?}");
        said.push(gist(&results[0]));
    }
    let codes: Vec<&str> = said
        .iter()
        .map(|s| &s[..s.find(' ').unwrap_or(s.len())])
        .collect();
    assert_eq!(
        codes,
        [
            "allowed=true",
            "allowed=true",
            "allowed=true",
            "404",
            "404",
            "400",
            "400",
            "404",
            "400"
        ]
    );
    assert!(
        said[0].contains("remaining=6000") && said[0].contains("Some(600000)"),
        "{said:?}"
    );
    assert!(said[1].contains("Some(1200000)"), "{said:?}");
    assert!(
        said[2].contains("remaining=8500") && said[2].ends_with("None"),
        "{said:?}"
    );

    // One worker batch across every partition: a reserve on each key, and
    // an ask and bad items between them, each answered in its own slot.
    let keys = a_key_per_partition(PARTITIONS);
    let worker = stack.worker_ids().remove(0);
    let mut items: Vec<Json> = keys
        .iter()
        .map(|k| json!({"key": k, "verb": "reserve", "policy": "inflight", "ttl_ms": 600_000}))
        .collect();
    items.push(json!({"key": keys[0], "policy": "exact", "cost": 1}));
    items.push(
        json!({"key": keys[1], "verb": "reserve", "policy": "exact", "cost": 2_000_000_000u64}),
    );
    items.push(json!({"key": keys[2], "verb": "settle", "policy": "inflight", "hold": HoldId::new(7).to_string(), "cost": 1}));
    let (results, named) = batched(&nats, &worker_batch_subject(&worker), &items).await;
    assert_eq!(named, worker);
    let n = keys.len();
    let held: Vec<String> = results[..n].iter().map(hold_of).collect();
    assert!(matches!(&results[n], Reply::Decision(d) if d.allowed && d.hold.is_none()));
    let code = |r: &Reply| match r {
        Reply::Error(e) => e.code,
        other => panic!("{other:?}"),
    };
    assert_eq!(code(&results[n + 1]), ErrorCode::BadRequest);
    assert_eq!(code(&results[n + 2]), ErrorCode::UnknownHold);
    // Settled together; settled again, each is unknown.
    let settles: Vec<Json> = keys
        .iter()
        .zip(&held)
        .map(|(k, h)| json!({"key": k, "verb": "settle", "policy": "inflight", "hold": h, "cost": 1}))
        .collect();
    let (results, _) = batched(&nats, &worker_batch_subject(&worker), &settles).await;
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Reply::Decision(d) if d.hold.is_none())),
        "{results:?}"
    );
    let (results, _) = batched(&nats, &worker_batch_subject(&worker), &settles).await;
    assert!(
        results.iter().all(|r| code(r) == ErrorCode::UnknownHold),
        "{results:?}"
    );
}

async fn batching_client(url: &str, timeout: Duration) -> Client {
    let config = Config::from_toml(CONFIG, "holds.toml").unwrap();
    let opts = ClientOptions::from_config(&config)
        .batching(true)
        .timeout(timeout);
    Client::connect_with(url, opts).await.unwrap()
}

/// A batching client that names nothing (`ask_ids` off).
async fn unnaming_client(url: &str, timeout: Duration) -> Client {
    let config = Config::from_toml(CONFIG, "holds.toml").unwrap();
    let opts = ClientOptions::from_config(&config)
        .batching(true)
        .ask_ids(false)
        .timeout(timeout);
    Client::connect_with(url, opts).await.unwrap()
}

/// Ten batching clients take and give back the three slots of one key as
/// fast as they can: never more than three are held at once (a slot is
/// counted here from its reserve's reply to just before its settle, so
/// the owner held it all that time), and the holds went in batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limits_hold_with_many_batching_clients() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, CONFIG, 1).await;
    let url = stack.nats.url();
    let mut clients = Vec::new();
    for _ in 0..10 {
        clients.push(batching_client(&url, Duration::from_secs(5)).await);
    }
    let live = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let (granted, denied) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = clients
        .iter()
        .flat_map(|c| std::iter::repeat_n(c, 3))
        .map(|client| {
            let client = client.clone();
            let (live, most) = (live.clone(), most.clone());
            let (granted, denied) = (granted.clone(), denied.clone());
            tokio::spawn(async move {
                for _ in 0..20 {
                    match client.hold("tenant-1", "inflight", 1, None).await.unwrap() {
                        Reserved::Held(slot) => {
                            let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            granted.fetch_add(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            live.fetch_sub(1, Ordering::SeqCst);
                            slot.settle(1).await.unwrap();
                        }
                        Reserved::Denied(answer) => {
                            assert!(!answer.allowed);
                            denied.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} slots held at once");
    assert!(granted.load(Ordering::SeqCst) >= 3, "slots were taken");
    assert!(
        denied.load(Ordering::SeqCst) > 0,
        "thirty callers wanted three slots"
    );
    let batched: u64 = clients.iter().map(|c| c.stats().batched_asks).sum();
    assert!(
        batched >= 600 * 2 / 3,
        "the verbs went in batches: {batched}"
    );
    // Every slot was settled: the three are free, and only three.
    let client = &clients[0];
    let mut slots = Vec::new();
    for _ in 0..3 {
        match client.hold("tenant-1", "inflight", 1, None).await.unwrap() {
            Reserved::Held(slot) => slots.push(slot),
            Reserved::Denied(a) => panic!("a slot leaked: {a:?}"),
        }
    }
    let fourth = client.hold("tenant-1", "inflight", 1, None).await.unwrap();
    assert!(matches!(fourth, Reserved::Denied(_)), "{fourth:?}");
    for slot in slots {
        slot.release().await.unwrap();
    }
}

/// What a stand-in worker gets: the subject and a batch's items, or a
/// verb's body.
struct Got {
    msg: async_nats::Message,
    items: Vec<Act>,
    /// Each item's id.
    ids: Vec<Option<String>>,
}

/// The next batch or hold verb (probes and anything else skipped).
async fn next(sub: &mut async_nats::Subscriber) -> Got {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .expect("the client sends")
            .unwrap();
        match Inbound::parse(msg.subject.as_str()) {
            Some(Inbound::PartitionBatch(_)) => {
                let items = batch::decode_items(&msg.payload).unwrap();
                let items: Vec<_> = items.into_iter().map(Result::unwrap).collect();
                let ids = items.iter().map(|i| i.id.clone().map(Into::into)).collect();
                let items = items.into_iter().map(|i| i.act).collect();
                return Got { msg, items, ids };
            }
            Some(Inbound::Ask(ask)) if Verb::HOLDS.contains(&ask.verb) => {
                return Got {
                    msg,
                    items: Vec::new(),
                    ids: Vec::new(),
                };
            }
            _ => {}
        }
    }
}

/// Answers `got` with `payload` and `headers`.
async fn answer(nats: &async_nats::Client, got: &Got, headers: &[(&str, &str)], payload: Vec<u8>) {
    let mut map = async_nats::HeaderMap::new();
    for (name, value) in headers {
        map.insert(*name, *value);
    }
    let to = got.msg.reply.clone().unwrap();
    nats.publish_with_headers(to, map, payload.into())
        .await
        .unwrap();
}

fn error(e: &ErrorReply) -> Vec<u8> {
    e.encode(Encoding::MsgPack)
}

/// A reserve's reply keeping hold 42 until `ttl`, or its repeat.
fn held_42(ttl: sluice_core::time::Nanos, repeat: bool, encoding: Encoding) -> Vec<u8> {
    let d = sluice_core::policy::Decision {
        allowed: true,
        limit: 10_000,
        remaining: 9_000,
        reset: sluice_core::time::Nanos::from_secs(1),
        retry_after: sluice_core::time::Nanos::ZERO,
        shadow_denied: false,
        wait: sluice_core::time::Nanos::ZERO,
        blocked: false,
    };
    encode_held(
        &d,
        "exact",
        (Some((HoldId::new(42), ttl)), repeat),
        encoding,
    )
}

/// `client` reserves on `k1`; the stand-in answers its batch with an
/// unstored 503. The reserve's task, and what the stand-in got.
async fn reserve_unstored(
    client: &Client,
    worker: &async_nats::Client,
    sub: &mut async_nats::Subscriber,
) -> (
    tokio::task::JoinHandle<Result<sluice_client::Held, Error>>,
    Got,
) {
    let task = tokio::spawn({
        let client = client.clone();
        async move { client.reserve("k1", "exact", 1000, None).await }
    });
    let got = next(sub).await;
    assert!(matches!(got.items[..], [Act::Hold(h)] if h.verb == Verb::Reserve));
    let unstored = ErrorReply::unavailable("the journal did not store it");
    answer(
        worker,
        &got,
        &[(SLUICE_UNSTORED, UNSTORED_YES)],
        error(&unstored),
    )
    .await;
    (task, got)
}

#[tokio::test]
async fn the_batching_client_never_sends_a_hold_verb_twice_and_alone_only_if_nothing_was_done() {
    let server = NatsServer::start_with_partitions(PARTITIONS).unwrap();
    let worker = server.connect().await.unwrap();
    let mut sub = worker.subscribe("rl.p.>").await.unwrap();
    worker.flush().await.unwrap();
    let client = unnaming_client(&server.url(), Duration::from_secs(30)).await;
    let id = HoldId::new(42).to_string();
    let held = |ttl| held_42(ttl, false, Encoding::Json);

    // An unstored batch: the reserve may be held, so it is not sent again.
    let (task, _) = reserve_unstored(&client, &worker, &mut sub).await;
    let result = task.await.unwrap();
    assert!(
        matches!(&result, Err(Error::Unavailable(m)) if m.contains("journal")),
        "{result:?}"
    );
    // Nothing more was sent: the next thing here is the client's sentinel.
    let sentinel = batch_subject(0);
    client
        .nats()
        .publish(sentinel.clone(), "".into())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.subject.as_str(), sentinel, "the reserve was sent again");

    // A worker of an earlier release refuses the batch whole, doing
    // nothing: the reserve is asked alone on its own subject.
    let task = tokio::spawn({
        let client = client.clone();
        async move { client.reserve("k2", "exact", 1000, None).await }
    });
    let got = next(&mut sub).await;
    assert_eq!(got.items.len(), 1);
    let old = ErrorReply::bad_request("batch item 0: unknown field \"verb\"; a batch item has only the fields \"key\", \"policy\", \"cost\" ...");
    answer(&worker, &got, &[], error(&old)).await;
    let got = next(&mut sub).await;
    assert!(
        got.msg.subject.ends_with(".reserve.k2"),
        "{}",
        got.msg.subject
    );
    answer(
        &worker,
        &got,
        &[],
        held(sluice_core::time::Nanos::from_secs(60)),
    )
    .await;
    let reserved = task.await.unwrap().unwrap();
    assert_eq!(reserved.ticket.unwrap().hold, id);

    // A 503 in the item's slot (the partition moved): nothing was done, so
    // the settle is asked alone, and its answer is the caller's.
    let task = tokio::spawn({
        let (client, id) = (client.clone(), id.clone());
        async move { client.settle("k3", "exact", &id, 10).await }
    });
    let got = next(&mut sub).await;
    assert!(matches!(got.items[..], [Act::Hold(h)] if h.verb == Verb::Settle));
    let moved = Reply::Error(ErrorReply::unavailable("not mine now"));
    answer(&worker, &got, &[], batch::encode_results(&[moved])).await;
    let got = next(&mut sub).await;
    assert!(
        got.msg.subject.ends_with(".settle.k3"),
        "{}",
        got.msg.subject
    );
    let unknown = ErrorReply::unknown_hold(&id, "exact");
    answer(&worker, &got, &[], error(&unknown)).await;
    let result = task.await.unwrap();
    assert!(matches!(result, Err(Error::UnknownHold(_))), "{result:?}");
}

/// With ids (the default), an unstored batch is sent again: each hold
/// verb under the id it had, so the owner answers the repeat instead of
/// keeping a second hold.
#[tokio::test]
async fn the_batching_client_sends_a_named_hold_verb_again_under_its_id() {
    let server = NatsServer::start_with_partitions(PARTITIONS).unwrap();
    let worker = server.connect().await.unwrap();
    let mut sub = worker.subscribe("rl.p.>").await.unwrap();
    worker.flush().await.unwrap();
    let client = batching_client(&server.url(), Duration::from_secs(30)).await;
    let (task, got) = reserve_unstored(&client, &worker, &mut sub).await;
    let first_id = got.ids[0].clone().expect("the client names its reserve");
    let again = next(&mut sub).await;
    assert!(matches!(again.items[..], [Act::Hold(h)] if h.verb == Verb::Reserve));
    assert_eq!(
        again.ids[0].as_deref(),
        Some(first_id.as_str()),
        "the same id"
    );
    let repeat = held_42(
        sluice_core::time::Nanos::from_secs(60),
        true,
        Encoding::MsgPack,
    );
    let reply = decode_reply(&repeat).unwrap();
    answer(&worker, &again, &[], batch::encode_results(&[reply])).await;
    let held = task.await.unwrap().unwrap();
    assert!(held.answer.repeat, "{held:?}");
    assert_eq!(held.ticket.unwrap().hold, HoldId::new(42).to_string());
}
