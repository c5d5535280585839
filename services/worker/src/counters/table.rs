//! One bucket's keys and states, packed back to back in one arena.
//!
//! A key costs one record in the arena and four bytes in the index, and no
//! allocation of its own: the record holds the key's [`Stamp`] (4 bytes: to
//! the second, rounded up), the lengths of its key and state (a varint each,
//! one byte for a key under 64 bytes and any state but a long log; the
//! stamp's flag is the key length's low bit), the counter key's bytes
//! and the state packed by [`sluice_core::packed`] (15 bytes for a sliding
//! window of a minute and an hour). The index is a `hashbrown::HashTable` of record
//! offsets, probed with the key's hash (the one that also picked the bucket)
//! and checked by comparing the key's bytes in the arena. So a counted key of
//! the 1M test (`default/m-123456`, a sliding window of two limits) takes
//! 37 bytes in the arena and 4 in the index (plus the index's spare slots).
//!
//! A sliding log is the exception: its state is up to `max` timestamps a
//! limit, which a decision would otherwise unpack and pack again whole. It is
//! kept unpacked in [`Logs`], and its record holds [`NOT_PACKED`] and the
//! log's place there instead.
//!
//! A record whose state packs to a new length moves to the arena's end; a
//! removed one leaves its bytes behind. Both count as dead bytes, and once
//! they are half of the arena, it is compacted in place (and its spare
//! capacity given back). The arena grows by an eighth at a time, not by
//! doubling: its spare capacity is memory every bucket pays.
//!
//! A table that has evicted keeps its least valuable records ([`Victims`]),
//! so that the next evictions need not scan it: at the key bound every new
//! key evicts one, and a scan per eviction made a flood of new keys run at
//! ~60 % of the speed when buckets held ~490 keys (docs/BENCHMARKS-HISTORY.md,
//! "Hot keys with local budgets"). One
//! scan finds the [`VICTIMS`] lowest stamps; every change of a record's
//! place or stamp that ranks it below them adds it, and an entry whose
//! record has gone, moved or been restamped is skipped when its turn comes.

use super::Stamp;
use hashbrown::HashTable;
use sluice_core::packed::{self, get_varint, put_varint, Scratch, NOT_PACKED};
use sluice_core::policy::KeyState;
use sluice_core::time::Nanos;

/// What a decision on a packed key needs besides the table: states to
/// unpack into and a buffer to pack into, reused from one key to the next.
#[derive(Debug, Default)]
pub struct Work {
    pub states: Scratch,
    pub bytes: Vec<u8>,
}

/// Sliding logs, unpacked, with the places free for reuse.
#[derive(Debug, Default)]
struct Logs {
    states: Vec<KeyState>,
    free: Vec<u32>,
}

impl Logs {
    fn add(&mut self, state: KeyState) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.states[i as usize] = state;
                i
            }
            None => {
                self.states.push(state);
                u32::try_from(self.states.len() - 1).expect("under 2^32 logs in a bucket")
            }
        }
    }

    fn take(&mut self, i: u32) -> KeyState {
        self.free.push(i);
        std::mem::replace(
            &mut self.states[i as usize],
            KeyState::SlidingLog(Vec::new()),
        )
    }
}

/// The parts of one record, as offsets into the arena.
#[derive(Clone, Copy, Debug)]
struct Record {
    at: usize,
    key: usize,
    state: usize,
    end: usize,
}

impl Record {
    fn len(&self) -> usize {
        self.end - self.at
    }
}

/// A new record's key: given, or a record's already in the arena.
enum Key<'a> {
    Bytes(&'a [u8]),
    Within(std::ops::Range<usize>),
}

/// A state's bytes in a record when it is kept in [`Logs`]: [`NOT_PACKED`]
/// and the log's place, little-endian.
const LOG_REF_LEN: usize = 5;

fn log_ref(i: u32) -> [u8; LOG_REF_LEN] {
    let b = i.to_le_bytes();
    [NOT_PACKED, b[0], b[1], b[2], b[3]]
}

