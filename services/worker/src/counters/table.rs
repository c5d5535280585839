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

use super::stamp::Stamp;
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
#[derive(Clone, Debug, Default)]
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

    /// A copy to read the keys and states of later ([`super::Cut`]): the
    /// index, the arena and the logs, without the eviction candidates.
    pub fn copy(&self) -> Table {
        Table {
            index: self.index.clone(),
            arena: self.arena.clone(),
            dead: self.dead,
            logs: self.logs.clone(),
            victims: None,
        }
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
mod tests;
