//! The owner's rules without NATS: snapshot scheduling, what a snapshot
//! carries, takeover and replay, hand-over and the usage flush, with the
//! journal faked and time passed in.

use super::*;
use crate::counters::KeyBound;
use sluice_core::ask::Op;
use sluice_core::outstanding::HeldSlice;
use sluice_core::usage::UsageConfig;
use std::cell::Cell;

const INTERVAL: Duration = Duration::from_secs(2);
const LEASE_REV: u64 = 7;
const SEC: u64 = 1_000_000_000;

/// A journal as the owner sees it: on or off, the acknowledged position,
/// and the records a takeover replays.
struct FakeJournal {
    on: bool,
    acked: Cell<u64>,
    records: Vec<Record>,
}

impl FakeJournal {
    fn snapshot_mode() -> FakeJournal {
        FakeJournal {
            on: false,
            acked: Cell::new(0),
            records: Vec::new(),
        }
    }

    fn journal_mode(acked: u64) -> FakeJournal {
        FakeJournal {
            on: true,
            acked: Cell::new(acked),
            records: Vec::new(),
        }
    }
}

impl Journal for FakeJournal {
    fn is_journal(&self) -> bool {
        self.on
    }

    fn position(&self, claimed: u64) -> (u64, Vec<String>) {
        if self.on {
            (claimed.max(self.acked.get()), vec!["w1".to_string()])
        } else {
            (0, Vec::new())
        }
    }

    fn moved_past(&self, claimed: u64) -> bool {
        self.on && self.acked.get() > claimed
    }

    fn replay(
        &self,
        partition: u32,
        manifest: &mut Manifest,
        _since: &Since,
        apply: &mut dyn FnMut(&Record) -> bool,
    ) -> usize {
        if !self.on {
            return 0;
        }
        let applied = self
            .records
            .iter()
            .filter(|r| r.n == partition)
            .filter(|r| apply(r))
            .count();
        manifest.lists_writer("w1");
        applied
    }
}

/// The decision core as a takeover sees it, faked: each record replayed
/// through `replay`, nothing to tell the other regions.
struct Replaying<F>(std::cell::RefCell<F>);

fn replaying<F: FnMut(&Record, &Counters) -> bool>(replay: F) -> Replaying<F> {
    Replaying(std::cell::RefCell::new(replay))
}

impl<F: FnMut(&Record, &Counters) -> bool> Rules for Replaying<F> {
    fn replay(&self, record: &Record, counters: &Counters) -> bool {
        (self.0.borrow_mut())(record, counters)
    }

    fn taken_over(&self, _owned: Owned<'_>) -> Vec<Action> {
        Vec::new()
    }
}

fn owner(now: Instant) -> Owner {
    let settings = Settings {
        partition: 3,
        worker_id: "w1".to_string(),
        snapshot_interval: INTERVAL,
    };
    let counters = Counters::within(KeyBound::new(1_000));
    Owner::new(settings, LEASE_REV, counters, Arc::default(), now)
}

fn ledger(stored_through: u64) -> Arc<Ledger> {
    Arc::new(Ledger::new(UsageConfig::default().tiers, stored_through))
}

/// The manifest of `snapshot` once the counters are copied between turns (with
/// the kept state read in it), as the shard completes it.
fn complete(snapshot: Snapshot, counters: &Counters, now: Nanos, stored: Option<u64>) -> Manifest {
    let (copy, carried) = counters
        .copy_between_turns(|c| Carried::read(c, now, snapshot.handover))
        .expect("no turn in progress");
    snapshot.complete(&copy, carried, stored)
}

fn record(n: u32, key: &str, c: u64) -> Record {
    Record {
        n,
        p: "default".to_string(),
        k: key.to_string(),
        c,
        t: SEC,
        r: false,
        d: false,
        s: false,
        g: 0,
        u: 0,
        h: None,
        e: 0,
        x: 0,
        v: 0,
        i: None,
        q: 0,
    }
}