/// A record that may be the least valuable: its stamp, its key's hash
/// (to check it is still in the index, and to remove it) and its place.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    stamp: Stamp,
    hash: u64,
    at: u32,
}

/// How many candidates a scan keeps: an eviction scans the table once
/// every this many evictions at most, while nothing else changes them. A
/// bucket holds ~490 keys at the default `max_keys` (64 buckets a
/// partition), so a flood's evictions read ~15 stamps each; the list costs
/// 24 bytes a candidate, only in buckets that evicted.
const VICTIMS: usize = 32;

/// The least valuable records of a table that evicts.
///
/// Invariant: every live record ranks at or above `floor`, or has a current
/// entry in `list` (one whose record is at `at` in the index with that
/// stamp). So the least current entry is the least valuable record, unless
/// no entry is current: then the table is scanned again.
#[derive(Debug)]
struct Victims {
    /// At most [`VICTIMS`], most valuable first (the least is popped).
    list: Vec<Candidate>,
    floor: Stamp,
    /// Scans so far (tests count them).
    #[cfg(test)]
    scans: usize,
}

impl Victims {
    /// Nothing known: every record ranks at or above zero.
    fn unknown() -> Victims {
        Victims {
            list: Vec::with_capacity(VICTIMS + 1),
            floor: Stamp::ZERO,
            #[cfg(test)]
            scans: 0,
        }
    }

    /// A record now at `at` with `stamp`: kept if it ranks below the floor.
    fn note(&mut self, candidate: Candidate) {
        if candidate.stamp >= self.floor {
            return;
        }
        let i = self.list.partition_point(|c| c.stamp > candidate.stamp);
        self.list.insert(i, candidate);
        if self.list.len() > VICTIMS {
            // The most valuable leaves the list: the floor drops to it.
            self.floor = self.list.remove(0).stamp;
        }
    }
}

#[derive(Debug, Default)]
pub struct Table {
    /// Where each key's record starts in `arena`.
    index: HashTable<u32>,
    /// Records back to back: stamp (u32 seconds, little-endian), key length
    /// (times 2, plus the stamp's flag) and state length (varints), key
    /// bytes, state bytes.
    arena: Vec<u8>,
    /// Bytes of `arena` that no record in `index` covers.
    dead: usize,
    /// The sliding logs, if the bucket ever held one.
    logs: Option<Box<Logs>>,
    /// The least valuable records, once the table has been asked for one.
    victims: Option<Box<Victims>>,
}

impl Table {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn record(&self, at: u32) -> Record {
        record_at(&self.arena, at)
    }

    fn key_bytes(&self, r: &Record) -> &[u8] {
        &self.arena[r.key..r.state]
    }

    fn state_bytes(&self, r: &Record) -> &[u8] {
        &self.arena[r.state..r.end]
    }

