//! The owner of one partition: restores it, answers for it, snapshots it,
//! keeps its lease, and hands it over.
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

use crate::counters::Counters;
use crate::decide::{Message, Owned};
use crate::journal;
use crate::lease::{self, Lease, LeaseError};
use crate::ledger::Ledger;
use crate::reply::Reply;
use crate::shared::Shared;
use crate::snapshot::{self, Manifest};
use crate::stats::{secs, LeaseEvent, ShardStats};
use crate::store;
use anyhow::{Context as _, Result};
use async_nats::Subscriber;
use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use sluice_core::budget::carried_through;
use sluice_core::subject::{owner_subjects, Inbound, Verb};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{interval_at, Instant, MissedTickBehavior};

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

/// Starts owning `partition` under `lease`.
pub fn spawn(shared: Arc<Shared>, partition: u32, lease: Lease) -> ShardHandle {
    let (stop_tx, stop_rx) = oneshot::channel();
    let stats = Arc::new(ShardStats::default());
    let join = tokio::spawn(run(shared, partition, lease, stop_rx, stats.clone()));
    ShardHandle {
        partition,
        stats,
        stop: Some(stop_tx),
        join,
    }
}

struct Shard {
    shared: Arc<Shared>,
    partition: u32,
    lease: Lease,
    counters: Counters,
    stats: Arc<ShardStats>,
    manifest: Manifest,
    manifest_rev: u64,
    /// When the manifest was last written (journal mode refreshes an idle
    /// partition's journal position, so the journal can be purged).
    manifest_written_at: Instant,
    /// `stats.changes` that the last written snapshot holds...
    changes_at_snapshot: u64,
    /// ...and that the snapshot being written holds.
    changes_in_flight: u64,
    /// When the snapshot being written was started (none while a manifest
    /// is only rewritten with a new journal position).
    snapshot_started: Option<std::time::Instant>,
    /// The partition's usage in memory (CONTRACT §9), when recorded.
    usage: Option<Arc<Ledger>>,
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

async fn run(
    shared: Arc<Shared>,
    partition: u32,
    lease: Lease,
    mut stop: oneshot::Receiver<()>,
    stats: Arc<ShardStats>,
) -> Exit {
    let counters = Counters::within(shared.key_bound.clone());
    let mut shard = Shard {
        shared,
        partition,
        lease: lease.clone(),
        counters,
        stats,
        manifest: Manifest::default(),
        manifest_rev: 0,
        manifest_written_at: Instant::now(),
        changes_at_snapshot: 0,
        changes_in_flight: 0,
        snapshot_started: None,
        usage: None,
        usage_replay: None,
        lease_valid_until: Arc::new(Mutex::new(lease.valid_until)),
    };
    let started = Instant::now();
    let mut attempts = 1;
    let mut subs = loop {
        let e = match shard.start().await {
            Ok(subs) => break subs,
            Err(e) => e,
        };
        match shard.try_again(&e, started, &mut stop).await {
            Again::Yes => {
                tracing::warn!(
                    partition,
                    attempts,
                    "cannot take the partition over yet, trying again: {e:#}"
                );
                attempts += 1;
            }
            Again::LeaseLost => {
                tracing::error!(
                    partition,
                    "cannot take the partition over, and the lease was taken: {e:#}"
                );
                shard.close_usage();
                return Exit::Lost;
            }
            Again::No => {
                tracing::error!(partition, attempts, "cannot take the partition over: {e:#}");
                shard.close_usage();
                let _ = lease::release(&shard.shared.stores.leases, &shard.lease).await;
                return Exit::Failed;
            }
        }
    };
    // A takeover tried again renewed the lease meanwhile.
    shard.note_lease();
    shard.stats.answering.store(true, Ordering::SeqCst);
    // The worker's stats outlive the shard; a clone keeps `shard` free to borrow.
    let stats = shard.shared.stats.clone();
    let meters = &stats.meters;
    meters.takeover_duration.observe(secs(started.elapsed()));
    shard.shared.routes.open(
        partition,
        shard.counters.clone(),
        shard.stats.clone(),
        shard.usage.clone(),
    );
    let usage_replay = shard.start_usage_replay();
    tracing::debug!(
        partition,
        keys = shard.stats.keys.load(Ordering::Relaxed),
        took_ms = started.elapsed().as_millis() as u64,
        "answering"
    );

    let ttl = shard.shared.lease_ttl;
    let mut renew_tick = interval_at(
        Instant::now() + lease::renew_interval(ttl),
        lease::renew_interval(ttl),
    );
    renew_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let snap_every = shard.shared.config.snapshot_interval;
    // Partitions restored together would otherwise snapshot together, every
    // time: spread their first ticks over one interval.
    let first_snapshot =
        snap_every.mul_f64(f64::from(partition + 1) / f64::from(shard.shared.config.partitions));
    let mut snap_tick = interval_at(Instant::now() + first_snapshot, snap_every);
    snap_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut renewal: Option<Renewal> = None;
    let mut snapshot_job: Option<SnapshotJob> = None;
    let mut usage_job: Option<UsageJob> = None;
    let mut batch = Vec::with_capacity(MAX_BATCH);

    // One timer for the lease deadline, moved when a renewal moves it (not
    // one registered anew on every turn of the loop).
    let lease_deadline = tokio::time::sleep_until(Instant::from_std(shard.lease.valid_until));
    tokio::pin!(lease_deadline);
    let exit = loop {
        let deadline = Instant::from_std(shard.lease.valid_until);
        if lease_deadline.deadline() != deadline {
            lease_deadline.as_mut().reset(deadline);
        }
        tokio::select! {
            biased;
            _ = &mut stop => break Exit::Released,
            _ = &mut lease_deadline => {
                tracing::warn!(partition, "lease could not be renewed in time; stopped answering");
                meters.lease(LeaseEvent::Lost);
                break Exit::Lost;
            }
            result = async { renewal.as_mut().expect("guarded").await }, if renewal.is_some() => {
                renewal = None;
                match result {
                    Ok(lease) => {
                        shard.lease = lease;
                        shard.note_lease();
                        meters.lease(LeaseEvent::Renewed);
                    }
                    Err(LeaseError::Taken) => {
                        tracing::error!(partition, "lease was taken by another worker; stopped answering");
                        meters.lease(LeaseEvent::Lost);
                        break Exit::Lost;
                    }
                    Err(LeaseError::Transient(e)) => {
                        tracing::warn!(partition, "lease renewal failed, will retry: {e}");
                        meters.lease(LeaseEvent::RenewFailed);
                    }
                }
            }
            _ = renew_tick.tick(), if renewal.is_none() => {
                let store = shard.shared.stores.leases.clone();
                let holder = shard.shared.worker_id.clone();
                let mut lease = shard.lease.clone();
                renewal = Some(Box::pin(async move {
                    lease::renew(&store, &mut lease, &holder, ttl).await.map(|_| lease)
                }));
            }
            done = async { snapshot_job.as_mut().expect("guarded").await }, if snapshot_job.is_some() => {
                snapshot_job = None;
                match done {
                    Ok(Ok((manifest, rev))) => shard.snapshot_written(manifest, rev),
                    Ok(Err(e)) => {
                        shard.shared.stats.meters.snapshot_failures.inc();
                        if shard.lost_to_someone_else().await {
                            tracing::error!(partition, "another worker wrote this partition's snapshot; stopped answering: {e:#}");
                            break Exit::Lost;
                        }
                        tracing::warn!(partition, "snapshot failed, will retry: {e:#}");
                    }
                    Err(e) => {
                        shard.shared.stats.meters.snapshot_failures.inc();
                        tracing::error!(partition, "snapshot task failed: {e}");
                    }
                }
            }
            done = async { usage_job.as_mut().expect("guarded").await }, if usage_job.is_some() => {
                usage_job = None;
                match done {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(partition, "storing usage failed, will retry: {e:#}"),
                    Err(e) => tracing::error!(partition, "the usage flush task failed: {e}"),
                }
            }
            _ = snap_tick.tick(), if snapshot_job.is_none() => {
                // In journal mode a snapshot stores the usage first (see
                // `start_snapshot`); two flushes of one ledger never overlap,
                // and none starts before the takeover's usage replay is in
                // (it would wait for it).
                let snapshot_flushes = shard.snapshot_flushes_usage();
                let flushing = snapshot_flushes && (usage_job.is_some() || !shard.usage_replayed());
                if shard.dirty() && !flushing {
                    snapshot_job = Some(shard.start_snapshot(true));
                } else if shard.journal_position_stale() && !flushing {
                    snapshot_job = Some(shard.refresh_journal_position());
                }
                if usage_job.is_none()
                    && shard.usage_replayed()
                    && !(snapshot_flushes && snapshot_job.is_some())
                {
                    usage_job = shard.start_usage_flush();
                }
            }
            first = subs.next() => {
                let received = std::time::Instant::now();
                let Some(first) = first else {
                    tracing::error!(partition, "subscriptions closed; giving the partition up");
                    break Exit::Lost;
                };
                batch.push(first);
                while batch.len() < MAX_BATCH {
                    match subs.next().now_or_never() {
                        Some(Some(m)) => batch.push(m),
                        _ => break,
                    }
                }
                shard.process(&mut batch, received).await;
            }
        }
    };
    let stopped = std::time::Instant::now();

    shard.stats.answering.store(false, Ordering::SeqCst);
    shard.shared.routes.close(partition, &shard.stats);
    for sub in subs.iter_mut() {
        let _ = sub.unsubscribe().await;
    }
    if exit == Exit::Released {
        // Answer what was already delivered to us before giving up.
        while let Some(Some(m)) = subs.next().now_or_never() {
            batch.push(m);
            if batch.len() == MAX_BATCH {
                shard.process(&mut batch, std::time::Instant::now()).await;
            }
        }
        shard.process(&mut batch, std::time::Instant::now()).await;
    }
    // Every record of ours stored (so the final snapshot's journal position
    // covers them) and every answer sent.
    shard.shared.outbox.flush().await;
    if let Some(job) = snapshot_job.take() {
        if let Ok(Ok((manifest, rev))) = job.await {
            shard.snapshot_written(manifest, rev);
        }
    }
    if let Some(job) = usage_job.take() {
        let _ = job.await;
    }
    if exit == Exit::Released {
        // A renewal in flight when the stop came may already have moved
        // the lease's revision on the server: take its result, or the
        // release below would expect the old revision, fail, and leave the
        // partition unowned until the lease expired.
        if let Some(renewing) = renewal.take() {
            if let Ok(lease) = renewing.await {
                shard.lease = lease;
                shard.note_lease();
                meters.lease(LeaseEvent::Renewed);
            }
        }
        shard.hand_over().await;
        let meters = &shard.shared.stats.meters;
        meters.handover_duration.observe(secs(stopped.elapsed()));
    }
    // Unfinished, it leaves the usage to the next owner's replay: nothing
    // was stored past the journal position this takeover started from.
    if let Some(job) = usage_replay {
        job.abort();
    }
    shard.close_usage();
    exit
}

impl Shard {
    /// Restores the partition and subscribes to its subjects.
    async fn start(&mut self) -> Result<SelectAll<Subscriber>> {
        let kv = &self.shared.stores.snapshots;
        let now = self.shared.clock.now();
        let phase = std::time::Instant::now();
        let (manifest, rev) = snapshot::read_manifest(kv, self.partition).await?;
        let t_manifest = phase.elapsed();
        if let Some(m) = &manifest {
            anyhow::ensure!(
                m.lease_rev <= self.lease.revision,
                "the snapshot was written under a newer lease ({} > {}); another worker owns this partition",
                m.lease_rev,
                self.lease.revision
            );
        }
        let restore = async {
            let Some(m) = &manifest else {
                return Ok(());
            };
            let entries = snapshot::read_entries(kv, self.partition, m).await?;
            // Inserting is most of a restore's CPU: off the answering thread,
            // and on the other core while another partition restores. (Not
            // `blocking::run`: a takeover restores partitions back to back,
            // and collecting after each made the next fault its pages in
            // again: 1.6 s instead of 0.9-1.1 until all 64 answered.)
            let counters = self.counters.clone();
            let shared = self.shared.clone();
            tokio::task::spawn_blocking(move || {
                let policies = shared.decider.policies();
                counters.import(entries, now, |name| policies.get(name))
            })
            .await
            .context("restoring the counters panicked")?;
            self.counters.slices().take_over(&m.slices, now);
            anyhow::Ok(())
        };
        // The journal's tail is read while the snapshot is restored: the
        // first partition of a takeover reads it for all, so its requests
        // go out first, ahead of the snapshot chunks of every partition.
        let none = Manifest::default();
        let journal = self
            .shared
            .outbox
            .journal_since(self.partition, manifest.as_ref().unwrap_or(&none));
        let (since, restored) = tokio::join!(journal, restore);
        restored?;
        let since = since?;
        let t_restored = phase.elapsed();
        let mut manifest = manifest.unwrap_or_default();
        let decider = &self.shared.decider;
        let policies = decider.policies();
        let now_ms = now.as_u64() / 1_000_000;
        let journal = self.shared.outbox.is_journal();
        self.usage =
            self.shared.usage.as_ref().map(|book| {
                book.open_ledger(self.partition, now_ms, manifest.journal_seq, journal)
            });
        let applied = self
            .shared
            .outbox
            .replay(self.partition, &mut manifest, &since, |record| {
                decider.replay(&policies, record, &self.counters)
            });
        let t_replayed = phase.elapsed();
        if journal && self.usage.is_some() {
            self.usage_replay = Some(since);
        }
        if applied > 0 {
            tracing::debug!(partition = self.partition, applied, "replayed the journal");
            // The replayed counts are only in memory: the next snapshot
            // (periodic or at handover) must persist them.
            self.stats.add_changes(applied as u64);
        }
        // Fence: from now on a late snapshot by the previous owner fails its CAS.
        manifest.lease_rev = self.lease.revision;
        manifest.worker = self.shared.worker_id.clone();
        self.manifest_rev = store::takeover_request(
            "fence the snapshot manifest",
            snapshot::write_manifest(kv, self.partition, &manifest, rev),
        )
        .await?;
        self.manifest = manifest;
        self.manifest_written_at = Instant::now();
        self.stats
            .last_snapshot_ms
            .store(self.manifest.taken_at_ms, Ordering::Relaxed);
        self.stats
            .keys
            .store(self.counters.len(), Ordering::Relaxed);

        let client = &self.shared.client;
        let mut subs = SelectAll::new();
        for subject in owner_subjects(self.partition) {
            subs.push(client.subscribe(subject).await?);
        }
        client.flush().await?;
        tracing::debug!(
            partition = self.partition,
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
        if error
            .downcast_ref::<sluice_core::format::NewerFormat>()
            .is_some()
            || started.elapsed() >= TAKEOVER_RETRIES_FOR
            || !matches!(stop.try_recv(), Err(oneshot::error::TryRecvError::Empty))
        {
            return Again::No;
        }
        tokio::time::sleep(TAKEOVER_RETRY_PAUSE).await;
        let ttl = self.shared.lease_ttl;
        let holder = &self.shared.worker_id;
        let renewal = lease::renew(&self.shared.stores.leases, &mut self.lease, holder, ttl);
        match tokio::time::timeout(store::TAKEOVER_REQUEST_TIMEOUT, renewal).await {
            Ok(Err(LeaseError::Taken)) => return Again::LeaseLost,
            Ok(Ok(())) => {}
            // Still ours for a while: the next attempt renews it again.
            Ok(Err(LeaseError::Transient(_))) | Err(_) if self.lease.is_valid() => {}
            Ok(Err(LeaseError::Transient(_))) | Err(_) => return Again::No,
        }
        // What a failed attempt restored is dropped: the next one starts over.
        self.counters = Counters::within(self.shared.key_bound.clone());
        Again::Yes
    }

    /// Changed since the last snapshot that was written (a failed one
    /// leaves the partition dirty, so the next tick tries again).
    fn dirty(&self) -> bool {
        self.stats.changes() != self.changes_at_snapshot
    }

    /// The journal position and writers a snapshot taken now may claim
    /// ([`crate::outbox::Outbox::position`]).
    ///
    /// With usage recorded, no further than the stored usage holds: a new
    /// owner replays the journal from the snapshot's position for usage too.
    fn journal_position(&self) -> (u64, Vec<String>) {
        let (seq, writers) = self.shared.outbox.position(self.manifest.journal_seq);
        match &self.usage {
            Some(ledger) if self.shared.outbox.is_journal() => {
                (seq.min(ledger.stored_through()), writers)
            }
            _ => (seq, writers),
        }
    }

    /// Stores the usage counted since the last flush and the rollups due
    /// (on its own task), unless a flush is running.
    fn start_usage_flush(&self) -> Option<UsageJob> {
        let ledger = self.usage.clone()?;
        let book = self.shared.usage.clone()?;
        let clock = self.shared.clock.clone();
        let partition = self.partition;
        let owner = self.lease_held();
        Some(tokio::spawn(async move {
            let now_ms = clock.now().as_u64() / 1_000_000;
            book.flush(partition, &ledger, now_ms, true, owner).await
        }))
    }

    /// Journal mode with usage, once the partition answers: adds the usage
    /// of what the takeover replayed ([`crate::usage::UsageBook::replay`])
    /// on its own task, tried again while the lease is held. Until it is
    /// in, flushes and usage queries of the partition wait for it.
    fn start_usage_replay(&mut self) -> Option<JoinHandle<()>> {
        let since = self.usage_replay.take()?;
        let ledger = self.usage.clone()?;
        let book = self.shared.usage.clone()?;
        let partition = self.partition;
        let owner = self.lease_held();
        Some(tokio::spawn(async move {
            loop {
                match book.replay(partition, &ledger, &since).await {
                    Ok(()) => return,
                    Err(e) if owner() => {
                        tracing::warn!(
                            partition,
                            "cannot restore the usage the journal holds yet, trying again: {e:#}"
                        );
                        tokio::time::sleep(TAKEOVER_RETRY_PAUSE).await;
                    }
                    Err(e) => {
                        tracing::error!(
                            partition,
                            "cannot restore the usage the journal holds, and the lease ended: {e:#}"
                        );
                        return;
                    }
                }
            }
        }))
    }

    /// Whether the takeover's usage replay is in (or there is none).
    fn usage_replayed(&self) -> bool {
        self.usage
            .as_ref()
            .is_none_or(|ledger| ledger.is_replayed())
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
        if let (Some(book), Some(ledger)) = (&self.shared.usage, &self.usage) {
            book.close_ledger(self.partition, ledger);
        }
    }

    /// Journal mode, nothing counted since the last snapshot, but our
    /// journal moved on: a manifest still claiming an old position keeps
    /// every worker's records from being purged.
    fn journal_position_stale(&self) -> bool {
        self.shared.outbox.moved_past(self.manifest.journal_seq)
            && self.manifest_written_at.elapsed() >= 4 * self.shared.config.snapshot_interval
    }

    /// Rewrites the manifest with the current journal position: the chunks
    /// are unchanged, as nothing changed since they were written.
    fn refresh_journal_position(&mut self) -> SnapshotJob {
        let mut manifest = self.manifest.clone();
        (manifest.journal_seq, manifest.journal_writers) = self.journal_position();
        manifest.lease_rev = self.lease.revision;
        self.changes_in_flight = self.changes_at_snapshot;
        self.snapshot_started = None;
        let kv = self.shared.stores.snapshots.clone();
        let partition = self.partition;
        let expected = self.manifest_rev;
        tokio::spawn(async move {
            let rev = snapshot::write_manifest(&kv, partition, &manifest, expected).await?;
            Ok((manifest, rev))
        })
    }

    /// Journal mode with usage: a snapshot stores the partition's usage
    /// too, so that it may claim the journal position it copies the
    /// counters at rather than the one the last flush held (one snapshot
    /// interval behind, which a takeover after heavy load paid for in a
    /// longer journal tail). The position is taken first, then the counters
    /// are copied while the usage is stored (which holds at least every
    /// record up to that position: the journal writer hands records to
    /// usage before it counts them acknowledged), and the claim is the
    /// position if the flush stored it all. (Storing the usage before
    /// taking the position made the claim lag the copy by the flush's
    /// duration: ~40 % more of the tail replayed after heavy load.)
    fn snapshot_flushes_usage(&self) -> bool {
        self.usage.is_some() && self.shared.usage.is_some() && self.shared.outbox.is_journal()
    }

    /// Starts a snapshot (with `rollups`: and, in journal mode with usage,
    /// the rollups that are due; a handover leaves those to the next owner).
    fn start_snapshot(&mut self, rollups: bool) -> SnapshotJob {
        let changes = self.stats.changes();
        let flush = if self.snapshot_flushes_usage() {
            self.usage.clone().zip(self.shared.usage.clone())
        } else {
            None
        };
        let (journal_seq, journal_writers) = if flush.is_some() {
            // Capped by what the flush below stores.
            self.shared.outbox.position(self.manifest.journal_seq)
        } else {
            self.journal_position()
        };
        let owner = self.lease_held();
        let counters = self.counters.clone();
        let shared = self.shared.clone();
        let partition = self.partition;
        let expected = self.manifest_rev;
        let previous_gen = self.manifest.gen.clone();
        let manifest = Manifest {
            gen: format!("{}x{}", self.lease.revision, changes),
            lease_rev: self.lease.revision,
            journal_seq,
            journal_writers,
            taken_at_ms: shared.clock.now().as_u64() / 1_000_000,
            worker: shared.worker_id.clone(),
            // Taken before the counters are encoded and again after: see
            // `carried_through`.
            slices: self.counters.slices().carried(shared.clock.now()),
            ..Default::default()
        };
        self.changes_in_flight = changes;
        self.snapshot_started = Some(std::time::Instant::now());
        let mut manifest = manifest;
        tokio::spawn(async move {
            // Off the thread that answers requests (a worker's runtime has
            // one), and beside the usage flush.
            let slices = counters.clone();
            let encoding = crate::blocking::run(move || snapshot::encode(&counters));
            if let Some((ledger, book)) = flush {
                let now_ms = shared.clock.now().as_u64() / 1_000_000;
                book.flush(partition, &ledger, now_ms, rollups, owner)
                    .await
                    .context("cannot store the usage this snapshot would claim")?;
                manifest.journal_seq = manifest.journal_seq.min(ledger.stored_through());
            }
            let encoded = encoding.await.context("the snapshot encoder panicked")??;
            let after = slices.slices().carried(shared.clock.now());
            manifest.slices = carried_through(std::mem::take(&mut manifest.slices), &after);
            snapshot::write(
                &shared.stores,
                partition,
                encoded,
                manifest,
                expected,
                (!previous_gen.is_empty()).then_some(previous_gen.as_str()),
            )
            .await
        })
    }

    fn snapshot_written(&mut self, manifest: Manifest, rev: u64) {
        if let Some(started) = self.snapshot_started.take() {
            let meters = &self.shared.stats.meters;
            meters.snapshot_duration.observe(secs(started.elapsed()));
            meters.snapshot_bytes.observe(manifest.bytes as f64);
        }
        self.changes_at_snapshot = self.changes_in_flight;
        self.manifest_written_at = Instant::now();
        self.stats
            .last_snapshot_ms
            .store(manifest.taken_at_ms, Ordering::Relaxed);
        self.stats.keys.store(manifest.entries, Ordering::Relaxed);
        self.manifest = manifest;
        self.manifest_rev = rev;
    }

    /// After a failed snapshot: is the manifest now someone else's?
    async fn lost_to_someone_else(&self) -> bool {
        match snapshot::read_manifest(&self.shared.stores.snapshots, self.partition).await {
            Ok((Some(m), _)) => m.lease_rev > self.lease.revision,
            _ => false,
        }
    }

    /// Final snapshot, then release the lease, so the next owner starts at once.
    async fn hand_over(&mut self) {
        let partition = self.partition;
        if let (Some(book), Some(ledger)) = (&self.shared.usage, &self.usage) {
            let now_ms = self.shared.clock.now().as_u64() / 1_000_000;
            let lease = &self.lease;
            if let Err(e) = book
                .flush(partition, ledger, now_ms, false, || lease.is_valid())
                .await
            {
                tracing::error!(partition, "final usage flush failed; what was counted since the last one is missing from usage: {e:#}");
            }
        }
        if self.dirty() && self.lease.is_valid() {
            match self.start_snapshot(false).await {
                Ok(Ok((manifest, rev))) => self.snapshot_written(manifest, rev),
                Ok(Err(e)) => {
                    self.shared.stats.meters.snapshot_failures.inc();
                    tracing::error!(
                        partition,
                        "final snapshot failed; the next owner starts from the previous one: {e:#}"
                    )
                }
                Err(e) => {
                    self.shared.stats.meters.snapshot_failures.inc();
                    tracing::error!(partition, "final snapshot task failed: {e}")
                }
            }
        }
        match lease::release(&self.shared.stores.leases, &self.lease).await {
            Ok(()) => self.shared.stats.meters.lease(LeaseEvent::Released),
            Err(e) => tracing::warn!(partition, "{e:#}; it will expire by itself"),
        }
        tracing::debug!(partition, "handed over");
    }

    /// Decides a batch of messages, the first taken at `received`, and
    /// hands the replies to the outbox.
    async fn process(
        &mut self,
        batch: &mut Vec<async_nats::Message>,
        received: std::time::Instant,
    ) {
        if batch.is_empty() {
            return;
        }
        let shared = &self.shared;
        let now = shared.clock.now();
        let owned = Owned {
            partition: self.partition,
            counters: &self.counters,
            stats: &self.stats,
            usage: self.usage.as_deref(),
        };
        let policies = shared.decider.policies();
        let mut tally = shared.decider.tally(self.partition);
        let mut replies = Vec::with_capacity(batch.len());
        for msg in batch.drain(..) {
            if is_usage_query(msg.subject.as_str()) {
                tokio::spawn(crate::usage::query::answer_usage(shared.clone(), msg));
                continue;
            }
            let answer = shared.decider.message(
                &policies,
                Message {
                    subject: msg.subject.as_str(),
                    body: &msg.payload,
                    wants_reply: msg.reply.is_some(),
                },
                owned,
                now,
                &mut tally,
            );
            if let (Some(answer), Some(to)) = (answer, msg.reply) {
                replies.push((to, Reply::of(&answer, &shared.worker_id)));
            }
        }
        let records = tally.finish(&shared.stats, &self.stats);
        shared.outbox.answer(records, replies, received).await;
    }
}

/// `rl.p.<n>.usage.<key>`: read from the store, so answered on its own
/// task rather than among the decisions.
fn is_usage_query(subject: &str) -> bool {
    matches!(Inbound::parse(subject), Some(Inbound::Ask(ask)) if ask.verb == Verb::Usage)
}

/// How long a shard may take to hand over on shutdown before the worker gives up on it.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);
