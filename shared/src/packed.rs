//! A key's state packed into a few bytes, for holding many keys in memory.
//!
//! [`KeyState`] is the form the algorithms work on: an enum holding a `Vec`
//! of per-limit states, 32 bytes plus a heap block of 16–24 bytes a limit
//! (plus the allocator's rounding). A worker holding a million keys keeps
//! them packed instead and unpacks one only while it decides for it
//! (`docs/ALGORITHMS.md`, "State bytes per key"):
//!
//! - one byte: the algorithm (low 3 bits) and the number of limits (high 5
//!   bits; 31 means the number follows as a varint);
//! - each limit's fields in their declared order, as LEB128 varints (7 bits
//!   a byte): a count below 128 takes one byte, a time in ns since the epoch
//!   nine. A window's start (fixed and sliding window) is a multiple of the
//!   window, which people choose round (a second, a minute, an hour), so it
//!   is written as `start / 10^k` and `k`, its trailing decimal zeros: five
//!   bytes for a minute's or an hour's window in this century. A sliding
//!   log's limit is its length, then its first time, then each time as the
//!   difference from the one before.
//!
//! A blocked key's state (SPEC §18, [`crate::penalty`]) is the byte
//! [`BLOCKED`], the block's end as a varint, then its counters packed.
//!
//! A sliding window with two limits (a minute and an hour) packs into 15
//! bytes. The first byte is
//! never [`NOT_PACKED`], so a holder may use that value to mark bytes that
//! are not a packed state. Packing is for memory only: snapshots keep their
//! MessagePack encoding of [`KeyState`] (`format.rs`), so this layout may
//! change between releases.
//!
//! [`Scratch`] unpacks into states it keeps, so that deciding for a packed
//! key allocates nothing once it has seen each algorithm.

use crate::algorithm::{fixed_window, gcra, sliding_log, sliding_window, token_bucket};
use crate::penalty::Blocked;
use crate::policy::{Algorithm, KeyState, Policy};
use crate::time::Nanos;

/// A first byte that [`pack`] never writes.
pub const NOT_PACKED: u8 = 0xff;

/// The first byte of a blocked key's state: no algorithm's tag (those are
/// 0 to 4 in the low 3 bits).
const BLOCKED: u8 = 5;

/// The limit count that says "the count follows as a varint".
const MANY: usize = 31;

fn tag(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::SlidingLog => 1,
        Algorithm::SlidingWindow => 2,
        Algorithm::TokenBucket => 3,
        Algorithm::Gcra => 4,
    }
}

fn algorithm_of_tag(tag: u8) -> Option<Algorithm> {
    Some(match tag {
        0 => Algorithm::FixedWindow,
        1 => Algorithm::SlidingLog,
        2 => Algorithm::SlidingWindow,
        3 => Algorithm::TokenBucket,
        4 => Algorithm::Gcra,
        _ => return None,
    })
}

/// The algorithm of a state (of a blocked key's, its counters').
pub fn algorithm(state: &KeyState) -> Algorithm {
    match state {
        KeyState::Blocked(b) => algorithm(&b.counters),
        KeyState::FixedWindow(_) => Algorithm::FixedWindow,
        KeyState::SlidingLog(_) => Algorithm::SlidingLog,
        KeyState::SlidingWindow(_) => Algorithm::SlidingWindow,
        KeyState::TokenBucket(_) => Algorithm::TokenBucket,
        KeyState::Gcra(_) => Algorithm::Gcra,
    }
}

/// Appends `v` as an LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an LEB128 varint from the front of `bytes`, advancing it; `None`
/// when `bytes` ends first or the value does not fit a `u64`.
pub fn get_varint(bytes: &mut &[u8]) -> Option<u64> {
    get_varint_wide(bytes).and_then(|v| u64::try_from(v).ok())
}

/// A varint of at most nine bytes (63 bits: every count, and every time
/// before 2262), read in a `u64`; `None`, with nothing read, when it is
/// longer or cut short. The wide form's `u128` arithmetic made unpacking
/// a bucket or a log 30 % slower.
fn get_varint_short(bytes: &mut &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(9) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *bytes = &bytes[i + 1..];
            return Some(v);
        }
    }
    None
}

