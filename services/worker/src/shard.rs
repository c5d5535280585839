//! The task of one owned partition: restores it, answers for it, snapshots
//! it, keeps its lease, and hands it over. What the partition's owner keeps
//! and the rules for when and what to store are [`crate::owner`]'s; this
//! task moves the messages, timers and store calls those rules ask for.
//!
//! One task per owned partition. It decides the partition's requests (worker
//! batches decide on the same counters while its route is open; each key
//! under its bucket's lock), without locks across keys.
//! Its loop, in priority order: a stop request (handover or shutdown), the
//! lease deadline (stop answering before the lease can expire), renewal,
//! snapshot, and finally requests, taken in batches of whatever is already
//! waiting, decided by the decision core ([`crate::decide`]) and handed to
//! the worker's [`crate::outbox`] (which, in journal mode, sends them once
//! their records are stored). Worker batches ([`crate::worker_batch`])
//! decide on its counters from their own tasks while its route is open.

use crate::alerting::Sink;
use crate::answering::Answering;
use crate::counters::Counters;
use crate::counters::KeyBound;
use crate::kept::Carried;

use crate::journal;
use crate::lease::{self, Lease, LeaseError};
use crate::owner::{Found, Owner, Snapshot, Write};

use crate::snapshot::{self, Manifest};
use crate::stats::WorkerStats;
use crate::stats::{secs, LeaseEvent, ShardStats};
use crate::store;
use crate::store::Stores;
use anyhow::{Context as _, Result};
use async_nats::Subscriber;
use futures::stream::SelectAll;
use sluice_core::subject::{link_partition_subjects, owner_subjects};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How many waiting requests one batch takes at most.
const MAX_BATCH: usize = 256;

/// How long a failed takeover is tried again while its lease is kept
/// ([`Shard::try_again`]): longer than nats-server takes to replace a
/// frozen stream leader.
const TAKEOVER_RETRIES_FOR: Duration = Duration::from_secs(15);

/// The pause before a failed takeover is tried again.
const TAKEOVER_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// What to do after a failed takeover attempt.
enum Again {
    Yes,
    /// Another worker holds the lease now.
    LeaseLost,
    /// Give the partition up (release the lease).
    No,
}

/// Why a shard ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Asked to stop; it snapshotted and released the lease.
    Released,
    /// Lost the lease (expired or taken): it stopped answering and dropped its state.
    Lost,
    /// Could not start (restore or subscribe failed); the lease was released.
    Failed,
}

pub struct ShardHandle {
    pub partition: u32,
    pub stats: Arc<ShardStats>,
    stop: Option<oneshot::Sender<()>>,
    pub join: JoinHandle<Exit>,
}

