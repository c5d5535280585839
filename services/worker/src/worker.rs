//! The worker: joins the fleet, owns its share of partitions, and leaves
//! cleanly.
//!
//! The controller here is the only place that decides which partitions this
//! worker should own. It keeps a live view of the lease bucket (a KV watch
//! with history: heartbeats `w.*`, leases `p.*`), computes the balanced
//! assignment from the live workers ([`sluice_core::assignment`]), claims the
//! partitions assigned to it that nobody holds, and asks shards it should no
//! longer run to hand over. A partition nobody has held for
//! [`ORPHAN_GRACE`] is claimed by whoever sees it first, so a crashed
//! worker's partitions come back even while its heartbeat lingers.

use crate::alert_publisher::{Barrier, Publisher};
use crate::answering::Answering;
use crate::counters::KeyBound;
use crate::decide::Decider;
use crate::global::Link;
use crate::lease::{self, LeaseError};
use crate::outbox::Outbox;
use crate::probe;
use crate::routes::Routes;
use crate::service;
use crate::service::StatusSources;
use crate::shard::Owning;
use crate::shard::{self, Exit, ShardHandle, HANDOVER_TIMEOUT};
use crate::stats::{PolicyStatus, ShardsView, WorkerStats};
use crate::store::{self, StoreOptions, Stores};
use crate::usage::{store::UsageStore, UsageHistory};
use anyhow::{Context as _, Result};
use async_nats::jetstream::kv;
use futures::StreamExt;
use sluice_core::assignment;
use sluice_core::config::{Config, Durability};
use sluice_core::format;
use sluice_core::region::RegionName;
use sluice_core::storage::{partition_key, worker_key, LeaseKey};
use sluice_core::subject::{is_valid_worker_id, worker_batch_subject};
use sluice_core::time::{Clock, SystemClock};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::time::MissedTickBehavior;

/// How long a fresh lease watch may deliver nothing before the view counts
/// as current (an empty bucket delivers nothing).
const SETTLE: Duration = Duration::from_millis(300);

/// How long a partition may stay unowned before any worker claims it.
pub const ORPHAN_GRACE: Duration = Duration::from_millis(500);

/// Everything a worker needs to start.
pub struct WorkerOptions {
    pub nats_url: String,
    /// NATS credentials and TLS (SPEC §10); as the `worker` role of
    /// `sluice nats-config --auth` in a secured system.
    pub auth: sluice_client::NatsAuth,
    pub config: Config,
    /// Unique per process; generated when `None`.
    pub worker_id: Option<String>,
    /// JetStream replicas for the buckets and streams; `None` matches the
    /// NATS cluster ([`store::replicas`]).
    pub replicas: Option<usize>,
    pub clock: Arc<dyn Clock>,
    /// Serve Prometheus metrics on this address.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Called with `true` when the worker begins taking partitions over
    /// and with `false` once every one of them answers (or failed): the
    /// binary turns transparent huge pages off meanwhile (see
    /// `sluice worker`), which a library should not decide for its process.
    pub taking_over: Option<fn(bool)>,
    /// Trace the asks that carry a W3C `traceparent` with this tracer
    /// (`--otlp-endpoint`); `None` traces nothing.
    pub tracer: Option<sluice_traces::SdkTracer>,
}

impl WorkerOptions {
    pub fn new(nats_url: impl Into<String>, config: Config) -> WorkerOptions {
        WorkerOptions {
            nats_url: nats_url.into(),
            auth: sluice_client::NatsAuth::default(),
            config,
            worker_id: None,
            replicas: None,
            clock: Arc::new(SystemClock),
            metrics_listen: None,
            taking_over: None,
            tracer: None,
        }
    }
}

/// A fresh worker id: valid as a KV key and a NATS token.
pub fn new_worker_id() -> String {
    format!("w{}-{:08x}", std::process::id(), lease::run_nonce() as u32)
}

