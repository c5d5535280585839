//! What a partition's owner keeps, and the rules that carry it through a
//! snapshot, a journal replay, a takeover and a handover: one state machine
//! without I/O.
//!
//! The owner keeps the partition's counters (with the state kept beside
//! their values, [`crate::kept`]), its usage not yet stored
//! ([`crate::usage::ledger::Ledger`]), the manifest of its last snapshot
//! and where that snapshot stands in the journal. Everything that decides
//! *what* to store and *when* lives here: when a snapshot is due, what its
//! manifest claims, what a takeover restores and replays, what the final
//! handover writes. The shard task ([`crate::shard`]) only moves messages,
//! timers and store calls: it asks [`Owner::tick`] what to start, runs it,
//! and tells the owner how it ended ([`Owner::snapshot_written`],
//! [`Owner::snapshot_failed`], [`Owner::usage_flushed`]).
//!
//! Time comes in as arguments (an `Instant` for intervals, [`Nanos`] for
//! the wall clock), and the journal is reached through [`Journal`], so the
//! unit tests (`owner/tests.rs`) drive every rule without NATS.
//!
//! A new kind of kept state (holds, a partition's global state) is
//! registered in [`crate::kept`]; nothing here changes for it. What the
//! decision core adds to a takeover (replaying a record, and what the
//! partition tells the other regions once it answers) comes in through
//! [`Rules`].

use crate::counters::{Counters, TurnCopy};
use crate::decide::Owned;
use crate::journal::record::Record;
use crate::journal::Since;
use crate::kept::Carried;
use crate::snapshot::Manifest;
use crate::stats::ShardStats;
use crate::usage::ledger::Ledger;
use sluice_core::region::state::Action;
use sluice_core::time::Nanos;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An idle partition's manifest is rewritten with a newer journal position
/// after this many snapshot intervals (journal mode), so that the records
/// it no longer needs can be purged.
const POSITION_REFRESH_INTERVALS: u32 = 4;

/// The journal as the owner sees it: the one place that knows the
/// durability mode ([`crate::outbox::Outbox`]) answers, and tests fake it.
pub trait Journal {
    /// Whether answers wait for the journal (journal mode).
    fn is_journal(&self) -> bool;
    /// The journal position and writers a snapshot taken now may claim,
    /// given the position `claimed` by the last one.
    fn position(&self, claimed: u64) -> (u64, Vec<String>);
    /// Whether this worker's journal moved past `claimed`.
    fn moved_past(&self, claimed: u64) -> bool;
    /// Replays the records of `partition` in `since`, handing each to
    /// `apply`; lists this worker among the manifest's writers. Returns
    /// how many were applied.
    fn replay(
        &self,
        partition: u32,
        manifest: &mut Manifest,
        since: &Since,
        apply: &mut dyn FnMut(&Record) -> bool,
    ) -> usize;
}

/// The decision core as a takeover sees it: the shard implements it with
/// [`crate::decide::Decider`] and the policies in force; tests fake it.
pub trait Rules {
    /// Applies a journal record of a turn the snapshot does not hold;
    /// `false` when it was skipped.
    fn replay(&self, record: &Record, counters: &Counters) -> bool;

