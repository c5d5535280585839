//! A region's tallies waiting for their homes, kept as the worker's link
//! task keeps them (`sluice_worker::global_link`, `PendingTallies`): the
//! latest report of each key, sent together every 250 ms until the home
//! takes them, a group not taken waiting again unless a newer report of
//! its key came meanwhile. Without it a report the network lost would
//! never reach the home, where the worker's link task sends it again.

use sluice_core::region::tally::Reported;
use std::collections::BTreeMap;

/// Where a group of reports goes: the home (a region's index) and the
/// partition there.
pub type To = (usize, u32);

/// The latest report of each key not taken by its home yet, by home.
#[derive(Default)]
pub struct PendingTallies {
    groups: BTreeMap<To, BTreeMap<(String, String), Reported>>,
}

impl PendingTallies {
    /// Keeps `report`, in place of its key's earlier one.
    pub fn add(&mut self, to: To, report: Reported) {
        let key = (report.policy.clone(), report.key.clone());
        self.groups.entry(to).or_default().insert(key, report);
    }

    /// Every group waiting, to send.
    pub fn take(&mut self) -> Vec<(To, Vec<Reported>)> {
        std::mem::take(&mut self.groups)
            .into_iter()
            .map(|(to, reports)| (to, reports.into_values().collect()))
            .collect()
    }

    /// A group its home did not take: each report waits again, unless a
    /// newer one of its key came meanwhile.
    pub fn put_back(&mut self, to: To, reports: Vec<Reported>) {
        for report in reports {
            let key = (report.policy.clone(), report.key.clone());
            let waiting = self.groups.entry(to).or_default();
            waiting.entry(key).or_insert(report);
        }
    }

    /// Forgets what waits (the worker stopped with its link task).
    pub fn clear(&mut self) {
        self.groups.clear();
    }
}
