use super::*;
use sluice_core::usage::{add_to_record, BucketRecord, UsageConfig};

const M: u64 = 60_000;

fn counts(used: u64, denied: u64) -> Counts {
    Counts { used, denied }
}

fn ledger(stored_through: u64) -> Ledger {
    Ledger::new(UsageConfig::default().tiers, stored_through)
}

/// A minute's store: its record and the marks of the writes that made it.
#[derive(Default)]
struct Store {
    record: Option<Vec<u8>>,
    marks: WriteMarks,
}

impl Store {
    /// What a flush of `minute` writes for `take` (not stored yet).
    fn flush(&self, ledger: &Ledger, minute: u64, take: &Take) -> Option<Vec<u8>> {
        let lacking = ledger.lacking(minute, &self.marks);
        if lacking.is_empty() {
            return None;
        }
        let more = lacking.iter().flat_map(|c| c.iter());
        Some(add_to_record(self.record.as_deref(), take.watermark, more).unwrap())
    }

    fn land(&mut self, record: Vec<u8>, take: &Take) {
        self.record = Some(record);
        self.marks = self.marks.with(take.mark);
    }

    /// A flush of `minute` for `take` whose write lands (whether the
    /// ledger hears so is the caller's: [`Ledger::written`]).
    fn flush_and_land(&mut self, ledger: &Ledger, minute: u64, take: &Take) {
        let record = self
            .flush(ledger, minute, take)
            .expect("something to write");
        self.land(record, take);
    }

    fn counts(&self, key: &str) -> Counts {
        self.record.as_deref().map_or(Counts::default(), |r| {
            BucketRecord::decode(r).unwrap().counts("default", key)
        })
    }

    /// What a query sees: memory copied first, then the record read.
    fn query(&self, ledger: &Ledger, minute: u64, key: &str) -> Counts {
        let mut total = self.counts(key);
        if let Some(view) = ledger.minute_counts(minute, &|_, k| k == key) {
            for (_, _, c) in view.lacking(&self.marks) {
                total.add(c);
            }
        }
        total
    }
}

#[test]
fn memory_holds_only_what_was_counted_since_the_last_write() {
    let ledger = ledger(0);
    let minute = 1000 * M;
    let mut store = Store::default();
    ledger.add("default", "alice", minute + 1, counts(2, 1));
    ledger.add("default", "bob", minute + 2, counts(1, 0));
    let take = ledger.take();
    assert_eq!(take.minutes, vec![minute]);
    store.flush_and_land(&ledger, minute, &take);
    ledger.written(minute, take.mark.write);
    assert_eq!(store.counts("alice"), counts(2, 1));
    // Nothing in memory any more; new counts add to the record.
    assert!(ledger
        .minute_counts(minute, &|_, _| true)
        .unwrap()
        .lacking(&WriteMarks::default())
        .is_empty());
    ledger.add("default", "alice", minute + 3, counts(1, 0));
    assert_eq!(store.query(&ledger, minute, "alice"), counts(3, 1));
    let take = ledger.take();
    store.flush_and_land(&ledger, minute, &take);
    ledger.written(minute, take.mark.write);
    assert_eq!(store.counts("alice"), counts(3, 1));
    assert_eq!(store.counts("bob"), counts(1, 0));
    // Nothing new: nothing to write.
    assert!(ledger.take().minutes.is_empty());
}

#[test]
fn counts_logged_as_they_came_are_summed_per_key_when_folded() {
    let ledger = ledger(0);
    let minute = 1000 * M;
    let mut store = Store::default();
    for i in 0..10 {
        ledger.add(
            "default",
            ["a", "b"][i % 2],
            minute + i as u64,
            counts(1, 0),
        );
    }
    ledger.add("login", "a", minute, counts(0, 3));
    // A query sees each key once, summed.
    let mut seen = ledger
        .minute_counts(minute, &|_, _| true)
        .unwrap()
        .lacking(&WriteMarks::default());
    seen.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
    let owned = |p: &str, k: &str, c| (p.to_string(), k.to_string(), c);
    assert_eq!(
        seen,
        vec![
            owned("default", "a", counts(5, 0)),
            owned("default", "b", counts(5, 0)),
            owned("login", "a", counts(0, 3)),
        ]
    );
    let take = ledger.take();
    let logs = ledger.unfolded(minute);
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].iter().count(), 11, "a key once per count");
    let folded = logs
        .into_iter()
        .map(|log| {
            let sums = log.folded().expect("a log folds");
            (log, sums)
        })
        .collect();
    ledger.folded(minute, folded);
    assert!(ledger.unfolded(minute).is_empty());
    let taken = ledger.lacking(minute, &WriteMarks::default());
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].iter().count(), 3, "summed per key");
    assert!(taken[0].folded().is_none(), "already summed");
    store.flush_and_land(&ledger, minute, &take);
    ledger.written(minute, take.mark.write);
    assert_eq!(store.counts("a"), counts(5, 0));
    assert_eq!(store.counts("b"), counts(5, 0));
}