    fn log_of(&self, r: &Record) -> Option<u32> {
        let bytes = self.state_bytes(r);
        (bytes.len() == LOG_REF_LEN && bytes[0] == NOT_PACKED)
            .then(|| u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]))
    }

    /// The record of `key`, if the table holds it.
    pub fn find(&self, hash: u64, key: &str) -> Option<u32> {
        self.index
            .find(hash, |&at| {
                self.key_bytes(&self.record(at)) == key.as_bytes()
            })
            .copied()
    }

    pub fn stamp(&self, at: u32) -> Stamp {
        stamp_at(&self.arena, at)
    }

    /// Stores `stamp` for the record at `at`, whose key has `hash` (see
    /// [`stamp_at`] for how it is rounded).
    pub fn set_stamp(&mut self, hash: u64, at: u32, stamp: Stamp) {
        // Read only where candidates are kept: this is every decision's path.
        let before = self.victims.is_some().then(|| self.stamp(at));
        let i = at as usize;
        self.arena[i..i + STAMP_SECS].copy_from_slice(&stamp_secs(stamp).to_le_bytes());
        // The flag is the low bit of the key length's varint, whose length
        // does not depend on it.
        let flag = &mut self.arena[i + STAMP_SECS];
        *flag = (*flag & !1) | u8::from(stamp.asked_again());
        if before.is_some_and(|before| before != self.stamp(at)) {
            self.placed(hash, at);
        }
    }

    /// The record at `at` (key hash `hash`) is new, moved or restamped.
    fn placed(&mut self, hash: u64, at: u32) {
        if let Some(victims) = self.victims.as_deref_mut() {
            let stamp = stamp_at(&self.arena, at);
            victims.note(Candidate { stamp, hash, at });
        }
    }

    /// The least valuable record: its place, stamp and key hash. Scans the
    /// table only when no kept candidate is current; `rehash` hashes the
    /// keys a scan keeps.
    pub fn least(&mut self, rehash: impl Fn(&[u8]) -> u64) -> Option<(u32, Stamp, u64)> {
        let Table {
            index,
            arena,
            victims,
            ..
        } = self;
        let victims = victims.get_or_insert_with(|| Box::new(Victims::unknown()));
        let current = |c: &Candidate| {
            index.find(c.hash, |&o| o == c.at).is_some() && stamp_at(arena, c.at) == c.stamp
        };
        while let Some(c) = victims.list.last() {
            if current(c) {
                return Some((c.at, c.stamp, c.hash));
            }
            victims.list.pop();
        }
        #[cfg(test)]
        {
            victims.scans += 1;
        }
        // Every record noted from no floor keeps the VICTIMS lowest (and
        // lowers the floor to what they left out); only those are hashed.
        victims.list.clear();
        victims.floor = Stamp::MAX;
        for &at in index.iter() {
            let stamp = stamp_at(arena, at);
            victims.note(Candidate { stamp, hash: 0, at });
        }
        for c in &mut victims.list {
            c.hash = rehash(key_at(arena, c.at));
        }
        victims.list.last().map(|c| (c.at, c.stamp, c.hash))
    }

    pub fn key(&self, at: u32) -> &str {
        std::str::from_utf8(self.key_bytes(&self.record(at))).unwrap_or_default()
    }

    /// Calls `f` with the state of the record at `at`, unpacked into `work`
    /// unless it is a log.
    pub fn read<R>(&self, at: u32, work: &mut Work, f: impl FnOnce(&KeyState) -> R) -> R {
        let r = self.record(at);
        if let (Some(i), Some(logs)) = (self.log_of(&r), self.logs.as_deref()) {
            return f(&logs.states[i as usize]);
        }
        match work.states.unpack(self.state_bytes(&r)) {
            Some(state) => f(state),
            None => f(&KeyState::FixedWindow(Vec::new())),
        }
    }

    /// Calls `f` with the state of `key`'s record at `at` (found with
    /// `hash`) and stores what it leaves. Returns `f`'s result and where
    /// the record is now (it moves when the state's packed length changes).
    pub fn update<R>(
        &mut self,
        hash: u64,
        at: u32,
        work: &mut Work,
        f: impl FnOnce(&mut KeyState) -> R,
    ) -> (R, u32) {
        let r = self.record(at);
        if let Some(i) = self.log_of(&r) {
            let logs = self.logs.get_or_insert_with(Box::default);
            let state = &mut logs.states[i as usize];
            let out = f(state);
            if matches!(state, KeyState::SlidingLog(_)) {
                return (out, at);
            }
            // The policy is no longer a sliding log: pack what it left.
            let mut state = logs.take(i);
            self.state_bytes_of(&mut state, &mut work.bytes);
            let at = self.rewrite(hash, r, &work.bytes);
            return (out, at);
        }
        // (Disjoint borrows: the state is in `work.states`, the bytes
        // are packed into `work.bytes`.)
        let Work { states, bytes } = work;
        let mut fallback = KeyState::FixedWindow(Vec::new());
        let state = match states.unpack(self.state_bytes(&r)) {
            Some(state) => state,
            None => &mut fallback,
        };
        let out = f(state);
        self.state_bytes_of(state, bytes);
        let at = self.rewrite(hash, r, bytes);
        (out, at)
    }

    /// Sets `bytes` to what a record holds for `state`: the state packed,
    /// or for a sliding log, a reference to it, moved into [`Logs`].
    fn state_bytes_of(&mut self, state: &mut KeyState, bytes: &mut Vec<u8>) {
        bytes.clear();
        if let KeyState::SlidingLog(_) = state {
            let log = std::mem::replace(state, KeyState::SlidingLog(Vec::new()));
            let i = self.logs.get_or_insert_with(Box::default).add(log);
            bytes.extend_from_slice(&log_ref(i));
        } else {
            packed::pack(state, bytes);
        }
    }

    /// Stores `state` as `r`'s new state bytes: in place when they are as
    /// long as before, else in a new record at the end.
    fn rewrite(&mut self, hash: u64, r: Record, state: &[u8]) -> u32 {
        if r.end - r.state == state.len() {
            self.arena[r.state..r.end].copy_from_slice(state);
            return r.at as u32;
        }
        let stamp = self.stamp(r.at as u32);
        let at = self.push(stamp, Key::Within(r.key..r.state), state);
        let old = r.at as u32;
        if let Some(slot) = self.index.find_mut(hash, |&o| o == old) {
            *slot = at;
        }
        self.dead += r.len();
        self.placed(hash, at);
        self.compact_if_sparse(at)
    }

    /// Appends a record; returns where it starts.
    fn push(&mut self, stamp: Stamp, key: Key<'_>, state: &[u8]) -> u32 {
        let key_len = match &key {
            Key::Bytes(b) => b.len(),
            Key::Within(r) => r.len(),
        };
        let key_word = (key_len as u64) << 1 | u64::from(stamp.asked_again());
        let varint_len = |v: u64| (64 - (v | 1).leading_zeros() as usize).div_ceil(7);
        let header = STAMP_SECS + varint_len(key_word) + varint_len(state.len() as u64);
        self.grow_for(header + key_len + state.len());
        let at = self.arena.len();
        self.arena
            .extend_from_slice(&stamp_secs(stamp).to_le_bytes());
        put_varint(&mut self.arena, key_word);
        put_varint(&mut self.arena, state.len() as u64);
        match key {
            Key::Bytes(b) => self.arena.extend_from_slice(b),
            Key::Within(r) => self.arena.extend_from_within(r),
        }
        self.arena.extend_from_slice(state);
        u32::try_from(at).expect("a bucket's arena stays under 4 GiB")
    }

    /// Room for `len` more bytes, growing by at least an eighth.
    fn grow_for(&mut self, len: usize) {
        if self.arena.capacity() - self.arena.len() < len {
            self.arena.reserve_exact(len.max(self.arena.len() / 8));
        }
    }

    /// Stores a new key (the table does not hold it) with `state`; a
    /// sliding log is moved out of it. `rehash` gives a stored key's hash
    /// when the index grows.
    pub fn insert(
        &mut self,
        hash: u64,
        key: &str,
        stamp: Stamp,
        state: &mut KeyState,
        bytes: &mut Vec<u8>,
        rehash: impl Fn(&[u8]) -> u64,
    ) {
        self.state_bytes_of(state, bytes);
        let at = self.push(stamp, Key::Bytes(key.as_bytes()), bytes);
        let Table { index, arena, .. } = self;
        index.insert_unique(hash, at, |&o| rehash(key_at(arena, o)));
        self.placed(hash, at);
    }

    /// Room in the index for `n` more keys.
    pub fn reserve(&mut self, n: usize, rehash: impl Fn(&[u8]) -> u64) {
        let Table { index, arena, .. } = self;
        index.reserve(n, |&o| rehash(key_at(arena, o)));
    }

    /// Forgets `key`; whether the table held it.
    pub fn remove(&mut self, hash: u64, key: &str) -> bool {
        match self.find(hash, key) {
            Some(at) => {
                self.remove_at(hash, at);
                true
            }
            None => false,
        }
    }

    /// Forgets the record at `at`, found in the index with `hash`.
    pub fn remove_at(&mut self, hash: u64, at: u32) {
        if let Ok(entry) = self.index.find_entry(hash, |&o| o == at) {
            entry.remove();
            self.release(at);
            self.compact_if_sparse(0);
        }
    }

    /// The bytes of a record just dropped from the index are dead, and
    /// its log (if any) is freed.
    fn release(&mut self, at: u32) {
        let r = self.record(at);
        if let (Some(i), Some(logs)) = (self.log_of(&r), self.logs.as_deref_mut()) {
            logs.take(i);
        }
        self.dead += r.len();
    }

    /// Keeps only the records for which `keep(stamp)` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(Stamp) -> bool) {
        let mut gone = Vec::new();
        let Table { index, arena, .. } = self;
        index.retain(|&mut at| {
            let kept = keep(stamp_at(arena, at));
            if !kept {
                gone.push(at);
            }
            kept
        });
        for at in gone {
            self.release(at);
        }
        self.compact_if_sparse(0);
    }

    /// Every record's place.
    pub fn records(&self) -> impl Iterator<Item = u32> + '_ {
        self.index.iter().copied()
    }

    /// Compacts the arena once half of it is dead; returns where the record
    /// at `follow` is then.
    fn compact_if_sparse(&mut self, follow: u32) -> u32 {
        if self.index.is_empty() {
            self.arena = Vec::new();
            self.dead = 0;
            self.forget_victims();
            if self
                .logs
                .as_ref()
                .is_some_and(|l| l.states.len() == l.free.len())
            {
                self.logs = None;
            }
        } else if self.dead > 0 && self.dead * 2 >= self.arena.len() {
            return self.compact(follow);
        }
        follow
    }

    /// The records moved: the candidates' places mean nothing any more.
    fn forget_victims(&mut self) {
        if let Some(victims) = self.victims.as_deref_mut() {
            victims.list.clear();
            victims.floor = Stamp::ZERO;
        }
    }

    /// Moves the records together, in arena order, and gives back the
    /// spare capacity beyond an eighth; returns where the record at
    /// `follow` is then.
    fn compact(&mut self, follow: u32) -> u32 {
        let mut places: Vec<u32> = self.index.iter().copied().collect();
        places.sort_unstable();
        let mut moved = Vec::with_capacity(places.len());
        let mut to = 0;
        for &at in &places {
            let r = self.record(at);
            self.arena.copy_within(r.at..r.end, to);
            moved.push(to as u32);
            to += r.len();
        }
        self.arena.truncate(to);
        self.arena.shrink_to(to + to / 8);
        self.dead = 0;
        self.forget_victims();
        let moved_to = |at: u32| places.binary_search(&at).map_or(at, |i| moved[i]);
        for at in self.index.iter_mut() {
            *at = moved_to(*at);
        }
        moved_to(follow)
    }

    /// Bytes held: the arena and the index as allocated, the logs' vectors
    /// (not what the logs hold).
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.arena.capacity()
            + self.index.allocation_size()
            + self.logs.as_ref().map_or(0, |l| {
                std::mem::size_of::<Logs>()
                    + l.states.capacity() * std::mem::size_of::<KeyState>()
                    + l.free.capacity() * 4
            })
    }

    #[cfg(test)]
    pub fn dead(&self) -> usize {
        self.dead
    }
}

