//! One partition's usage in memory: what was counted in each of the
//! finest tier's buckets ("minutes") since it was last written, and the
//! coarser buckets owed a rollup.
//!
//! The store holds a minute's absolute counts, every key of the partition
//! in one record; memory holds only what was counted since the last write.
//! So a worker's memory grows with the keys counted per flush interval, not
//! per minute: when memory held the whole minute, a million new keys in a
//! minute held a million entries (docs/BENCHMARKS-HISTORY.md, "1M keys"), and a
//! flood of new keys grew without bound.
//!
//! A flush *takes* what each minute counted ([`Ledger::take`]), reads the
//! stored record, adds the taken counts to it
//! ([`sluice_core::usage::add_to_record`]) and writes it back expecting the
//! stream sequence it read: a record written meanwhile (by a worker that
//! lost the partition, finishing a flush) makes the write fail, and the
//! next flush adds to that one instead of overwriting it.
//!
//! Taken counts stay here, visible to queries, until their write is known
//! to have landed. Every write is marked with this ledger's id and the
//! write's number ([`WriteMark`]; numbers increase), and a record holds
//! every count this ledger took under its number or a lower one (a record
//! keeps the marks of every ledger that wrote it, [`WriteMarks`]). Whoever
//! reads the record knows what it holds: a write whose acknowledgement was
//! lost is recognised by the next flush ([`Ledger::lacking`]) instead of
//! being added twice, and a query adds exactly what the record it read
//! lacks ([`MinuteView::lacking`]), however its read interleaves with a
//! flush.
//!
//! In journal mode a new owner adds what the journal holds past the stored
//! minutes after the partition already answers ([`Ledger::replay_pending`]):
//! new counts may come first, as sums do not care about order, but nothing
//! may read or store the ledger's totals before that replay is in, so the
//! flush and the queries wait for it ([`Ledger::replayed`]).
//!
//! Adding takes the partition's ledger lock once per counted request (no
//! await under it; on a worker's one-thread runtime it is contended only
//! while a flush takes the counts or a query copies them) and appends the
//! count to the current minute's log ([`Log`]): its policy, key and counts
//! at the end of one buffer, found beside the lock word. Counts are summed
//! per key only when a flush takes them, off the answering thread
//! ([`Counted::folded`]). Usage counted in a map per minute, searched for
//! the minute and then the key on every request, cost the worker 0.4-0.5
//! µs of its ~2.5 µs per decision, mostly waiting for those lines to come
//! from memory: a worker's 64 ledgers are each touched once every few
//! hundred requests (docs/BENCHMARKS-HISTORY.md, "Hot keys with local budgets").
//! A log that grows past [`FOLD_AT`] (a flush late, or tens of thousands
//! of requests a second in one partition) is summed on the spot, so
//! memory stays bounded by the keys counted, as with the map.

use sluice_core::packed::{get_varint, put_varint};
use sluice_core::usage::{BucketId, Counts, Tier};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher as _;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

type Keys = HashMap<Box<str>, Counts, foldhash::fast::RandomState>;

/// Counts by policy and key, as a query takes them out of a minute.
pub type KeyCounts = Vec<(String, String, Counts)>;

/// A log past this many counts (or [`FOLD_AT_BYTES`] of them) is folded
/// where it is added to: ~2 ms of folding on the answering thread, at most
/// once per 65,536 requests of one partition in one flush interval.
/// (Tests fold often, so that every path meets logs and sums together.)
const FOLD_AT: usize = if cfg!(test) { 64 } else { 1 << 16 };
const FOLD_AT_BYTES: usize = 1 << 21;

/// Counts in the order they came, a key as often as it was counted, in
/// one buffer: so that adding touches only its end. Each count is its
/// policy's and its key's length and bytes, then units used and denied
/// (varints, [`sluice_core::packed`]).
#[repr(C)]
#[derive(Default)]
struct Log {
    bytes: Vec<u8>,
    counts: usize,
}

impl Log {
    fn add(&mut self, policy: &str, key: &str, counts: Counts) {
        for s in [policy, key] {
            put_varint(&mut self.bytes, s.len() as u64);
            self.bytes.extend_from_slice(s.as_bytes());
        }
        put_varint(&mut self.bytes, counts.used);
        put_varint(&mut self.bytes, counts.denied);
        self.counts += 1;
    }

