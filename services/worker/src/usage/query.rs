//! The usage queries: `rl.usage.<key>` at the key's owner, and `rl.top`,
//! which any worker takes and asks every worker for its partitions' share.
//!
//! Both read the same way: the range is laid out in buckets
//! ([`sluice_core::usage::resolve_series`], [`cover`]), the stored records
//! of those buckets are read, and the minutes still in the owner's memory
//! are laid over them, so an answer holds everything counted up to the
//! moment it was asked (CONTRACT §9: "within 1 s"). A coarser bucket is
//! read from its own tier only once it is final (ended, rolled up);
//! before that, from its finer buckets.
//!
//! Top N is exact: a key lives in one partition, so the N largest of all
//! are among the N largest of each partition; each worker sends those of
//! its partitions, and the worker that was asked merges them once every
//! partition has answered (or refuses with a 503 naming those that did
//! not).

use super::UsageBook;
use crate::answering::Answering;
use crate::reply::Reply;
use crate::usage::ledger::{KeyCounts, Ledger, WriteMarks};
use anyhow::{Context as _, Result};
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sluice_core::key::KeyToken;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::{PartitionSubject, TOP, TOP_SCATTER};
use sluice_core::usage::{
    cover, resolve_series, resolve_top, top, visit_record, BucketId, By, Counts, RecordError,
    TopPlan,
};
use sluice_core::wire::usage::{
    decode_top_query, decode_usage_query, Point, TopEntry, TopReply, UsageReply,
};
use sluice_core::wire::{Encoding, ErrorReply};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// How long the worker that took `rl.top` waits for every partition.
const SCATTER_TIMEOUT: Duration = Duration::from_secs(5);

/// How many of its partitions a worker ranks at once for a top query:
/// enough that one partition's reads from the store overlap another's
/// ranking on the blocking threads, few enough that a query does not
/// hold every partition's records in memory at once.
const TOP_PARTITIONS_AT_ONCE: usize = 4;

/// The records a query needs (as stored), and what the owner's memory
/// adds to them.
struct Loaded {
    stored: HashMap<BucketId, Bytes>,
    /// Minutes in memory: the counts their stored records lack.
    memory: HashMap<u64, KeyCounts>,
}

impl Loaded {
    /// Reads `buckets` of `partition` from the store and, for the minutes
    /// in memory, what memory adds to them (that `wanted` keeps). Memory is
    /// copied before its minute's record is read, and the record's write
    /// mark says which of those counts it already holds
    /// ([`crate::usage::ledger::MinuteView::lacking`]), so a flush landing between the two
    /// neither drops nor doubles a count. Right after a takeover it waits
    /// for the ledger to hold the journal's usage ([`Ledger::replayed`]): a
    /// total without it would be short.
    async fn read(
        book: &UsageBook,
        partition: u32,
        ledger: &Ledger,
        buckets: &[BucketId],
        wanted: &(dyn Fn(&str, &str) -> bool + Sync),
    ) -> Result<Loaded> {
        tokio::time::timeout(crate::usage::REPLAY_WAIT, ledger.replayed())
            .await
            .with_context(|| {
                format!(
                    "the usage of partition {partition} is still being restored from the journal"
                )
            })?;
        let mut in_memory = Vec::new();
        let mut by_tier: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for &(tier, start) in buckets {
            if tier == 0 {
                if let Some(view) = ledger.minute_counts(start, wanted) {
                    in_memory.push((start, view));
                    continue;
                }
            }
            by_tier.entry(tier).or_default().push(start);
        }
        let mut stored = HashMap::new();
        let mut memory = HashMap::new();
        let gets = in_memory
            .iter()
            .map(|(start, _)| book.store.get(partition, (0, *start)));
        let records = futures::future::join_all(gets).await;
        for ((start, view), record) in in_memory.into_iter().zip(records) {
            let record = record?;
            let unmarked = WriteMarks::default();
            let marks = record.as_ref().map_or(&unmarked, |r| &r.marks);
            memory.insert(start, view.lacking(marks));
            if let Some(record) = record {
                stored.insert((0, start), record.payload);
            }
        }
        for (tier, starts) in by_tier {
            for (start, record) in book.store.read(partition, tier, &starts).await? {
                stored.insert((tier, start), record);
            }
        }
        Ok(Loaded { stored, memory })
    }

