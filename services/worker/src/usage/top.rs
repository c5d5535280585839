//! `rl.top`, which any worker takes and asks every worker for its
//! partitions' share (SPEC §9).
//!
//! Top N is exact: a key lives in one partition, so the N largest of all
//! are among the N largest of each partition; each worker sends those of
//! its partitions, and the worker that was asked merges them once every
//! partition has answered (or refuses with a 503 naming those that did
//! not).
//!
//! A group's top (`group`, SPEC §17) is the same scatter with one
//! partition wanted: every key of a group lives in its first token's
//! partition, so only that partition's owner ranks (its members alone)
//! and the worker that was asked waits for that partition only. The
//! owner says in its share which group it ranked: a worker of a release
//! before groups would rank every key of the partition, so a share that
//! does not say so is refused, not merged.
//!
//! A partition's N largest are found by the threshold algorithm over its
//! buckets' ranked lists ([`sluice_core::usage::top_of`]), not by summing
//! every key of every bucket in the range: with a million keys counted in
//! the last hour, that sum decoded and hashed a million entries per query
//! (docs/BENCHMARKS-HISTORY.md, "The dashboard"). A final bucket's list is built
//! once and kept ([`crate::usage::top_cache`]); the lists of records still being written
//! are kept by stream sequence; what the ledger's memory adds to the
//! minutes it holds (a flush interval's counts) is ranked per query.

use crate::answering::Answering;
use crate::reply::Reply;
use crate::usage::ledger::{KeyCounts, Ledger};
use crate::usage::query::{history, read_minutes, wait_replayed};
use crate::usage::top_cache::Version;
use crate::usage::UsageHistory;
use anyhow::{Context as _, Result};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sluice_core::partition::partition_of;
use sluice_core::subject::{TOP, TOP_SCATTER};
use sluice_core::usage::{cover, resolve_top, top, top_of, By, Counts, RankedBucket, TopFilter};
use sluice_core::wire::usage::{decode_top_query, TopEntry, TopReply};
use sluice_core::wire::{Encoding, ErrorReply};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long the worker that took `rl.top` waits for every partition.
const SCATTER_TIMEOUT: Duration = Duration::from_secs(5);

/// How many of its partitions a worker ranks at once for a top query:
/// enough that one partition's reads from the store overlap another's
/// ranking on the blocking threads, few enough that a query does not
/// hold every partition's records in memory at once.
const TOP_PARTITIONS_AT_ONCE: usize = 4;

/// What the worker that took `rl.top` asks every worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Scatter {
    from_ms: u64,
    to_ms: u64,
    n: usize,
    by: By,
    policy: Option<String>,
    /// Only this group's members, in its partition only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
}

impl Scatter {
    fn filter(&self) -> TopFilter<'_> {
        TopFilter {
            policy: self.policy.as_deref(),
            group: self.group.as_deref(),
        }
    }

    /// The partitions whose share the query needs: the group's, or all.
    fn partitions(&self, partitions: u32) -> Vec<u32> {
        match &self.group {
            Some(group) => vec![partition_of(group, partitions)],
            None => (0..partitions).collect(),
        }
    }
}

/// A worker's share of a top query: the partitions it answers for and
/// the N largest over all of them, listed under the first (the others'
/// lists empty: a gatherer merges every list, so that is the same answer
/// as each partition's N largest, in 1/32 of the bytes at 64 partitions
/// over 2 workers).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Share {
    partitions: Vec<(u32, Vec<TopEntry>)>,
    #[serde(default)]
    error: Option<String>,
    /// The group whose members alone it ranked (the scatter's), so that
    /// the gatherer knows its worker read `group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
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
    let history = history(answering)?;
    let (query, _) = decode_top_query(body).map_err(|e| e.reply)?;
    if let Some(policy) = &query.policy {
        if answering.decider.policies().get(policy).is_none() {
            return Err(ErrorReply::unknown_policy(policy));
        }
    }
    let now_ms = answering.clock.now().as_u64() / 1_000_000;
    let by = query.by.unwrap_or_default();
    let plan = resolve_top(
        &history.config,
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
        group: query.group,
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
    let wanted = scatter.partitions(answering.partitions);
    let mut answered: BTreeMap<u32, Vec<TopEntry>> = BTreeMap::new();
    while answered.len() < wanted.len() {
        let Some(msg) = replies.next().await else {
            break;
        };
        let Ok(share) = serde_json::from_slice::<Share>(&msg.payload) else {
            continue;
        };
        take_share(&mut answered, share, &scatter, &wanted)?;
    }
    let missing: Vec<u32> = wanted
        .into_iter()
        .filter(|p| !answered.contains_key(p))
        .collect();
    if !missing.is_empty() {
        return Err(ErrorReply::unavailable(format!(
            "partitions {missing:?} did not answer within {SCATTER_TIMEOUT:?} (being taken over, or their worker is down); ask again"
        )));
    }
    let keys = largest(answered.into_values().flatten(), plan.n, by);
    Ok(TopReply {
        by,
        from_ms: plan.from_ms,
        to_ms: plan.to_ms,
        keys,
        complete_to_ms: now_ms,
    })
}