    fn is_empty(&self) -> bool {
        self.counts == 0
    }

    fn is_full(&self) -> bool {
        self.counts >= FOLD_AT || self.bytes.len() >= FOLD_AT_BYTES
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &str, Counts)> {
        let mut rest = &self.bytes[..];
        (0..self.counts).map(move |_| {
            let mut string = || {
                let len = get_varint(&mut rest).expect("logged by Log::add") as usize;
                let (s, after) = rest.split_at(len);
                rest = after;
                std::str::from_utf8(s).expect("logged from a str")
            };
            let (policy, key) = (string(), string());
            let used = get_varint(&mut rest).expect("logged by Log::add");
            let denied = get_varint(&mut rest).expect("logged by Log::add");
            (policy, key, Counts { used, denied })
        })
    }

    /// Appends `other`'s counts after these.
    fn append(&mut self, other: Log) {
        self.bytes.extend_from_slice(&other.bytes);
        self.counts += other.counts;
    }
}

/// Counts by policy and key, summed per key.
#[derive(Default)]
struct Sums {
    /// By policy: a few, so a short list (no hashing per count).
    by_policy: Vec<(Box<str>, Keys)>,
}

impl Sums {
    fn add(&mut self, policy: &str, key: &str, counts: Counts) {
        let keys = match self.by_policy.iter().position(|(p, _)| &**p == policy) {
            Some(i) => &mut self.by_policy[i].1,
            None => {
                self.by_policy.push((policy.into(), Keys::default()));
                &mut self.by_policy.last_mut().expect("just pushed").1
            }
        };
        match keys.get_mut(key) {
            Some(c) => c.add(counts),
            None => {
                keys.insert(key.into(), counts);
            }
        }
    }

    /// Adds every count of `counts` (a log's, or other sums').
    fn add_all<'a>(&mut self, counts: impl Iterator<Item = (&'a str, &'a str, Counts)>) {
        for (p, k, c) in counts {
            self.add(p, k, c);
        }
    }

    fn is_empty(&self) -> bool {
        self.by_policy.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &str, Counts)> {
        self.by_policy
            .iter()
            .flat_map(|(p, keys)| keys.iter().map(move |(k, c)| (&**p, &**k, *c)))
    }
}

/// Counts by policy and key: as they came (a key may come more than once;
/// whoever reads them adds them up), or summed per key.
pub struct Counted(Form);

enum Form {
    Logged(Log),
    Summed(Sums),
}

impl Counted {
    /// Every `(policy, key, counts)`, a key as often as it was logged.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&str, &str, Counts)> + '_> {
        match &self.0 {
            Form::Logged(log) => Box::new(log.iter()),
            Form::Summed(sums) => Box::new(sums.iter()),
        }
    }

    /// The same counts summed per key; `None` when they already are.
    /// Takes a millisecond or more for a busy minute: not on the answering
    /// thread.
    pub fn folded(&self) -> Option<Counted> {
        let Form::Logged(log) = &self.0 else {
            return None;
        };
        let mut sums = Sums::default();
        sums.add_all(log.iter());
        Some(Counted(Form::Summed(sums)))
    }

    fn copy(&self, wanted: &dyn Fn(&str, &str) -> bool) -> KeyCounts {
        copy_wanted(self.iter(), wanted)
    }
}

/// The counts `wanted` keeps, owned and summed per key (a log holds a hot
/// key once per request: a query copies it once).
fn copy_wanted<'a>(
    counts: impl Iterator<Item = (&'a str, &'a str, Counts)>,
    wanted: &dyn Fn(&str, &str) -> bool,
) -> KeyCounts {
    let mut sums: HashMap<(&str, &str), Counts, foldhash::fast::RandomState> = HashMap::default();
    for (p, k, c) in counts.filter(|(p, k, _)| wanted(p, k)) {
        sums.entry((p, k)).or_default().add(c);
    }
    sums.into_iter()
        .map(|((p, k), c)| (p.to_string(), k.to_string(), c))
        .collect()
}