fn put_varint_wide(out: &mut Vec<u8>, mut v: u128) {
    if let Ok(v) = u64::try_from(v) {
        return put_varint(out, v);
    }
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An LEB128 varint of up to 70 bits (ten bytes); in a `u64` while it fits
/// nine.
fn get_varint_wide(bytes: &mut &[u8]) -> Option<u128> {
    if let Some(v) = get_varint_short(bytes) {
        return Some(v.into());
    }
    let mut v: u128 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        v |= u128::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *bytes = &bytes[i + 1..];
            return Some(v);
        }
    }
    None
}

/// The most trailing decimal zeros a `u64` can have (10^19 < 2^64).
const MAX_ZEROS: u32 = 19;

/// Appends a time that is usually round (a window's start) as
/// `(t / 10^k) · 32 + k`, with `k` its trailing decimal zeros.
fn put_round(out: &mut Vec<u8>, t: u64) {
    let mut k = 0;
    let mut q = t;
    if q != 0 {
        // Zeros by halves: 16 + 2 + 1 = 19 at most.
        for (zeros, p) in [
            (16, 10u64.pow(16)),
            (8, 10u64.pow(8)),
            (4, 10_000),
            (2, 100),
            (1, 10),
        ] {
            if q.is_multiple_of(p) {
                q /= p;
                k += zeros;
            }
        }
    }
    put_varint_wide(out, u128::from(q) << 5 | k);
}

fn get_round(bytes: &mut &[u8]) -> Option<u64> {
    let v = get_varint_wide(bytes)?;
    let k = (v & 31) as u32;
    if k > MAX_ZEROS {
        return None;
    }
    u64::try_from(v >> 5).ok()?.checked_mul(10u64.pow(k))
}

/// One limit's state as varints.
trait Fields: Default {
    fn put(&self, out: &mut Vec<u8>);
    /// Overwrites `self` (reusing what it holds) from the front of `bytes`.
    fn get(&mut self, bytes: &mut &[u8]) -> Option<()>;
}

/// [`Fields`] for a state of `u64` fields, each written by its pair of
/// functions: [`put_varint`] / [`get_varint`], or for a time that is
/// usually round, [`put_round`] / [`get_round`].
macro_rules! fields {
    ($state:ty { $($field:ident: $put:ident / $get:ident),+ }) => {
        impl Fields for $state {
            fn put(&self, out: &mut Vec<u8>) {
                $($put(out, self.$field);)+
            }
            fn get(&mut self, bytes: &mut &[u8]) -> Option<()> {
                $(self.$field = $get(bytes)?;)+
                Some(())
            }
        }
    };
}

fields!(fixed_window::State {
    start: put_round / get_round,
    count: put_varint / get_varint
});
fields!(sliding_window::State {
    start: put_round / get_round,
    prev: put_varint / get_varint,
    curr: put_varint / get_varint
});
fields!(token_bucket::State {
    at: put_varint / get_varint,
    used: put_varint / get_varint,
    frac: put_varint / get_varint
});
fields!(gcra::State {
    tat: put_varint / get_varint,
    frac: put_varint / get_varint
});

impl Fields for sliding_log::State {
    fn put(&self, out: &mut Vec<u8>) {
        put_varint(out, self.log.len() as u64);
        let mut before = 0u64;
        for &t in &self.log {
            // Oldest first, so each difference is small; a restored log out
            // of order wraps around, and still unpacks to what it was.
            put_varint(out, t.wrapping_sub(before));
            before = t;
        }
    }
    fn get(&mut self, bytes: &mut &[u8]) -> Option<()> {
        let len = get_varint(bytes)?;
        // Each time takes at least one byte: a longer count is garbage.
        if len > bytes.len() as u64 {
            return None;
        }
        self.log.clear();
        let mut t = 0u64;
        for _ in 0..len {
            t = t.wrapping_add(get_varint(bytes)?);
            self.log.push_back(t);
        }
        Some(())
    }
}