impl ShardHandle {
    /// Asks the shard to hand its partition over (snapshot, release).
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// What owning a partition needs beyond what answering does
/// ([`Answering`]): the stores, the lease's length, the snapshot interval,
/// the worker's key bound and stats.
pub struct Owning {
    /// What this run writes under its leases and heartbeat.
    pub holder: lease::Holder,
    pub stores: Stores,
    pub lease_ttl: Duration,
    pub snapshot_interval: Duration,
    pub key_bound: Arc<KeyBound>,
    /// The most ask ids a partition remembers (`max_ids`, SPEC §16).
    pub max_ids: usize,
    pub stats: Arc<WorkerStats>,
    /// Where the partitions' threshold alerts go (SPEC §14).
    pub alerts: Sink,
}

impl Owning {
    /// Fresh counters for a partition: within the worker's key bound,
    /// remembering at most `max_ids` ask ids, sending their alerts to its
    /// publisher.
    fn counters(&self) -> Counters {
        Counters::within(self.key_bound.clone())
            .remembering(self.max_ids)
            .alerting(self.alerts.clone())
    }
}

/// Starts owning `partition` under `lease`.
pub fn spawn(
    answering: Arc<Answering>,
    owning: Arc<Owning>,
    partition: u32,
    lease: Lease,
) -> ShardHandle {
    let (stop_tx, stop_rx) = oneshot::channel();
    let stats = Arc::new(ShardStats::default());
    let join = tokio::spawn(Shard::run(
        answering,
        owning,
        partition,
        lease,
        stop_rx,
        stats.clone(),
    ));
    ShardHandle {
        partition,
        stats,
        stop: Some(stop_tx),
        join,
    }
}

struct Shard {
    answering: Arc<Answering>,
    owning: Arc<Owning>,
    lease: Lease,
    /// The partition's state and the rules that carry it ([`crate::owner`]).
    owner: Owner,
    /// Journal mode: what the takeover replays, kept for the usage replay
    /// that follows once the partition answers ([`Shard::start_usage_replay`]).
    usage_replay: Option<journal::Since>,
    /// The lease's `valid_until`, kept current across renewals for the
    /// usage flush on its own task: it stores nothing once the lease may
    /// have ended (a worker frozen past it must not overwrite the next
    /// owner's records when it wakes).
    lease_valid_until: Arc<Mutex<std::time::Instant>>,
}

type Renewal = Pin<Box<dyn Future<Output = Result<Lease, LeaseError>> + Send>>;
type SnapshotJob = JoinHandle<Result<(Manifest, u64)>>;
type UsageJob = JoinHandle<Result<()>>;

impl Shard {
    /// Restores the partition and subscribes to its subjects.
    async fn start(&mut self) -> Result<SelectAll<Subscriber>> {
        let partition = self.owner.partition();
        let kv = &self.owning.stores.snapshots;
        let now = self.answering.clock.now();
        let phase = std::time::Instant::now();
        let (manifest, rev) = snapshot::read_manifest(kv, partition).await?;
        let mut found = Found { manifest, rev };
        let t_manifest = phase.elapsed();
        self.owner.check_found(&found)?;
        let restore = async {
            let Some(m) = &found.manifest else {
                return Ok(None);
            };
            let (entries, carried) = snapshot::read_entries(kv, partition, m).await?;
            // Inserting is most of a restore's CPU: off the answering thread,
            // and on the other core while another partition restores. (Not
            // `blocking::run`: a takeover restores partitions back to back,
            // and collecting after each made the next fault its pages in
            // again: 1.6 s instead of 0.9-1.1 until all 64 answered.)
            let counters = self.owner.counters().clone();
            let decider = self.answering.decider.clone();
            let idle_at = m.idle_judged_at(now);
            tokio::task::spawn_blocking(move || {
                let policies = decider.policies();
                let rules = deciding::Deciding {
                    decider: &decider,
                    policies: &policies,
                };
                counters.import(entries, idle_at, |name, key| rules.kept_under(name, key))
            })
            .await
            .context("restoring the counters panicked")?;
            anyhow::Ok(carried)
        };
        // The journal's tail is read while the snapshot is restored: the
        // first partition of a takeover reads it for all, so its requests
        // go out first, ahead of the snapshot chunks of every partition.
        let none = Manifest::default();
        let journal = self
            .answering
            .outbox
            .journal_since(partition, found.manifest.as_ref().unwrap_or(&none));
        let (since, restored) = tokio::join!(journal, restore);
        // State carried in the chunks (format 3) joins its manifest.
        if let (Some(carried), Some(m)) = (restored?, found.manifest.as_mut()) {
            m.carried = carried;
        }
        let since = since?;
        let t_restored = phase.elapsed();
        let decider = &self.answering.decider;
        let policies = decider.policies();
        let now_ms = now.as_u64() / 1_000_000;
        let outbox = &self.answering.outbox;
        let history = self.answering.usage.as_ref();
        let rules = deciding::Deciding {
            decider,
            policies: &policies,
        };
        let taken = self.owner.take_over(
            found,
            &since,
            outbox,
            |stored_through| {
                history.map(|history| {
                    history.open_ledger(partition, now_ms, stored_through, outbox.is_journal())
                })
            },
            &rules,
            now,
        );
        let t_replayed = phase.elapsed();
        if taken.usage_replay_owed {
            self.usage_replay = Some(since);
        }
        let manifest = taken.manifest;
        let rev = store::takeover_request(
            "fence the snapshot manifest",
            snapshot::write_manifest(kv, partition, &manifest, self.owner.manifest_rev()),
        )
        .await?;
        self.owner.fenced(manifest, rev, std::time::Instant::now());
        let stats = self.owner.stats();
        stats
            .last_snapshot_ms
            .store(self.owner.manifest().taken_at_ms, Ordering::Relaxed);
        stats
            .keys
            .store(self.owner.counters().len(), Ordering::Relaxed);
        let holds = self.owner.manifest().carried.holds.len() as u64;
        stats.holds.store(holds, Ordering::Relaxed);

        let client = &self.answering.client;
        let mut subs = SelectAll::new();
        let link_subjects = self
            .answering
            .decider
            .region()
            .map(|region| link_partition_subjects(region.as_str(), partition))
            .unwrap_or_default();
        for subject in owner_subjects(partition).into_iter().chain(link_subjects) {
            subs.push(client.subscribe(subject).await?);
        }
        client.flush().await?;
        // Subscribed: what the takeover tells the other regions may now
        // be answered (a home's owner takes the tallies it asks for).
        if let Some(link) = &self.answering.link {
            link.perform(taken.actions);
        }
        tracing::debug!(
            partition,
            manifest_ms = t_manifest.as_millis() as u64,
            restored_ms = t_restored.as_millis() as u64,
            replayed_ms = t_replayed.as_millis() as u64,
            subscribed_ms = phase.elapsed().as_millis() as u64,
            "takeover phases"
        );
        Ok(subs)
    }

