//! `sluice status`: partitions, their owners, snapshot ages, worker health.
//!
//! Everything comes from NATS: the lease bucket says who owns what, the
//! snapshot manifests say how old each partition's snapshot is, and each
//! worker's status endpoint (found with `$SRV.PING`) gives its counts.

use crate::common::Common;
use anyhow::{Context as _, Result};
use async_nats::jetstream;
use futures::StreamExt;
use serde::Serialize;
use sluice_core::storage::{partition_key, LEASE_BUCKET, SNAPSHOT_BUCKET};
use sluice_core::subject::{status_ping, status_stats};
use sluice_worker::service::WorkerStatus;
use sluice_worker::snapshot::{read_manifest, Manifest};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// How long to wait for workers to answer.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub wait: Duration,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    sluice_core::config::parse_duration(s).map_err(|e| e.to_string())
}

#[derive(Serialize, Debug)]
pub struct Status {
    pub partitions: Vec<PartitionRow>,
    pub workers: Vec<WorkerStatus>,
    pub unowned: Vec<u32>,
}

#[derive(Serialize, Debug)]
pub struct PartitionRow {
    pub partition: u32,
    pub owner: Option<String>,
    pub snapshot_age_ms: Option<u64>,
    pub snapshot_keys: Option<u64>,
    pub decisions: Option<u64>,
}

pub fn run(common: &Common, args: &StatusArgs) -> Result<()> {
    let config = common.load_config()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let status = rt.block_on(async {
        let client = common.connect("sluice status").await?;
        collect(&client, config.partitions, args.wait).await
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", table(&status));
    }
    Ok(())
}

pub async fn collect(
    client: &async_nats::Client,
    partitions: u32,
    wait: Duration,
) -> Result<Status> {
    let js = jetstream::new(client.clone());
    let leases = js
        .get_key_value(LEASE_BUCKET)
        .await
        .context("no lease bucket: has a worker ever run against this NATS?")?;
    let snapshots = js.get_key_value(SNAPSHOT_BUCKET).await.ok();
    let workers = worker_statuses(client, wait).await?;
    let decisions: BTreeMap<u32, u64> = workers
        .iter()
        .flat_map(|w| w.partitions.iter().map(|p| (p.partition, p.decisions)))
        .collect();
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let mut rows = Vec::new();
    let mut unowned = Vec::new();
    for p in 0..partitions {
        let owner = leases.get(partition_key(p)).await?.map(|v| {
            sluice_core::format::holder_of(&v).unwrap_or_else(|e| format!("(unreadable: {e})"))
        });
        if owner.is_none() {
            unowned.push(p);
        }
        let manifest: Option<Manifest> = match &snapshots {
            Some(kv) => read_manifest(kv, p).await?.0,
            None => None,
        };
        rows.push(PartitionRow {
            partition: p,
            owner,
            snapshot_age_ms: manifest
                .as_ref()
                .filter(|m| m.taken_at_ms > 0)
                .map(|m| now_ms.saturating_sub(m.taken_at_ms)),
            snapshot_keys: manifest.map(|m| m.entries),
            decisions: decisions.get(&p).copied(),
        });
    }
    Ok(Status {
        partitions: rows,
        workers,
        unowned,
    })
}

/// Finds workers with `$SRV.PING.sluice-worker` and asks each for its status.
async fn worker_statuses(client: &async_nats::Client, wait: Duration) -> Result<Vec<WorkerStatus>> {
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await?;
    client
        .publish_with_reply(status_ping(), inbox, "".into())
        .await?;
    client.flush().await?;
    let mut ids = Vec::new();
    let deadline = tokio::time::sleep(wait);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            Some(msg) = replies.next() => {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&msg.payload) {
                    if let Some(id) = v["id"].as_str() {
                        ids.push(id.to_string());
                    }
                }
            }
        }
    }
    let mut statuses = Vec::new();
    for id in ids {
        let info = client.request(status_stats(&id), "".into()).await;
        let Ok(info) = info else { continue };
        let v: serde_json::Value = serde_json::from_slice(&info.payload).unwrap_or_default();
        if let Some(data) = v["endpoints"].get(0).and_then(|e| e.get("data")) {
            if let Ok(status) = serde_json::from_value::<WorkerStatus>(data.clone()) {
                statuses.push(status);
            }
        }
    }
    statuses.sort_by(|a, b| a.worker.cmp(&b.worker));
    Ok(statuses)
}

fn table(s: &Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "WORKERS ({})", s.workers.len());
    let _ = writeln!(
        out,
        "  {:<20} {:>10} {:>10} {:>10} {:>8} {:>8} {:>11} {:>10} {:>19} {:>9}",
        "worker",
        "partitions",
        "allowed",
        "denied",
        "hits",
        "errors",
        "journal_err",
        "policy_rev",
        "keys/max_keys",
        "evicted"
    );
    for w in &s.workers {
        let _ = writeln!(
            out,
            "  {:<20} {:>10} {:>10} {:>10} {:>8} {:>8} {:>11} {:>10} {:>19} {:>9}",
            w.worker,
            w.partitions.len(),
            w.allowed,
            w.denied,
            w.hits,
            w.errors,
            w.journal_errors,
            w.policy_revision,
            format!("{}/{}", w.keys, w.max_keys),
            w.evicted_keys
        );
    }
    for w in &s.workers {
        for (key, why) in &w.refused_policies {
            let _ = writeln!(out, "  {}: refused policy value {key:?}: {why}", w.worker);
        }
    }
    let _ = writeln!(
        out,
        "\nPARTITIONS ({}, {} unowned)",
        s.partitions.len(),
        s.unowned.len()
    );
    let _ = writeln!(
        out,
        "  {:>4}  {:<20} {:>12} {:>10} {:>10}",
        "p", "owner", "snapshot_age", "keys", "decisions"
    );
    for r in &s.partitions {
        let age = r
            .snapshot_age_ms
            .map(|ms| format!("{:.1}s", ms as f64 / 1000.0))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "  {:>4}  {:<20} {:>12} {:>10} {:>10}",
            r.partition,
            r.owner.as_deref().unwrap_or("(none)"),
            age,
            r.snapshot_keys
                .map(|k| k.to_string())
                .unwrap_or_else(|| "-".into()),
            r.decisions
                .map(|k| k.to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
    out
}
