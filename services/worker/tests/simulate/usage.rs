//! A partition's stored usage in the simulation, flushed into and
//! replayed from as the worker's usage history does
//! (`sluice_worker::usage::UsageHistory`: `flush`, `replay`), around the
//! real ledger ([`Ledger`]): every write lands at once, so only what a
//! flush adds and a takeover replays is simulated, not the stream. What
//! it holds, with what the ledger holds in memory, is the region's
//! recorded usage, which the run checks against what the region answered.

use sluice_core::usage::Counts;
use sluice_worker::journal::record::Record;
use sluice_worker::usage::counts_of;
use sluice_worker::usage::ledger::{Ledger, WriteMarks};
use std::collections::BTreeMap;

/// Usage by key.
pub type ByKey = BTreeMap<String, Counts>;

/// Adds `counts` to `key`'s.
pub fn add(to: &mut ByKey, key: &str, counts: Counts) {
    let sum = to.entry(key.to_string()).or_default();
    sum.used += counts.used;
    sum.denied += counts.denied;
}

/// One minute's stored record: counts by key, and the journal position
/// whose records it holds (journal mode).
#[derive(Default)]
struct Minute {
    keys: ByKey,
    watermark: u64,
}

/// A partition's usage records, by minute.
#[derive(Default)]
pub struct UsageStore {
    minutes: BTreeMap<u64, Minute>,
}

impl UsageStore {
    /// A flush: what the ledger took goes into the minutes' records, with
    /// the journal position it holds (`delivered`: the records stored so
    /// far, all in the ledger), and the ledger learns it landed.
    pub fn flush(&mut self, ledger: &Ledger, delivered: u64) {
        ledger.advance(delivered);
        let take = ledger.take();
        for &minute in &take.minutes {
            // No write of this ledger's is stored but the ones it knows.
            let record = self.minutes.entry(minute).or_default();
            for counted in ledger.lacking(minute, &WriteMarks::default()) {
                for (_, key, counts) in counted.iter() {
                    add(&mut record.keys, key, counts);
                }
            }
            record.watermark = record.watermark.max(take.watermark);
            ledger.written(minute, take.mark.write);
        }
        ledger.stored_all(take.watermark);
    }

    /// A takeover in journal mode: the usage of the records after the
    /// snapshot's position (`since`; `journal` numbered from 1) that the
    /// stored record of their minute does not hold goes into the new
    /// ledger.
    pub fn replay(&self, ledger: &Ledger, journal: &[Record], since: u64) {
        let step = ledger.tiers()[0];
        for (seq, record) in (1u64..).zip(journal).skip(since as usize) {
            let t_ms = record.at().as_u64() / 1_000_000;
            let minute = step.bucket_of(t_ms);
            let stored = self.minutes.get(&minute).map_or(0, |m| m.watermark);
            if let Some(counts) = counts_of(record).filter(|_| seq > stored) {
                ledger.add(record.policy(), record.key(), t_ms, counts);
            }
            ledger.advance(seq);
        }
    }

    /// Every key's stored usage.
    pub fn totals(&self) -> ByKey {
        let mut totals = ByKey::new();
        for minute in self.minutes.values() {
            for (key, counts) in &minute.keys {
                add(&mut totals, key, *counts);
            }
        }
        totals
    }
}

/// What `ledger` holds not yet stored, by key: what a kill in snapshot
/// mode loses. It takes the counts (the ledger is going with its owner).
pub fn held(ledger: &Ledger) -> ByKey {
    let mut held = ByKey::new();
    for minute in ledger.take().minutes {
        for counted in ledger.lacking(minute, &WriteMarks::default()) {
            for (_, key, counts) in counted.iter() {
                add(&mut held, key, counts);
            }
        }
    }
    held
}