/// An owner that took its partition over with nothing found and fenced it
/// at revision 1, with `usage` as its ledger.
fn taken_over(journal: &FakeJournal, usage: Option<Arc<Ledger>>, now: Instant) -> Owner {
    let mut o = owner(now);
    let taken = o.take_over(
        Found::default(),
        &Since::default(),
        journal,
        |_| usage,
        &replaying(|_, _| true),
        Nanos(SEC),
    );
    o.fenced(taken.manifest, 1, now);
    o
}

fn snapshot_of(due: Due) -> Snapshot {
    match due.write {
        Some(Write::Snapshot(s)) => s,
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

#[test]
fn a_partition_is_snapshotted_when_it_changed_and_not_while_a_write_is_in_flight() {
    let t0 = Instant::now();
    let journal = FakeJournal::snapshot_mode();
    let mut o = taken_over(&journal, None, t0);
    let due = o.tick(&journal, t0 + INTERVAL, Nanos(2 * SEC));
    assert!(due.write.is_none() && !due.usage_flush, "nothing changed");

    o.stats().add_changes(5);
    let snapshot = snapshot_of(o.tick(&journal, t0 + INTERVAL, Nanos(2 * SEC)));
    assert_eq!(snapshot.expected_rev, 1);
    assert_eq!(snapshot.manifest.lease_rev, LEASE_REV);
    assert_eq!(snapshot.manifest.gen, format!("{LEASE_REV}x5"));
    assert_eq!(snapshot.manifest.taken_at_ms, 2_000);
    assert_eq!(snapshot.manifest.worker, "w1");
    assert_eq!(
        snapshot.flush_usage, None,
        "snapshot mode stores no usage with it"
    );
    assert_eq!(snapshot.previous_gen, None, "nothing was written before");

    o.stats().add_changes(1);
    let due = o.tick(&journal, t0 + 2 * INTERVAL, Nanos(4 * SEC));
    assert!(due.write.is_none(), "one write at a time");

    let manifest = complete(snapshot, o.counters(), Nanos(2 * SEC), None);
    let written = o.snapshot_written(manifest, 2, t0 + INTERVAL + INTERVAL / 2);
    assert_eq!(written.took, Some(INTERVAL / 2));
    assert_eq!(o.manifest().gen, format!("{LEASE_REV}x5"));
    assert!(o.dirty(), "a change made while the snapshot was written");

    let next = snapshot_of(o.tick(&journal, t0 + 2 * INTERVAL, Nanos(4 * SEC)));
    assert_eq!(next.expected_rev, 2);
    assert_eq!(
        next.previous_gen.as_deref(),
        Some(format!("{LEASE_REV}x5").as_str())
    );
    let manifest = complete(next, o.counters(), Nanos(4 * SEC), None);
    o.snapshot_written(manifest, 3, t0 + 2 * INTERVAL);
    assert!(!o.dirty());
    assert!(o
        .tick(&journal, t0 + 3 * INTERVAL, Nanos(6 * SEC))
        .write
        .is_none());
}

#[test]
fn a_failed_snapshot_leaves_the_partition_dirty_and_the_next_tick_tries_again() {
    let t0 = Instant::now();
    let journal = FakeJournal::snapshot_mode();
    let mut o = taken_over(&journal, None, t0);
    o.stats().add_changes(1);
    snapshot_of(o.tick(&journal, t0 + INTERVAL, Nanos(2 * SEC)));
    o.snapshot_failed();
    assert!(o.dirty());
    let again = snapshot_of(o.tick(&journal, t0 + 2 * INTERVAL, Nanos(4 * SEC)));
    assert_eq!(
        again.expected_rev, 1,
        "the manifest is still the fenced one"
    );
    assert!(!o.lost_to(LEASE_REV) && o.lost_to(LEASE_REV + 1));
}

#[test]
fn an_idle_partition_rewrites_its_journal_position_only_when_the_journal_moved_and_the_manifest_is_old(
) {
    let t0 = Instant::now();
    let journal = FakeJournal::journal_mode(10);
    let mut o = taken_over(&journal, None, t0);
    assert_eq!(o.manifest().journal_writers, ["w1"]);
    journal.acked.set(25);
    let young = o.tick(&journal, t0 + 3 * INTERVAL, Nanos(SEC));
    assert!(young.write.is_none(), "written 3 intervals ago: not yet");
    let due = o.tick(&journal, t0 + 4 * INTERVAL, Nanos(SEC));
    let Some(Write::Position {
        manifest,
        expected_rev,
    }) = due.write
    else {
        panic!("expected a position rewrite, got {:?}", due.write);
    };
    assert_eq!((manifest.journal_seq, expected_rev), (25, 1));
    assert_eq!(manifest.gen, o.manifest().gen, "the chunks are unchanged");
    let written = o.snapshot_written(manifest, 2, t0 + 4 * INTERVAL);
    assert_eq!(written.took, None, "no snapshot duration for a rewrite");
    assert_eq!(o.manifest().journal_seq, 25);
    assert!(o
        .tick(&journal, t0 + 9 * INTERVAL, Nanos(SEC))
        .write
        .is_none());

    let snapshot_mode = FakeJournal::snapshot_mode();
    let mut idle = taken_over(&snapshot_mode, None, t0);
    assert!(idle
        .tick(&snapshot_mode, t0 + 9 * INTERVAL, Nanos(SEC))
        .write
        .is_none());
}

#[test]
fn with_usage_in_journal_mode_the_position_claimed_is_no_further_than_the_stored_usage() {
    let t0 = Instant::now();
    let journal = FakeJournal::journal_mode(50);
    let usage = ledger(30);
    let mut o = taken_over(&journal, Some(usage.clone()), t0);
    o.stats().add_changes(1);
    let due = o.tick(&journal, t0 + INTERVAL, Nanos(SEC));
    assert!(!due.usage_flush, "the snapshot stores the usage itself");
    let snapshot = snapshot_of(due);
    assert_eq!(snapshot.flush_usage, Some(true), "with the rollups due");
    assert_eq!(snapshot.manifest.journal_seq, 50, "capped only once stored");
    let manifest = complete(
        snapshot,
        o.counters(),
        Nanos(SEC),
        Some(usage.stored_through()),
    );
    assert_eq!(manifest.journal_seq, 30);

    // An idle partition's rewrite is capped by the stored usage at once.
    o.snapshot_written(manifest, 2, t0 + INTERVAL);
    journal.acked.set(80);
    let due = o.tick(&journal, t0 + 5 * INTERVAL, Nanos(SEC));
    let Some(Write::Position { manifest, .. }) = due.write else {
        panic!("expected a position rewrite, got {:?}", due.write);
    };
    assert_eq!(manifest.journal_seq, 30);
}

#[test]
fn the_usage_is_flushed_once_at_a_time_and_not_before_the_takeovers_replay_is_in() {
    let t0 = Instant::now();
    let journal = FakeJournal::snapshot_mode();
    let mut o = taken_over(&journal, Some(ledger(0)), t0);
    assert!(o.tick(&journal, t0 + INTERVAL, Nanos(SEC)).usage_flush);
    assert!(
        !o.tick(&journal, t0 + 2 * INTERVAL, Nanos(SEC)).usage_flush,
        "one is running"
    );
    o.usage_flushed();
    assert!(o.tick(&journal, t0 + 3 * INTERVAL, Nanos(SEC)).usage_flush);

    let without_usage = &mut taken_over(&journal, None, t0);
    assert!(
        !without_usage
            .tick(&journal, t0 + INTERVAL, Nanos(SEC))
            .usage_flush
    );

    let journal = FakeJournal::journal_mode(5);
    let usage = ledger(0);
    usage.replay_pending();
    let mut o = taken_over(&journal, Some(usage.clone()), t0);
    o.stats().add_changes(1);
    let due = o.tick(&journal, t0 + INTERVAL, Nanos(SEC));
    assert!(
        due.write.is_none() && !due.usage_flush,
        "the replay is not in yet"
    );
    usage.replay_done();
    let due = o.tick(&journal, t0 + 2 * INTERVAL, Nanos(SEC));
    assert!(due.write.is_some() && !due.usage_flush);
}

/// The slices a snapshot carries are those held when its counters are
/// copied, in the same cut: one that came back after the snapshot was
/// decided on but before the copy is not carried, one granted then is.
#[test]
fn a_snapshot_carries_the_slices_held_at_its_cut() {
    let t0 = Instant::now();
    let journal = FakeJournal::snapshot_mode();
    let mut o = taken_over(&journal, None, t0);
    let now = Nanos(10 * SEC);
    o.counters()
        .outstanding()
        .granted("default/kept", Nanos(9 * SEC), 40);
    o.counters()
        .outstanding()
        .granted("default/back", Nanos(9 * SEC), 40);
    o.stats().add_changes(1);
    let snapshot = snapshot_of(o.tick(&journal, t0 + INTERVAL, now));

    let back = o.counters().outstanding().refund(
        "default/back",
        &sluice_core::budget::Refund {
            units: 40,
            spent: 0,
            taken_at: Nanos(9 * SEC),
        },
        now,
    );
    assert!(back.is_ok());
    o.counters()
        .outstanding()
        .granted("default/new", Nanos(10 * SEC), 40);

    let manifest = complete(snapshot, o.counters(), now, None);
    let mut keys: Vec<&str> = manifest
        .carried
        .slices
        .iter()
        .map(|h| h.key.as_str())
        .collect();
    keys.sort();
    assert_eq!(keys, ["default/kept", "default/new"]);
}

#[test]
fn a_takeover_refuses_a_snapshot_of_a_newer_lease() {
    let o = owner(Instant::now());
    let newer = Found {
        manifest: Some(Manifest {
            lease_rev: LEASE_REV + 1,
            ..Manifest::default()
        }),
        rev: 4,
    };
    let e = o.check_found(&newer).unwrap_err();
    assert!(e.to_string().contains("another worker owns"), "{e}");
    let older = Found {
        manifest: Some(Manifest {
            lease_rev: LEASE_REV - 1,
            ..Manifest::default()
        }),
        rev: 4,
    };
    assert!(o.check_found(&older).is_ok());
}

#[test]
fn a_takeover_restores_the_carried_state_replays_the_journal_and_fences_the_manifest() {
    let t0 = Instant::now();
    let mut journal = FakeJournal::journal_mode(0);
    journal.records = vec![
        record(3, "a", 1),
        record(4, "other-partition", 1),
        record(3, "b", 2),
    ];
    let found = Found {
        manifest: Some(Manifest {
            gen: "5x9".to_string(),
            lease_rev: 5,
            journal_seq: 40,
            journal_writers: vec!["w0".to_string()],
            worker: "w0".to_string(),
            carried: Carried {
                slices: vec![HeldSlice {
                    key: "default/hot".to_string(),
                    taken_at: 9 * SEC,
                    units: 20,
                    until: 0,
                }],
                ..Carried::default()
            },
            ..Manifest::default()
        }),
        rev: 12,
    };
    let mut o = owner(t0);
    let mut opened_at = None;
    let mut replayed = Vec::new();
    let TakenOver {
        manifest,
        usage_replay_owed: owed,
        ..
    } = o.take_over(
        found,
        &Since::default(),
        &journal,
        |stored_through| {
            opened_at = Some(stored_through);
            Some(ledger(stored_through))
        },
        &replaying(|record, _| {
            replayed.push(record.k.clone());
            true
        }),
        Nanos(10 * SEC),
    );
    assert_eq!(
        opened_at,
        Some(40),
        "usage opens at the snapshot's position"
    );
    assert_eq!(replayed, ["a", "b"]);
    assert_eq!(
        o.stats().changes(),
        2,
        "the replay is still to be snapshotted"
    );
    assert!(o.dirty());
    assert!(owed, "journal mode with usage owes the replay's usage");
    assert_eq!(
        o.counters().outstanding().len(),
        1,
        "the carried slice is known"
    );
    assert_eq!(
        (manifest.lease_rev, manifest.worker.as_str()),
        (LEASE_REV, "w1")
    );
    assert_eq!(manifest.journal_writers, ["w0", "w1"]);
    assert_eq!((manifest.gen.as_str(), manifest.journal_seq), ("5x9", 40));
    assert_eq!(
        o.manifest_rev(),
        12,
        "the fence replaces the revision found"
    );
    o.fenced(manifest, 13, t0);
    assert_eq!(o.manifest().lease_rev, LEASE_REV);

    let snapshot_mode = FakeJournal::snapshot_mode();
    let mut o = owner(t0);
    let taken = o.take_over(
        Found::default(),
        &Since::default(),
        &snapshot_mode,
        |_| Some(ledger(0)),
        &replaying(|_, _| panic!("snapshot mode replays nothing")),
        Nanos(SEC),
    );
    assert!(!taken.usage_replay_owed);
    assert!(!o.dirty());
}

/// The double count the kill -9 test found: records stored while a
/// snapshot was copied are both in its copy and after its journal
/// position. The snapshot's turn tells them apart: a takeover replays only
/// the records of later turns (and those of no turn, from journals written
/// before turns were numbered), and numbers its own turns after all of
/// them.
#[test]
fn a_takeover_replays_only_the_records_of_turns_its_snapshot_does_not_hold() {
    let t0 = Instant::now();
    let policy = sluice_core::policy::Policy::builtin_default();
    let now = Nanos(SEC);
    let ask = |o: &Owner, key: &str| {
        let turn = o.counters().begin_turn();
        let counter = format!("default/{key}");
        o.counters().apply(&policy, &counter, now, Op::Allow(1));
        Record {
            q: turn.number(),
            ..record(3, key, 1)
        }
    };
    // The old owner: two asks, a snapshot's cut, one more ask.
    let journal = FakeJournal::journal_mode(0);
    let mut old = taken_over(&journal, None, t0);
    let before = [ask(&old, "a"), ask(&old, "b")];
    old.stats().add_changes(2);
    let snapshot = snapshot_of(old.tick(&journal, t0 + INTERVAL, now));
    let manifest = complete(snapshot, old.counters(), now, None);
    assert_eq!(manifest.turn, 2, "the cut holds both turns");
    let after = ask(&old, "a");

    // The new owner restores what the snapshot copied (a: 1, b: 1) and
    // finds every record after its journal position, the copied ones too.
    let restored = Counters::within(KeyBound::new(1_000));
    for r in &before {
        let key = format!("default/{}", r.k);
        restored.apply(&policy, &key, now, Op::Record(1));
    }
    let mut journal = FakeJournal::journal_mode(0);
    let old_format = record(3, "c", 1);
    journal.records = vec![before[0].clone(), before[1].clone(), after, old_format];
    let settings = Settings {
        partition: 3,
        worker_id: "w2".to_string(),
        snapshot_interval: INTERVAL,
    };
    let mut next = Owner::new(settings, LEASE_REV + 1, restored, Arc::default(), t0);
    let mut replayed = Vec::new();
    next.take_over(
        Found {
            manifest: Some(manifest),
            rev: 2,
        },
        &Since::default(),
        &journal,
        |_| None,
        &replaying(|record, counters| {
            replayed.push((record.k.clone(), record.q));
            counters.apply(
                &policy,
                &format!("default/{}", record.k),
                now,
                Op::Record(record.c),
            );
            true
        }),
        now,
    );
    assert_eq!(replayed, [("a".to_string(), 3), ("c".to_string(), 0)]);
    let used = |key: &str| {
        let full = policy.limits()[0].max();
        let peek = next
            .counters()
            .apply(&policy, &format!("default/{key}"), now, Op::Allow(0));
        full - peek.remaining
    };
    assert_eq!((used("a"), used("b"), used("c")), (2, 1, 1), "each once");
    assert_eq!(
        next.counters().begin_turn().number(),
        4,
        "numbered after every replayed turn"
    );
}

#[test]
fn a_takeover_tried_again_starts_over_with_empty_counters() {
    let t0 = Instant::now();
    let journal = FakeJournal::snapshot_mode();
    let mut o = taken_over(&journal, Some(ledger(0)), t0);
    o.counters()
        .outstanding()
        .granted("default/x", Nanos(SEC), 1);
    o.start_over(Counters::within(KeyBound::new(10)));
    assert_eq!(o.counters().outstanding().len(), 0);
    assert!(o.usage().is_none());
}

#[test]
fn a_handover_snapshots_only_what_changed_and_only_under_a_valid_lease() {
    let t0 = Instant::now();
    let journal = FakeJournal::snapshot_mode();
    let mut o = taken_over(&journal, None, t0);
    assert!(
        o.final_snapshot(&journal, true, t0, Nanos(SEC)).is_none(),
        "clean"
    );
    o.stats().add_changes(3);
    assert!(
        o.final_snapshot(&journal, false, t0, Nanos(SEC)).is_none(),
        "the lease may be the next owner's"
    );
    let last = o
        .final_snapshot(&journal, true, t0, Nanos(SEC))
        .expect("dirty");
    assert_eq!(last.flush_usage, None);

    let journal = FakeJournal::journal_mode(9);
    let mut o = taken_over(&journal, Some(ledger(9)), t0);
    o.stats().add_changes(1);
    let last = o
        .final_snapshot(&journal, true, t0, Nanos(SEC))
        .expect("dirty");
    assert_eq!(
        last.flush_usage,
        Some(false),
        "the rollups are left to the next owner"
    );
}

#[test]
fn a_renewed_lease_is_what_the_next_snapshot_claims() {
    let t0 = Instant::now();
    let journal = FakeJournal::snapshot_mode();
    let mut o = taken_over(&journal, None, t0);
    o.renewed(LEASE_REV + 3);
    o.stats().add_changes(1);
    let snapshot = snapshot_of(o.tick(&journal, t0 + INTERVAL, Nanos(SEC)));
    assert_eq!(snapshot.manifest.lease_rev, LEASE_REV + 3);
    assert!(!o.lost_to(LEASE_REV + 3));
}

/// A partition's global state (SPEC §12) through snapshots and
/// takeovers: a periodic snapshot carries each global key's demand and
/// the home's reclaims but not a delegate's slices (an owner after a
/// crash would spend them again); a handover's final snapshot carries the
/// slices too, even with no count changed, for its first owner only; and
/// a delegate's share is read again from its counter, which the journal's
/// records after the snapshot add to.
#[test]
fn the_global_state_travels_with_snapshots_and_slices_only_with_a_handover() {
    use sluice_core::budget::Grant;
    use sluice_core::policy::{Algorithm, Limit, Policy};
    use sluice_core::region::global::REGION_LEASE;
    let t0 = Instant::now();
    let limit = Limit::new(100, Duration::from_secs(10), None).unwrap();
    let policy = Policy::new("plan", Algorithm::FixedWindow, vec![limit.clone()]).unwrap();
    let (now, key, homed) = (Nanos(10_000 * SEC), "plan/alice", "plan/bob");
    let used = |c: &Counters| c.state(key).map_or(0, |s| policy.inspect(&s, now)[0].used);
    let journal = FakeJournal::journal_mode(0);
    let mut old = taken_over(&journal, None, t0);
    {
        let mut global = old.counters().global();
        let books = global.delegates();
        for i in 0..4 {
            assert!(
                books
                    .decide(key, &limit, 5, Nanos(now.0 + i), 1, || 0)
                    .decision
                    .allowed
            );
        }
        books.asked(key, now);
        let grant = Grant {
            units: 10,
            lease: REGION_LEASE,
            taken_at: now,
        };
        // The home's answer, as its count decided the slice.
        let answer = Counters::new().apply(&policy, key, now, Op::Allow(60));
        books.answered(key, now, Nanos(now.0 + 1), Some(&grant), &answer);
        global.home_took(homed, &limit, now, 3);
        assert!(global.reclaim_due(homed, &limit, now));
    }
    // What the decision core records of the share spent.
    old.counters().apply(&policy, key, now, Op::Record(4));
    old.stats().add_changes(1);
    let snapshot = snapshot_of(old.tick(&journal, t0 + INTERVAL, now));
    let periodic = complete(snapshot, old.counters(), now, None);
    let carried = &periodic.carried.global;
    assert_eq!((carried.delegates.len(), carried.homed.len()), (1, 1));
    assert!(carried.delegates[0].slices().is_empty(), "no slice");
    old.snapshot_written(periodic.clone(), 2, t0 + INTERVAL);
    let last = old.final_snapshot(&journal, true, t0 + INTERVAL, now);
    let handed = complete(
        last.expect("a slice only a handover carries"),
        old.counters(),
        now,
        None,
    );
    assert!(handed.handover);
    assert_ne!(handed.gen, periodic.gen, "chunks of its own");
    assert_eq!(handed.carried.global.delegates[0].slices().len(), 1);
    // In the manifest (JSON) and in the chunks (MessagePack) alike.
    let json: Manifest = serde_json::from_slice(&serde_json::to_vec(&handed).unwrap()).unwrap();
    assert_eq!(json, handed);
    let packed = rmp_serde::to_vec_named(&handed.carried).unwrap();
    assert_eq!(
        rmp_serde::from_slice::<Carried>(&packed).unwrap(),
        handed.carried
    );

    let next_owner = |rev: u64| {
        let restored = Counters::within(KeyBound::new(1_000));
        restored.apply(&policy, key, now, Op::Record(4));
        let settings = Settings {
            partition: 3,
            worker_id: "w2".to_string(),
            snapshot_interval: INTERVAL,
        };
        Owner::new(settings, rev, restored, Arc::default(), t0)
    };
    // The handover's first owner spends the slice: 1 of the share left,
    // then 10 from the slice.
    let take_over =
        |o: &mut Owner, manifest: Manifest, journal: &FakeJournal, rules: &dyn Rules| {
            let found = Found {
                manifest: Some(manifest),
                rev: 3,
            };
            o.take_over(found, &Since::default(), journal, |_| None, rules, now)
        };
    let mut next = next_owner(LEASE_REV + 1);
    let fence = take_over(&mut next, handed.clone(), &journal, &replaying(|_, _| true));
    assert!(!fence.manifest.handover, "the fence ends the handover's");
    let c = next.counters();
    let spent = c
        .global()
        .delegates()
        .decide(key, &limit, 5, now, 3, || used(c));
    assert!(spent.decision.allowed);
    assert_eq!((spent.from_share, spent.decision.remaining), (0, 8));
    // An owner after it, from a manifest fenced since (its carried state
    // in the chunks, unchanged): no slice.
    let mut third = next_owner(LEASE_REV + 2);
    let fenced = Manifest {
        handover: false,
        ..handed
    };
    take_over(&mut third, fenced, &journal, &replaying(|_, _| true));
    assert!(!third.counters().global().holds_slices());

    // After a crash, from the periodic snapshot and a record of the share
    // spent after it: no slice, the share read again with the record.
    let mut journal = FakeJournal::journal_mode(0);
    journal.records = vec![Record {
        q: periodic.turn + 1,
        ..record(3, "alice", 1)
    }];
    let mut crashed = next_owner(LEASE_REV + 3);
    let replay = replaying(|r, c| {
        c.apply(&policy, &format!("plan/{}", r.k), now, Op::Record(r.c));
        true
    });
    take_over(&mut crashed, periodic, &journal, &replay);
    let c = crashed.counters();
    let mut global = c.global();
    assert_eq!(used(c), 5);
    assert!(
        !global
            .delegates()
            .decide(key, &limit, 5, now, 1, || used(c))
            .decision
            .allowed
    );
    // The home's demand (3 taken) and its last reclaim went on.
    assert_eq!(global.home_keeps(homed, 50, &limit, now), 47);
    assert!(!global.reclaim_due(homed, &limit, now));
}