fn put_limits<F: Fields>(algorithm: Algorithm, limits: &[F], out: &mut Vec<u8>) {
    let n = limits.len();
    out.push(tag(algorithm) | (n.min(MANY) as u8) << 3);
    if n >= MANY {
        put_varint(out, n as u64);
    }
    for limit in limits {
        limit.put(out);
    }
}

fn get_limits<F: Fields>(n: usize, limits: &mut Vec<F>, bytes: &mut &[u8]) -> Option<()> {
    // Each limit takes at least one byte: a longer count is garbage.
    if n > bytes.len() {
        return None;
    }
    limits.truncate(n);
    for limit in limits.iter_mut() {
        limit.get(bytes)?;
    }
    while limits.len() < n {
        let mut limit = F::default();
        limit.get(bytes)?;
        limits.push(limit);
    }
    Some(())
}

/// Appends `state`, packed.
pub fn pack(state: &KeyState, out: &mut Vec<u8>) {
    match state {
        KeyState::FixedWindow(v) => put_limits(Algorithm::FixedWindow, v, out),
        KeyState::SlidingLog(v) => put_limits(Algorithm::SlidingLog, v, out),
        KeyState::SlidingWindow(v) => put_limits(Algorithm::SlidingWindow, v, out),
        KeyState::TokenBucket(v) => put_limits(Algorithm::TokenBucket, v, out),
        KeyState::Gcra(v) => put_limits(Algorithm::Gcra, v, out),
        KeyState::Blocked(b) => {
            out.push(BLOCKED);
            put_varint(out, b.until.as_u64());
            pack(&b.counters, out);
        }
    }
}

/// How many bytes `state` packs into.
pub fn packed_len(state: &KeyState) -> usize {
    let mut out = Vec::new();
    pack(state, &mut out);
    out.len()
}

/// The algorithm and limit count at the front of `bytes`, advancing past them.
fn header(bytes: &mut &[u8]) -> Option<(Algorithm, usize)> {
    let (&first, rest) = bytes.split_first()?;
    *bytes = rest;
    let algorithm = algorithm_of_tag(first & 7)?;
    let n = match usize::from(first >> 3) {
        MANY => usize::try_from(get_varint(bytes)?).ok()?,
        n => n,
    };
    Some((algorithm, n))
}

/// Overwrites `state` with the state packed in `bytes`, reusing its `Vec`
/// when it is of the same algorithm. `false` (and `state` unspecified)
/// when `bytes` is not exactly one packed state.
pub fn unpack_into(mut bytes: &[u8], state: &mut KeyState) -> bool {
    if let Some((&BLOCKED, rest)) = bytes.split_first() {
        bytes = rest;
        let Some(until) = get_varint(&mut bytes) else {
            return false;
        };
        if !matches!(state, KeyState::Blocked(_)) {
            *state = KeyState::Blocked(Box::new(Blocked::<KeyState> {
                until: Nanos(until),
                counters: KeyState::Gcra(Vec::new()),
            }));
        }
        let KeyState::Blocked(b) = state else {
            return false;
        };
        b.until = Nanos(until);
        // Counters are never blocked themselves.
        return bytes.first() != Some(&BLOCKED) && unpack_into(bytes, &mut b.counters);
    }
    let Some((algorithm, n)) = header(&mut bytes) else {
        return false;
    };
    if matches!(state, KeyState::Blocked(_)) || self::algorithm(state) != algorithm {
        *state = empty(algorithm);
    }
    let read = match state {
        KeyState::FixedWindow(v) => get_limits(n, v, &mut bytes),
        KeyState::SlidingLog(v) => get_limits(n, v, &mut bytes),
        KeyState::SlidingWindow(v) => get_limits(n, v, &mut bytes),
        KeyState::TokenBucket(v) => get_limits(n, v, &mut bytes),
        KeyState::Gcra(v) => get_limits(n, v, &mut bytes),
        KeyState::Blocked(_) => None,
    };
    read.is_some() && bytes.is_empty()
}