    /// Every count of `bucket` that `wanted` keeps, handed to `f` with
    /// its policy and key borrowed from what was loaded.
    fn each<'s>(
        &'s self,
        bucket: BucketId,
        wanted: &dyn Fn(&str, &str) -> bool,
        f: &mut dyn FnMut(&'s str, &'s str, Counts),
    ) -> Result<(), RecordError> {
        if bucket.0 == 0 {
            for (policy, key, c) in self.memory.get(&bucket.1).into_iter().flatten() {
                f(policy, key, *c);
            }
        }
        if let Some(record) = self.stored.get(&bucket) {
            visit_record(record, |policy, key, c| {
                if wanted(policy, key) {
                    f(policy, key, c);
                }
            })?;
        }
        Ok(())
    }
}

/// Answers one `rl.p.<n>.usage.<key>` request on its own task.
pub async fn answer_usage(answering: Arc<Answering>, msg: async_nats::Message) {
    let Some(to) = msg.reply.clone() else {
        return;
    };
    let encoding = Encoding::of_body(&msg.payload);
    let reply = match series(&answering, &msg).await {
        Ok(reply) => Reply::body(reply.encode(encoding), encoding),
        Err(error) => Reply::error(&error, encoding),
    };
    crate::reply::publish(&answering.client, vec![(to, reply)]).await;
}

async fn series(
    answering: &Answering,
    msg: &async_nats::Message,
) -> Result<UsageReply, ErrorReply> {
    let subject = PartitionSubject::parse(msg.subject.as_str()).ok_or_else(|| {
        ErrorReply::bad_request(format!("{} is not a usage subject", msg.subject))
    })?;
    let key = KeyToken::parse(subject.key_token)?;
    let book = book(answering)?;
    let (query, _) = decode_usage_query(&msg.payload).map_err(|e| e.reply)?;
    let policy = query.policy.unwrap_or_else(|| DEFAULT_POLICY.to_string());
    if answering.decider.policies().get(&policy).is_none() {
        return Err(ErrorReply::unknown_policy(&policy));
    }
    let home = key.partition(answering.partitions);
    let ledger = match book.ledger(home) {
        Some(ledger) if home == subject.partition => ledger,
        _ => {
            return Err(ErrorReply::unavailable(format!(
                "key {key} belongs to partition {home}, which this worker does not answer for right now; ask it on rl.usage.{key}"
            )))
        }
    };
    let now_ms = answering.clock.now().as_u64() / 1_000_000;
    let tiers = &book.config.tiers;
    let plan = resolve_series(
        &book.config,
        now_ms,
        query.from_ms,
        query.to_ms,
        query.step.as_deref(),
    )
    .map_err(|e| ErrorReply::bad_request(e.0))?;
    let usable = |b: BucketId| ledger.is_final(b, now_ms, book.grace_ms);
    let covers: Vec<Vec<BucketId>> = plan
        .points
        .iter()
        .map(|&(tier, start)| cover(tiers, tier, start, start + tiers[tier].step_ms(), &usable))
        .collect();
    let needed: Vec<BucketId> = covers.iter().flatten().copied().collect();
    let token = key.as_str().to_string();
    // Owned: it picks what memory adds here and the records' counts on a
    // blocking thread.
    let wanted = {
        let (policy, token) = (policy.clone(), token.clone());
        move |p: &str, k: &str| p == policy && k == token
    };
    let loaded = Loaded::read(book, home, &ledger, &needed, &wanted)
        .await
        .map_err(|e| ErrorReply::unavailable(format!("cannot read usage right now: {e:#}")))?;
    let unreadable = |e: RecordError| ErrorReply::unavailable(format!("cannot read usage: {e}"));
    // Every record read holds all of the partition's keys in its bucket:
    // picked through off the thread that answers requests.
    let starts: Vec<u64> = plan.points.iter().map(|&(_, t_ms)| t_ms).collect();
    let points = crate::blocking::run(move || {
        let mut points = Vec::with_capacity(starts.len());
        for (t_ms, buckets) in starts.into_iter().zip(&covers) {
            let mut sum = Counts::default();
            for bucket in buckets {
                loaded
                    .each(*bucket, &wanted, &mut |_, _, c| sum.add(c))
                    .map_err(unreadable)?;
            }
            points.push(Point {
                t_ms,
                used: sum.used,
                denied: sum.denied,
            });
        }
        Ok::<_, ErrorReply>(points)
    })
    .await
    .map_err(|e| ErrorReply::unavailable(format!("reading usage failed: {e}")))??;
    Ok(UsageReply {
        key: token,
        policy,
        step_ms: plan.step_ms,
        points,
        complete_to_ms: now_ms,
        parts: plan.parts,
    })
}

