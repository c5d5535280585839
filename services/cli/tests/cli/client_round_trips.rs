//! The round trips the Rust client (`sluice-client`) saves against a real
//! nats-server and real `sluice worker` processes: the deny cache, and
//! batching (per partition, then per worker once a reply names the owner;
//! two batches in flight per destination), with every caller still
//! getting the decision for its own ask.
//!
//! Round trips are counted independently of the client: an observer
//! connection subscribes to the partition subjects (`rl.p.<n>.allow.<key>`,
//! `rl.p.<n>.batch`) next to the owning worker and counts what arrives, up
//! to a sentinel the client's own connection publishes last (NATS keeps one
//! connection's messages in order, and workers ignore an allow without a
//! reply subject).

use crate::common;

use common::client::{ask_all, client, options, stack};
use futures::StreamExt;
use sluice_client::{Client, Fallback, Source};
use sluice_core::partition::partition_of;
use sluice_core::subject::{
    any_partition_batch_subject, batch_subject, partition_wildcard, worker_batch_subject, Inbound,
    Verb, PARTITION_PREFIX,
};
use sluice_tests::{
    a_key_per_partition, ask, key_in_partition, request, serial, NatsServer, Stack, PEEK,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Counts the requests that reach a key's partition, from outside the client.
/// One subscription (`rl.p.<n>.>`), so that what it sees keeps the order
/// the client sent it in.
struct Observer {
    _nats: async_nats::Client,
    sub: async_nats::Subscriber,
    token: String,
}

/// Requests seen by an [`Observer`].
#[derive(Debug, Default, PartialEq)]
struct Seen {
    singles: usize,
    batches: usize,
}

impl Observer {
    async fn watch(stack: &Stack, token: &str) -> Observer {
        let nats = stack.nats.connect().await.unwrap();
        let p = partition_of(token, stack.partitions);
        let mut sub = nats.subscribe(partition_wildcard(p)).await.unwrap();
        // async-nats' flush() does not wait for the server, so wait for a
        // message of our own: then the subscription is in place.
        let ready = format!("{PARTITION_PREFIX}.{p}.observer-ready");
        nats.publish(ready.clone(), "".into()).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::timeout_at(deadline, sub.next())
            .await
            .expect("the observer's own message arrives")
            .is_some_and(|m| m.subject.as_str() != ready)
        {}
        Observer {
            _nats: nats,
            sub,
            token: token.to_string(),
        }
    }

    /// Everything `client` sent for the key since the last call.
    async fn seen(&mut self, client: &Client) -> Seen {
        let nats = client.nats();
        nats.publish(Verb::Allow.client_subject(&self.token), "".into())
            .await
            .unwrap();
        nats.flush().await.unwrap();
        let mut seen = Seen::default();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let msg = tokio::time::timeout_at(deadline, self.sub.next())
                .await
                .expect("the sentinel arrives")
                .expect("the subscription stays open");
            match Inbound::parse(msg.subject.as_str()) {
                Some(Inbound::PartitionBatch(_)) => seen.batches += 1,
                Some(Inbound::Ask(a)) if a.verb == Verb::Allow && a.key_token == self.token => {
                    if msg.reply.is_none() {
                        return seen;
                    }
                    seen.singles += 1;
                }
                _ => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_answers_denied_keys_without_round_trips() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let client = client(&stack, Fallback::Closed).await;
    let mut observer = Observer::watch(&stack, "dave").await;

    for _ in 0..6 {
        client.allow("dave").await.unwrap();
    }
    // The first ask teaches the owner; the others go to the worker's subject.
    let after_denial = observer.seen(&client).await;
    assert_eq!(
        after_denial,
        Seen {
            singles: 0,
            batches: 1
        }
    );
    assert_eq!(client.stats().worker_batches, 5);

    for _ in 0..100 {
        let a = client.allow("dave").await.unwrap();
        assert!(!a.allowed);
        assert_eq!(a.source, Source::DenyCache);
        assert!(
            a.retry_after > Duration::from_secs(8),
            "{:?}",
            a.retry_after
        );
        assert_eq!(a.headers().count(), 4, "with Retry-After");
    }
    assert_eq!(
        observer.seen(&client).await,
        Seen::default(),
        "no request reached the worker"
    );
    let stats = client.stats();
    assert_eq!((stats.deny_cache, stats.round_trips), (100, 6));

    // Another policy of the same key is asked for real.
    assert!(client.ask("dave", "tenper", 1).await.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_with_nothing_to_batch_with_goes_at_once_and_teaches_the_owner() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let client = client(&stack, Fallback::Closed).await;
    let mut observer = Observer::watch(&stack, "erin").await;
    for _ in 0..5 {
        client.ask("erin", "tenper", 1).await.unwrap();
    }
    // The first goes to its partition, whose reply names the owner; the
    // others go straight to that worker's subject.
    assert_eq!(
        observer.seen(&client).await,
        Seen {
            singles: 0,
            batches: 1
        }
    );
    let stats = client.stats();
    assert_eq!(
        (
            stats.round_trips,
            stats.batches,
            stats.batched_asks,
            stats.worker_batches
        ),
        (5, 5, 5, 4),
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_for_many_partitions_travel_together_per_worker_and_one_key_still_gets_exactly_five() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let opts = options(Fallback::Closed).deny_cache(false);
    let client = Client::connect_with(&stack.nats.url(), opts).await.unwrap();
    // One ask per partition teaches the client every owner.
    for key in &a_key_per_partition(stack.partitions) {
        client.ask(key, "tenper", 0).await.unwrap();
    }
    let before = client.stats();

    // 200 asks on one key and 200 on keys of every partition, all at once.
    let mut keys = vec!["hot".to_string(); 200];
    keys.extend((0..200).map(|i| format!("spread-{i}")));
    let answers = ask_all(&client, &keys).await;
    let mut hot_allowed = 0;
    for (key, answer) in keys.iter().zip(&answers) {
        let a = answer.as_ref().expect("every ask is decided");
        assert_eq!(a.source, Source::Worker, "{key}");
        if key == "hot" {
            hot_allowed += a.allowed as usize;
        } else {
            assert!(a.allowed, "{key} is fresh");
        }
    }
    assert_eq!(
        hot_allowed, 5,
        "a sliding log of 5 per 10 s allows exactly 5"
    );

    let stats = client.stats();
    let round_trips = stats.round_trips - before.round_trips;
    let worker_batches = stats.worker_batches - before.worker_batches;
    assert!(
        round_trips <= 20,
        "400 asks over 16 partitions of 2 workers travelled in {round_trips} requests: {stats:?}"
    );
    assert_eq!(
        worker_batches, round_trips,
        "with every owner known, every request goes to a worker: {stats:?}"
    );
    assert_eq!(stats.batched_asks - before.batched_asks, 400, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_batch_item_of_a_partition_the_worker_does_not_own_gets_503_and_counts_nothing() {
    use sluice_core::key::KeyToken;
    use sluice_core::wire::{batch, ErrorCode, Reply};
    let _serial = serial().await;
    let stack = stack(2).await;
    let owners = stack.owners().await;
    let ids = stack.worker_ids();
    let owned_by = |w: &str| *owners.iter().find(|(_, o)| *o == w).unwrap().0;
    let (mine, theirs) = (owned_by(&ids[0]), owned_by(&ids[1]));
    let (my_key, their_key) = (
        key_in_partition(mine, stack.partitions),
        key_in_partition(theirs, stack.partitions),
    );
    fn item(key: &str, cost: u64) -> batch::Item<'_> {
        batch::Item {
            key: KeyToken::parse(key).unwrap(),
            policy: "default".into(),
            cost,
            id: None,
            act: Default::default(),
        }
    }
    let body = batch::encode_items(&[item(&their_key, 1), item(&my_key, 2), item(&their_key, 3)]);
    let nats = &stack.clients(1).await[0];
    let reply = request(nats, &worker_batch_subject(&ids[0]), &body)
        .await
        .expect("the worker answers its own subject");
    assert_eq!(
        reply
            .headers
            .as_ref()
            .and_then(|h| h.get(batch::WORKER_HEADER))
            .map(|v| v.as_str()),
        Some(ids[0].as_str()),
        "the reply names the worker"
    );
    let results = batch::decode_results(&reply.payload, 3).unwrap();
    for i in [0, 2] {
        match &results[i] {
            Reply::Error(e) => assert_eq!(e.code, ErrorCode::Unavailable, "{e:?}"),
            other => panic!("item {i} of partition {theirs}: {other:?}"),
        }
    }
    match &results[1] {
        Reply::Decision(d) => assert_eq!((d.allowed, d.remaining), (true, 3)),
        other => panic!("item of partition {mine}: {other:?}"),
    }
    // Nothing was counted for the other worker's key; the own one counted 2.
    assert_eq!(ask(nats, &their_key, PEEK).await.unwrap().remaining, 5);
    assert_eq!(ask(nats, &my_key, PEEK).await.unwrap().remaining, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_asks_on_one_key_are_batched_and_exactly_five_pass() {
    let _serial = serial().await;
    let stack = stack(2).await;
    // No deny cache here, so that every ask goes to the worker.
    let opts = options(Fallback::Closed).deny_cache(false);
    let client = Client::connect_with(&stack.nats.url(), opts).await.unwrap();
    let mut observer = Observer::watch(&stack, "hot-key").await;

    let start = Arc::new(tokio::sync::Barrier::new(200));
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let client = client.clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                client.allow("hot-key").await
            })
        })
        .collect();
    let mut remaining_of_allowed = BTreeSet::new();
    let mut allowed = 0;
    for t in tasks {
        let a = t.await.unwrap().expect("every ask is decided");
        assert_ne!(a.source, Source::Fallback(Fallback::Open));
        if a.allowed {
            allowed += 1;
            remaining_of_allowed.insert(a.remaining);
        }
    }
    assert_eq!(allowed, 5, "a sliding log of 5 per 10 s allows exactly 5");
    assert_eq!(
        remaining_of_allowed,
        BTreeSet::from([0, 1, 2, 3, 4]),
        "each allowed caller got its own decision"
    );
    let seen = observer.seen(&client).await;
    let stats = client.stats();
    assert!(seen.batches >= 1, "{seen:?}");
    // Asks that came after the first reply named the owner went to the
    // worker's subject, which the observer does not watch.
    let requests = seen.singles + seen.batches + stats.worker_batches as usize;
    assert!(
        requests < 20,
        "200 asks travelled in a few requests: {seen:?} {stats:?}"
    );
    assert_eq!(stats.round_trips as usize, requests, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_in_a_batch_gets_the_decision_for_its_own_key_policy_and_cost() {
    let _serial = serial().await;
    let stack = stack(2).await;
    let client = client(&stack, Fallback::Closed).await;
    // 120 distinct fresh keys of one partition, with different policies and
    // costs: each answer must be the one for its own ask.
    let keys: Vec<String> = (0..)
        .map(|i| format!("mixed-{i}"))
        .filter(|k| partition_of(k, stack.partitions) == 3)
        .take(120)
        .collect();
    let tasks: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let client = client.clone();
            let key = key.clone();
            let (policy, cost) = if i % 2 == 0 {
                ("default", 1 + i as u64 % 5)
            } else {
                ("tenper", 1 + i as u64 % 10)
            };
            tokio::spawn(async move { (policy, cost, client.ask(&key, policy, cost).await) })
        })
        .collect();
    for t in tasks {
        let (policy, cost, answer) = t.await.unwrap();
        let a = answer.expect("decided");
        let max = if policy == "default" { 5 } else { 10 };
        assert!(a.allowed);
        assert_eq!(
            (a.policy.as_str(), a.limit, a.remaining),
            (policy, max, max - cost)
        );
    }
    assert!(client.stats().batches >= 1, "{:?}", client.stats());
}

/// A hand-made responder on `rl.p.*.batch` that answers only when told, so
/// the test sees what the client sends while its requests are unanswered.
/// Each item's decision has `remaining` = the number in its key
/// (`turns-<n>`), so a caller can tell it got its own item's answer.
#[tokio::test]
async fn while_a_batch_is_in_flight_the_next_asks_go_at_once_in_one_more_request() {
    use sluice_core::wire::{batch, DecisionReply, Reply};
    let server = NatsServer::start_with_partitions(16).unwrap();
    let responder = server.connect().await.unwrap();
    let mut requests = responder
        .subscribe(any_partition_batch_subject())
        .await
        .unwrap();
    responder.flush().await.unwrap();
    // Asks wait far longer than the test waits for a request: a request
    // that comes only because an earlier one timed out fails the test.
    let opts = options(Fallback::Closed)
        .deny_cache(false)
        .timeout(Duration::from_secs(60));
    let client = Client::connect_with(&server.url(), opts).await.unwrap();

    let p = partition_of("turns-0", 16);
    let keys: Vec<String> = (0..)
        .map(|i| format!("turns-{i}"))
        .filter(|k| partition_of(k, 16) == p)
        .take(12)
        .collect();
    let ask = |key: &String| {
        let (client, key) = (client.clone(), key.clone());
        tokio::spawn(async move { (key.clone(), client.allow(&key).await) })
    };
    async fn next_request(
        requests: &mut async_nats::Subscriber,
    ) -> (async_nats::Subject, Vec<String>) {
        let msg = tokio::time::timeout(Duration::from_secs(10), requests.next())
            .await
            .expect("a request arrives while the others are unanswered")
            .unwrap();
        let items: Vec<String> = batch::decode_items(&msg.payload)
            .unwrap()
            .into_iter()
            .map(|i| i.unwrap().key.as_str().to_string())
            .collect();
        (msg.reply.unwrap(), items)
    }
    let answer = |to: async_nats::Subject, items: Vec<String>| {
        let results: Vec<Reply> = items
            .iter()
            .map(|k| {
                Reply::Decision(DecisionReply {
                    allowed: true,
                    limit: 100,
                    remaining: k["turns-".len()..].parse().unwrap(),
                    reset_ms: 1,
                    retry_after_ms: 0,
                    policy: "default".into(),
                    shadow_denied: false,
                    repeat: false,
                    wait_ms: 0,
                    blocked: false,
                    levels: Vec::new(),
                    denied_by: None,
                    grant: None,
                    hold: None,
                })
            })
            .collect();
        let responder = responder.clone();
        async move {
            responder
                .publish(to, batch::encode_results(&results).into())
                .await
                .unwrap()
        }
    };

    // An ask that finds its destination idle goes alone, at once.
    let mut tasks = vec![ask(&keys[0])];
    let (first_to, first) = next_request(&mut requests).await;
    assert_eq!(first, keys[..1]);
    // The asks that arrive while it is unanswered do not wait for it: they
    // go together, in a second request.
    tasks.extend(keys[1..11].iter().map(ask));
    let (second_to, second) = next_request(&mut requests).await;
    assert_eq!(
        second,
        keys[1..11],
        "the ten asks of one tick share one request"
    );

    // Two requests in flight: the next ask waits for one of them. A message
    // the client's connection publishes after it is queued arrives before
    // any third request (NATS keeps one connection's order).
    tasks.push(ask(&keys[11]));
    for _ in 0..100 {
        if client.stats().asks == 12 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(client.stats().asks, 12, "the twelfth ask has started");
    // It found two turns taken and queued; had it taken a turn, it would
    // send after one yield of its own.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let sentinel = batch_subject(p);
    client.nats().publish(sentinel, "".into()).await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(10), requests.next())
        .await
        .expect("the sentinel arrives")
        .unwrap();
    assert!(
        msg.reply.is_none(),
        "no third request while two are in flight"
    );

    answer(first_to, first).await;
    let (third_to, third) = next_request(&mut requests).await;
    assert_eq!(
        third,
        keys[11..],
        "an answer hands the turn to the queued ask"
    );
    answer(second_to, second).await;
    answer(third_to, third).await;
    for t in tasks {
        let (key, answer) = t.await.unwrap();
        let answer = answer.expect("every ask is answered");
        assert_eq!(
            answer.remaining.to_string(),
            key["turns-".len()..],
            "{key} got its own decision"
        );
    }
    let stats = client.stats();
    assert_eq!((stats.batches, stats.batched_asks), (3, 12), "{stats:?}");
}
