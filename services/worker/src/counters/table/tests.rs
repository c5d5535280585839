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
                        let (got, at) = f
                            .table
                            .update(hash, at, &mut f.work, |state| op.apply(&policy, state, now));
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