/// Runs a worker until `shutdown` completes, then hands its partitions over.
pub async fn run(opts: WorkerOptions, shutdown: impl Future<Output = ()>) -> Result<()> {
    let worker_id = opts.worker_id.clone().unwrap_or_else(new_worker_id);
    anyhow::ensure!(
        is_valid_worker_id(&worker_id),
        "the worker id {worker_id:?} is not valid: it names the worker's NATS subject \
         {}, so it must be 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'",
        worker_batch_subject("<worker-id>")
    );
    let config = Arc::new(opts.config);
    let nats = (&opts.auth, opts.nats_url.as_str());
    let connect = connect_options(&opts.auth, format!("sluice-worker {worker_id}"))?;
    let client = opts.auth.connect(&opts.nats_url, connect).await?;
    probe::check_mapping(&client, config.partitions).await?;
    let replicas = store::replicas(&client, opts.replicas);
    let stores = Stores::open(
        client.clone(),
        &StoreOptions {
            lease_ttl: config.lease_ttl,
            replicas,
            journal: config.durability == Durability::Journal,
            journal_max_age: Duration::from_secs(24 * 3600),
        },
    )
    .await?;
    let region = match &config.region {
        Some(name) => {
            Some(start_region(name, &worker_id, &client, &stores, &opts.clock, nats).await?)
        }
        None => None,
    };
    store::open_alerts(&stores.js, config.alert_retention, replicas).await?;
    let stats = Arc::new(WorkerStats::default());
    let usage = open_usage(&config, &stores, replicas).await?;
    let (outbox, outbox_tasks) = Outbox::start(
        client.clone(),
        &stores,
        &worker_id,
        stats.clone(),
        &config,
        usage.clone(),
    );
    let key_bound = KeyBound::new(config.max_keys);
    let decider = Decider::new(config.clone(), stats.clone(), outbox.recording());
    let (decider, link, link_task) = in_region(decider, region.as_ref(), &opts.clock);
    let decider = Arc::new(decider);
    let policy_status = Arc::new(PolicyStatus::default());
    // A worker started while the meta leader moves (its node stopped) gets
    // no answer for a few seconds: it waits, as for its streams.
    store::while_not_ready("the policies", || {
        crate::policy_watch::load(&stores.policies, &decider, &policy_status)
    })
    .await?;
    let policy_watch = tokio::spawn(crate::policy_watch::watch(
        stores.js.clone(),
        decider.clone(),
        policy_status.clone(),
    ));
    let answering = Arc::new(Answering {
        client: client.clone(),
        worker_id: worker_id.clone(),
        clock: opts.clock,
        partitions: config.partitions,
        decider,
        routes: Routes::default(),
        outbox,
        usage,
        link,
        tracer: opts.tracer.clone(),
    });
    let (alerts, alert_publisher) = Publisher::spawn(
        stores.js.clone(),
        journal_barrier(&answering),
        stats.clone(),
    );
    let owning = Arc::new(Owning {
        alerts,
        holder: lease::Holder::new(&worker_id),
        stores,
        lease_ttl: config.lease_ttl,
        snapshot_interval: config.snapshot_interval,
        key_bound: key_bound.clone(),
        max_ids: usize::try_from(config.max_ids).unwrap_or(usize::MAX),
        stats: stats.clone(),
    });
    let mut controller = Controller::new(answering.clone(), owning.clone(), opts.taking_over);
    let status = Arc::new(StatusSources {
        worker_id: worker_id.clone(),
        partitions: config.partitions,
        stats,
        policy_status,
        key_bound,
        shards: controller.shards_view(),
        region: region
            .as_ref()
            .map(|r| (r.name.to_string(), r.view.clone())),
        decider: answering.decider.clone(),
    });
    let service = service::start(&client, status.clone()).await?;
    let metrics = serve_metrics(opts.metrics_listen, status, &client).await?;
    let servers = crate::servers::Servers::spawn(&client, &answering);
    tracing::info!(worker = %worker_id, partitions = config.partitions, "worker started");
    let result = controller.run(shutdown).await;
    servers.abort();
    policy_watch.abort();
    // Every shard flushed the journal writer before it handed over.
    outbox_tasks.abort();
    // What it had not published yet, the final snapshots carry on.
    alert_publisher.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    let _ = service.stop().await;
    if let Some(task) = link_task {
        task.abort();
    }
    drop(region);
    let _ = client.drain().await;
    result
}

