//! A policy table's `alerts` and the file's `alert_retention` (SPEC
//! §14), checked apart from the table's shape so that `table.rs` stays
//! about what a table holds.

use super::error::FieldError;
use super::table::PolicyTable;
use crate::alerts::Thresholds;
use crate::duration::{format_duration, parse_duration};
use std::time::Duration;

/// How long `SLUICE_ALERTS` keeps an alert without `alert_retention`.
pub const DEFAULT_ALERT_RETENTION: Duration = Duration::from_secs(31 * 24 * 3600);
/// The shortest `alert_retention`: the stream must keep an alert at least
/// as long as it remembers its message id (docs/USAGE.md, "Alerts").
pub const MIN_ALERT_RETENTION: Duration = Duration::from_secs(60);

impl PolicyTable {
    /// The table's alert thresholds, each 1 to 1000; a policy of only
    /// concurrency slots has no window to reach a share of.
    pub(super) fn thresholds(&self) -> Result<Thresholds, FieldError> {
        let thresholds =
            Thresholds::new(&self.alerts).map_err(|e| FieldError::new("alerts", e.to_string()))?;
        if !thresholds.is_empty() && self.limits.is_empty() {
            return Err(FieldError::new(
                "alerts",
                "alerts need limits: a threshold is a share of a limit's max in a window; add limits (fixed_window) or remove alerts",
            ));
        }
        Ok(thresholds)
    }
}

/// `alert_retention = "31d"`: how long the alerts stream keeps an alert.
pub(super) fn alert_retention(text: &str) -> Result<Duration, FieldError> {
    let field = "alert_retention";
    let d = parse_duration(text).map_err(|e| FieldError::new(field, e.to_string()))?;
    if d < MIN_ALERT_RETENTION {
        return Err(FieldError::new(
            field,
            format!(
                "must be at least {}, found {text:?}",
                format_duration(MIN_ALERT_RETENTION)
            ),
        ));
    }
    Ok(d)
}