#[test]
fn a_count_for_an_earlier_minute_goes_to_that_minute() {
    let ledger = ledger(0);
    let minute = 1000 * M;
    ledger.add("default", "k", minute + M, counts(1, 0));
    // Late (a replayed record of the minute before), then a query
    // settles the current minute between two adds of it.
    ledger.add("default", "k", minute + 5, counts(2, 0));
    let _ = ledger.minute_counts(minute + M, &|_, _| true);
    ledger.add("default", "k", minute + M + 1, counts(4, 0));
    let take = ledger.take();
    assert_eq!(take.minutes, vec![minute, minute + M]);
    let sum = |m| {
        let mut total = Counts::default();
        for part in ledger.lacking(m, &WriteMarks::default()) {
            for (_, _, c) in part.iter() {
                total.add(c);
            }
        }
        total
    };
    assert_eq!(sum(minute), counts(2, 0));
    assert_eq!(sum(minute + M), counts(5, 0));
}

#[test]
fn a_fold_that_finishes_after_its_write_landed_changes_nothing() {
    let ledger = ledger(0);
    let minute = 1000 * M;
    ledger.add("default", "k", minute, counts(2, 0));
    let take = ledger.take();
    let log = ledger.unfolded(minute).pop().unwrap();
    ledger.written(minute, take.mark.write);
    let sums = log.folded().unwrap();
    ledger.folded(minute, vec![(log, sums)]);
    assert!(ledger.lacking(minute, &WriteMarks::default()).is_empty());
    // A minute already forgotten: nothing to put it in.
    ledger.forget_stored(minute + 10 * M, 0);
    let sums = Arc::new(Counted(Form::Summed(Sums::default())));
    ledger.folded(minute, vec![(sums, Counted(Form::Summed(Sums::default())))]);
    assert_eq!(ledger.minutes(), 0);
}

#[test]
fn a_log_that_grows_full_is_folded_where_it_is_added_to() {
    let ledger = ledger(0);
    let minute = 1000 * M;
    let keys = ["a", "b", "c"];
    let n = FOLD_AT * 2 + 7;
    for i in 0..n {
        ledger.add("default", keys[i % 3], minute, counts(1, 0));
    }
    {
        let state = ledger.lock();
        let fresh = &state.minutes[&minute].fresh;
        assert_eq!(fresh.log.counts, 7, "two full logs folded");
        assert_eq!(fresh.sums.iter().count(), 3);
    }
    // Long keys fill a log by their bytes first.
    let long = "x".repeat(1024);
    for _ in 0..FOLD_AT_BYTES / 1024 {
        ledger.add("default", &long, minute, counts(1, 0));
    }
    {
        let state = ledger.lock();
        let fresh = &state.minutes[&minute].fresh;
        assert!(fresh.log.bytes.len() < FOLD_AT_BYTES);
        assert!(fresh.sums.iter().any(|(_, k, _)| k == long));
    }
    let take = ledger.take();
    let mut store = Store::default();
    store.flush_and_land(&ledger, minute, &take);
    let total: u64 = keys.iter().map(|k| store.counts(k).used).sum();
    assert_eq!(total, n as u64);
    assert_eq!(store.counts(&long).used, (FOLD_AT_BYTES / 1024) as u64);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// Whatever is counted, in whichever minutes and order, with
    /// queries settling the current minute and flushes folding what
    /// they take, a minute's parts add up to what a plain map of every
    /// count holds.
    #[test]
    fn the_parts_of_a_minute_add_up_to_every_count_added(
        adds in proptest::collection::vec(
            // Mostly the latest minute, as counts come.
            (proptest::prop_oneof![6 => proptest::strategy::Just(2u64), 1 => 0u64..2],
             "[a-c]{0,3}", 0u64..4, "\\PC{0,6}", 0u64..1000, 0u64..1000),
            0..600,
        ),
        query_every in 1usize..200,
        take_every in 1usize..400,
    ) {
        let ledger = ledger(0);
        let base = 1000 * M;
        let mut expected: BTreeMap<(u64, String, String), Counts> = BTreeMap::new();
        for (i, (minute, policy, ms, key, used, denied)) in adds.iter().enumerate() {
            let t = base + minute * M + ms;
            ledger.add(policy, key, t, counts(*used, *denied));
            expected
                .entry((base + minute * M, policy.clone(), key.clone()))
                .or_default()
                .add(counts(*used, *denied));
            if i % query_every == 0 {
                let _ = ledger.minute_counts(base + minute * M, &|_, _| true);
            }
            if i % take_every == 0 {
                let take = ledger.take();
                for m in take.minutes {
                    let folded = ledger
                        .unfolded(m)
                        .into_iter()
                        .filter_map(|log| log.folded().map(|sums| (log, sums)))
                        .collect();
                    ledger.folded(m, folded);
                }
            }
        }
        let mut got: BTreeMap<(u64, String, String), Counts> = BTreeMap::new();
        for minute in 0..3 {
            let m = base + minute * M;
            let view = ledger.minute_counts(m, &|_, _| true);
            for (p, k, c) in view.map(|v| v.lacking(&WriteMarks::default())).unwrap_or_default() {
                got.entry((m, p, k)).or_default().add(c);
            }
        }
        proptest::prop_assert_eq!(got, expected);
    }
}