    /// After a failed [`Shard::start`]: whether to try again at once, with
    /// the lease renewed and the counters emptied. A takeover fails when a
    /// stream it reads has no leader (its node froze or stopped); nats-server
    /// elects another within seconds (5.8-8.2 s measured for a frozen one,
    /// docs/RELIABILITY.md), so the takeover is tried again for up to
    /// [`TAKEOVER_RETRIES_FOR`] while the lease is kept, instead of giving
    /// the partition up, which left it unanswered until the lease was
    /// released (or expired) and claimed again. State of a newer format is
    /// not tried again: it stays unreadable.
    async fn try_again(
        &mut self,
        error: &anyhow::Error,
        started: Instant,
        stop: &mut oneshot::Receiver<()>,
    ) -> Again {
        let newer = error
            .downcast_ref::<sluice_core::format::NewerFormat>()
            .is_some();
        if newer {
            let refusals = &self.owning.stats.format_refusals;
            refusals.fetch_add(1, Ordering::Relaxed);
        }
        if newer
            || started.elapsed() >= TAKEOVER_RETRIES_FOR
            || !matches!(stop.try_recv(), Err(oneshot::error::TryRecvError::Empty))
        {
            return Again::No;
        }
        tokio::time::sleep(TAKEOVER_RETRY_PAUSE).await;
        let ttl = self.owning.lease_ttl;
        let holder = &self.owning.holder;
        let renewal = lease::renew(&self.owning.stores.leases, &mut self.lease, holder, ttl);
        match tokio::time::timeout(store::TAKEOVER_REQUEST_TIMEOUT, renewal).await {
            Ok(Err(LeaseError::Taken)) => return Again::LeaseLost,
            Ok(Ok(())) => {}
            // Still ours for a while: the next attempt renews it again.
            Ok(Err(LeaseError::Transient(_))) | Err(_) if self.lease.is_valid() => {}
            Ok(Err(LeaseError::Transient(_))) | Err(_) => return Again::No,
        }
        self.owner.renewed(self.lease.revision);
        // What a failed attempt restored is dropped: the next one starts over.
        self.close_usage();
        self.owner.start_over(self.owning.counters());
        Again::Yes
    }

    /// The lease was renewed: `lease` replaces ours.
    fn renewed(&mut self, lease: Lease) {
        self.owner.renewed(lease.revision);
        self.lease = lease;
        self.note_lease();
    }

    /// Stores the usage counted since the last flush and the rollups due
    /// (on its own task).
    fn start_usage_flush(&self) -> Option<UsageJob> {
        let ledger = self.owner.usage()?.clone();
        let history = self.answering.usage.clone()?;
        let clock = self.answering.clock.clone();
        let partition = self.owner.partition();
        let owner = self.lease_held();
        Some(tokio::spawn(async move {
            let now_ms = clock.now().as_u64() / 1_000_000;
            history.flush(partition, &ledger, now_ms, true, owner).await
        }))
    }

