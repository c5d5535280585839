//! One region's owner of one partition, kept as the worker keeps it: the
//! real [`Owner`] (when a snapshot is due, what its manifest claims, what
//! a takeover replays), its snapshots encoded and decoded as the bucket
//! holds them ([`snapshot::encode`], [`snapshot::decode`]), and in journal
//! mode its records. Only the bucket and the journal are simulated: both
//! store at once, so a snapshot or a record is in once its turn ends.
//!
//! The owner goes in two ways, as a worker's does: killed (`kill -9`: the
//! next owner restores the last snapshot, and in journal mode replays the
//! records after it) or handed over (a final snapshot first, carrying what
//! only a handover carries: the delegate's slices). Either way the next
//! owner takes over through [`Owner::take_over`] with the decision core's
//! [`Deciding`], and what it must tell the other regions comes back as
//! actions.
//!
//! Usage is recorded as the worker records it: into the owner's ledger,
//! at once in snapshot mode and from the stored records in journal mode,
//! flushed on the owner's ticks and at a handover into the partition's
//! [`UsageStore`], replayed from the journal at a takeover; a kill loses
//! what the ledger held, which in journal mode the replay brings back.

use crate::usage::{held, ByKey, UsageStore};
use sluice_core::policies::Policies;
use sluice_core::region::state::Action;
use sluice_core::time::Nanos;
use sluice_core::usage::Tier;
use sluice_worker::alerting::Sink;
use sluice_worker::counters::Counters;
use sluice_worker::decide::Decider;
use sluice_worker::journal::record::Record;
use sluice_worker::journal::Since;
use sluice_worker::kept::Carried;
use sluice_worker::owner::{Found, Journal, Owner, Settings, Snapshot, Write};
use sluice_worker::shard::deciding::Deciding;
use sluice_worker::snapshot::{self, Manifest};
use sluice_worker::stats::ShardStats;
use sluice_worker::usage::counts_of;
use sluice_worker::usage::ledger::Ledger;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The worker's id in every manifest and journal position.
const WORKER: &str = "sim";

/// A partition's journal: every record stored, numbered from 1 in order.
struct Records {
    on: bool,
    stored: Vec<Record>,
}

impl Journal for Records {
    fn is_journal(&self) -> bool {
        self.on
    }

    fn position(&self, claimed: u64) -> (u64, Vec<String>) {
        match self.on {
            true => (claimed.max(self.stored.len() as u64), vec![WORKER.into()]),
            false => (0, Vec::new()),
        }
    }

    fn moved_past(&self, claimed: u64) -> bool {
        self.on && self.stored.len() as u64 > claimed
    }

    fn replay(
        &self,
        _partition: u32,
        manifest: &mut Manifest,
        _since: &Since,
        apply: &mut dyn FnMut(&Record) -> bool,
    ) -> usize {
        if !self.on {
            return 0;
        }
        let after = usize::try_from(manifest.journal_seq).unwrap_or(usize::MAX);
        let applied = self.stored.iter().skip(after).filter(|r| apply(r)).count();
        manifest.lists_writer(WORKER);
        applied
    }
}

/// A snapshot as the bucket holds it.
struct Stored {
    manifest: Manifest,
    rev: u64,
    bytes: Vec<u8>,
}

/// One partition's owner, its bucket, its journal and its stored usage.
pub struct Partition {
    pub owner: Owner,
    partition: u32,
    lease_rev: u64,
    bucket: Option<Stored>,
    journal: Records,
    usage: UsageStore,
    /// The usage tiers each new owner's ledger counts in.
    tiers: Vec<Tier>,
    /// Where each owner's counters send the alerts they fire: the
    /// region's publisher.
    alerts: Sink,
    /// When the simulated clock started, as an [`Instant`] (the owner
    /// measures snapshot intervals with those).
    epoch: Instant,
}

/// What a partition's next owner must do first, and what the last one
/// took with it.
pub struct NextOwner {
    /// What it must tell the other regions.
    pub actions: Vec<Action>,
    /// The usage the last owner's ledger held unstored (a kill loses it;
    /// in journal mode the replay brings it back).
    pub usage_held: ByKey,
}

impl Partition {
    /// `partition` with nothing stored and no owner yet ([`Partition::open`]).
    pub fn new(
        partition: u32,
        journal: bool,
        (tiers, alerts): (Vec<Tier>, Sink),
        epoch: Instant,
    ) -> Partition {
        Partition {
            owner: new_owner(partition, 1, alerts.clone(), epoch),
            partition,
            lease_rev: 1,
            bucket: None,
            journal: Records {
                on: journal,
                stored: Vec::new(),
            },
            usage: UsageStore::default(),
            tiers,
            alerts,
            epoch,
        }
    }

    pub fn counters(&self) -> &Counters {
        self.owner.counters()
    }

    /// A turn's records are stored (journal mode): their usage reaches
    /// the ledger, as the journal writer hands it over once stored.
    pub fn store(&mut self, records: Vec<Record>) {
        if !self.journal.on {
            return;
        }
        if let Some(ledger) = self.owner.usage() {
            for record in &records {
                if let Some(counts) = counts_of(record) {
                    let t_ms = record.at().as_u64() / 1_000_000;
                    ledger.add(record.policy(), record.key(), t_ms, counts);
                }
            }
        }
        self.journal.stored.extend(records);
    }

    /// Stores what the ledger holds, as the worker's flush does.
    fn flush_usage(&mut self) {
        if let Some(ledger) = self.owner.usage() {
            let delivered = self.journal.stored.len() as u64;
            self.usage.flush(ledger, delivered);
        }
    }

    /// The partition's recorded usage: stored, and (stored now) what
    /// its ledger holds.
    pub fn usage(&mut self) -> ByKey {
        self.flush_usage();
        self.usage.totals()
    }

