//! Threshold alerts as kept state (SPEC §14): the alerts a partition's
//! owner fired in windows not over yet ([`sluice_core::alerts::Fired`]),
//! carried to the next owner so that a threshold reached before a
//! handover fires nothing after it, and an alert the stream had not
//! acknowledged is published again (with the same message id, which the
//! stream keeps once).

use super::kind::Kept;
use crate::counters::Counters;
use sluice_core::alerts::FiredAlert;
use sluice_core::time::Nanos;

/// The fired alerts ([`Kept`]).
pub struct Alerts;

impl Kept for Alerts {
    type Carried = Vec<FiredAlert>;

    /// Forgets the alerts of windows that are over (and stored) first.
    /// An alert is noted under the bucket lock of the count that reached
    /// it, within that count's turn, so the copy holds each alert whose
    /// count it holds.
    fn read(counters: &Counters, now: Nanos, _handover: bool) -> Vec<FiredAlert> {
        let mut fired = counters.alerts().fired();
        fired.prune(now);
        fired.carried()
    }

    fn take_over(carried: &Vec<FiredAlert>, counters: &Counters, _now: Nanos, _handover: bool) {
        counters.alerts().take_over(carried);
    }
}