fn record_at(arena: &[u8], at: u32) -> Record {
    let at = at as usize;
    let mut rest = &arena[at + STAMP_SECS..];
    let before = rest.len();
    let key_len = (get_varint(&mut rest).unwrap_or(0) >> 1) as usize;
    let state_len = get_varint(&mut rest).unwrap_or(0) as usize;
    let key = at + STAMP_SECS + (before - rest.len());
    Record {
        at,
        key,
        state: key + key_len,
        end: key + key_len + state_len,
    }
}

/// The key bytes of the record at `at` (for rehashing while the index is borrowed).
fn key_at(arena: &[u8], at: u32) -> &[u8] {
    let r = record_at(arena, at);
    &arena[r.key..r.state]
}

/// Bytes of a record's stamp: when it may be forgotten, in whole seconds
/// since the epoch (until 2106), rounded up. So a key may stay up to a
/// second longer than it matters, never less, and 4 bytes a key are saved.
/// Whether it was asked again is the low bit of the key length that follows.
const STAMP_SECS: usize = 4;

const NS_PER_SEC: u64 = 1_000_000_000;

fn stamp_secs(stamp: Stamp) -> u32 {
    let secs = stamp.forgettable_at().as_u64().div_ceil(NS_PER_SEC);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

fn stamp_at(arena: &[u8], at: u32) -> Stamp {
    let at = at as usize;
    let mut word = [0; STAMP_SECS];
    word.copy_from_slice(&arena[at..at + STAMP_SECS]);
    let secs = u64::from(u32::from_le_bytes(word));
    let asked_again = arena[at + STAMP_SECS] & 1 == 1;
    Stamp::new(Nanos(secs * NS_PER_SEC), asked_again)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::ask::Op;
    use sluice_core::policy::{Algorithm, Limit, Policy};
    use sluice_core::time::Nanos;
    use std::collections::HashMap;
    use std::hash::BuildHasher;
    use std::time::Duration;

    fn policy(algorithm: Algorithm) -> Policy {
        let limits = vec![
            Limit::new(10, Duration::from_secs(60), None).unwrap(),
            Limit::new(500, Duration::from_secs(3600), None).unwrap(),
        ];
        Policy::new("default", algorithm, limits).unwrap()
    }

    /// A stamp at a whole second, as records keep them.
    fn secs(s: u64, asked_again: bool) -> Stamp {
        Stamp::new(Nanos::from_secs(s), asked_again)
    }

    #[test]
    fn a_stamp_is_kept_to_the_second_rounded_up_with_its_flag() {
        let mut f = Fixture::new();
        let state = KeyState::Gcra(Vec::new());
        f.insert(
            "p/a",
            state.clone(),
            Stamp::new(Nanos(100 * 1_000_000_000 + 1), true),
        );
        f.insert("p/b", state, Stamp::new(Nanos(100 * 1_000_000_000), false));
        let got = f.contents();
        assert_eq!(got["p/a"].1, secs(101, true));
        assert_eq!(got["p/b"].1, secs(100, false));
        let at = f.table.find(f.hash("p/b"), "p/b").unwrap();
        f.table
            .set_stamp(f.hash("p/b"), at, secs(u64::MAX / 1_000_000_000, true));
        assert_eq!(f.table.stamp(at), secs(u64::from(u32::MAX), true));
        assert_eq!(f.table.key(at), "p/b");
    }

    /// A reproducible stream of pseudo-random numbers (xorshift).
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    struct Fixture {
        table: Table,
        hasher: foldhash::fast::RandomState,
        work: Work,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                table: Table::default(),
                hasher: Default::default(),
                work: Work::default(),
            }
        }

        fn hash(&self, key: &str) -> u64 {
            self.hasher.hash_one(key.as_bytes())
        }

        fn insert(&mut self, key: &str, mut state: KeyState, stamp: Stamp) {
            let hash = self.hash(key);
            let hasher = self.hasher.clone();
            let rehash = |k: &[u8]| hasher.hash_one(k);
            let bytes = &mut self.work.bytes;
            self.table
                .insert(hash, key, stamp, &mut state, bytes, rehash);
        }

        /// Every key the table holds, with its state and stamp.
        fn contents(&mut self) -> HashMap<String, (KeyState, Stamp)> {
            let records: Vec<u32> = self.table.records().collect();
            records
                .into_iter()
                .map(|at| {
                    let state = self.table.read(at, &mut self.work, KeyState::clone);
                    let key = self.table.key(at).to_string();
                    (key, (state, self.table.stamp(at)))
                })
                .collect()
        }
    }

    #[test]
    fn a_key_of_the_1m_test_takes_37_bytes_in_the_arena_and_no_allocation_of_its_own() {
        // `default/m-123456` under 10/min + 500/h, sliding window, counted once.
        let policy = policy(Algorithm::SlidingWindow);
        let mut state = policy.new_state();
        policy.decide(&mut state, Nanos(1_799_999_999_999_999_999), 1);
        let mut f = Fixture::new();
        f.insert("default/m-123456", state.clone(), secs(7, true));
        // Stamp 4, two one-byte lengths, the key 16, the packed state 15.
        assert_eq!(f.table.arena.len(), 4 + 1 + 1 + 16 + 15);
        // 244 such keys (a bucket's share of a million keys over 64 × 64
        // buckets): arena and index, spare capacity included, 48 bytes a
        // key (37 + 11); nothing else is allocated for them.
        for i in 0..243 {
            f.insert(
                &format!("default/m-{}", 200_000 + i),
                state.clone(),
                secs(i, false),
            );
        }
        assert!(f.table.logs.is_none());
        let per_key = f.table.allocated() / 244;
        assert!(per_key <= 52, "{per_key} bytes a key");
        assert_eq!(f.contents()["default/m-123456"], (state, secs(7, true)));
    }

    #[test]
    fn the_table_struct_stays_small() {
        // Every bucket pays it, 64 × 64 of them in a worker: the index,
        // the arena, the dead bytes and two pointers (logs, victims).
        assert!(
            std::mem::size_of::<Table>() <= 80,
            "{}",
            std::mem::size_of::<Table>()
        );
    }

    #[test]
    fn updates_removals_and_compaction_keep_every_key_and_state() {
        // Keys of every algorithm, policies switching between them (a
        // sliding log moves out of the arena and back), states whose packed
        // length changes (records move), removals and retains (the arena is
        // compacted): the table must always hold what a plain map holds.
        let mut f = Fixture::new();
        let mut model: HashMap<String, (KeyState, Stamp)> = HashMap::new();
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut now = Nanos::from_secs(1_800_000_000);
        let mut compacted = false;
        for step in 0..20_000u64 {
            let r = next();
            let key = format!("p/k{}", r % 60);
            let algorithm = Algorithm::ALL[(r >> 8) as usize % 5];
            let policy = policy(algorithm);
            now = now.saturating_add(Nanos((r >> 16) % 3_000_000_000));
            let hash = f.hash(&key);
            match (r >> 40) % 10 {
                0 => {
                    let removed = f.table.remove(hash, &key);
                    assert_eq!(removed, model.remove(&key).is_some());
                }
                1 if step % 50 == 0 => {
                    let cut = secs(next() % 1_000, false);
                    f.table.retain(|stamp| stamp > cut);
                    model.retain(|_, (_, stamp)| *stamp > cut);
                }
                _ => {
                    let stamp = secs(next() % 1_000, r & 1 == 1);
                    let op = Op::Allow(1 + (r >> 50) % 3);
                    match f.table.find(hash, &key) {
                        Some(at) => {
                            let want = {
                                let (state, s) = model.get_mut(&key).unwrap();
                                *s = stamp;
                                op.apply(&policy, state, now)
                            };
                            let (got, at) = f.table.update(hash, at, &mut f.work, |state| {
                                op.apply(&policy, state, now)
                            });
                            f.table.set_stamp(hash, at, stamp);
                            assert_eq!(got, want, "step {step}");
                        }
                        None => {
                            assert!(!model.contains_key(&key));
                            let mut state = policy.new_state();
                            op.apply(&policy, &mut state, now);
                            model.insert(key.clone(), (state.clone(), stamp));
                            f.insert(&key, state, stamp);
                        }
                    }
                }
            }
            compacted |= f.table.dead() == 0 && step > 1_000;
            assert!(
                f.table.dead() * 2 < f.table.arena.len().max(1),
                "step {step}"
            );
            if step % 500 == 0 {
                assert_eq!(f.contents(), model, "step {step}");
            }
        }
        assert_eq!(f.contents(), model);
        assert!(compacted);
    }

    /// The least stamp of `model`, as a scan would find it.
    fn least_of(model: &HashMap<String, (KeyState, Stamp)>) -> Option<Stamp> {
        model.values().map(|(_, stamp)| *stamp).min()
    }

    #[test]
    fn the_least_valuable_record_is_the_one_a_scan_would_find() {
        // Inserts, restamps up and down, moves (a state whose packed length
        // changes), removals, prunes, compactions and evictions in any
        // order: the kept candidates must always give the lowest stamp.
        let mut f = Fixture::new();
        let mut model: HashMap<String, (KeyState, Stamp)> = HashMap::new();
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let policy = policy(Algorithm::FixedWindow);
        let now = Nanos::from_secs(1_800_000_000);
        let mut evictions = 0;
        for step in 0..30_000u64 {
            let r = next();
            let key = format!("p/k{}", r % 200);
            let hash = f.hash(&key);
            let stamp = secs(next() % 10_000, r & 1 == 1);
            match (r >> 20) % 16 {
                0..=5 => match f.table.find(hash, &key) {
                    Some(at) => {
                        // Counting more grows the packed state: the record moves.
                        let op = Op::Allow(1 + (r >> 40) % 300);
                        let (_, at) = f
                            .table
                            .update(hash, at, &mut f.work, |state| op.apply(&policy, state, now));
                        f.table.set_stamp(hash, at, stamp);
                        let entry = model.get_mut(&key).unwrap();
                        entry.1 = stamp;
                        op.apply(&policy, &mut entry.0, now);
                    }
                    None => {
                        let state = policy.new_state();
                        model.insert(key.clone(), (state.clone(), stamp));
                        f.insert(&key, state, stamp);
                    }
                },
                6 | 7 => {
                    assert_eq!(f.table.remove(hash, &key), model.remove(&key).is_some());
                }
                8 if step % 40 == 0 => {
                    let cut = secs(next() % 3_000, false);
                    f.table.retain(|stamp| stamp > cut);
                    model.retain(|_, (_, stamp)| *stamp > cut);
                }
                _ => {
                    let hasher = f.hasher.clone();
                    let least = f.table.least(|k| hasher.hash_one(k));
                    assert_eq!(least.map(|(_, s, _)| s), least_of(&model), "step {step}");
                    if let Some((at, stamp, hash)) = least {
                        let key = f.table.key(at).to_string();
                        assert_eq!(hash, f.hash(&key));
                        assert_eq!(model[&key].1, stamp);
                        if r & 2 == 0 {
                            f.table.remove_at(hash, at);
                            model.remove(&key);
                            evictions += 1;
                        }
                    }
                }
            }
        }
        assert!(evictions > 1_000, "{evictions}");
        assert_eq!(f.contents(), model);
    }

    #[test]
    fn evicting_a_flood_scans_the_table_once_every_few_evictions() {
        // At the key bound every new key evicts the least valuable: a key
        // counted earlier, so ranking lower than the new one.
        let mut f = Fixture::new();
        let state = KeyState::FixedWindow(Vec::new());
        for i in 0..500 {
            f.insert(&format!("p/old{i}"), state.clone(), secs(1_000 + i, false));
        }
        let hasher = f.hasher.clone();
        for i in 0..2_000u64 {
            let (at, stamp, hash) = f.table.least(|k| hasher.hash_one(k)).unwrap();
            let key = f.table.key(at).to_string();
            let want = if i < 500 {
                format!("p/old{i}")
            } else {
                format!("p/new{}", i - 500)
            };
            assert_eq!((key.as_str(), stamp.asked_again()), (want.as_str(), false));
            f.table.remove_at(hash, at);
            f.insert(&format!("p/new{i}"), state.clone(), secs(2_000 + i, false));
        }
        assert_eq!(f.table.len(), 500);
        let scans = f.table.victims.as_ref().unwrap().scans;
        // One in VICTIMS evictions, plus one after each compaction.
        assert!(scans <= 2_000 / VICTIMS + 2_000 / 250, "{scans} scans");
    }
}
