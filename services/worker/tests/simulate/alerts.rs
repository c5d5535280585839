//! Threshold alerts of a global fixed window (SPEC §14 across regions;
//! docs/REGIONS-DESIGN.md, "How alerts of a global policy are counted"),
//! checked from outside against what the regions answered: an alert
//! fires at the home once per key, window and threshold, and never before
//! what every region spent in the window reached it. Each region's
//! spending is counted where the ask was made, in the window of that
//! region's clock, as its tally counts it (an ask decided at the home for
//! another region: when its answer came back there).

use sluice_core::alerts::FiredAlert;
use sluice_core::limit::units;
use sluice_core::time::Nanos;
use std::collections::BTreeMap;

/// What the home published of one key, window and threshold.
#[derive(Debug)]
struct Published {
    /// How many times it was published (the stream keeps one).
    times: u32,
    /// The home's restarts by the first time: it may publish again only
    /// after a kill, which forgets what it fired since its snapshot.
    home_kills: u64,
}

/// The alerts a run published, and what they are checked against.
#[derive(Debug, Default)]
pub struct AlertCheck {
    per_ms: u64,
    max: u64,
    thresholds: Vec<u16>,
    /// When (on the simulation's clock) each unit of a key was spent, by
    /// window (its start in ms, on the clock of the region that spent it).
    spent: BTreeMap<(String, u64), Vec<Nanos>>,
    published: BTreeMap<(String, u64, u16), Published>,
    /// How often the home's worker was killed so far.
    home_kills: u64,
    /// Alerts published, and published again after a kill at the home.
    pub fired: u64,
    pub again: u64,
}

impl AlertCheck {
    pub fn new(per_ms: u64, max: u64, thresholds: &[u16]) -> AlertCheck {
        AlertCheck {
            per_ms,
            max,
            thresholds: thresholds.to_vec(),
            ..AlertCheck::default()
        }
    }

    /// A region spent a unit of `key` at `now`, its clock reading `clock`.
    pub fn spent(&mut self, key: &str, clock: Nanos, now: Nanos) {
        let ms = clock.0 / 1_000_000;
        let window = (key.to_string(), ms - ms % self.per_ms);
        self.spent.entry(window).or_default().push(now);
    }

    /// The home's worker was killed (it forgets what it fired since its
    /// last snapshot, and in journal mode fires it again as it replays).
    pub fn home_killed(&mut self) {
        self.home_kills += 1;
    }

    /// The home published `alert`: `Err` when no region spent enough for
    /// it yet, or it was published before and the home was not killed
    /// since.
    pub fn published(&mut self, alert: &FiredAlert) -> Result<(), String> {
        let a = &alert.alert;
        let window = (a.key.clone(), a.window_start_ms);
        let spent = self.spent.get(&window).map_or(0, Vec::len) as u64;
        if a.used > spent {
            return Err(format!(
                "the home alerted {}% of {} in the window from {} ms at a count of {}, \
                 but the regions had spent {spent} in it",
                a.threshold_pct, a.key, a.window_start_ms, a.used
            ));
        }
        self.fired += 1;
        let id = (a.key.clone(), a.window_start_ms, a.threshold_pct);
        let home_kills = self.home_kills;
        let first = self.published.entry(id).or_insert(Published {
            times: 0,
            home_kills,
        });
        first.times += 1;
        if first.times > 1 {
            if first.home_kills == home_kills {
                return Err(format!(
                    "the home alerted {}% of {} in the window from {} ms again, \
                     without a kill since the first time",
                    a.threshold_pct, a.key, a.window_start_ms
                ));
            }
            self.again += 1;
        }
        Ok(())
    }

    /// Nothing lost, the link never cut, no worker killed: every threshold
    /// that the regions' spending reached in a window at least `margin`
    /// before its end (the home's tally hears of it a report's interval
    /// and a link trip later), by `end`, was published.
    pub fn all_fired(&self, end: Nanos, margin: Nanos) -> Result<(), String> {
        let per = self.per_ms * 1_000_000;
        for ((key, start_ms), times) in &self.spent {
            let window_end = start_ms * 1_000_000 + per;
            if window_end > end.0 {
                continue;
            }
            for &pct in &self.thresholds {
                let need = units(self.max, pct);
                let Some(reached) = times.get(need as usize - 1) else {
                    continue;
                };
                let published = self.published.contains_key(&(key.clone(), *start_ms, pct));
                if reached.0 + margin.0 <= window_end && !published {
                    return Err(format!(
                        "{key} reached {pct}% ({need}) of its window from {start_ms} ms at \
                         {:.3} s, and the home never alerted it",
                        reached.0 as f64 / 1e9
                    ));
                }
            }
        }
        Ok(())
    }
}