/// The state packed in `bytes`, if it is exactly one.
pub fn unpack(bytes: &[u8]) -> Option<KeyState> {
    let mut state = KeyState::Gcra(Vec::new());
    unpack_into(bytes, &mut state).then_some(state)
}

/// A state of `algorithm` with no limits.
fn empty(algorithm: Algorithm) -> KeyState {
    match algorithm {
        Algorithm::FixedWindow => KeyState::FixedWindow(Vec::new()),
        Algorithm::SlidingLog => KeyState::SlidingLog(Vec::new()),
        Algorithm::SlidingWindow => KeyState::SlidingWindow(Vec::new()),
        Algorithm::TokenBucket => KeyState::TokenBucket(Vec::new()),
        Algorithm::Gcra => KeyState::Gcra(Vec::new()),
    }
}

/// Working states to unpack into, one per algorithm, kept between uses so
/// that unpacking (or starting a fresh key) reuses their allocations.
#[derive(Debug)]
pub struct Scratch {
    states: [KeyState; 5],
    /// A blocked key's, its counters' allocation kept as the others'.
    blocked: KeyState,
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch {
            states: [
                Algorithm::FixedWindow,
                Algorithm::SlidingLog,
                Algorithm::SlidingWindow,
                Algorithm::TokenBucket,
                Algorithm::Gcra,
            ]
            .map(empty),
            blocked: KeyState::Blocked(Box::new(Blocked::<KeyState> {
                until: Nanos::ZERO,
                counters: KeyState::Gcra(Vec::new()),
            })),
        }
    }
}

impl Scratch {
    /// The state packed in `bytes`, in a working state of its algorithm;
    /// `None` when `bytes` is not exactly one packed state.
    pub fn unpack(&mut self, bytes: &[u8]) -> Option<&mut KeyState> {
        let first = *bytes.first()?;
        let state = match first {
            BLOCKED => &mut self.blocked,
            _ => &mut self.states[usize::from(tag(algorithm_of_tag(first & 7)?))],
        };
        unpack_into(bytes, state).then_some(state)
    }

