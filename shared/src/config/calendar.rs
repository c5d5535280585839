//! The calendar fields of a policy table (SPEC §14): `tz`,
//! `week_start` and `anchor_day`, checked into the [`Zone`] of its calendar
//! limits, and refused where no limit uses them. Apart from `table.rs`,
//! which reads the table's shape, because these rules concern the values.

use super::error::FieldError;
use super::table::{LimitTable, PolicyTable};
use crate::calendar::{
    CalendarError, Period, Zone, DEFAULT_ANCHOR_DAY, DEFAULT_WEEK_START, DEFAULT_ZONE,
};

impl PolicyTable {
    /// Whether a limit's `per` is the calendar period `p` (any, for `None`).
    fn uses(&self, p: Option<Period>) -> bool {
        self.limits
            .iter()
            .filter_map(|l| Period::parse(&l.per))
            .any(|q| p.is_none_or(|p| p == q))
    }

    /// The same table with `limits` instead (a per-key override's), and
    /// only the calendar settings they use.
    pub fn with_limits(&self, limits: Vec<LimitTable>) -> PolicyTable {
        let mut t = PolicyTable {
            limits,
            ..self.clone()
        };
        if !t.uses(None) {
            t.tz = None;
        }
        if !t.uses(Some(Period::Week)) {
            t.week_start = None;
        }
        if !t.uses(Some(Period::Month)) {
            t.anchor_day = None;
        }
        t
    }

    /// The calendar of the table's calendar limits, checked; each setting
    /// is refused where no limit uses it (a `tz` without a calendar period
    /// would silently do nothing).
    pub(super) fn zone(&self) -> Result<Zone, FieldError> {
        let zone = Zone::new(
            self.tz.as_deref().unwrap_or(DEFAULT_ZONE),
            self.week_start.as_deref().unwrap_or(DEFAULT_WEEK_START),
            self.anchor_day.unwrap_or(DEFAULT_ANCHOR_DAY.into()),
        )
        .map_err(|e| {
            let field = match e {
                CalendarError::UnknownZone(_) => "tz",
                CalendarError::UnknownWeekday(_) => "week_start",
                CalendarError::AnchorDay(_) => "anchor_day",
            };
            FieldError::new(field, e.to_string())
        })?;
        let uses = |p| self.uses(p);
        let unused = [
            (
                self.tz.is_some(),
                None,
                "tz",
                "a calendar period (per = \"day\", \"week\" or \"month\")",
            ),
            (
                self.week_start.is_some(),
                Some(Period::Week),
                "week_start",
                "per = \"week\"",
            ),
            (
                self.anchor_day.is_some(),
                Some(Period::Month),
                "anchor_day",
                "per = \"month\"",
            ),
        ];
        for (set, period, field, needs) in unused {
            if set && !uses(period) {
                return Err(FieldError::new(
                    field,
                    format!("{field} only applies to limits with {needs}, and no limit of this policy has one; remove {field} or add such a limit"),
                ));
            }
        }
        Ok(zone)
    }
}