/// The options of the worker's NATS connections, named `name`. A server
/// that stops without closing the connection (frozen, partitioned) is
/// noticed only by unanswered pings: every 60 s by default, so a worker
/// stayed on a frozen node for a minute or more (docs/RELIABILITY.md). With
/// a ping a second it moves to another server after a few seconds.
fn connect_options(
    auth: &sluice_client::NatsAuth,
    name: String,
) -> Result<async_nats::ConnectOptions> {
    Ok(auth
        .connect_options()?
        .name(name)
        .connection_timeout(Duration::from_secs(5))
        .ping_interval(WORKER_PING_INTERVAL))
}

/// Joins this worker to its region `name` ([`crate::region::start`]),
/// with a link connection of its own: the worker's credentials (`nats`),
/// a link inbox prefix.
async fn start_region(
    name: &RegionName,
    worker_id: &str,
    client: &async_nats::Client,
    stores: &Stores,
    clock: &Arc<dyn Clock>,
    (auth, nats_url): (&sluice_client::NatsAuth, &str),
) -> Result<crate::region::Region> {
    let link_name = format!("sluice-worker {worker_id} link");
    crate::region::start(
        name.clone(),
        worker_id,
        client,
        &stores.js,
        clock.clone(),
        |inbox| async {
            let link = connect_options(auth, link_name)?.custom_inbox_prefix(inbox);
            Ok(auth.connect(nats_url, link).await?)
        },
    )
    .await
}

/// The usage history, when usage is recorded (`[usage] enabled`).
async fn open_usage(
    config: &Config,
    stores: &Stores,
    replicas: usize,
) -> Result<Option<Arc<UsageHistory>>> {
    if !config.usage.enabled {
        return Ok(None);
    }
    let store = UsageStore::open(stores.js.clone(), &config.usage.tiers, replicas).await?;
    Ok(Some(Arc::new(UsageHistory::new(store, config))))
}

/// With a region: the decider of that region, and the link to the other
/// regions that global limits use (the shards' handle, and its task).
fn in_region(
    decider: Decider,
    region: Option<&crate::region::Region>,
    clock: &Arc<dyn Clock>,
) -> (Decider, Option<Link>, Option<tokio::task::JoinHandle<()>>) {
    let Some(region) = region else {
        return (decider, None, None);
    };
    let (link, task) = crate::global_link::start(region.link.clone(), clock.clone());
    (
        decider.in_region(region.name.clone()),
        Some(link),
        Some(task),
    )
}

/// In journal mode an alert goes out once the journal holds the count
/// that reached it (crate::alert_publisher): the barrier it waits on.
fn journal_barrier(answering: &Arc<Answering>) -> Option<Barrier> {
    answering.outbox.is_journal().then(|| {
        let answering = answering.clone();
        let barrier: Barrier = Arc::new(move || {
            let answering = answering.clone();
            Box::pin(async move { answering.outbox.flush().await })
        });
        barrier
    })
}

/// Serves Prometheus metrics on `listen`, if set, on a task of its own.
async fn serve_metrics(
    listen: Option<std::net::SocketAddr>,
    status: Arc<StatusSources>,
    client: &async_nats::Client,
) -> Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    tracing::info!(%addr, "serving /metrics, /livez and /readyz");
    let client = client.clone();
    Ok(Some(tokio::spawn(crate::metrics::serve(
        listener, status, client,
    ))))
}

/// This worker's view of the lease bucket.
#[derive(Default)]
struct View {
    /// Workers with a heartbeat in the bucket, and when we last saw one.
    workers: BTreeMap<String, Instant>,
    owners: HashMap<u32, String>,
    unowned_since: HashMap<u32, Instant>,
    current: bool,
}

impl View {
    fn apply(&mut self, entry: &kv::Entry, partitions: u32) {
        let present = entry.operation == kv::Operation::Put;
        match LeaseKey::parse(&entry.key) {
            Some(LeaseKey::Worker(id)) => {
                if present {
                    self.workers.insert(id.to_string(), Instant::now());
                } else {
                    self.workers.remove(id);
                }
            }
            Some(LeaseKey::Partition(p)) if p < partitions => {
                if present {
                    // An owner this release cannot read still owns the
                    // partition: no one else can take the lease meanwhile.
                    let owner = format::holder_of(&entry.value).unwrap_or_else(|e| {
                        tracing::error!(partition = p, "the lease of partition {p}: {e}");
                        String::new()
                    });
                    self.owners.insert(p, owner);
                    self.unowned_since.remove(&p);
                } else {
                    self.owners.remove(&p);
                    self.unowned_since.insert(p, Instant::now());
                }
            }
            _ => {}
        }
    }
}