fn book(answering: &Answering) -> Result<&UsageBook, ErrorReply> {
    answering.usage.as_deref().ok_or_else(|| {
        ErrorReply::unavailable(
            "usage history is turned off on this worker ([usage] enabled = false in its config)",
        )
    })
}

/// What the worker that took `rl.top` asks every worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Scatter {
    from_ms: u64,
    to_ms: u64,
    n: usize,
    by: By,
    policy: Option<String>,
}

/// A worker's share of a top query: the largest of each of its partitions.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Share {
    partitions: Vec<(u32, Vec<TopEntry>)>,
    #[serde(default)]
    error: Option<String>,
}

/// Answers `rl.top` (queue group: one worker takes each) and every
/// worker's share of one (`sluice.usage.top`), until the subscriptions end.
pub async fn serve_top(answering: Arc<Answering>) -> Result<()> {
    let client = &answering.client;
    let mut asked = client.queue_subscribe(TOP, "sluice-top".into()).await?;
    let mut shares = client.subscribe(TOP_SCATTER).await?;
    loop {
        tokio::select! {
            msg = asked.next() => match msg {
                Some(msg) => { tokio::spawn(answer_top(answering.clone(), msg)); }
                None => return Ok(()),
            },
            msg = shares.next() => match msg {
                Some(msg) => { tokio::spawn(answer_share(answering.clone(), msg)); }
                None => return Ok(()),
            },
        }
    }
}

async fn answer_top(answering: Arc<Answering>, msg: async_nats::Message) {
    let Some(to) = msg.reply.clone() else {
        return;
    };
    let encoding = Encoding::of_body(&msg.payload);
    let reply = match gather_top(&answering, &msg.payload).await {
        Ok(reply) => Reply::body(reply.encode(encoding), encoding),
        Err(error) => Reply::error(&error, encoding),
    };
    crate::reply::publish(&answering.client, vec![(to, reply)]).await;
}

async fn gather_top(answering: &Answering, body: &[u8]) -> Result<TopReply, ErrorReply> {
    let book = book(answering)?;
    let (query, _) = decode_top_query(body).map_err(|e| e.reply)?;
    if let Some(policy) = &query.policy {
        if answering.decider.policies().get(policy).is_none() {
            return Err(ErrorReply::unknown_policy(policy));
        }
    }
    let now_ms = answering.clock.now().as_u64() / 1_000_000;
    let by = query.by.unwrap_or_default();
    let plan = resolve_top(
        &book.config,
        now_ms,
        query.from_ms,
        query.to_ms,
        query.n,
        by,
    )
    .map_err(|e| ErrorReply::bad_request(e.0))?;
    let scatter = Scatter {
        from_ms: plan.from_ms,
        to_ms: plan.to_ms,
        n: plan.n,
        by,
        policy: query.policy,
    };
    let unavailable =
        |e: &dyn std::fmt::Display| ErrorReply::unavailable(format!("cannot ask the workers: {e}"));
    let body = serde_json::to_vec(&scatter).expect("a scatter encodes");
    let mut replies = crate::scatter::scatter(
        &answering.client,
        TOP_SCATTER.to_string(),
        body.into(),
        SCATTER_TIMEOUT,
    )
    .await
    .map_err(|e| unavailable(&e))?;
    let partitions = answering.partitions;
    let mut answered: BTreeMap<u32, Vec<TopEntry>> = BTreeMap::new();
    while (answered.len() as u32) < partitions {
        let Some(msg) = replies.next().await else {
            break;
        };
        let Ok(share) = serde_json::from_slice::<Share>(&msg.payload) else {
            continue;
        };
        if let Some(e) = share.error {
            tracing::warn!("a worker could not give its share of a top query: {e}");
        }
        for (p, entries) in share.partitions {
            answered.entry(p).or_insert(entries);
        }
    }
    let missing: Vec<u32> = (0..partitions)
        .filter(|p| !answered.contains_key(p))
        .collect();
    if !missing.is_empty() {
        return Err(ErrorReply::unavailable(format!(
            "partitions {missing:?} did not answer within {SCATTER_TIMEOUT:?} (being taken over, or their worker is down); ask again"
        )));
    }
    let all = answered.into_values().flatten().map(|e| {
        let counts = Counts {
            used: e.used,
            denied: e.denied,
        };
        ((e.key_token, e.policy), counts)
    });
    let keys = entries(top(all, plan.n, by));
    Ok(TopReply {
        by,
        from_ms: plan.from_ms,
        to_ms: plan.to_ms,
        keys,
        complete_to_ms: now_ms,
    })
}