/// What a minute counted since the last take: a log, and the sums of the
/// logs that grew full before it.
#[repr(C)]
#[derive(Default)]
struct Fresh {
    log: Log,
    sums: Sums,
}

impl Fresh {
    fn add(&mut self, policy: &str, key: &str, counts: Counts) {
        self.log.add(policy, key, counts);
        self.fold_if_full();
    }

    fn fold_if_full(&mut self) {
        if self.log.is_full() {
            let log = std::mem::take(&mut self.log);
            self.sums.add_all(log.iter());
        }
    }

    fn is_empty(&self) -> bool {
        self.log.is_empty() && self.sums.is_empty()
    }

    /// Adds `other`'s counts to these.
    fn merge(&mut self, other: Fresh) {
        self.sums.add_all(other.sums.iter());
        self.log.append(other.log);
        self.fold_if_full();
    }

    /// What was counted, in parts; empty afterwards.
    fn take(&mut self) -> impl Iterator<Item = Counted> {
        let Fresh { log, sums } = std::mem::take(self);
        let sums = (!sums.is_empty()).then_some(Counted(Form::Summed(sums)));
        let log = (!log.is_empty()).then_some(Counted(Form::Logged(log)));
        sums.into_iter().chain(log)
    }

    fn copy(&self, wanted: &dyn Fn(&str, &str) -> bool) -> KeyCounts {
        copy_wanted(self.log.iter().chain(self.sums.iter()), wanted)
    }
}

/// Which write of which ledger a stored record is (a header on it): the
/// record holds every count that ledger took under this write's number or
/// a lower one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteMark {
    pub ledger: u64,
    pub write: u64,
}

impl WriteMark {
    /// As a header value: `<ledger>.<write>`.
    pub fn to_header(self) -> String {
        format!("{}.{}", self.ledger, self.write)
    }

    /// A header value; `None` when it is not one.
    pub fn parse(value: &str) -> Option<WriteMark> {
        let (ledger, write) = value.split_once('.')?;
        Some(WriteMark {
            ledger: ledger.parse().ok()?,
            write: write.parse().ok()?,
        })
    }
}

/// The marks a stored record carries (its header): for each ledger that
/// wrote it, the highest write of that ledger it holds. A writer keeps the
/// marks it read and puts its own in place of its ledger's, so a worker
/// that lost the partition and rewrote the record after our write landed
/// unheard keeps our mark, and our next flush does not add that write's
/// counts again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteMarks(Vec<WriteMark>);

/// The most marks a record keeps, the newest writers': a minute gets a new
/// writer only when its partition changes owner.
const MAX_MARKS: usize = 8;

impl WriteMarks {
    /// The highest write of `ledger` the record holds, if any.
    pub fn of(&self, ledger: u64) -> Option<u64> {
        self.0.iter().find(|m| m.ledger == ledger).map(|m| m.write)
    }

    /// These marks with `mark` in place of its ledger's, newest first.
    pub fn with(&self, mark: WriteMark) -> WriteMarks {
        let others = self.0.iter().filter(|m| m.ledger != mark.ledger);
        WriteMarks(
            std::iter::once(mark)
                .chain(others.copied())
                .take(MAX_MARKS)
                .collect(),
        )
    }

    /// As a header value: the marks, comma-separated.
    pub fn to_header(&self) -> String {
        let marks: Vec<String> = self.0.iter().map(|m| m.to_header()).collect();
        marks.join(",")
    }

    /// A header value (one mark, as workers before this wrote, is one
    /// too); none when it is not one.
    pub fn parse(value: &str) -> WriteMarks {
        let marks: Option<Vec<WriteMark>> = value.split(',').map(WriteMark::parse).collect();
        WriteMarks(marks.unwrap_or_default())
    }
}

/// One minute of the finest tier.
#[derive(Default)]
struct Minute {
    /// Counted since the last take.
    fresh: Fresh,
    /// Taken by writes not known to have landed: by write number, lowest
    /// first. Shared with the flush that writes them.
    taken: Vec<(u64, Arc<Counted>)>,
}

impl Minute {
    fn dirty(&self) -> bool {
        !self.fresh.is_empty() || !self.taken.is_empty()
    }
}