    /// The partition is restored: what it must tell the other regions
    /// once it answers (SPEC §12: its tallies to their homes again, and,
    /// as a home, a request to report theirs again, since its snapshot
    /// may hold older reports than the last owner had taken).
    fn taken_over(&self, owned: Owned<'_>) -> Vec<Action>;
}

/// What a takeover restored and what it leaves to do.
#[derive(Debug)]
pub struct TakenOver {
    /// The manifest to fence the partition with ([`Owner::fenced`]).
    pub manifest: Manifest,
    /// Whether the ledger still owes the usage of the replayed records
    /// (journal mode).
    pub usage_replay_owed: bool,
    /// What to carry over the link once the partition answers (its
    /// subjects subscribed, so that answers to them arrive).
    pub actions: Vec<Action>,
}

/// What an owner is configured with.
#[derive(Clone, Debug)]
pub struct Settings {
    pub partition: u32,
    pub worker_id: String,
    pub snapshot_interval: Duration,
}

/// What a snapshot tick asks the shard to start.
#[derive(Debug, Default)]
pub struct Due {
    pub write: Option<Write>,
    /// Store the usage counted since the last flush, with the rollups due.
    pub usage_flush: bool,
}

/// A write of the partition's state to the snapshot bucket.
#[derive(Debug)]
pub enum Write {
    /// Encode the counters and write them as a new generation.
    Snapshot(Snapshot),
    /// Nothing changed: rewrite the manifest with a newer journal position.
    Position {
        manifest: Manifest,
        expected_rev: u64,
    },
}

/// A snapshot to write: its manifest as it stands before the counters are
/// encoded, and what completes it ([`Snapshot::complete`]).
#[derive(Debug)]
pub struct Snapshot {
    pub manifest: Manifest,
    /// The manifest's revision it replaces (compare and set).
    pub expected_rev: u64,
    /// The generation whose chunks it replaces, to be purged once written.
    pub previous_gen: Option<String>,
    /// Journal mode with usage: the partition's usage is stored first (with
    /// the rollups due when `Some(true)`; a handover leaves those to the
    /// next owner), and the snapshot claims no journal position past what
    /// it stored. See [`Owner::tick`].
    pub flush_usage: Option<bool>,
    /// A handover's final snapshot: the kept state is read as its owner
    /// leaves it ([`crate::kept::Kept::read`]).
    pub handover: bool,
}

impl Snapshot {
    /// The manifest to write once the counters copied in `copy` (with the
    /// state kept beside them, `carried`, read in the same copy) are
    /// encoded and, with [`Snapshot::flush_usage`], the usage stored
    /// through `usage_stored_through`.
    pub fn complete(
        self,
        copy: &TurnCopy,
        carried: Carried,
        usage_stored_through: Option<u64>,
    ) -> Manifest {
        let mut manifest = self.manifest;
        if let Some(stored) = usage_stored_through {
            manifest.journal_seq = manifest.journal_seq.min(stored);
        }
        manifest.turn = copy.turn();
        manifest.carried = carried;
        manifest
    }
}

/// A takeover's snapshot as read from the bucket.
#[derive(Debug, Default)]
pub struct Found {
    pub manifest: Option<Manifest>,
    /// The manifest's revision (0 when there is none).
    pub rev: u64,
}

/// What [`Owner::snapshot_written`] reports for the meters.
#[derive(Debug, PartialEq)]
pub struct Written {
    /// How long the snapshot took (none for a position rewrite).
    pub took: Option<Duration>,
    pub bytes: u64,
}

/// The state of one partition's owner.
pub struct Owner {
    settings: Settings,
    lease_rev: u64,
    counters: Counters,
    stats: Arc<ShardStats>,
    usage: Option<Arc<Ledger>>,
    manifest: Manifest,
    manifest_rev: u64,
    /// When the manifest was last written (journal mode refreshes an idle
    /// partition's journal position, so the journal can be purged).
    manifest_written_at: Instant,
    /// `stats.changes` that the last written snapshot holds...
    changes_at_snapshot: u64,
    /// ...and that the write in flight holds.
    changes_in_flight: u64,
    /// When the snapshot in flight was started (none while a manifest is
    /// only rewritten with a new journal position).
    snapshot_started: Option<Instant>,
    writing: bool,
    flushing: bool,
}

impl Owner {
    /// The owner of `settings.partition` under the lease of revision
    /// `lease_rev`, before its takeover: empty counters.
    pub fn new(
        settings: Settings,
        lease_rev: u64,
        counters: Counters,
        stats: Arc<ShardStats>,
        now: Instant,
    ) -> Owner {
        Owner {
            settings,
            lease_rev,
            counters,
            stats,
            usage: None,
            manifest: Manifest::default(),
            manifest_rev: 0,
            manifest_written_at: now,
            changes_at_snapshot: 0,
            changes_in_flight: 0,
            snapshot_started: None,
            writing: false,
            flushing: false,
        }
    }