struct Controller {
    answering: Arc<Answering>,
    owning: Arc<Owning>,
    view: View,
    shards: BTreeMap<u32, ShardHandle>,
    stopping: BTreeSet<u32>,
    shards_view: ShardsView,
    started: Instant,
    /// Partitions claimed since the last summary line, and when the first
    /// of them was claimed: one INFO line once they all answer (or failed),
    /// not one per partition.
    starting: Option<(Instant, Vec<u32>)>,
    /// [`WorkerOptions::taking_over`].
    taking_over: Option<fn(bool)>,
    /// Keys forgotten at the key bound as of the last warning, and when it
    /// was given: one line a minute at most while it goes on.
    evictions_reported: (u64, Option<Instant>),
}

/// How often a worker pings its NATS server (see [`run`]).
const WORKER_PING_INTERVAL: Duration = Duration::from_secs(1);

/// How often a worker forgetting keys at its bound says so, at most.
const EVICTION_REPORT_EVERY: Duration = Duration::from_secs(60);

impl Controller {
    fn new(
        answering: Arc<Answering>,
        owning: Arc<Owning>,
        taking_over: Option<fn(bool)>,
    ) -> Controller {
        Controller {
            answering,
            owning,
            view: View::default(),
            shards: BTreeMap::new(),
            stopping: BTreeSet::new(),
            shards_view: ShardsView::default(),
            started: Instant::now(),
            starting: None,
            taking_over,
            evictions_reported: (0, None),
        }
    }

    fn shards_view(&self) -> ShardsView {
        self.shards_view.clone()
    }