async fn answer_share(answering: Arc<Answering>, msg: async_nats::Message) {
    let Some(to) = msg.reply.clone() else {
        return;
    };
    let Some(book) = answering.usage.as_deref() else {
        return;
    };
    let share = match serde_json::from_slice::<Scatter>(&msg.payload) {
        Ok(scatter) => {
            let now_ms = answering.clock.now().as_u64() / 1_000_000;
            let plan = TopPlan {
                from_ms: scatter.from_ms,
                to_ms: scatter.to_ms,
                n: scatter.n,
                by: scatter.by,
            };
            let (plan, policy) = (&plan, scatter.policy.as_deref());
            let mut ranked = futures::stream::iter(book.ledgers())
                .map(|(partition, ledger)| async move {
                    let top = partition_top(book, partition, &ledger, plan, policy, now_ms).await;
                    (partition, top)
                })
                .buffer_unordered(TOP_PARTITIONS_AT_ONCE);
            let mut share = Share::default();
            while let Some((partition, top)) = ranked.next().await {
                match top {
                    Ok(entries) => share.partitions.push((partition, entries)),
                    Err(e) => share.error = Some(format!("partition {partition}: {e:#}")),
                }
            }
            share
        }
        Err(e) => Share {
            error: Some(format!("a top query this worker cannot read: {e}")),
            ..Default::default()
        },
    };
    if !sluice_core::subject::is_safe_reply_subject(to.as_str()) {
        return;
    }
    let body = serde_json::to_vec(&share).expect("a share encodes");
    let _ = answering.client.publish(to, body.into()).await;
}

/// The `plan.n` largest keys of one partition over the plan's range.
async fn partition_top(
    book: &UsageBook,
    partition: u32,
    ledger: &Ledger,
    plan: &TopPlan,
    policy: Option<&str>,
    now_ms: u64,
) -> Result<Vec<TopEntry>> {
    let tiers = &book.config.tiers;
    let usable = |b: BucketId| ledger.is_final(b, now_ms, book.grace_ms);
    let buckets = cover(tiers, tiers.len() - 1, plan.from_ms, plan.to_ms, &usable);
    let policy = policy.map(str::to_string);
    let wanted = move |p: &str, _: &str| policy.as_deref().is_none_or(|want| want == p);
    let loaded = Loaded::read(book, partition, ledger, &buckets, &wanted).await?;
    // Every key of the partition over the range: summed off the thread that
    // answers requests, exactly. The totals borrow each key and policy from
    // the records read (no string is made but for the N kept).
    let (n, by) = (plan.n, plan.by);
    crate::blocking::run(move || -> Result<Vec<TopEntry>> {
        let mut totals: HashMap<(&str, &str), Counts, foldhash::fast::RandomState> =
            HashMap::default();
        for bucket in &buckets {
            loaded.each(*bucket, &wanted, &mut |p, k, c| {
                totals.entry((k, p)).or_default().add(c);
            })?;
        }
        Ok(entries(top(totals, n, by)))
    })
    .await
    .context("ranking a partition's keys panicked")?
}

/// Ranked `((key token, policy), counts)` as the entries of a reply.
fn entries<S: Into<String>>(ranked: Vec<((S, S), Counts)>) -> Vec<TopEntry> {
    ranked
        .into_iter()
        .map(|((token, policy), c)| TopEntry::new(token.into(), policy.into(), c.used, c.denied))
        .collect()
}