    pub fn partition(&self) -> u32 {
        self.settings.partition
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn stats(&self) -> &Arc<ShardStats> {
        &self.stats
    }

    /// The partition as the decision core is handed it.
    pub fn owned(&self) -> Owned<'_> {
        Owned {
            partition: self.settings.partition,
            counters: &self.counters,
            stats: &self.stats,
            usage: self.usage.as_deref(),
        }
    }

    /// The partition's usage ledger, once the takeover opened it.
    pub fn usage(&self) -> Option<&Arc<Ledger>> {
        self.usage.as_ref()
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The lease was renewed (its revision moved on).
    pub fn renewed(&mut self, lease_rev: u64) {
        self.lease_rev = lease_rev;
    }

    // --- Takeover ---------------------------------------------------------

    /// Takeover, first step: a snapshot written under a newer lease means
    /// another worker owns the partition now.
    pub fn check_found(&self, found: &Found) -> anyhow::Result<()> {
        if let Some(m) = &found.manifest {
            anyhow::ensure!(
                m.lease_rev <= self.lease_rev,
                "the snapshot was written under a newer lease ({} > {}); another worker owns this partition",
                m.lease_rev,
                self.lease_rev
            );
        }
        Ok(())
    }

    /// A failed takeover attempt: what it restored is dropped, the next
    /// attempt starts over with `counters`.
    pub fn start_over(&mut self, counters: Counters) {
        self.counters = counters;
        self.usage = None;
    }

    /// Takeover, once the snapshot's counters are imported into
    /// [`Owner::counters`]: takes over every kind of state carried beside
    /// them ([`crate::kept`]), opens the usage ledger (`open_usage`, given
    /// the journal position the snapshot covers), replays the journal's
    /// records since the snapshot (`since`) through `rules`, each once:
    /// those of turns the snapshot's copy holds are skipped
    /// ([`crate::counters::Turns`]), and asks `rules` what the restored
    /// partition must tell the other regions.
    pub fn take_over(
        &mut self,
        found: Found,
        since: &Since,
        journal: &dyn Journal,
        open_usage: impl FnOnce(u64) -> Option<Arc<Ledger>>,
        rules: &dyn Rules,
        now: Nanos,
    ) -> TakenOver {
        let mut manifest = found.manifest.unwrap_or_default();
        let handover = manifest.handover;
        manifest.carried.take_over(&self.counters, now, handover);
        self.usage = open_usage(manifest.journal_seq);
        let counters = &self.counters;
        // Records numbered up to the snapshot's turn are in its copy; a
        // record of no turn (written before turns were numbered) is
        // replayed as it always was.
        let copied = manifest.turn;
        let mut last_turn = copied;
        let applied = journal.replay(self.settings.partition, &mut manifest, since, &mut |r| {
            last_turn = last_turn.max(r.turn());
            (r.turn() == 0 || r.turn() > copied) && rules.replay(r, counters)
        });
        // Our turns are numbered after every earlier owner's.
        counters.turns().resume_after(last_turn);
        if applied > 0 {
            tracing::debug!(
                partition = self.settings.partition,
                applied,
                "replayed the journal"
            );
            // The replayed counts are only in memory: the next snapshot
            // (periodic or at handover) must persist them.
            self.stats.add_changes(applied as u64);
        }
        // Fence: from now on a late snapshot by the previous owner fails
        // its compare and set. What a handover's snapshot carried for its
        // first owner only is ours now: an owner after us must not take
        // it too.
        manifest.lease_rev = self.lease_rev;
        manifest.worker = self.settings.worker_id.clone();
        manifest.handover = false;
        self.manifest_rev = found.rev;
        let usage_replay_owed = journal.is_journal() && self.usage.is_some();
        TakenOver {
            manifest,
            usage_replay_owed,
            actions: rules.taken_over(self.owned()),
        }
    }

    /// The fencing manifest was written at revision `rev`: the partition is ours.
    pub fn fenced(&mut self, manifest: Manifest, rev: u64, now: Instant) {
        self.manifest = manifest;
        self.manifest_rev = rev;
        self.manifest_written_at = now;
    }

    /// The revision the fencing write replaces.
    pub fn manifest_rev(&self) -> u64 {
        self.manifest_rev
    }

    // --- Snapshots and usage flushes --------------------------------------

    /// Changed since the last snapshot that was written (a failed one
    /// leaves the partition dirty, so the next tick tries again).
    pub fn dirty(&self) -> bool {
        self.stats.changes() != self.changes_at_snapshot
    }

    /// Whether the takeover's usage replay is in (or there is none).
    fn usage_replayed(&self) -> bool {
        self.usage.as_ref().is_none_or(|l| l.is_replayed())
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
    fn snapshot_flushes_usage(&self, journal: &dyn Journal) -> bool {
        self.usage.is_some() && journal.is_journal()
    }

    /// The journal position and writers a snapshot taken now may claim.
    /// With usage recorded, no further than the stored usage holds: a new
    /// owner replays the journal from the snapshot's position for usage too.
    fn journal_position(&self, journal: &dyn Journal) -> (u64, Vec<String>) {
        let (seq, writers) = journal.position(self.manifest.journal_seq);
        match &self.usage {
            Some(ledger) if journal.is_journal() => (seq.min(ledger.stored_through()), writers),
            _ => (seq, writers),
        }
    }

    /// A snapshot interval passed: what to start. A snapshot when the
    /// counters changed; else, in journal mode, a manifest rewrite when the
    /// journal moved on and the manifest is old; and a usage flush. Two
    /// flushes of one ledger never overlap, none starts before the
    /// takeover's usage replay is in, and a snapshot that stores the usage
    /// itself waits for both.
    pub fn tick(&mut self, journal: &dyn Journal, now: Instant, wall: Nanos) -> Due {
        let mut due = Due::default();
        if self.writing {
            return due;
        }
        let snapshot_flushes = self.snapshot_flushes_usage(journal);
        let flushing = snapshot_flushes && (self.flushing || !self.usage_replayed());
        if self.dirty() && !flushing {
            due.write = Some(Write::Snapshot(self.snapshot(journal, false, now, wall)));
        } else if self.journal_position_stale(journal, now) && !flushing {
            due.write = Some(self.position_rewrite(journal));
        }
        if !self.flushing
            && self.usage.is_some()
            && self.usage_replayed()
            && !(snapshot_flushes && due.write.is_some())
        {
            self.flushing = true;
            due.usage_flush = true;
        }
        due
    }

    /// Nothing counted since the last snapshot, but our journal moved on: a
    /// manifest still claiming an old position keeps every worker's records
    /// from being purged.
    fn journal_position_stale(&self, journal: &dyn Journal, now: Instant) -> bool {
        journal.moved_past(self.manifest.journal_seq)
            && now.saturating_duration_since(self.manifest_written_at)
                >= POSITION_REFRESH_INTERVALS * self.settings.snapshot_interval
    }

    /// The manifest with the current journal position: the chunks are
    /// unchanged, as nothing changed since they were written.
    fn position_rewrite(&mut self, journal: &dyn Journal) -> Write {
        let mut manifest = self.manifest.clone();
        (manifest.journal_seq, manifest.journal_writers) = self.journal_position(journal);
        manifest.lease_rev = self.lease_rev;
        self.changes_in_flight = self.changes_at_snapshot;
        self.snapshot_started = None;
        self.writing = true;
        Write::Position {
            manifest,
            expected_rev: self.manifest_rev,
        }
    }

    /// A snapshot taken now: a handover's final one, or a periodic one
    /// (with the rollups due when it stores the usage).
    fn snapshot(
        &mut self,
        journal: &dyn Journal,
        handover: bool,
        now: Instant,
        wall: Nanos,
    ) -> Snapshot {
        let changes = self.stats.changes();
        let flush_usage = self.snapshot_flushes_usage(journal).then_some(!handover);
        let (journal_seq, journal_writers) = if flush_usage.is_some() {
            // Capped by what the flush stores (`Snapshot::complete`).
            journal.position(self.manifest.journal_seq)
        } else {
            self.journal_position(journal)
        };
        // A generation of its own: a handover's may hold no change since
        // the last snapshot ([`Carried::unsaved`]), whose chunks it must
        // not overwrite (nor purge, if it fails).
        let mark = if handover { "h" } else { "" };
        let manifest = Manifest {
            gen: format!("{}x{changes}{mark}", self.lease_rev),
            lease_rev: self.lease_rev,
            journal_seq,
            journal_writers,
            taken_at_ms: wall.as_u64() / 1_000_000,
            worker: self.settings.worker_id.clone(),
            handover,
            // Read in the copy of the counters (`Snapshot::complete`).
            ..Default::default()
        };
        self.changes_in_flight = changes;
        self.snapshot_started = Some(now);
        self.writing = true;
        let previous_gen = &self.manifest.gen;
        Snapshot {
            manifest,
            expected_rev: self.manifest_rev,
            previous_gen: (!previous_gen.is_empty()).then(|| previous_gen.clone()),
            flush_usage,
            handover,
        }
    }

    /// The write in flight landed: `manifest` is at revision `rev`.
    pub fn snapshot_written(&mut self, manifest: Manifest, rev: u64, now: Instant) -> Written {
        self.writing = false;
        let written = Written {
            took: self
                .snapshot_started
                .take()
                .map(|started| now.saturating_duration_since(started)),
            bytes: manifest.bytes,
        };
        self.changes_at_snapshot = self.changes_in_flight;
        self.manifest_written_at = now;
        self.stats
            .last_snapshot_ms
            .store(manifest.taken_at_ms, std::sync::atomic::Ordering::Relaxed);
        self.stats
            .keys
            .store(manifest.entries, std::sync::atomic::Ordering::Relaxed);
        let holds = manifest.carried.holds.len() as u64;
        self.stats
            .holds
            .store(holds, std::sync::atomic::Ordering::Relaxed);
        self.manifest = manifest;
        self.manifest_rev = rev;
        written
    }

    /// The write in flight failed: the partition stays dirty and the next
    /// tick tries again.
    pub fn snapshot_failed(&mut self) {
        self.writing = false;
        self.snapshot_started = None;
    }

    /// Whether a manifest written under `lease_rev` means the partition is
    /// someone else's now (after a failed write).
    pub fn lost_to(&self, lease_rev: u64) -> bool {
        lease_rev > self.lease_rev
    }

    /// The usage flush started by a tick ended (stored or not: what it did
    /// not store stays in the ledger for the next one).
    pub fn usage_flushed(&mut self) {
        self.flushing = false;
    }

    // --- Handover ---------------------------------------------------------

    /// Handover, after every answer is sent and the usage stored: the final
    /// snapshot, when anything changed since the last one (or kept state
    /// holds what only a handover carries, [`Carried::unsaved`]) and the
    /// lease is still valid (a snapshot without a valid lease could
    /// overwrite the next owner's). The rollups due are left to the next
    /// owner.
    pub fn final_snapshot(
        &mut self,
        journal: &dyn Journal,
        lease_valid: bool,
        now: Instant,
        wall: Nanos,
    ) -> Option<Snapshot> {
        let changed = self.dirty() || Carried::unsaved(&self.counters);
        (changed && lease_valid).then(|| self.snapshot(journal, true, now, wall))
    }
}

#[cfg(test)]
mod tests;