    fn instant(&self, now: Nanos) -> Instant {
        self.epoch + Duration::from_nanos(now.0)
    }

    /// A snapshot interval passed: the owner writes what it says is due.
    /// Whether a snapshot was written.
    pub fn tick(&mut self, now: Nanos) -> bool {
        let at = self.instant(now);
        let due = self.owner.tick(&self.journal, at, now);
        if due.usage_flush {
            self.flush_usage();
            self.owner.usage_flushed();
        }
        match due.write {
            Some(Write::Snapshot(snapshot)) => {
                self.write(snapshot, now);
                true
            }
            Some(Write::Position { manifest, .. }) => {
                self.put(manifest, self.bytes(), now);
                false
            }
            None => false,
        }
    }

    /// Copies the counters between turns, encodes them as the worker
    /// does, stores the usage first when the snapshot asks (journal mode:
    /// it claims no position past the stored usage), and stores them with
    /// their manifest.
    fn write(&mut self, snapshot: Snapshot, now: Nanos) {
        let handover = snapshot.handover;
        let (copy, carried) = self
            .counters()
            .copy_between_turns(|c| Carried::read(c, now, handover))
            .expect("no turn is in progress between two steps");
        let encoded = snapshot::encode(&copy, &carried, now).expect("the counters encode");
        let mut stored_through = None;
        if snapshot.flush_usage.is_some() {
            self.flush_usage();
            stored_through = self.owner.usage().map(|ledger| ledger.stored_through());
        }
        let mut manifest = snapshot.complete(&copy, carried, stored_through);
        encoded.describe(&mut manifest);
        let bytes = encoded
            .chunks()
            .iter()
            .flat_map(|c| c.iter().copied())
            .collect();
        self.put(manifest, bytes, now);
    }

    /// A snapshot (or a manifest with a newer position) is written.
    fn put(&mut self, manifest: Manifest, bytes: Vec<u8>, now: Nanos) {
        let rev = self.keep(manifest.clone(), bytes);
        self.owner
            .snapshot_written(manifest, rev, self.instant(now));
    }

    /// The bucket holds `manifest` and `bytes` now: their revision.
    fn keep(&mut self, manifest: Manifest, bytes: Vec<u8>) -> u64 {
        let rev = self.bucket.as_ref().map_or(0, |s| s.rev) + 1;
        self.bucket = Some(Stored {
            manifest,
            rev,
            bytes,
        });
        rev
    }

    /// The chunks the bucket holds (none before the first snapshot).
    fn bytes(&self) -> Vec<u8> {
        self.bucket.as_ref().map_or(Vec::new(), |s| s.bytes.clone())
    }

    /// The owner goes (`handover`: after its last usage flush and final
    /// snapshot; else killed) and the next one takes over.
    pub fn next_owner(
        &mut self,
        decider: &Decider,
        policies: &Policies,
        handover: bool,
        now: Nanos,
    ) -> NextOwner {
        if handover {
            self.flush_usage();
            let at = self.instant(now);
            if let Some(last) = self.owner.final_snapshot(&self.journal, true, at, now) {
                self.write(last, now);
            }
        }
        let usage_held = self.owner.usage().map(|l| held(l)).unwrap_or_default();
        self.lease_rev += 1;
        let alerts = self.alerts.clone();
        self.owner = new_owner(self.partition, self.lease_rev, alerts, self.epoch);
        let actions = self.open(decider, policies, now);
        NextOwner {
            actions,
            usage_held,
        }
    }

    /// The owner takes the partition over as a shard does: the snapshot's
    /// counters and carried state, in journal mode the records after it
    /// (their usage too); what it must tell the other regions.
    pub fn open(&mut self, decider: &Decider, policies: &Policies, now: Nanos) -> Vec<Action> {
        let rules = Deciding { decider, policies };
        let mut found = Found::default();
        if let Some(stored) = &self.bucket {
            let (entries, carried) =
                snapshot::decode(self.partition, &stored.manifest, &stored.bytes)
                    .expect("the snapshot decodes");
            let idle_at = stored.manifest.idle_judged_at(now);
            self.counters()
                .import(entries, idle_at, |name, key| rules.kept_under(name, key));
            let mut manifest = stored.manifest.clone();
            if let Some(carried) = carried {
                manifest.carried = carried;
            }
            found = Found {
                manifest: Some(manifest),
                rev: stored.rev,
            };
        }
        let since = found.manifest.as_ref().map_or(0, |m| m.journal_seq);
        let tiers = self.tiers.clone();
        let taken = self.owner.take_over(
            found,
            &Since::default(),
            &self.journal,
            |stored_through| Some(Arc::new(Ledger::new(tiers, stored_through))),
            &rules,
            now,
        );
        if let (true, Some(ledger)) = (self.journal.on, self.owner.usage()) {
            self.usage.replay(ledger, &self.journal.stored, since);
        }
        // Fenced: the manifest names the new owner.
        let rev = self.keep(taken.manifest.clone(), self.bytes());
        self.owner.fenced(taken.manifest, rev, self.instant(now));
        taken.actions
    }
}

fn new_owner(partition: u32, lease_rev: u64, alerts: Sink, epoch: Instant) -> Owner {
    let settings = Settings {
        partition,
        worker_id: WORKER.into(),
        snapshot_interval: Duration::from_secs(2),
    };
    Owner::new(
        settings,
        lease_rev,
        // Buckets kept as long as a run lasts whatever the machine's
        // clock does: moka expires them by real time, and an ask's need
        // (sim time) read as real time could let a stalled run lose them.
        Counters::with_min_idle_ttl(Duration::from_secs(3_600)).alerting(alerts),
        Arc::new(ShardStats::default()),
        epoch,
    )
}
