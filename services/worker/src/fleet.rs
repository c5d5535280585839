//! What `sluice status` and the gateway's dashboard show of the fleet:
//! partitions, their owners, snapshot ages, worker health ([`collect`]).
//!
//! Everything comes from NATS: the lease bucket says who owns what and
//! which workers are alive (their heartbeats), the snapshot manifests say
//! how old each partition's snapshot is, and each worker's status endpoint
//! (found with `$SRV.PING`) gives its counts. Reads run concurrently and
//! the wait for workers ends as soon as every worker with a heartbeat has
//! answered, so a page that shows this answers in milliseconds, not after
//! the whole `wait`.

use crate::scatter::scatter;
use crate::service::WorkerStatus;
use crate::snapshot::{read_manifest, Manifest};
use anyhow::{Context as _, Result};
use async_nats::jetstream;
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;
use sluice_core::replication::{sluice_streams, ClusterView, StreamReplicas};
use sluice_core::storage::{partition_key, LeaseKey, LEASE_BUCKET, SNAPSHOT_BUCKET};
use sluice_core::subject::{status_ping, status_stats};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The fleet as NATS sees it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Serialize, Debug)]
pub struct Status {
    pub partitions: Vec<PartitionRow>,
    pub workers: Vec<WorkerStatus>,
    pub unowned: Vec<u32>,
    /// The region these workers run in and the others they see over the
    /// link (SPEC §12); empty without regions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<RegionRow>,
    /// The replicas sluice's buckets and streams are kept with, against
    /// what the NATS cluster could give ([`replication`]; `sluice status`
    /// reads it, the dashboard does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<Replication>,
}

/// sluice's buckets and streams and their replicas, against what the NATS
/// cluster could give ([`sluice_core::replication`]).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Serialize, Debug)]
pub struct Replication {
    /// 3 in a cluster of 3 or more servers, else 1.
    pub cluster_could_give: usize,
    /// Each bucket's or stream's replicas; those that do not exist (yet)
    /// or that these credentials may not read are left out.
    pub kept: Vec<StreamReplicas>,
}

impl Replication {
    /// What is kept with fewer replicas than the cluster could give.
    pub fn below_cluster(&self) -> Vec<&StreamReplicas> {
        self.kept
            .iter()
            .filter(|k| k.replicas < self.cluster_could_give)
            .collect()
    }
}

/// The replicas of sluice's buckets and streams (usage in `usage_steps`),
/// and what the cluster `client` is connected to could give. Each stream is
/// read with its own `STREAM.INFO` (what an admin may read; listing streams
/// is not), all at once, each given up after a second.
pub async fn replication(client: &async_nats::Client, usage_steps: &[String]) -> Replication {
    let info = client.server_info();
    let view = ClusterView::from_info(info.cluster.as_deref(), &info.connect_urls);
    let js = jetstream::new(client.clone());
    let reads = sluice_streams(usage_steps).into_iter().map(|name| {
        let js = js.clone();
        async move {
            let stream = tokio::time::timeout(Duration::from_secs(1), js.get_stream(&name))
                .await
                .ok()?
                .ok()?;
            let replicas = stream.cached_info().config.num_replicas;
            Some(StreamReplicas {
                stream: name,
                replicas,
            })
        }
    });
    Replication {
        cluster_could_give: view.could_give(),
        kept: futures::future::join_all(reads)
            .await
            .into_iter()
            .flatten()
            .collect(),
    }
}

/// A region as this region's workers see it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct RegionRow {
    pub region: String,
    /// The region the status was asked in.
    pub here: bool,
    /// Some worker here has its workers' answer over the link now (always
    /// true for the region here).
    pub link_up: bool,
    /// When a worker here last heard from it over the link (Unix ms).
    pub last_seen_ms: Option<u64>,
}

