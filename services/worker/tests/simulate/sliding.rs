//! The bound of a global sliding log or sliding window, checked from
//! outside as the asks were answered (docs/REGIONS-DESIGN.md, "Bounds,
//! and why they hold"). A sliding policy has no window a count could be
//! kept in, so the fixed window's check by window does not apply: each
//! region decides at most its part in any span of `per`, the home
//! decides the rest from its part, so over all regions
//!
//! - a **sliding log** admits at most `max` in any span `(t − per, t]`;
//! - a **sliding window** keeps its estimate (`prev · (per − e) / per +
//!   curr`, each counter's windows aligned on its region's clock) summed
//!   over the counters that decide (each region's part; the home's,
//!   which decides the asks sent on to it) at most `max`: as exact as
//!   its estimate is in one region, whatever the regions' clocks.
//!
//! `on_cut = "open"` allows one whole limit in each region (SPEC §12),
//! and a kill in snapshot mode what it lost, for as long as the lost
//! units would still have counted.

use sluice_core::time::Nanos;
use std::collections::BTreeMap;

/// One admitted ask: the region whose counter decided it, and when (on
/// the simulation's clock).
#[derive(Clone, Copy, Debug)]
struct Admitted {
    decided_in: usize,
    at: Nanos,
}

/// Units a kill in snapshot mode lost, and when.
#[derive(Clone, Copy, Debug)]
struct Lost {
    at: Nanos,
    units: u64,
}

/// What a run admitted of each key under a global sliding policy, and the
/// check of its bound.
#[derive(Debug)]
pub struct SlidingBound {
    /// A sliding log (exact), else a sliding window (the estimate).
    log: bool,
    per: u64,
    /// The most over all regions: `max`, or one per region with
    /// `on_cut = "open"`.
    most: u64,
    /// Each region's clock, off the simulation's by this (ns): where its
    /// counter's windows start.
    offsets: Vec<i64>,
    admitted: BTreeMap<String, Vec<Admitted>>,
    lost: BTreeMap<String, Vec<Lost>>,
}

impl SlidingBound {
    pub fn new(log: bool, per: u64, most: u64, offsets: Vec<i64>) -> SlidingBound {
        SlidingBound {
            log,
            per,
            most,
            offsets,
            admitted: BTreeMap::new(),
            lost: BTreeMap::new(),
        }
    }

    /// A kill in snapshot mode at `at` lost `units` of `key` in one
    /// region. A sliding window's room is whole units of a fractional
    /// estimate, so what it lost may be up to one more than the room it
    /// gave back.
    pub fn lost(&mut self, key: &str, at: Nanos, units: u64) {
        let units = units + u64::from(!self.log);
        let lost = Lost { at, units };
        self.lost.entry(key.to_string()).or_default().push(lost);
    }

    /// Region `decided_in`'s counter admitted an ask of `key` at `at`:
    /// `Err` with what broke, if any span it falls in now holds more
    /// than the bound (asks answered later may have been decided
    /// earlier, so every span after it is checked again).
    pub fn admit(&mut self, key: &str, decided_in: usize, at: Nanos) -> Result<(), String> {
        // Kept in the order decided, so that a span is a range of them.
        let admitted = self.admitted.entry(key.to_string()).or_default();
        let place = admitted.partition_point(|a| a.at <= at);
        admitted.insert(place, Admitted { decided_in, at });
        let admitted = &self.admitted[key];
        // A unit counts for `per` in a log, for up to two windows in a
        // sliding window's estimate.
        let reach = if self.log { self.per } else { 2 * self.per };
        let until = admitted.partition_point(|a| a.at.0 < at.0 + reach);
        for end in admitted[place..until].iter().map(|a| a.at) {
            let lost = self.lost_before(key, end, reach);
            let count = match self.log {
                true => self.in_span(admitted, end),
                false => self.estimate(admitted, end),
            };
            let per = u128::from(self.per);
            if count > u128::from(self.most + lost) * per {
                let what = match self.log {
                    true => format!("{} in the {} ns up to", count / per, self.per),
                    false => format!("an estimate of {:.2} at", count as f64 / self.per as f64),
                };
                return Err(format!(
                    "key {key} admitted {what} {:.3} s over all regions, past {} \
                     (with {lost} lost by kills in snapshot mode)",
                    end.0 as f64 / 1e9,
                    self.most + lost
                ));
            }
        }
        Ok(())
    }

    /// The admitted asks (in order) from `from` to `to`, both included.
    fn between(admitted: &[Admitted], from: u64, to: u64) -> &[Admitted] {
        let first = admitted.partition_point(|a| a.at.0 < from);
        let last = admitted.partition_point(|a| a.at.0 <= to);
        &admitted[first..last.max(first)]
    }

    /// What kills in snapshot mode lost of `key` within `reach` before
    /// `end` (and at it).
    fn lost_before(&self, key: &str, end: Nanos, reach: u64) -> u64 {
        self.lost.get(key).map_or(0, |lost| {
            lost.iter()
                .filter(|l| l.at <= end && l.at.0 + reach > end.0)
                .map(|l| l.units)
                .sum()
        })
    }

    /// `per` times the asks admitted in `(end − per, end]` (scaled as the
    /// estimate is, so both compare with `most · per`).
    fn in_span(&self, admitted: &[Admitted], end: Nanos) -> u128 {
        let from = end.0.saturating_sub(self.per) + 1;
        let count = Self::between(admitted, from, end.0).len();
        count as u128 * u128::from(self.per)
    }

    /// `per` times the estimate at `end`, summed over the counters that
    /// decided: each on its own region's clock, as it decides.
    fn estimate(&self, admitted: &[Admitted], end: Nanos) -> u128 {
        let per = self.per;
        (0..self.offsets.len())
            .map(|region| {
                let offset = self.offsets[region];
                let now = end.0.saturating_add_signed(offset);
                let start = now - now % per;
                let elapsed = now - start;
                let (mut prev, mut curr) = (0u128, 0u128);
                // What its clock puts in this window or the one before.
                let reach = (2 * per).saturating_add(offset.unsigned_abs());
                let near = Self::between(admitted, end.0.saturating_sub(reach), end.0);
                for a in near.iter().filter(|a| a.decided_in == region) {
                    let t = a.at.0.saturating_add_signed(offset);
                    if (start..=now).contains(&t) {
                        curr += 1;
                    } else if t < start && t + per >= start {
                        prev += 1;
                    }
                }
                prev * u128::from(per - elapsed) + curr * u128::from(per)
            })
            .sum()
    }
}
