//! One request in, one reply out.
//!
//! Validation happens before any counter is touched: the key token, the
//! partition it belongs to, the body, the policy and the cost. A request that
//! fails any of them gets an error reply (CONTRACT §1) and changes nothing.

use crate::counters::{counter_key, Counters, Op};
use crate::journal::Record;
use crate::worker::Shared;
use async_nats::{HeaderMap, HeaderName};
use bytes::Bytes;
use sluice_core::key::KeyToken;
use sluice_core::nats_config::{allow_subject, batch_subject, hit_subject};
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;
use sluice_core::wire::{self, batch, DecisionReply, Encoding, ErrorReply, RateLimitHeaders};
use std::cell::RefCell;
use std::sync::atomic::Ordering;

/// A reply to send.
pub struct Reply {
    pub headers: HeaderMap,
    pub payload: Bytes,
}

/// What decisions counted: how many asks changed a counter (which makes the
/// partition's snapshot stale) and, in journal mode only, the records to
/// store. Snapshot mode builds no records: they would be dropped unread.
pub struct Counted {
    pub changes: u64,
    pub records: Vec<Record>,
    partition: u32,
    journal: bool,
}

impl Counted {
    /// Records are kept only in journal mode.
    pub fn new(shared: &Shared, partition: u32) -> Counted {
        Counted {
            changes: 0,
            records: Vec::new(),
            partition,
            journal: shared.journal.is_some(),
        }
    }

    fn add(&mut self, policy: &str, token: &str, cost: u64, now: Nanos) {
        self.changes += 1;
        if self.journal {
            self.records.push(Record {
                n: self.partition,
                p: policy.to_string(),
                k: token.to_string(),
                c: cost,
                t: now.as_u64(),
            });
        }
    }
}

/// The subjects the owner of `partition` subscribes to.
pub fn subjects(partition: u32) -> [String; 3] {
    [
        allow_subject(partition),
        hit_subject(partition),
        batch_subject(partition),
    ]
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Allow,
    Hit,
}

/// Decides one message on `partition` at `now`; returns the reply, if
/// anyone asked.
pub fn handle(
    shared: &Shared,
    partition: u32,
    counters: &Counters,
    msg: &async_nats::Message,
    now: Nanos,
    counted: &mut Counted,
) -> Option<Reply> {
    let subject = msg.subject.as_str();
    // rl.p.<n>.<kind>.<token> or rl.p.<n>.batch
    let mut parts = subject.splitn(5, '.');
    let (kind, token) = match (parts.nth(3), parts.next()) {
        (Some("allow"), Some(token)) => (Kind::Allow, token),
        (Some("hit"), Some(token)) => (Kind::Hit, token),
        (Some("batch"), None) => {
            return handle_batch(shared, partition, counters, msg, now, counted)
        }
        _ => return None,
    };
    // An allow nobody waits for is not a request (the mapping probe sends those).
    if kind == Kind::Allow && msg.reply.is_none() {
        return None;
    }
    let encoding = Encoding::of_body(&msg.payload);
    let outcome = decide_body(
        shared,
        partition,
        counters,
        token,
        &msg.payload,
        kind,
        now,
        counted,
    );
    msg.reply.as_ref().map(|_| match outcome {
        Ok((decision, policy)) => decision_reply(&decision, policy, encoding),
        Err(e) => error_reply(&e, encoding),
    })
}

/// Validates and applies one ask whose body is still encoded.
#[allow(clippy::too_many_arguments)]
fn decide_body<'a>(
    shared: &'a Shared,
    partition: u32,
    counters: &Counters,
    token: &str,
    body: &[u8],
    kind: Kind,
    now: Nanos,
    counted: &mut Counted,
) -> Result<(Decision, &'a str), ErrorReply> {
    let result = KeyToken::parse(token)
        .map_err(ErrorReply::from)
        .and_then(|key| {
            let request = wire::decode_request(body).map_err(|e| e.reply)?;
            decide(
                shared,
                partition,
                counters,
                key,
                &request.policy,
                request.cost,
                kind,
                now,
                counted,
            )
        });
    count_outcome(shared, &result, kind);
    result
}

/// Applies one validated-as-far-as-the-wire-goes ask: checks the partition,
/// the policy and the cost, then counts. Nothing changes unless every check passed.
#[allow(clippy::too_many_arguments)]
fn decide<'a>(
    shared: &'a Shared,
    partition: u32,
    counters: &Counters,
    key: KeyToken<'_>,
    policy_name: &str,
    cost: u64,
    kind: Kind,
    now: Nanos,
    counted: &mut Counted,
) -> Result<(Decision, &'a str), ErrorReply> {
    let token = key.as_str();
    let home = key.partition(shared.config.partitions);
    if home != partition {
        return Err(ErrorReply::bad_request(format!(
            "key {token} belongs to partition {home}, not {partition}; send it to rl.allow.{token} \
             (a batching client must use the workers' partition count, {})",
            shared.config.partitions
        )));
    }
    let Some(policy) = shared.config.policy(policy_name) else {
        return Err(ErrorReply::unknown_policy(policy_name));
    };
    if kind == Kind::Allow && cost > policy.capacity() {
        return Err(ErrorReply::cost_above_capacity(
            cost,
            policy.name(),
            policy.capacity(),
        ));
    }
    let op = match kind {
        Kind::Allow => Op::Allow(cost),
        Kind::Hit => Op::Record(cost),
    };
    let decision = KEY.with(|buf| {
        let mut buf = buf.borrow_mut();
        counter_key(&mut buf, policy.name(), token);
        counters.apply(policy, &buf, now, op)
    });
    let consumed = match op {
        Op::Allow(c) => decision.allowed && c > 0,
        Op::Record(c) => c > 0,
    };
    if consumed {
        counted.add(policy.name(), token, cost, now);
    }
    Ok((decision, policy.name()))
}