/// The regions `workers` report: their own, then every other one any of
/// them has seen, up where any of them sees it up.
pub fn regions(workers: &[WorkerStatus]) -> Vec<RegionRow> {
    let mut rows: BTreeMap<String, RegionRow> = BTreeMap::new();
    for w in workers {
        if let Some(region) = &w.region {
            rows.insert(
                region.clone(),
                RegionRow {
                    region: region.clone(),
                    here: true,
                    link_up: true,
                    last_seen_ms: None,
                },
            );
        }
    }
    for link in workers.iter().flat_map(|w| &w.links) {
        let row = rows.entry(link.region.clone()).or_insert(RegionRow {
            region: link.region.clone(),
            here: false,
            link_up: false,
            last_seen_ms: None,
        });
        if !row.here {
            row.link_up |= link.up;
            row.last_seen_ms = row.last_seen_ms.max(Some(link.last_seen_ms));
        }
    }
    let mut rows: Vec<RegionRow> = rows.into_values().collect();
    rows.sort_by_key(|r| (!r.here, r.region.clone()));
    rows
}

/// One partition: its owner, its snapshot, the decisions its owner made.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Serialize, Debug)]
pub struct PartitionRow {
    pub partition: u32,
    pub owner: Option<String>,
    pub snapshot_age_ms: Option<u64>,
    pub snapshot_keys: Option<u64>,
    pub decisions: Option<u64>,
}

/// Reads the fleet's status for `partitions` partitions, waiting at most
/// `wait` for the workers' own reports.
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
    let alive = heartbeats(&leases).await?;
    let workers = worker_statuses(client, alive, wait).await?;
    let decisions: BTreeMap<u32, u64> = workers
        .iter()
        .flat_map(|w| w.partitions.iter().map(|p| (p.partition, p.decisions)))
        .collect();
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let rows = futures::future::try_join_all((0..partitions).map(|p| {
        let (leases, snapshots) = (&leases, &snapshots);
        async move {
            let owner = leases.get(partition_key(p)).await?.map(|v| {
                sluice_core::format::holder_of(&v).unwrap_or_else(|e| format!("(unreadable: {e})"))
            });
            let manifest: Option<Manifest> = match snapshots {
                Some(kv) => read_manifest(kv, p).await?.0,
                None => None,
            };
            anyhow::Ok(PartitionRow {
                partition: p,
                owner,
                snapshot_age_ms: manifest
                    .as_ref()
                    .filter(|m| m.taken_at_ms > 0)
                    .map(|m| now_ms.saturating_sub(m.taken_at_ms)),
                snapshot_keys: manifest.map(|m| m.entries),
                decisions: None,
            })
        }
    }))
    .await?;
    let rows: Vec<PartitionRow> = rows
        .into_iter()
        .map(|r| PartitionRow {
            decisions: decisions.get(&r.partition).copied(),
            ..r
        })
        .collect();
    let unowned = rows
        .iter()
        .filter(|r| r.owner.is_none())
        .map(|r| r.partition)
        .collect();
    Ok(Status {
        partitions: rows,
        regions: regions(&workers),
        workers,
        unowned,
        replication: None,
    })
}

/// How many workers have a live heartbeat in the lease bucket.
async fn heartbeats(leases: &jetstream::kv::Store) -> Result<usize> {
    let mut keys = leases
        .keys()
        .await
        .context("cannot list the lease bucket")?;
    let mut alive = 0;
    while let Some(key) = keys.next().await {
        if matches!(LeaseKey::parse(&key?), Some(LeaseKey::Worker(_))) {
            alive += 1;
        }
    }
    Ok(alive)
}

/// Finds workers with `$SRV.PING.sluice-worker` (until `expected` have
/// answered, or `wait` is over) and asks each for its status.
async fn worker_statuses(
    client: &async_nats::Client,
    expected: usize,
    wait: Duration,
) -> Result<Vec<WorkerStatus>> {
    let mut replies = scatter(client, status_ping(), Bytes::new(), wait).await?;
    let mut ids = Vec::new();
    while expected == 0 || ids.len() < expected {
        let Some(msg) = replies.next().await else {
            break;
        };
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&msg.payload) {
            if let Some(id) = v["id"].as_str() {
                ids.push(id.to_string());
            }
        }
    }
    let asks = ids.iter().map(|id| async move {
        let info = tokio::time::timeout(wait, client.request(status_stats(id), "".into()))
            .await
            .ok()?
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&info.payload).unwrap_or_default();
        let data = v["endpoints"].get(0).and_then(|e| e.get("data"))?;
        serde_json::from_value::<WorkerStatus>(data.clone()).ok()
    });
    let mut statuses: Vec<WorkerStatus> = futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    statuses.sort_by(|a, b| a.worker.cmp(&b.worker));
    Ok(statuses)
}