/// Adds what `share` gives of the `wanted` partitions to `answered`; a
/// share of a wanted partition ranked without the scatter's group (a
/// worker of a release before groups' top ranks every key) refuses the
/// query.
fn take_share(
    answered: &mut BTreeMap<u32, Vec<TopEntry>>,
    share: Share,
    scatter: &Scatter,
    wanted: &[u32],
) -> Result<(), ErrorReply> {
    if let Some(e) = share.error {
        tracing::warn!("a worker could not give its share of a top query: {e}");
    }
    for (p, entries) in share.partitions {
        if !wanted.contains(&p) {
            continue;
        }
        if share.group != scatter.group {
            return Err(ErrorReply::unavailable(format!(
                "the worker owning partition {p} ranks every key of it, not a group's members: it is of a release before groups' top (SPEC §17); upgrade it, or ask without group"
            )));
        }
        answered.entry(p).or_insert(entries);
    }
    Ok(())
}

async fn answer_share(answering: Arc<Answering>, msg: async_nats::Message) {
    let Some(to) = msg.reply.clone() else {
        return;
    };
    let Some(history) = answering.usage.as_deref() else {
        return;
    };
    let share = match serde_json::from_slice::<Scatter>(&msg.payload) {
        Ok(scatter) => {
            let now_ms = answering.clock.now().as_u64() / 1_000_000;
            let plan = &scatter;
            let wanted = scatter.partitions(answering.partitions);
            let ledgers = history
                .ledgers()
                .into_iter()
                .filter(|(partition, _)| wanted.contains(partition));
            let mut ranked = futures::stream::iter(ledgers)
                .map(|(partition, ledger)| async move {
                    let top = partition_top(history, partition, &ledger, plan, now_ms).await;
                    (partition, top)
                })
                .buffer_unordered(TOP_PARTITIONS_AT_ONCE);
            let mut share = Share {
                group: scatter.group.clone(),
                ..Default::default()
            };
            let mut all = Vec::new();
            while let Some((partition, top)) = ranked.next().await {
                match top {
                    Ok(entries) => {
                        share.partitions.push((partition, Vec::new()));
                        all.extend(entries);
                    }
                    Err(e) => share.error = Some(format!("partition {partition}: {e:#}")),
                }
            }
            if let Some((_, first)) = share.partitions.first_mut() {
                *first = largest(all, plan.n, plan.by);
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

/// The `plan.n` largest keys of one partition over the plan's range
/// (those its filter wants), by
/// the threshold algorithm over its buckets' ranked lists: kept ones
/// where the history's cache has them, built from the stored records (and
/// kept) where it does not, and one of what the ledger's memory adds to
/// the minutes it holds. As in a series, each minute in memory is copied before its
/// record is read, and its record's write marks say what of the copy the
/// record lacks ([`crate::usage::ledger::MinuteView::lacking`]).
async fn partition_top(
    history: &UsageHistory,
    partition: u32,
    ledger: &Ledger,
    plan: &Scatter,
    now_ms: u64,
) -> Result<Vec<TopEntry>> {
    wait_replayed(partition, ledger).await?;
    let tiers = &history.config.tiers;
    let usable = |b| ledger.is_final(b, now_ms, history.grace_ms);
    let buckets = cover(tiers, tiers.len() - 1, plan.from_ms, plan.to_ms, &usable);
    let filter = plan.filter();
    let wanted = |p: &str, k: &str| filter.wants(k, p);
    let (cache, ledger_id) = (&history.top_cache, ledger.id());
    cache.asked(now_ms);
    // Read before any record: a list read before its bucket is written
    // again is then not kept.
    let generation = cache.generation(partition);
    let minute_ms = tiers[0].step_ms();
    let mut lists: Vec<Arc<RankedBucket>> = Vec::new();
    let mut unsettled = Vec::new();
    let mut finals: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut settled = Vec::new();
    for &(tier, start) in &buckets {
        if tier == 0 {
            if let Some(view) = ledger.minute_counts(start, &wanted) {
                unsettled.push((start, Some(view)));
                continue;
            }
            if start + minute_ms + history.grace_ms > now_ms {
                unsettled.push((start, None));
                continue;
            }
        }
        match cache.get(partition, ledger_id, (tier, start), Version::Final) {
            Some(list) => lists.push(list),
            // A minute just final: its list is kept if the record is the
            // one it was built from (one read, not a sort).
            None if tier == 0 && cache.has_unsettled(partition, ledger_id, (0, start)) => {
                unsettled.push((start, None));
                settled.push(start);
            }
            None => finals.entry(tier).or_default().push(start),
        }
    }
    // Records to rank: by bucket, with the version they are kept under
    // (none: an absent final bucket, kept as an empty list).
    let mut to_rank = Vec::new();
    let mut memory: KeyCounts = Vec::new();
    for (start, lacking, record) in read_minutes(history, partition, unsettled).await? {
        memory.extend(lacking);
        let Some(record) = record else {
            continue;
        };
        let version = Version::Seq(record.seq);
        let version_now = if settled.contains(&start) {
            Version::Final
        } else {
            version
        };
        match cache.get(partition, ledger_id, (0, start), version) {
            Some(list) if version_now == Version::Final => {
                cache.keep(
                    partition,
                    ledger_id,
                    (0, start),
                    Version::Final,
                    list.clone(),
                    generation,
                );
                lists.push(list);
            }
            Some(list) => lists.push(list),
            None => to_rank.push(((0, start), version_now, Some(record.payload))),
        }
    }
    for (tier, starts) in finals {
        let mut stored = history.store.read(partition, tier, &starts).await?;
        for start in starts {
            let payload = stored.remove(&start);
            to_rank.push(((tier, start), Version::Final, payload));
        }
    }
    // Ranked off the thread that answers requests.
    let plan = plan.clone();
    let (entries, ranked) = crate::blocking::run(move || -> Result<_> {
        let mut ranked = Vec::with_capacity(to_rank.len());
        for (bucket, version, payload) in to_rank {
            let list = match payload {
                Some(payload) => RankedBucket::from_record(&payload)
                    .with_context(|| format!("cannot read the usage record of {bucket:?}"))?,
                None => RankedBucket::from_counts([]),
            };
            ranked.push((bucket, version, Arc::new(list)));
        }
        let fresh =
            RankedBucket::from_counts(memory.iter().map(|(p, k, c)| (p.as_str(), k.as_str(), *c)));
        let all: Vec<&RankedBucket> = lists
            .iter()
            .chain(ranked.iter().map(|(_, _, list)| list))
            .map(|list| &**list)
            .chain(std::iter::once(&fresh))
            .collect();
        let (top, _) = top_of(&all, plan.n, plan.by, plan.filter());
        Ok((entries(top), ranked))
    })
    .await
    .context("ranking a partition's keys panicked")??;
    for (bucket, version, list) in ranked {
        cache.keep(partition, ledger_id, bucket, version, list, generation);
    }
    Ok(entries)
}

/// The `n` largest of `all` by `by`.
fn largest(all: impl IntoIterator<Item = TopEntry>, n: usize, by: By) -> Vec<TopEntry> {
    let all = all.into_iter().map(|e| {
        let counts = Counts {
            used: e.used,
            denied: e.denied,
        };
        ((e.key_token, e.policy), counts)
    });
    entries(top(all, n, by))
}

/// Ranked `((key token, policy), counts)` as the entries of a reply.
fn entries<S: Into<String>>(ranked: Vec<((S, S), Counts)>) -> Vec<TopEntry> {
    ranked
        .into_iter()
        .map(|((token, policy), c)| TopEntry::new(token.into(), policy.into(), c.used, c.denied))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scatter(group: Option<&str>) -> Scatter {
        Scatter {
            from_ms: 0,
            to_ms: 60_000,
            n: 10,
            by: By::Used,
            policy: None,
            group: group.map(str::to_string),
        }
    }

    fn entry(key: &str) -> TopEntry {
        TopEntry::new(key.into(), "user".into(), 1, 0)
    }

    #[test]
    fn a_groups_top_wants_its_partition_alone_and_its_members_ranked() {
        let acme = scatter(Some("acme"));
        let at = partition_of("acme", 16);
        assert_eq!(acme.partitions(16), [at]);
        assert_eq!(scatter(None).partitions(4), [0, 1, 2, 3]);
        // An old worker's scatter had no group: it reads as every key.
        let old: Scatter =
            serde_json::from_str(r#"{"from_ms":0,"to_ms":1,"n":3,"by":"used","policy":null}"#)
                .unwrap();
        assert_eq!(old.group, None);

        // The owner's share says it ranked the group: taken; other
        // partitions' shares are not the query's.
        let mut answered = BTreeMap::new();
        let other = Share {
            partitions: vec![((at + 1) % 16, vec![entry("zed")])],
            group: None,
            ..Default::default()
        };
        take_share(&mut answered, other, &acme, &[at]).unwrap();
        assert!(answered.is_empty());
        let owner = Share {
            partitions: vec![(at, vec![entry("acme.alice")])],
            group: Some("acme".into()),
            ..Default::default()
        };
        take_share(&mut answered, owner, &acme, &[at]).unwrap();
        assert_eq!(answered[&at], [entry("acme.alice")]);

        // A worker of a release before groups' top ignores `group` and
        // ranks every key of the partition: its share is refused, not
        // merged.
        let before: Share = serde_json::from_str(&format!(
            r#"{{"partitions":[[{at},[{{"key":"acme","policy":"org","used":9,"denied":0}}]]]}}"#
        ))
        .unwrap();
        let e = take_share(&mut BTreeMap::new(), before, &acme, &[at]).unwrap_err();
        assert_eq!(e.code, sluice_core::wire::ErrorCode::Unavailable);
        assert!(e.message.contains("upgrade"), "{}", e.message);
    }
}