#[test]
fn a_write_whose_acknowledgement_was_lost_is_not_added_twice() {
    let ledger = ledger(0);
    let minute = 1000 * M;
    let mut store = Store::default();
    ledger.add("default", "k", minute, counts(5, 0));
    let first = ledger.take();
    // It lands, but the flush never hears so.
    store.flush_and_land(&ledger, minute, &first);
    ledger.add("default", "k", minute, counts(1, 0));
    // A query meanwhile: the record holds the first take, memory adds
    // only what came after.
    assert_eq!(store.query(&ledger, minute, "k"), counts(6, 0));
    let second = ledger.take();
    store.flush_and_land(&ledger, minute, &second);
    ledger.written(minute, second.mark.write);
    assert_eq!(store.counts("k"), counts(6, 0));
    assert_eq!(store.query(&ledger, minute, "k"), counts(6, 0));
}

#[test]
fn a_write_that_failed_is_added_by_the_next_one() {
    let ledger = ledger(0);
    let minute = 1000 * M;
    let mut store = Store::default();
    ledger.add("default", "k", minute, counts(5, 0));
    let first = ledger.take();
    let _lost = store.flush(&ledger, minute, &first).unwrap();
    // Not landed: the query still sees it in memory.
    assert_eq!(store.query(&ledger, minute, "k"), counts(5, 0));
    ledger.add("default", "k", minute, counts(1, 2));
    let second = ledger.take();
    assert_eq!(second.minutes, vec![minute]);
    store.flush_and_land(&ledger, minute, &second);
    ledger.written(minute, second.mark.write);
    assert_eq!(store.counts("k"), counts(6, 2));
    // A minute holding only a failed take is written again too.
    let other = minute + M;
    ledger.add("default", "k", other, counts(1, 0));
    let third = ledger.take();
    let _lost = store.flush(&ledger, other, &third).unwrap();
    assert_eq!(ledger.take().minutes, vec![other]);
}