/// What a flush took: the minutes to write, the mark their writes carry,
/// and the journal watermark they hold.
pub struct Take {
    pub minutes: Vec<u64>,
    pub mark: WriteMark,
    pub watermark: u64,
}

/// A minute's counts in memory as a query saw them, by the write number
/// they go (or went) out under.
pub struct MinuteView {
    ledger: u64,
    parts: Vec<(u64, KeyCounts)>,
}

impl MinuteView {
    /// What a stored record marked `stored` (empty: no marks, or no
    /// record) lacks of these counts.
    pub fn lacking(self, stored: &WriteMarks) -> KeyCounts {
        let held = |write: u64| stored.of(self.ledger).is_some_and(|w| w >= write);
        self.parts
            .into_iter()
            .filter(|(write, _)| !held(*write))
            .flat_map(|(_, counts)| counts)
            .collect()
    }
}

/// `repr(C)`: what every add touches first, so that it shares the lines
/// of the lock word.
#[repr(C)]
struct State {
    /// The finest tier's step.
    step_ms: u64,
    /// The minute being counted now, and what it counted since it was last
    /// settled into `minutes` ([`State::settle`]): an add of the current
    /// minute finds it here, without a search of the map.
    current: u64,
    fresh: Fresh,
    minutes: BTreeMap<u64, Minute>,
    /// Coarser buckets whose rollup is owed (tier index ≥ 1).
    pending: BTreeSet<BucketId>,
    /// The number the next take gives its writes.
    next_write: u64,
    /// Journal mode: the highest journal sequence whose records are in
    /// these counts or in the stored records (records replayed at takeover
    /// or stored by our writer).
    watermark: u64,
    /// Journal mode: every record at or below this is in the stored
    /// records (what the last complete flush covered); a snapshot may claim
    /// no journal position past it.
    stored_through: u64,
}

impl State {
    /// Moves the current minute's counts into `minutes`, where everything
    /// but [`Ledger::add`] looks for them.
    fn settle(&mut self) {
        if self.fresh.is_empty() {
            return;
        }
        let fresh = std::mem::take(&mut self.fresh);
        let minute = self.minutes.entry(self.current).or_default();
        if minute.fresh.is_empty() {
            minute.fresh = fresh;
        } else {
            minute.fresh.merge(fresh);
        }
    }
}

/// One partition's usage not yet final in the store.
#[repr(C)]
pub struct Ledger {
    state: Mutex<State>,
    /// Tells this ledger's writes from any other's (another worker's, or
    /// this worker's in an earlier ownership of the partition).
    id: u64,
    tiers: Vec<Tier>,
    /// Whether every journal record the takeover replays is in the counts.
    replayed: watch::Sender<bool>,
}

impl Ledger {
    /// The ledger of a partition whose restored state covers the journal
    /// up to `stored_through` (0 in snapshot mode).
    pub fn new(tiers: Vec<Tier>, stored_through: u64) -> Ledger {
        Ledger {
            // Randomly keyed: a different id for every ledger of every worker.
            id: std::hash::RandomState::new().hash_one(stored_through),
            state: Mutex::new(State {
                step_ms: tiers[0].step_ms(),
                current: 0,
                fresh: Fresh::default(),
                minutes: BTreeMap::new(),
                pending: BTreeSet::new(),
                next_write: 1,
                watermark: stored_through,
                stored_through,
            }),
            tiers,
            replayed: watch::channel(true).0,
        }
    }

    /// A takeover's journal replay will add to the counts later
    /// ([`Ledger::replay_done`]); until then [`Ledger::replayed`] waits.
    pub fn replay_pending(&self) {
        self.replayed.send_replace(false);
    }

    /// The takeover's journal replay is in the counts.
    pub fn replay_done(&self) {
        self.replayed.send_replace(true);
    }

    pub fn is_replayed(&self) -> bool {
        *self.replayed.borrow()
    }

    /// Waits until the counts hold the takeover's journal replay: before,
    /// a total read or stored would miss what the journal holds.
    pub async fn replayed(&self) {
        let mut done = self.replayed.subscribe();
        // The sender lives as long as `self`: this ends only once done.
        let _ = done.wait_for(|done| *done).await;
    }

