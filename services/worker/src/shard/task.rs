//! The shard task's life, a function per phase: take the partition over
//! (tried again while the lease is kept), open it for answering, answer
//! until a stop or the lease's end, then stop (answer what was already
//! delivered, wait for the writes in flight, hand over). [`Shard::run`]
//! reads as that list; the timers the answering loop waits on are
//! [`Timers`], the store calls it has in flight [`InFlight`].

use super::{
    Again, Answering, Exit, Owning, Renewal, Shard, SnapshotJob, UsageJob, MAX_BATCH, SWEEP,
};
use crate::lease::{self, Lease, LeaseError};
use crate::owner::{Owner, Settings};
use crate::stats::{secs, LeaseEvent, ShardStats};
use async_nats::{Message, Subscriber};
use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use sluice_core::region::state::Event;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior, Sleep};

/// What the answering loop waits on besides messages: the lease's
/// renewal, the snapshot tick, the sweep of what ended, and the lease's deadline.
struct Timers {
    renew: Interval,
    snapshot: Interval,
    /// The sweep of what ended: holds, and slices of global keys.
    sweep: Interval,
    /// One timer for the lease deadline, moved when a renewal moves it (not
    /// one registered anew on every turn of the loop).
    lease_deadline: Pin<Box<Sleep>>,
}

impl Timers {
    fn new(shard: &Shard) -> Self {
        let ttl = shard.owning.lease_ttl;
        let mut renew = interval_at(
            Instant::now() + lease::renew_interval(ttl),
            lease::renew_interval(ttl),
        );
        renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let snap_every = shard.owning.snapshot_interval;
        // Partitions restored together would otherwise snapshot together, every
        // time: spread their first ticks over one interval.
        let partition = shard.owner.partition();
        let first_snapshot =
            snap_every.mul_f64(f64::from(partition + 1) / f64::from(shard.answering.partitions));
        let mut snapshot = interval_at(Instant::now() + first_snapshot, snap_every);
        snapshot.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut sweep = interval_at(Instant::now() + SWEEP, SWEEP);
        sweep.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let lease_deadline = Box::pin(tokio::time::sleep_until(Instant::from_std(
            shard.lease.valid_until,
        )));
        Timers {
            renew,
            snapshot,
            sweep,
            lease_deadline,
        }
    }
}

/// The store calls the answering loop has started and not seen end, at most
/// one of each kind; stopping waits for them (or takes their result).
#[derive(Default)]
struct InFlight {
    renewal: Option<Renewal>,
    snapshot: Option<SnapshotJob>,
    usage: Option<UsageJob>,
}

impl Shard {
    /// The shard task: owns `partition` under `lease` until `stop` or the
    /// lease's end.
    pub(super) async fn run(
        answering: Arc<Answering>,
        owning: Arc<Owning>,
        partition: u32,
        lease: Lease,
        mut stop: oneshot::Receiver<()>,
        stats: Arc<ShardStats>,
    ) -> Exit {
        let mut shard = Shard::new(answering, owning, partition, lease, stats);
        let started = Instant::now();
        let mut subs = match shard.take_over(started, &mut stop).await {
            Ok(subs) => subs,
            Err(exit) => return exit,
        };
        // A takeover tried again renewed the lease meanwhile.
        shard.note_lease();
        // The outcomes of this partition's requests across the link.
        let mut link_events = shard.answering.link.as_ref().map(|l| l.register(partition));
        let usage_replay = shard.open(started);
        let mut timers = Timers::new(&shard);
        let mut in_flight = InFlight::default();
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let exit = shard
            .answer(
                &mut subs,
                &mut stop,
                &mut link_events,
                &mut timers,
                &mut in_flight,
                &mut batch,
            )
            .await;
        shard.stop(exit, subs, batch, in_flight, usage_replay).await;
        exit
    }

    /// A shard of `partition` not yet taken over: empty counters, the
    /// owner's rules set for this worker.
    fn new(
        answering: Arc<Answering>,
        owning: Arc<Owning>,
        partition: u32,
        lease: Lease,
        stats: Arc<ShardStats>,
    ) -> Self {
        let settings = Settings {
            partition,
            worker_id: answering.worker_id.clone(),
            snapshot_interval: owning.snapshot_interval,
        };
        let counters = owning.counters();
        let owner = Owner::new(
            settings,
            lease.revision,
            counters,
            stats,
            std::time::Instant::now(),
        );
        Shard {
            answering,
            owning,
            lease: lease.clone(),
            owner,
            usage_replay: None,
            lease_valid_until: Arc::new(Mutex::new(lease.valid_until)),
        }
    }