fn count_outcome(shared: &Shared, result: &Result<(Decision, &str), ErrorReply>, kind: Kind) {
    let stats = &shared.stats;
    match (result, kind) {
        (Err(_), _) => stats.errors.fetch_add(1, Ordering::Relaxed),
        (Ok(_), Kind::Hit) => stats.hits.fetch_add(1, Ordering::Relaxed),
        (Ok((d, _)), Kind::Allow) if d.allowed => stats.allowed.fetch_add(1, Ordering::Relaxed),
        (Ok(_), Kind::Allow) => stats.denied.fetch_add(1, Ordering::Relaxed),
    };
}

thread_local! {
    static KEY: RefCell<String> = RefCell::new(String::with_capacity(128));
}

/// Header names are parsed once; a clone is a pointer copy.
static RATELIMIT_LIMIT: HeaderName = HeaderName::from_static(wire::RATELIMIT_LIMIT);
static RATELIMIT_REMAINING: HeaderName = HeaderName::from_static(wire::RATELIMIT_REMAINING);
static RATELIMIT_RESET: HeaderName = HeaderName::from_static(wire::RATELIMIT_RESET);
static RETRY_AFTER: HeaderName = HeaderName::from_static(wire::RETRY_AFTER);

/// The reply to a decided request: headers as [`wire::decision_headers`]
/// gives them, formatted without a `String` per number (a reply is built
/// for every request).
pub fn decision_reply(decision: &Decision, policy: &str, encoding: Encoding) -> Reply {
    let values = RateLimitHeaders::of(decision);
    let mut number = itoa::Buffer::new();
    let mut headers = HeaderMap::new();
    headers.insert(RATELIMIT_LIMIT.clone(), number.format(values.limit));
    headers.insert(RATELIMIT_REMAINING.clone(), number.format(values.remaining));
    headers.insert(RATELIMIT_RESET.clone(), number.format(values.reset_s));
    if let Some(retry_after) = values.retry_after_s {
        headers.insert(RETRY_AFTER.clone(), number.format(retry_after));
    }
    Reply {
        headers,
        payload: wire::encode_decision(decision, policy, encoding).into(),
    }
}

pub fn error_reply(error: &ErrorReply, encoding: Encoding) -> Reply {
    let mut headers = HeaderMap::new();
    for (name, value) in wire::error_headers(error) {
        headers.insert(name, value.as_str());
    }
    Reply {
        headers,
        payload: wire::encode_error(error, encoding).into(),
    }
}

fn handle_batch(
    shared: &Shared,
    partition: u32,
    counters: &Counters,
    msg: &async_nats::Message,
    now: Nanos,
    counted: &mut Counted,
) -> Option<Reply> {
    // A batch nobody waits for is not decided (nothing is counted).
    msg.reply.as_ref()?;
    let reply = match batch::decode_items(&msg.payload) {
        Err(e) => {
            shared.stats.errors.fetch_add(1, Ordering::Relaxed);
            error_reply(&e, Encoding::MsgPack)
        }
        Ok(items) => {
            let results = decide_items(shared, partition, counters, items, now, counted);
            batch_reply(shared, &results)
        }
    };
    Some(reply)
}

/// Decides batch items of `partition` in order, as if sent one after the
/// other: those of an `rl.p.<n>.batch` request, and a worker batch's share
/// for this partition (see [`crate::worker_batch`]).
pub fn decide_items<'a>(
    shared: &Shared,
    partition: u32,
    counters: &Counters,
    items: impl IntoIterator<Item = Result<batch::Item<'a>, ErrorReply>>,
    now: Nanos,
    counted: &mut Counted,
) -> Vec<wire::Reply> {
    items
        .into_iter()
        .map(|item| {
            let result = item.and_then(|item| {
                if item.key.partition(shared.config.partitions) != partition {
                    return Err(not_in_partition(shared, item.key, partition));
                }
                decide(
                    shared,
                    partition,
                    counters,
                    item.key,
                    &item.policy,
                    item.cost,
                    Kind::Allow,
                    now,
                    counted,
                )
            });
            count_outcome(shared, &result, Kind::Allow);
            match result {
                Ok((decision, policy)) => {
                    wire::Reply::Decision(DecisionReply::new(&decision, policy))
                }
                Err(e) => wire::Reply::Error(e),
            }
        })
        .collect()
}

/// The item error for a key that is not in `partition` (or whose partition
/// this worker does not answer for right now): a 503, so the client asks it
/// again on its own through the server's mapping (PROTOCOL.md §5).
fn not_in_partition(shared: &Shared, key: KeyToken<'_>, partition: u32) -> ErrorReply {
    ErrorReply::unavailable(format!(
        "key {key} is not in partition {partition} with {} partitions; \
         ask it on rl.allow.{key} (does the client use the workers' partition count?)",
        shared.config.partitions
    ))
}

/// A batch reply with its results, naming this worker (so the client learns
/// who owns the items' partitions).
pub fn batch_reply(shared: &Shared, results: &[wire::Reply]) -> Reply {
    let mut headers = HeaderMap::new();
    headers.insert(batch::WORKER_HEADER, shared.worker_id.as_str());
    Reply {
        headers,
        payload: batch::encode_results(results).into(),
    }
}