#[test]
fn a_query_counts_everything_once_however_a_flush_interleaves() {
    // Two flushes, each taking, landing its write, and only then
    // hearing so, with counts added in between. A query copies memory
    // before step `copy` and reads the record before step `read`: it
    // must hold at least what was added before its copy (nothing lost)
    // and at most what was added before its read (nothing twice).
    enum Step {
        Add(u64),
        Take,
        Land,
        Hear,
    }
    use Step::*;
    let steps = [
        Take,
        Land,
        Add(4),
        Hear,
        Add(1),
        Take,
        Add(2),
        Land,
        Hear,
        Add(8),
    ];
    let minute = 1000 * M;
    for copy in 0..=steps.len() {
        for read in copy..=steps.len() {
            let ledger = ledger(0);
            let mut store = Store::default();
            ledger.add("default", "k", minute, counts(3, 0));
            let (mut added, mut added_at_copy) = (3, 0);
            let (mut take, mut record) = (None, None);
            let mut view = None;
            let mut total = None;
            for i in 0..=steps.len() {
                if i == copy {
                    view = ledger.minute_counts(minute, &|_, _| true);
                    added_at_copy = added;
                }
                if i == read {
                    let mut sum = store.counts("k");
                    for (_, _, c) in view.take().unwrap().lacking(&store.marks) {
                        sum.add(c);
                    }
                    total = Some((sum.used, added));
                }
                match steps.get(i) {
                    Some(Add(n)) => {
                        ledger.add("default", "k", minute, counts(*n, 0));
                        added += n;
                    }
                    Some(Take) => {
                        let t = ledger.take();
                        record = store.flush(&ledger, minute, &t);
                        take = Some(t);
                    }
                    Some(Land) => store.land(record.take().unwrap(), take.as_ref().unwrap()),
                    Some(Hear) => ledger.written(minute, take.as_ref().unwrap().mark.write),
                    None => {}
                }
            }
            let (total, added_at_read) = total.unwrap();
            assert!(
                (added_at_copy..=added_at_read).contains(&total),
                "copy before step {copy}, read before step {read}: {total} not in {added_at_copy}..={added_at_read}"
            );
        }
    }
}

#[test]
fn a_record_of_another_ledger_lacks_everything_taken_here() {
    let minute = 1000 * M;
    let previous = ledger(0);
    let mut store = Store::default();
    previous.add("default", "k", minute, counts(9, 0));
    let take = previous.take();
    store.flush_and_land(&previous, minute, &take);
    // A new owner of the partition, with the same write numbers.
    let next = ledger(0);
    next.add("default", "k", minute, counts(1, 0));
    assert_eq!(store.query(&next, minute, "k"), counts(10, 0));
    let take = next.take();
    assert_eq!(take.mark.write, 1);
    store.flush_and_land(&next, minute, &take);
    next.written(minute, take.mark.write);
    assert_eq!(store.counts("k"), counts(10, 0));
}

#[test]
fn rollups_wait_for_their_minutes_and_finer_rollups() {
    let start = 1000 * M; // a multiple of 5 minutes
    let ledger = ledger(0);
    for i in 0..5 {
        ledger.add("default", "k", start + i * M, counts(1, 0));
    }
    let grace = 5_000;
    let after = start + 5 * M + grace;
    let write_all = |ledger: &Ledger| {
        let take = ledger.take();
        for minute in &take.minutes {
            ledger.written(*minute, take.mark.write);
        }
        ledger.stored_all(take.watermark);
    };
    // Nothing stored yet: nothing owed.
    assert_eq!(ledger.due_rollups(after, grace), vec![]);
    write_all(&ledger);
    assert_eq!(ledger.due_rollups(after - 1, grace), vec![]);
    assert_eq!(ledger.due_rollups(after, grace), vec![(1, start)]);
    assert!(!ledger.is_final((1, start), after, grace));
    // Counted again (a late replay): owed again only once stored again.
    ledger.add("default", "k", start + M, counts(1, 0));
    assert_eq!(ledger.due_rollups(after, grace), vec![]);
    write_all(&ledger);
    assert_eq!(ledger.due_rollups(after, grace), vec![(1, start)]);
    ledger.rolled_up((1, start));
    assert!(ledger.is_final((1, start), after, grace));
    // The hour owes its rollup, due once it ended.
    let hour = (2, start - start % (60 * M));
    assert_eq!(ledger.due_rollups(after, grace), vec![]);
    assert_eq!(
        ledger.due_rollups(hour.1 + 60 * M + grace, grace),
        vec![hour]
    );
    // Written minutes are forgotten once past the grace.
    ledger.forget_stored(after, grace);
    assert_eq!(ledger.minutes(), 0);
}

#[test]
fn a_coarser_bucket_is_final_only_once_what_is_within_it_is_rolled_up() {
    // The hour that ends with this 5-minute bucket: ended, not owed itself
    // yet (its 5-minute bucket is), so it must not read as final before the
    // 5 minutes are rolled up into it.
    let hour_start = 1000 * 60 * M;
    let last5 = hour_start + 55 * M;
    let ledger = ledger(0);
    ledger.add("default", "k", last5 + M, counts(1, 0));
    let grace = 5_000;
    let after = hour_start + 60 * M + grace;
    let hour = (2, hour_start);
    // Counted, not written: the minute is owed.
    assert!(!ledger.is_final(hour, after, grace));
    let take = ledger.take();
    for minute in &take.minutes {
        ledger.written(*minute, take.mark.write);
    }
    // Written: the 5 minutes owe their rollup, so the hour does.
    assert!(!ledger.is_final((1, last5), after, grace));
    assert!(!ledger.is_final(hour, after, grace));
    ledger.rolled_up((1, last5));
    assert!(ledger.is_final((1, last5), after, grace));
    assert!(!ledger.is_final(hour, after, grace));
    ledger.rolled_up(hour);
    assert!(ledger.is_final(hour, after, grace));
}

