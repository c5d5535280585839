//! The JetStream resources a worker uses, created on first use by whichever
//! worker starts first, and opened by the rest. Their names are spelled in
//! [`sluice_core::storage`].
//!
//! - `sluice-leases` (KV): `w.<worker>` heartbeats and `p.<partition>` leases.
//!   `history = 1` and `max_age = lease_ttl`: every renewal is a new message,
//!   which restarts the age clock, and an unrenewed key is removed by the
//!   server. `limit_markers` makes that removal visible to watchers as a
//!   `Purge`, so survivors react at once instead of polling. (Per-key TTLs via
//!   `create_with_ttl` are avoided: async-nats 0.51 drops the TTL when it
//!   creates over a tombstone; see docs/ARCHITECTURE.md.)
//! - `sluice-snapshots` (KV): per partition a manifest `p.<n>` and chunks
//!   `p.<n>.g<gen>.c<i>`.
//! - `sluice-policies` (KV): live policies and overrides (SPEC §7),
//!   watched by [`crate::policy_watch`]. It keeps [`POLICY_HISTORY`] values
//!   per key, so a reader that starts after an invalid value finds the
//!   valid one before it; a bucket made with less (by an older worker) is
//!   raised to it when a worker opens it ([`keep_policy_history`]).
//! - `SLUICE_JOURNAL` (stream, `durability = "journal"` only): counted
//!   requests, each worker's on `sluice.journal.w.<worker>`.
//! - `SLUICE_ALERTS` (stream): threshold alerts on `rl.alert.<policy>.<key>`
//!   (SPEC §14), kept `alert_retention`; their message ids are
//!   remembered [`ALERT_DUPLICATE_WINDOW`] ([`open_alerts`]).
//!
//! A worker may start before its JetStream cluster can place them: with no
//! meta leader yet, or too few peers for `replicas` (`no suitable peers for
//! placement (10005)`, seen when a cluster and its workers start together).
//! Opening waits for that, up to [`READY_TIMEOUT`] ([`while_not_ready`]);
//! any other error stops the worker at once.
//!
//! Entries are read from the stream's leader ([`entry`], [`create`]), not
//! with the direct gets async-nats uses, which any replica answers: a
//! replica on a frozen NATS node keeps its place among those that answer
//! (the routes to a frozen node stay up), so about one read in three went
//! unanswered for as long as the node was frozen, and takeovers, which read
//! manifests, chunks and lease tombstones, failed until it woke up
//! (docs/RELIABILITY.md). A frozen leader is replaced within seconds, and
//! a leader's read is never stale.

use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream::{self, kv, stream, Context};
use bytes::Bytes;
use sluice_core::replication::{self, ClusterView};
use sluice_core::storage::{
    bucket_stream, ALERT_DUPLICATE_WINDOW, ALERT_STREAM, JOURNAL_STREAM, JOURNAL_SUBJECTS,
    LEASE_BUCKET, POLICY_BUCKET, POLICY_HISTORY, SNAPSHOT_BUCKET,
};
use std::future::Future;
use std::time::Duration;

/// How the JetStream resources are laid out; `replicas` is 1 on a single
/// server and 3 in the compose cluster.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub lease_ttl: Duration,
    pub replicas: usize,
    pub journal: bool,
    /// How long journal records are kept at most. Records are also purged
    /// once a snapshot covers them; this is only the backstop.
    pub journal_max_age: Duration,
}

/// The replicas this worker keeps its state with: `given` (`--replicas`),
/// or what the NATS cluster it is connected to can give
/// ([`sluice_core::replication`]); said in the log either way.
pub fn replicas(client: &async_nats::Client, given: Option<usize>) -> usize {
    let info = client.server_info();
    let view = ClusterView::from_info(info.cluster.as_deref(), &info.connect_urls);
    let choice = replication::choose(given, &view);
    tracing::info!("state kept with {choice}");
    choice.replicas
}

/// Handles to the buckets and the stream.
#[derive(Clone)]
pub struct Stores {
    pub js: Context,
    pub leases: kv::Store,
    pub snapshots: kv::Store,
    /// The stream under `snapshots`, kept to purge old generations without
    /// looking it up for every snapshot.
    pub snapshot_stream: stream::Stream,
    pub journal: Option<stream::Stream>,
    /// Live policies and overrides (SPEC §7), written by `sluice policy`.
    pub policies: kv::Store,
}

impl Stores {
    /// Opens (or creates) everything, once JetStream can place it.
    pub async fn open(client: async_nats::Client, opts: &StoreOptions) -> Result<Stores> {
        let js = jetstream::ContextBuilder::new()
            .timeout(Duration::from_secs(5))
            .build(client);
        while_not_ready("the worker's buckets", || Stores::open_once(&js, opts)).await
    }