    /// Tells this ledger from every other (of this partition or another,
    /// on this worker or another).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    /// The state with every count settled in its minute ([`State::settle`]).
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.settle();
        state
    }

    /// Counts one request (or a replayed record) of `key` under `policy` at
    /// `t_ms`.
    pub fn add(&self, policy: &str, key: &str, t_ms: u64, counts: Counts) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let minute = t_ms - t_ms % state.step_ms;
        if minute == state.current {
            state.fresh.add(policy, key, counts);
        } else if minute > state.current {
            state.settle();
            state.current = minute;
            state.fresh.add(policy, key, counts);
        } else {
            // Late (a replayed record): rare, so into the map.
            state
                .minutes
                .entry(minute)
                .or_default()
                .fresh
                .add(policy, key, counts);
        }
    }

    /// Journal mode: records up to journal sequence `seq` are in the counts.
    pub fn advance(&self, seq: u64) {
        let mut state = self.lock();
        state.watermark = state.watermark.max(seq);
    }

    /// Journal mode: a snapshot may claim no journal position past this.
    pub fn stored_through(&self) -> u64 {
        self.lock().stored_through
    }

    /// Takes every minute's fresh counts under the next write number; the
    /// minutes to write are those holding taken counts (this take's, or an
    /// earlier one's whose write is not known to have landed).
    pub fn take(&self) -> Take {
        let mut state = self.lock();
        let write = state.next_write;
        state.next_write += 1;
        let mut minutes = Vec::new();
        for (t, m) in state.minutes.iter_mut() {
            for part in m.fresh.take() {
                m.taken.push((write, Arc::new(part)));
            }
            if !m.taken.is_empty() {
                minutes.push(*t);
            }
        }
        Take {
            minutes,
            mark: WriteMark {
                ledger: self.id,
                write,
            },
            watermark: state.watermark,
        }
    }

    /// What the stored record of `minute`, marked `stored`, lacks of the
    /// counts taken so far; the taken counts it holds are forgotten (an
    /// earlier write landed after all).
    pub fn lacking(&self, minute: u64, stored: &WriteMarks) -> Vec<Arc<Counted>> {
        if let Some(write) = stored.of(self.id) {
            self.written(minute, write);
        }
        let state = self.lock();
        state
            .minutes
            .get(&minute)
            .map(|m| m.taken.iter().map(|(_, c)| c.clone()).collect())
            .unwrap_or_default()
    }

    /// The counts of `minute` taken but not yet summed per key, for the
    /// flush to fold ([`Counted::folded`]) before it reads the store: so
    /// that takes whose writes fail hold sums, not every request's count.
    pub fn unfolded(&self, minute: u64) -> Vec<Arc<Counted>> {
        let state = self.lock();
        let Some(m) = state.minutes.get(&minute) else {
            return Vec::new();
        };
        m.taken
            .iter()
            .filter(|(_, c)| matches!(c.0, Form::Logged(_)))
            .map(|(_, c)| c.clone())
            .collect()
    }

    /// Puts each folded part in place of the part it was folded from
    /// (unless that write landed meanwhile and the part is gone).
    pub fn folded(&self, minute: u64, folded: Vec<(Arc<Counted>, Counted)>) {
        let mut state = self.lock();
        let Some(m) = state.minutes.get_mut(&minute) else {
            return;
        };
        for (from, sums) in folded {
            if let Some(part) = m.taken.iter_mut().find(|(_, c)| Arc::ptr_eq(c, &from)) {
                part.1 = Arc::new(sums);
            }
        }
    }

    /// The record of `minute` holding every count taken under `write` or a
    /// lower number is stored: those are forgotten, and the minute's
    /// coarser bucket owes a rollup.
    pub fn written(&self, minute: u64, write: u64) {
        let mut state = self.lock();
        if let Some(m) = state.minutes.get_mut(&minute) {
            m.taken.retain(|(w, _)| *w > write);
        }
        if let Some(coarser) = self.tiers.get(1) {
            state.pending.insert((1, coarser.bucket_of(minute)));
        }
    }

    /// Every minute of a take was written: the journal up to its
    /// `watermark` is in the store.
    pub fn stored_all(&self, watermark: u64) {
        let mut state = self.lock();
        state.stored_through = state.stored_through.max(watermark);
    }

    /// Forgets minutes that hold nothing unwritten and ended `grace_ms`
    /// before `now_ms`.
    pub fn forget_stored(&self, now_ms: u64, grace_ms: u64) {
        let step = self.tiers[0].step_ms();
        let mut state = self.lock();
        state
            .minutes
            .retain(|t, m| m.dirty() || t + step + grace_ms > now_ms);
    }

    /// Owes the rollup of every coarser bucket that ended less than
    /// `lookback_ms` before `now_ms` or has not ended (at takeover: the
    /// previous owner may have died before it rolled them up).
    pub fn owe_recent_rollups(&self, now_ms: u64, lookback_ms: u64) {
        let mut state = self.lock();
        for (i, tier) in self.tiers.iter().enumerate().skip(1) {
            let step = tier.step_ms();
            let mut b = tier.bucket_of(now_ms.saturating_sub(lookback_ms.max(step)));
            while b <= now_ms {
                state.pending.insert((i, b));
                b += step;
            }
        }
    }

    /// The rollups that can be done at `now_ms`: buckets that ended
    /// `grace_ms` ago and hold nothing still owed (no unwritten minute, no
    /// finer rollup owed), finest tier first.
    pub fn due_rollups(&self, now_ms: u64, grace_ms: u64) -> Vec<BucketId> {
        let state = self.lock();
        state
            .pending
            .iter()
            .filter(|&&bucket| {
                let end = bucket.1 + self.tiers[bucket.0].step_ms();
                end + grace_ms <= now_ms && !self.owes_within(&state, bucket)
            })
            .copied()
            .collect()
    }

    /// Whether anything within `bucket` is not in the stored records yet:
    /// a minute not written, or a finer bucket not rolled up.
    fn owes_within(&self, state: &State, (tier, b): BucketId) -> bool {
        let end = b + self.tiers[tier].step_ms();
        state.minutes.range(b..end).any(|(_, m)| m.dirty())
            || state
                .pending
                .iter()
                .any(|(t, c)| *t < tier && *c >= b && *c < end)
    }

    /// The rollup of `bucket` is stored: the next coarser bucket owes one.
    pub fn rolled_up(&self, bucket: BucketId) {
        let mut state = self.lock();
        state.pending.remove(&bucket);
        if let Some(coarser) = self.tiers.get(bucket.0 + 1) {
            state
                .pending
                .insert((bucket.0 + 1, coarser.bucket_of(bucket.1)));
        }
    }

    /// Whether the stored record of a coarser bucket is final at `now_ms`:
    /// it ended `grace_ms` ago, owes no rollup, and nothing within it does
    /// (a finer bucket's rollup owed makes this one's owed only once it is
    /// done: until then this one's record lacks it). (Finest-tier minutes
    /// are read through [`Ledger::minute_counts`] instead.)
    pub fn is_final(&self, bucket: BucketId, now_ms: u64, grace_ms: u64) -> bool {
        let step = self.tiers[bucket.0].step_ms();
        if bucket.1 + step + grace_ms > now_ms {
            return false;
        }
        let state = self.lock();
        !state.pending.contains(&bucket) && !self.owes_within(&state, bucket)
    }

    /// The counts of `minute` in memory that `wanted` keeps, for a query to
    /// add to the stored record it reads next ([`MinuteView::lacking`]).
    /// `None` when the minute is not in memory.
    pub fn minute_counts(
        &self,
        minute: u64,
        wanted: &dyn Fn(&str, &str) -> bool,
    ) -> Option<MinuteView> {
        let state = self.lock();
        let m = state.minutes.get(&minute)?;
        let mut parts: Vec<(u64, KeyCounts)> = m
            .taken
            .iter()
            .map(|(write, counts)| (*write, counts.copy(wanted)))
            .collect();
        parts.push((state.next_write, m.fresh.copy(wanted)));
        Some(MinuteView {
            ledger: self.id,
            parts,
        })
    }

    /// Minutes in memory (for status and tests).
    pub fn minutes(&self) -> usize {
        self.lock().minutes.len()
    }
}

#[cfg(test)]
mod tests;