    /// Journal mode with usage, once the partition answers: adds the usage
    /// of what the takeover replayed on its own task, tried again while the
    /// lease is held ([`crate::usage::UsageHistory::replay_while_owner`]). Until it is
    /// in, flushes and usage queries of the partition wait for it.
    fn start_usage_replay(&mut self) -> Option<JoinHandle<()>> {
        let since = self.usage_replay.take()?;
        let ledger = self.owner.usage()?.clone();
        let history = self.answering.usage.clone()?;
        let partition = self.owner.partition();
        let owner = self.lease_held();
        Some(tokio::spawn(async move {
            history
                .replay_while_owner(partition, &ledger, &since, owner, TAKEOVER_RETRY_PAUSE)
                .await
        }))
    }

    /// Keeps [`Shard::lease_held`] current after the lease changed.
    fn note_lease(&self) {
        *self
            .lease_valid_until
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self.lease.valid_until;
    }

    /// Whether the lease (as renewed since) is still valid, for a task that
    /// outlives this borrow.
    fn lease_held(&self) -> impl Fn() -> bool + Send + 'static {
        let valid_until = self.lease_valid_until.clone();
        move || std::time::Instant::now() < *valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unregisters the usage ledger (once nothing more is counted in it).
    fn close_usage(&self) {
        if let (Some(history), Some(ledger)) = (&self.answering.usage, self.owner.usage()) {
            history.close_ledger(self.owner.partition(), ledger);
        }
    }

    /// Starts a write the owner asked for, on its own task.
    fn start_write(&self, write: Write) -> SnapshotJob {
        match write {
            Write::Snapshot(snapshot) => self.start_snapshot(snapshot),
            Write::Position {
                manifest,
                expected_rev,
            } => {
                let kv = self.owning.stores.snapshots.clone();
                let partition = self.owner.partition();
                tokio::spawn(async move {
                    let rev =
                        snapshot::write_manifest(&kv, partition, &manifest, expected_rev).await?;
                    Ok((manifest, rev))
                })
            }
        }
    }

    /// Copies the counters and the state kept beside them between two
    /// turns (here, on the partition's task: a memcpy of its tables),
    /// encodes the copy (off the thread that answers requests: a worker's
    /// runtime has one), stores the usage first when the snapshot asks for
    /// it, and writes the snapshot.
    fn start_snapshot(&self, snapshot: Snapshot) -> SnapshotJob {
        let flush = snapshot
            .flush_usage
            .and_then(|rollups| Some((self.owner.usage()?.clone(), rollups)));
        let owner = self.lease_held();
        let now = self.answering.clock.now();
        let handover = snapshot.handover;
        let copy = self
            .owner
            .counters()
            .copy_between_turns(|counters| Carried::read(counters, now, handover));
        let (answering, owning) = (self.answering.clone(), self.owning.clone());
        let partition = self.owner.partition();
        tokio::spawn(async move {
            let (copy, carried) = copy?;
            let copy = Arc::new(copy);
            let to_encode = copy.clone();
            let encoding = crate::blocking::run(move || {
                let encoded = snapshot::encode(&to_encode, &carried, now);
                (encoded, carried)
            });
            let mut stored_through = None;
            if let (Some((ledger, rollups)), Some(history)) = (flush, &answering.usage) {
                let now_ms = answering.clock.now().as_u64() / 1_000_000;
                history
                    .flush(partition, &ledger, now_ms, rollups, owner)
                    .await
                    .context("cannot store the usage this snapshot would claim")?;
                stored_through = Some(ledger.stored_through());
            }
            let (encoded, carried) = encoding.await.context("the snapshot encoder panicked")?;
            let encoded = encoded?;
            let expected = snapshot.expected_rev;
            let previous_gen = snapshot.previous_gen.clone();
            let manifest = snapshot.complete(&copy, carried, stored_through);
            snapshot::write(
                &owning.stores,
                partition,
                encoded,
                manifest,
                expected,
                previous_gen.as_deref(),
            )
            .await
        })
    }