    async fn open_once(js: &Context, opts: &StoreOptions) -> Result<Stores> {
        let js = js.clone();
        let leases = open_bucket(
            &js,
            kv::Config {
                bucket: LEASE_BUCKET.into(),
                description: "sluice partition leases and worker heartbeats".into(),
                history: 1,
                max_age: opts.lease_ttl,
                num_replicas: opts.replicas,
                limit_markers: Some(Duration::from_secs(10)),
                ..Default::default()
            },
        )
        .await?;
        let actual = leases.status().await?.max_age();
        if actual != opts.lease_ttl {
            bail!(
                "the lease bucket {LEASE_BUCKET} expires leases after {actual:?}, but this worker's lease_ttl is {:?}; \
                 give every worker the same lease_ttl, or delete the bucket while no worker runs",
                opts.lease_ttl
            );
        }
        let policies = open_bucket(
            &js,
            kv::Config {
                bucket: POLICY_BUCKET.into(),
                description: "sluice policies and per-key overrides (SPEC §7)".into(),
                history: POLICY_HISTORY,
                num_replicas: opts.replicas,
                ..Default::default()
            },
        )
        .await?;
        keep_policy_history(&js).await?;
        let snapshots = open_bucket(
            &js,
            kv::Config {
                bucket: SNAPSHOT_BUCKET.into(),
                description: "sluice partition snapshots".into(),
                history: 1,
                num_replicas: opts.replicas,
                ..Default::default()
            },
        )
        .await?;
        let snapshot_stream = js
            .get_stream(bucket_stream(SNAPSHOT_BUCKET))
            .await
            .with_context(|| {
                format!("cannot open the stream of the KV bucket {SNAPSHOT_BUCKET}")
            })?;
        let journal = if opts.journal {
            Some(
                js.get_or_create_stream(stream::Config {
                    name: JOURNAL_STREAM.into(),
                    description: Some(
                        "sluice counted requests since each partition's last snapshot".into(),
                    ),
                    subjects: vec![JOURNAL_SUBJECTS.into()],
                    max_age: opts.journal_max_age,
                    num_replicas: opts.replicas,
                    storage: stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .context("cannot open the journal stream")?,
            )
        } else {
            None
        };
        Ok(Stores {
            js,
            leases,
            policies,
            snapshots,
            snapshot_stream,
            journal,
        })
    }
}

/// Creates the alerts stream, or brings its retention and replicas to
/// this worker's config (the last worker started with a new
/// `alert_retention` sets it; the alerts it holds stay).
pub async fn open_alerts(js: &Context, retention: Duration, replicas: usize) -> Result<()> {
    let config = stream::Config {
        name: ALERT_STREAM.into(),
        description: Some("sluice threshold alerts (SPEC §14)".into()),
        subjects: vec![sluice_core::subject::alert_filter(None)],
        max_age: retention,
        duplicate_window: ALERT_DUPLICATE_WINDOW.min(retention),
        num_replicas: replicas,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    while_not_ready("the alerts stream", || async {
        js.create_or_update_stream(config.clone())
            .await
            .map(|_| ())
            .with_context(|| format!("cannot open the stream {ALERT_STREAM}"))
    })
    .await
}

async fn open_bucket(js: &Context, config: kv::Config) -> Result<kv::Store> {
    let name = config.bucket.clone();
    if let Ok(store) = js.get_key_value(&name).await {
        return Ok(store);
    }
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another worker created it between our get and create.
        Err(create_err) => js.get_key_value(&name).await.map_err(|e| {
            anyhow!("cannot create or open the KV bucket {name}: {create_err} ({e}); is JetStream enabled on the server?")
        }),
    }
}

/// How long opening the JetStream resources waits for a cluster that
/// cannot place them yet: a 3-node cluster starting together elects its
/// meta leader and learns its peers within a few seconds.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// `open` (which opens `what`), tried again while it fails with an error
/// of a JetStream that is not ready yet ([`not_ready`]), until
/// [`READY_TIMEOUT`]; each wait is logged.
pub async fn while_not_ready<T, F>(what: &str, mut open: impl FnMut() -> F) -> Result<T>
where
    F: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        match open().await {
            Err(e) if not_ready(&e) && tokio::time::Instant::now() < deadline => {
                tracing::warn!("cannot reach {what} yet, waiting for JetStream: {e:#}");
                // Not a synchronisation: the pace of tries while the cluster forms.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            result => return result,
        }
    }
}

/// Whether `e` says JetStream cannot serve the request *yet*: no peers to
/// place the replicas on (10005), no cluster or meta leader (10008), no
/// answer in time, no stream leader yet. Read from the text: async-nats keeps the server's code
/// inside error kinds the context wraps away, and every open step has its
/// own error type.
fn not_ready(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}").to_lowercase();
    [
        "error code 10005",
        "error code 10008",
        "timed out",
        "no answer within",
        "jetstream unavailable",
        // A stream whose leader is not elected yet (a cluster that just got
        // its quorum back) answers nobody: "no stream found for given
        // subject", or no responders.
        "no stream found",
        "no responders",
    ]
    .iter()
    .any(|mark| text.contains(mark))
}