    async fn run(&mut self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let leases = self.owning.stores.leases.clone();
        let me = self.answering.worker_id.clone();
        let ttl = self.owning.lease_ttl;
        let heartbeat_key = worker_key(&me);
        store::while_not_ready("the lease bucket", || async {
            leases
                .put(&heartbeat_key, self.owning.holder.value())
                .await
                .context("cannot register in the lease bucket")
        })
        .await?;
        let stats = self.owning.stats.clone();
        stats.readiness.joined(ttl);
        let mut watch = Some(
            store::while_not_ready("the lease bucket", || async {
                leases
                    .watch_with_history(">")
                    .await
                    .context("cannot watch the lease bucket")
            })
            .await?,
        );
        // The watch delivers at least this worker's own heartbeat every
        // renew interval; silent for two of them (and a margin), it is
        // stalled, not quiet: a watch whose consumer lived on a NATS node
        // that froze or a stream leader that moved can stay silent without
        // an error for 10-20 s (async-nats re-creates it with a back-off).
        let watch_stalled_after = lease::renew_interval(ttl) * 2 + Duration::from_millis(500);
        let mut last_watch_entry = Instant::now();
        let mut heartbeat = tokio::time::interval(lease::renew_interval(ttl));
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        // An empty bucket delivers nothing: start acting after a short wait.
        let settle = tokio::time::sleep(SETTLE);
        tokio::pin!(settle);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                entry = async { watch.as_mut().expect("guarded").next().await }, if watch.is_some() => match entry {
                    Some(Ok(entry)) => {
                        last_watch_entry = Instant::now();
                        if entry.delta == 0 {
                            self.view.current = true;
                        }
                        self.view.apply(&entry, self.answering.partitions);
                        if self.view.current {
                            self.reconcile().await;
                        }
                    }
                    // The library would re-create its consumer itself, with
                    // a back-off that reaches 10 s while the cluster has no
                    // JetStream leader; meanwhile freed leases go unseen and
                    // unclaimed. So the watch is dropped and re-created on
                    // the next tick, and the view is read afresh.
                    Some(Err(e)) => {
                        tracing::warn!("lease watch failed: {e}; re-creating it");
                        watch = None;
                    }
                    None => {
                        tracing::warn!("lease watch ended; re-creating it");
                        watch = None;
                    }
                },
                _ = heartbeat.tick() => match leases.put(&heartbeat_key, self.owning.holder.value()).await {
                    Ok(_) => stats.readiness.heartbeat_stored(),
                    Err(e) => tracing::warn!("heartbeat failed: {e}"),
                },
                _ = &mut settle, if !self.view.current => {
                    self.view.current = true;
                    self.reconcile().await;
                }
                _ = tick.tick() => {
                    if watch.is_some() && last_watch_entry.elapsed() > watch_stalled_after {
                        tracing::warn!(
                            silent_ms = last_watch_entry.elapsed().as_millis() as u64,
                            "lease watch delivered not even this worker's heartbeat; re-creating it"
                        );
                        watch = None;
                    }
                    if watch.is_none() {
                        match leases.watch_with_history(">").await {
                            Ok(w) => {
                                tracing::info!("lease watch re-created; reading the leases afresh");
                                watch = Some(w);
                                last_watch_entry = Instant::now();
                                self.view = View::default();
                                settle.as_mut().reset(tokio::time::Instant::now() + SETTLE);
                            }
                            Err(e) => tracing::debug!("cannot re-create the lease watch yet: {e}"),
                        }
                    }
                    self.reap();
                    self.summarize_starts();
                    self.report_evictions();
                    self.answering.outbox.forget_unused_tails();
                    if self.view.current {
                        self.reconcile().await;
                    }
                }
            }
        }
        self.shutdown().await;
        let _ = leases.delete(&heartbeat_key).await;
        Ok(())
    }

    /// While keys are forgotten at the key bound, says so once a minute:
    /// limits of the forgotten keys start over, which an operator should
    /// know (and may answer with a larger `max_keys` or more workers).
    fn report_evictions(&mut self) {
        let bound = &self.owning.key_bound;
        let evicted = bound.evicted();
        let (reported, at) = self.evictions_reported;
        if evicted == reported || at.is_some_and(|at| at.elapsed() < EVICTION_REPORT_EVERY) {
            return;
        }
        tracing::warn!(
            max_keys = bound.max(),
            held = bound.held(),
            forgotten = evicted - reported,
            "at the key bound: live counters were forgotten to make room for new keys (their limits start over); raise max_keys or add workers if these are real users"
        );
        self.evictions_reported = (evicted, Some(Instant::now()));
    }

    /// Once every partition claimed since the last summary answers (or its
    /// shard ended), says so in one line: how many, with how many keys
    /// restored, how long it took, and how many this worker owns now.
    fn summarize_starts(&mut self) {
        let Some((since, claimed)) = &self.starting else {
            return;
        };
        let mut answering = 0;
        let mut keys = 0;
        for p in claimed {
            match self.shards.get(p) {
                Some(h) if h.stats.answering.load(Ordering::Relaxed) => {
                    answering += 1;
                    keys += h.stats.keys.load(Ordering::Relaxed);
                }
                Some(h) if !h.join.is_finished() => return,
                _ => {}
            }
        }
        tracing::info!(
            taken = answering,
            failed = claimed.len() - answering,
            keys_restored = keys,
            took_ms = since.elapsed().as_millis() as u64,
            owned = self.shards.len() - self.stopping.len(),
            "partitions taken over and answering"
        );
        self.starting = None;
        if let Some(hook) = self.taking_over {
            hook(false);
        }
    }

    /// Forgets shards that ended on their own (lease lost, failed start).
    fn reap(&mut self) {
        let ended: Vec<u32> = self
            .shards
            .iter()
            .filter(|(_, h)| h.join.is_finished())
            .map(|(p, _)| *p)
            .collect();
        for p in ended {
            self.shards.remove(&p);
            self.stopping.remove(&p);
            self.shards_view
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&p);
        }
    }

    async fn reconcile(&mut self) {
        self.owning.stats.readiness.view_current();
        let answering = self.answering.clone();
        let me = answering.worker_id.as_str();
        let partitions = answering.partitions;
        // A worker whose heartbeats stopped (two missed, at ttl/3 each) is
        // about to expire: assigning it partitions would hand them to a dead
        // worker, so it is left out already.
        let fresh = lease::renew_interval(self.owning.lease_ttl) * 2 + Duration::from_millis(250);
        let now = Instant::now();
        let mut live: Vec<&str> = self
            .view
            .workers
            .iter()
            .filter(|(_, seen)| now.duration_since(**seen) <= fresh)
            .map(|(id, _)| id.as_str())
            .collect();
        if !live.contains(&me) {
            live.push(me);
        }
        let owners = assignment::assign(partitions, &live);
        // Hand over what is now someone else's.
        let mut handing: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (&p, handle) in self.shards.iter_mut() {
            let to = live[owners[p as usize]];
            if to != me && !self.stopping.contains(&p) {
                tracing::debug!(partition = p, to, "handing over");
                handle.stop();
                self.stopping.insert(p);
                handing.entry(to).or_default().push(p);
            }
        }
        for (to, ps) in handing {
            tracing::info!(to, partitions = ps.len(), "handing partitions over");
        }
        // Claim what is ours and free, and orphans nobody claimed in time.
        let to_claim: Vec<u32> = (0..partitions)
            .filter(|p| !self.shards.contains_key(p) && !self.view.owners.contains_key(p))
            .filter(|p| {
                let mine = live[owners[*p as usize]] == me;
                let orphaned = self
                    .view
                    .unowned_since
                    .get(p)
                    .map(|since| now.duration_since(*since) >= ORPHAN_GRACE)
                    .unwrap_or(now.duration_since(self.started) >= ORPHAN_GRACE * 4);
                mine || orphaned
            })
            .collect();
        // All at once: one round trip for the lot, not one per partition
        // (a worker taking over 64 partitions spent ~0.35 s claiming them
        // one by one while the first shards restored on the same thread).
        let claims = to_claim.into_iter().map(|p| {
            let owning = &self.owning;
            async move {
                let key = partition_key(p);
                let result = lease::acquire(
                    &owning.stores.leases,
                    &key,
                    &owning.holder,
                    owning.lease_ttl,
                )
                .await;
                (p, result)
            }
        });
        for (p, result) in futures::future::join_all(claims).await {
            self.claimed(p, result);
        }
    }

    /// Starts the shard of `p` if its lease was acquired.
    fn claimed(&mut self, p: u32, result: Result<lease::Lease, LeaseError>) {
        let (answering, owning) = (&self.answering, &self.owning);
        match result {
            Ok(lease) => {
                tracing::debug!(partition = p, revision = lease.revision, "lease acquired");
                owning
                    .stats
                    .meters
                    .lease(crate::stats::LeaseEvent::Acquired);
                self.view.owners.insert(p, answering.worker_id.clone());
                if self.starting.is_none() {
                    if let Some(hook) = self.taking_over {
                        hook(true);
                    }
                }
                let handle = shard::spawn(answering.clone(), owning.clone(), p, lease);
                self.starting
                    .get_or_insert_with(|| (Instant::now(), Vec::new()))
                    .1
                    .push(p);
                self.shards_view
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(p, handle.stats.clone());
                self.shards.insert(p, handle);
            }
            Err(LeaseError::Taken) => {}
            Err(LeaseError::Transient(e)) => tracing::warn!(partition = p, "cannot claim: {e}"),
        }
    }

    /// Hands every partition over and waits (bounded) for the shards to finish.
    async fn shutdown(&mut self) {
        self.owning.stats.readiness.stopping();
        for handle in self.shards.values_mut() {
            handle.stop();
        }
        let shards = std::mem::take(&mut self.shards);
        let waits = shards.into_values().map(|h| async move {
            let p = h.partition;
            match tokio::time::timeout(HANDOVER_TIMEOUT, h.join).await {
                Ok(Ok(Exit::Released)) => {}
                Ok(Ok(exit)) => {
                    tracing::warn!(partition = p, ?exit, "partition ended without a handover")
                }
                Ok(Err(e)) => tracing::error!(partition = p, "shard task failed: {e}"),
                Err(_) => {
                    tracing::error!(partition = p, "handover timed out; its lease will expire")
                }
            }
        });
        futures::future::join_all(waits).await;
        tracing::info!("all partitions handed over");
    }
}