    /// A write ended: tells the owner. `Err` when the partition is someone
    /// else's now.
    async fn write_ended(
        &mut self,
        done: Result<Result<(Manifest, u64)>, tokio::task::JoinError>,
    ) -> Result<(), ()> {
        let partition = self.owner.partition();
        match done {
            Ok(Ok((manifest, rev))) => self.written(manifest, rev),
            Ok(Err(e)) => {
                self.owner.snapshot_failed();
                self.owning.stats.meters.snapshot_failures.inc();
                if self.lost_to_someone_else().await {
                    tracing::error!(
                        partition,
                        "another worker wrote this partition's snapshot; stopped answering: {e:#}"
                    );
                    return Err(());
                }
                tracing::warn!(partition, "snapshot failed, will retry: {e:#}");
            }
            Err(e) => {
                self.owner.snapshot_failed();
                self.owning.stats.meters.snapshot_failures.inc();
                tracing::error!(partition, "snapshot task failed: {e}");
            }
        }
        Ok(())
    }

    fn written(&mut self, manifest: Manifest, rev: u64) {
        let written = self
            .owner
            .snapshot_written(manifest, rev, std::time::Instant::now());
        if let Some(took) = written.took {
            let meters = &self.owning.stats.meters;
            meters.snapshot_duration.observe(secs(took));
            meters.snapshot_bytes.observe(written.bytes as f64);
        }
    }

    /// After a failed snapshot: is the manifest now someone else's?
    async fn lost_to_someone_else(&self) -> bool {
        let kv = &self.owning.stores.snapshots;
        match snapshot::read_manifest(kv, self.owner.partition()).await {
            Ok((Some(m), _)) => self.owner.lost_to(m.lease_rev),
            _ => false,
        }
    }

    /// Final snapshot, then release the lease, so the next owner starts at once.
    async fn hand_over(&mut self) {
        let partition = self.owner.partition();
        if let (Some(history), Some(ledger)) = (&self.answering.usage, self.owner.usage()) {
            let now_ms = self.answering.clock.now().as_u64() / 1_000_000;
            let lease = &self.lease;
            if let Err(e) = history
                .flush(partition, ledger, now_ms, false, || lease.is_valid())
                .await
            {
                let failures = &self.owning.stats.usage_flush_failures;
                failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(partition, "final usage flush failed; what was counted since the last one is missing from usage: {e:#}");
            }
        }
        let now = self.answering.clock.now();
        let outbox = &self.answering.outbox;
        let lease_valid = self.lease.is_valid();
        let snapshot =
            self.owner
                .final_snapshot(outbox, lease_valid, std::time::Instant::now(), now);
        if let Some(snapshot) = snapshot {
            match self.start_snapshot(snapshot).await {
                Ok(Ok((manifest, rev))) => self.written(manifest, rev),
                Ok(Err(e)) => {
                    self.owner.snapshot_failed();
                    self.owning.stats.meters.snapshot_failures.inc();
                    tracing::error!(
                        partition,
                        "final snapshot failed; the next owner starts from the previous one: {e:#}"
                    )
                }
                Err(e) => {
                    self.owner.snapshot_failed();
                    self.owning.stats.meters.snapshot_failures.inc();
                    tracing::error!(partition, "final snapshot task failed: {e}")
                }
            }
        }
        match lease::release(&self.owning.stores.leases, &self.lease).await {
            Ok(()) => self.owning.stats.meters.lease(LeaseEvent::Released),
            Err(e) => tracing::warn!(partition, "{e:#}; it will expire by itself"),
        }
        tracing::debug!(partition, "handed over");
    }
}

/// How often a shard sweeps what ended in its kept state: the holds whose
/// end has come, and a delegate's slices of global keys whose lease ended.
/// A hold's slots are free at its end whatever this is; what a released
/// hold gives back, and a charged one's usage, wait for the sweep (or the
/// key's next hold verb), as does what is left of a slice for its home.
const SWEEP: Duration = Duration::from_millis(250);

/// How long a shard may take to hand over on shutdown before the worker gives up on it.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

pub mod deciding;
mod task;
mod turns;