    /// A fresh state for `policy` (as [`Policy::new_state`]), in a working
    /// state of its algorithm.
    pub fn fresh(&mut self, policy: &Policy) -> &mut KeyState {
        let n = policy.limits().len();
        let state = &mut self.states[usize::from(tag(policy.algorithm()))];
        fn reset<T: Default>(v: &mut Vec<T>, n: usize) {
            v.clear();
            v.resize_with(n, T::default);
        }
        if matches!(state, KeyState::Blocked(_)) {
            // A decision blocked the key it was working on.
            *state = empty(policy.algorithm());
        }
        match state {
            KeyState::Blocked(_) => {}
            KeyState::FixedWindow(v) => reset(v, n),
            KeyState::SlidingLog(v) => reset(v, n),
            KeyState::SlidingWindow(v) => reset(v, n),
            KeyState::TokenBucket(v) => reset(v, n),
            KeyState::Gcra(v) => reset(v, n),
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::Op;
    use crate::policy::Limit;
    use crate::time::Nanos;
    use std::time::Duration;

    fn login(algorithm: Algorithm) -> Policy {
        let limits = vec![
            Limit::new(10, Duration::from_secs(60), None).unwrap(),
            Limit::new(500, Duration::from_secs(3600), None).unwrap(),
        ];
        Policy::new("login", algorithm, limits).unwrap()
    }

    #[test]
    fn varints_round_trip_at_every_width() {
        // Nine bytes hold 63 bits, ten the rest (two ways to read them).
        let widths = [0, 1, 127, 128, 300, u64::from(u32::MAX), 1 << 62];
        for v in widths.into_iter().chain([(1 << 63) - 1, 1 << 63, u64::MAX]) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            out.push(0x2a);
            let mut bytes = &out[..];
            assert_eq!(get_varint(&mut bytes), Some(v));
            assert_eq!(bytes, [0x2a], "what follows is left");
        }
        assert_eq!(get_varint(&mut &[0x80][..]), None, "cut short");
        assert_eq!(get_varint(&mut &[0xff; 10][..]), None, "past 64 bits");
    }

    #[test]
    fn round_times_take_few_bytes_and_any_time_round_trips() {
        let cases = [
            (0, 1),
            (1_800_000_000_000_000_000, 2),
            (1_799_999_940_000_000_000, 5), // a minute's window
            (1_799_996_400_000_000_000, 5), // an hour's
            (1_800_000_012_345_678_901, 10),
            (u64::MAX, 10),
            (10_000_000_000_000_000_000, 1),
        ];
        for (t, len) in cases {
            let mut out = Vec::new();
            put_round(&mut out, t);
            assert_eq!(out.len(), len, "{t}");
            let mut bytes = &out[..];
            assert_eq!(get_round(&mut bytes), Some(t));
            assert!(bytes.is_empty());
        }
        // 20 zeros, or a quotient past 64 bits: garbage.
        assert_eq!(get_round(&mut &[20][..]), None);
        let mut out = Vec::new();
        put_varint_wide(&mut out, u128::from(u64::MAX) << 5 | 1);
        assert_eq!(get_round(&mut &out[..]), None);
    }

    #[test]
    fn a_sliding_window_of_two_limits_counted_once_packs_into_15_bytes() {
        let policy = login(Algorithm::SlidingWindow);
        let mut state = policy.new_state();
        policy.decide(&mut state, Nanos(1_799_999_999_999_999_999), 1);
        let mut out = Vec::new();
        pack(&state, &mut out);
        // A header byte; per limit a 5-byte window start and two counts.
        assert_eq!(out.len(), 15);
        assert_ne!(out[0], NOT_PACKED);
        assert_eq!(unpack(&out), Some(state));
    }

    #[test]
    fn every_algorithm_round_trips_through_a_scratch_without_mixing_them() {
        let mut scratch = Scratch::default();
        let now = Nanos::from_secs(1_800_000_000);
        let mut packed = Vec::new();
        for algorithm in Algorithm::ALL {
            let policy = login(algorithm);
            let mut state = policy.new_state();
            for i in 0..7 {
                let at = now.saturating_add(Nanos::from_secs(i));
                Op::Allow(1).apply(&policy, &mut state, at);
            }
            let mut out = Vec::new();
            pack(&state, &mut out);
            assert_eq!(scratch.unpack(&out), Some(&mut state.clone()));
            packed.push((out, state));
        }
        for (out, state) in &packed {
            assert_eq!(scratch.unpack(out), Some(&mut state.clone()));
        }
        for algorithm in Algorithm::ALL {
            let policy = login(algorithm);
            assert_eq!(*scratch.fresh(&policy), policy.new_state());
        }
    }

    #[test]
    fn many_limits_and_empty_states_round_trip() {
        let many = KeyState::FixedWindow(
            (0..40)
                .map(|i| fixed_window::State {
                    start: i * 1_000,
                    count: i,
                })
                .collect(),
        );
        for state in [many, KeyState::SlidingLog(Vec::new())] {
            let mut out = Vec::new();
            pack(&state, &mut out);
            assert_eq!(out.len(), packed_len(&state));
            assert_eq!(unpack(&out), Some(state));
        }
    }

    #[test]
    fn bytes_that_are_not_one_packed_state_are_refused() {
        let policy = login(Algorithm::TokenBucket);
        let mut out = Vec::new();
        pack(&policy.new_state(), &mut out);
        assert!(unpack(&out).is_some());
        assert_eq!(unpack(&out[..out.len() - 1]), None, "cut short");
        let mut longer = out.clone();
        longer.push(0);
        assert_eq!(unpack(&longer), None, "trailing bytes");
        assert_eq!(unpack(&[NOT_PACKED]), None);
        assert_eq!(unpack(&[]), None);
        // A sliding log claiming more times than it has bytes.
        assert_eq!(unpack(&[1 | 1 << 3, 0xff, 0x7f]), None);
    }
}