    /// Restores and subscribes ([`Shard::start`]), tried again as
    /// [`Shard::try_again`] says. `Err` is how the task ends when the
    /// partition cannot be taken over (the lease released, or lost).
    async fn take_over(
        &mut self,
        started: Instant,
        stop: &mut oneshot::Receiver<()>,
    ) -> Result<SelectAll<Subscriber>, Exit> {
        let partition = self.owner.partition();
        let mut attempts = 1;
        loop {
            let e = match self.start().await {
                Ok(subs) => return Ok(subs),
                Err(e) => e,
            };
            match self.try_again(&e, started, stop).await {
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
                    self.close_usage();
                    return Err(Exit::Lost);
                }
                Again::No => {
                    tracing::error!(partition, attempts, "cannot take the partition over: {e:#}");
                    self.close_usage();
                    let _ = lease::release(&self.owning.stores.leases, &self.lease).await;
                    return Err(Exit::Failed);
                }
            }
        }
    }

    /// Taken over: opens the partition's route to worker batches, counts
    /// the takeover's time, and starts the usage replay the takeover owes
    /// (its task, aborted if the shard stops before it ends).
    fn open(&mut self, started: Instant) -> Option<JoinHandle<()>> {
        let partition = self.owner.partition();
        let shard_stats = self.owner.stats().clone();
        shard_stats.answering.store(true, Ordering::SeqCst);
        let meters = &self.owning.stats.meters;
        meters.takeover_duration.observe(secs(started.elapsed()));
        self.answering.routes.open(
            partition,
            self.owner.counters().clone(),
            shard_stats.clone(),
            self.owner.usage().cloned(),
        );
        let usage_replay = self.start_usage_replay();
        tracing::debug!(
            partition,
            keys = shard_stats.keys.load(Ordering::Relaxed),
            took_ms = started.elapsed().as_millis() as u64,
            "answering"
        );
        usage_replay
    }

    /// The answering loop, in priority order: a stop, the lease's deadline,
    /// renewals, the writes and link events that ended, the sweeps, the
    /// snapshot tick, and then requests in batches of what is waiting.
    /// Returns why it ended.
    async fn answer(
        &mut self,
        subs: &mut SelectAll<Subscriber>,
        stop: &mut oneshot::Receiver<()>,
        link_events: &mut Option<mpsc::UnboundedReceiver<Event>>,
        timers: &mut Timers,
        in_flight: &mut InFlight,
        batch: &mut Vec<Message>,
    ) -> Exit {
        let partition = self.owner.partition();
        loop {
            let deadline = Instant::from_std(self.lease.valid_until);
            if timers.lease_deadline.deadline() != deadline {
                timers.lease_deadline.as_mut().reset(deadline);
            }
            tokio::select! {
                biased;
                _ = &mut *stop => return Exit::Released,
                _ = &mut timers.lease_deadline => {
                    tracing::warn!(partition, "lease could not be renewed in time; stopped answering");
                    self.owning.stats.meters.lease(LeaseEvent::Lost);
                    return Exit::Lost;
                }
                result = async { in_flight.renewal.as_mut().expect("guarded").await }, if in_flight.renewal.is_some() => {
                    in_flight.renewal = None;
                    if let Some(exit) = self.renewal_ended(result, &mut timers.renew) {
                        return exit;
                    }
                }
                _ = timers.renew.tick(), if in_flight.renewal.is_none() => {
                    in_flight.renewal = Some(self.start_renewal());
                }
                done = async { in_flight.snapshot.as_mut().expect("guarded").await }, if in_flight.snapshot.is_some() => {
                    in_flight.snapshot = None;
                    if self.write_ended(done).await.is_err() {
                        return Exit::Lost;
                    }
                }
                done = async { in_flight.usage.as_mut().expect("guarded").await }, if in_flight.usage.is_some() => {
                    in_flight.usage = None;
                    self.owner.usage_flushed();
                    let failures = &self.owning.stats.usage_flush_failures;
                    match done {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(partition, "storing usage failed, will retry: {e:#}");
                        }
                        Err(e) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            tracing::error!(partition, "the usage flush task failed: {e}");
                        }
                    }
                }
                Some(event) = async { link_events.as_mut().expect("guarded").recv().await }, if link_events.is_some() => {
                    let more = link_events.as_mut().expect("guarded");
                    self.link_events(event, more);
                }
                _ = timers.sweep.tick() => self.sweep().await,
                _ = timers.snapshot.tick(), if in_flight.snapshot.is_none() => {
                    let now = self.answering.clock.now();
                    let due = self.owner.tick(&self.answering.outbox, std::time::Instant::now(), now);
                    in_flight.snapshot = due.write.map(|write| self.start_write(write));
                    if due.usage_flush {
                        in_flight.usage = self.start_usage_flush();
                    }
                }
                first = subs.next() => {
                    let received = std::time::Instant::now();
                    let Some(first) = first else {
                        tracing::error!(partition, "subscriptions closed; giving the partition up");
                        return Exit::Lost;
                    };
                    batch.push(first);
                    while batch.len() < MAX_BATCH {
                        match subs.next().now_or_never() {
                            Some(Some(m)) => batch.push(m),
                            _ => break,
                        }
                    }
                    self.process(batch, received).await;
                }
            }
        }
    }

    /// Renews the lease on a future the loop polls, so that answering goes
    /// on while the store answers.
    fn start_renewal(&self) -> Renewal {
        let store = self.owning.stores.leases.clone();
        let holder = self.owning.holder.clone();
        let ttl = self.owning.lease_ttl;
        let mut lease = self.lease.clone();
        Box::pin(async move {
            lease::renew(&store, &mut lease, &holder, ttl)
                .await
                .map(|_| lease)
        })
    }

    /// A renewal ended: keeps the lease it got, or stops answering if the
    /// lease was taken (`Some(Exit::Lost)`), or tries again soon: not a
    /// whole interval later, as the deadline may be less than one away.
    fn renewal_ended(
        &mut self,
        result: Result<Lease, LeaseError>,
        renew: &mut Interval,
    ) -> Option<Exit> {
        let partition = self.owner.partition();
        let meters = &self.owning.stats.meters;
        match result {
            Ok(lease) => {
                self.renewed(lease);
                self.owning.stats.meters.lease(LeaseEvent::Renewed);
            }
            Err(LeaseError::Taken) => {
                tracing::error!(
                    partition,
                    "lease was taken by another worker; stopped answering"
                );
                meters.lease(LeaseEvent::Lost);
                return Some(Exit::Lost);
            }
            Err(LeaseError::Transient(e)) => {
                tracing::warn!(partition, "lease renewal failed, will retry: {e}");
                meters.lease(LeaseEvent::RenewFailed);
                renew.reset_after(lease::renew_retry_pause(self.owning.lease_ttl));
            }
        }
        None
    }

    /// Stops answering: closes the route and the subscriptions, answers
    /// what was already delivered (when asked to stop), waits for the
    /// writes in flight, and, when asked to stop, hands the partition over.
    async fn stop(
        &mut self,
        exit: Exit,
        mut subs: SelectAll<Subscriber>,
        mut batch: Vec<Message>,
        in_flight: InFlight,
        usage_replay: Option<JoinHandle<()>>,
    ) {
        let stopped = std::time::Instant::now();
        let partition = self.owner.partition();
        let shard_stats = self.owner.stats().clone();
        shard_stats.answering.store(false, Ordering::SeqCst);
        self.answering.routes.close(partition, &shard_stats);
        for sub in subs.iter_mut() {
            let _ = sub.unsubscribe().await;
        }
        if exit == Exit::Released {
            // Answer what was already delivered to us before giving up.
            while let Some(Some(m)) = subs.next().now_or_never() {
                batch.push(m);
                if batch.len() == MAX_BATCH {
                    self.process(&mut batch, std::time::Instant::now()).await;
                }
            }
            self.process(&mut batch, std::time::Instant::now()).await;
        }
        // Every record of ours stored (so the final snapshot's journal position
        // covers them) and every answer sent.
        self.answering.outbox.flush().await;
        if let Some(job) = in_flight.snapshot {
            match job.await {
                Ok(Ok((manifest, rev))) => self.written(manifest, rev),
                _ => self.owner.snapshot_failed(),
            }
        }
        if let Some(job) = in_flight.usage {
            let _ = job.await;
            self.owner.usage_flushed();
        }
        if exit == Exit::Released {
            // A renewal in flight when the stop came may already have moved
            // the lease's revision on the server: take its result, or the
            // release below would expect the old revision, fail, and leave the
            // partition unowned until the lease expired.
            if let Some(renewing) = in_flight.renewal {
                if let Ok(lease) = renewing.await {
                    self.renewed(lease);
                    self.owning.stats.meters.lease(LeaseEvent::Renewed);
                }
            }
            self.hand_over().await;
            let meters = &self.owning.stats.meters;
            meters.handover_duration.observe(secs(stopped.elapsed()));
        }
        // Unfinished, it leaves the usage to the next owner's replay: nothing
        // was stored past the journal position this takeover started from.
        if let Some(job) = usage_replay {
            job.abort();
        }
        self.close_usage();
    }
}