#[test]
fn a_pending_replay_holds_readers_back_until_it_is_in() {
    use futures::FutureExt as _;
    let ledger = ledger(0);
    assert!(ledger.is_replayed());
    assert!(ledger.replayed().now_or_never().is_some());
    ledger.replay_pending();
    // New counts go in meanwhile; readers wait for the replay.
    ledger.add("default", "k", 1000 * M, counts(1, 0));
    assert!(!ledger.is_replayed());
    let mut waiting = Box::pin(ledger.replayed());
    assert!(waiting.as_mut().now_or_never().is_none());
    ledger.add("default", "k", 1000 * M, counts(2, 0));
    ledger.replay_done();
    assert!(waiting.now_or_never().is_some());
    assert!(ledger.is_replayed());
}

#[test]
fn stored_through_moves_only_when_every_minute_was_stored() {
    let ledger = ledger(40);
    assert_eq!(ledger.stored_through(), 40);
    ledger.add("default", "k", 1001 * M, counts(1, 0));
    ledger.advance(50);
    let take = ledger.take();
    assert_eq!(take.watermark, 50);
    assert_eq!(ledger.stored_through(), 40);
    ledger.stored_all(take.watermark);
    assert_eq!(ledger.stored_through(), 50);
}

#[test]
fn a_record_another_ledger_rewrote_after_our_write_landed_unheard_still_holds_it() {
    let ours = ledger(0);
    let theirs = ledger(0);
    let minute = 1000 * M;
    let mut store = Store::default();
    ours.add("default", "k", minute, counts(5, 0));
    let first = ours.take();
    // It lands, but our flush never hears so.
    store.flush_and_land(&ours, minute, &first);
    // A worker that lost the partition adds what it counted to the
    // record it read (ours) and writes it under its own mark.
    theirs.add("default", "k", minute, counts(2, 0));
    let late = theirs.take();
    store.flush_and_land(&theirs, minute, &late);
    assert_eq!(store.counts("k"), counts(7, 0));
    // Our next flush and our queries know the record holds our write.
    assert_eq!(store.query(&ours, minute, "k"), counts(7, 0));
    ours.add("default", "k", minute, counts(1, 0));
    let second = ours.take();
    store.flush_and_land(&ours, minute, &second);
    assert_eq!(store.counts("k"), counts(8, 0));
}

#[test]
fn write_marks_keep_one_mark_per_ledger_and_read_back() {
    let mark = |ledger, write| WriteMark { ledger, write };
    let marks = WriteMarks::default().with(mark(1, 3)).with(mark(2, 9));
    let marks = marks.with(mark(1, 4));
    assert_eq!(
        (marks.of(1), marks.of(2), marks.of(3)),
        (Some(4), Some(9), None)
    );
    assert_eq!(marks.to_header(), "1.4,2.9");
    assert_eq!(WriteMarks::parse(&marks.to_header()), marks);
    // One mark, as workers before wrote it.
    assert_eq!(WriteMarks::parse("7.2").of(7), Some(2));
    // Junk anywhere: no marks.
    for junk in ["", "7", "1.2,x", "1.2,,3.4"] {
        assert_eq!(WriteMarks::parse(junk), WriteMarks::default(), "{junk:?}");
    }
    // At most MAX_MARKS, the newest writers'.
    let many = (0..20).fold(WriteMarks::default(), |m, l| m.with(mark(l, 1)));
    assert_eq!(many.0.len(), MAX_MARKS);
    assert_eq!((many.of(19), many.of(0)), (Some(1), None));
}

#[test]
fn a_write_mark_reads_back_and_junk_is_no_mark() {
    let mark = WriteMark {
        ledger: u64::MAX,
        write: 7,
    };
    assert_eq!(WriteMark::parse(&mark.to_header()), Some(mark));
    for junk in ["", "7", "a.b", "1.2.3", "-1.2"] {
        assert_eq!(WriteMark::parse(junk), None, "{junk:?}");
    }
}