/// Raises the history of a `sluice-policies` bucket made with less than
/// [`POLICY_HISTORY`] (older workers made it with 5). Only the limit
/// changes: the values it kept stay.
async fn keep_policy_history(js: &Context) -> Result<()> {
    let name = bucket_stream(POLICY_BUCKET);
    let mut stream = js
        .get_stream(&name)
        .await
        .with_context(|| format!("cannot open the stream of the KV bucket {POLICY_BUCKET}"))?;
    let mut config = stream.info().await?.config.clone();
    if config.max_messages_per_subject >= POLICY_HISTORY {
        return Ok(());
    }
    tracing::info!(
        from = config.max_messages_per_subject,
        to = POLICY_HISTORY,
        "raising the history the policy bucket keeps per key"
    );
    config.max_messages_per_subject = POLICY_HISTORY;
    js.update_stream(&config)
        .await
        .with_context(|| format!("cannot raise the history of {POLICY_BUCKET}"))?;
    Ok(())
}

/// How long one JetStream request of a takeover (a lease claim, a
/// manifest, a chunk, the journal's state) may take: a few milliseconds
/// normally, so when a stream's leader froze, the request fails soon after
/// and the takeover tries again with the new leader, instead of waiting
/// out the context's 5 s.
pub const TAKEOVER_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// `request` (`what` names it in the error), given up after
/// [`TAKEOVER_REQUEST_TIMEOUT`].
pub async fn takeover_request<T, E>(
    what: &str,
    request: impl Future<Output = std::result::Result<T, E>>,
) -> Result<T>
where
    E: Into<anyhow::Error>,
{
    match tokio::time::timeout(TAKEOVER_REQUEST_TIMEOUT, request).await {
        Ok(result) => result.map_err(|e| e.into().context(format!("cannot {what}"))),
        Err(_) => Err(anyhow!(
            "cannot {what}: no answer within {TAKEOVER_REQUEST_TIMEOUT:?}"
        )),
    }
}

/// The latest entry of `key` (a put, or the delete, purge or expiry
/// marker that removed it), read from the stream's leader; `None` if the
/// key never held anything.
pub async fn entry(store: &kv::Store, key: &str) -> Result<Option<kv::Entry>> {
    let subject = format!("{}{key}", store.prefix);
    let message = match store.stream.get_last_raw_message_by_subject(&subject).await {
        Ok(m) => m,
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => return Ok(None),
        Err(e) => {
            return Err(anyhow!(
                "cannot read {key} in the bucket {}: {e}",
                store.name
            ))
        }
    };
    Ok(Some(kv::Entry {
        bucket: store.name.clone(),
        key: key.to_string(),
        operation: operation_of(&message.headers),
        value: message.payload,
        revision: message.sequence,
        delta: 0,
        created: message.time,
        seen_current: false,
    }))
}

/// What a KV message did, from its headers (as async-nats reads them).
fn operation_of(headers: &async_nats::HeaderMap) -> kv::Operation {
    if let Some(op) = headers.get("KV-Operation") {
        return op.as_str().parse().unwrap_or(kv::Operation::Put);
    }
    match headers.get("Nats-Marker-Reason").map(|r| r.as_str()) {
        Some("MaxAge" | "Purge") => kv::Operation::Purge,
        Some("Remove") => kv::Operation::Delete,
        _ => kv::Operation::Put,
    }
}

/// Creates `key` with `value` unless it holds a value (a deleted, purged or
/// expired key is created again), as `kv::Store::create` does but reading
/// the key from the leader ([`entry`]). Returns the new revision, or `None`
/// if the key holds a value.
pub async fn create(store: &kv::Store, key: &str, value: Bytes) -> Result<Option<u64>> {
    let first = match store.update(key, value.clone(), 0).await {
        Ok(revision) => return Ok(Some(revision)),
        Err(e) => e,
    };
    match entry(store, key).await? {
        Some(e) if e.operation != kv::Operation::Put => {
            match store.update(key, value, e.revision).await {
                Ok(revision) => Ok(Some(revision)),
                // Someone else created it in between.
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
                Err(e) => Err(anyhow!(
                    "cannot create {key} in the bucket {}: {e}",
                    store.name
                )),
            }
        }
        Some(_) => Ok(None),
        None => Err(anyhow!(
            "cannot create {key} in the bucket {}: {first}",
            store.name
        )),
    }
}
