//! The hold fields of a policy table (SPEC §13): `concurrency`,
//! `hold_ttl` and `on_expiry`, checked into the policy's
//! [`Holding`], and a policy of only `concurrency`. Apart from `table.rs`,
//! which reads the table's shape, as the calendar's rules are
//! (`config/calendar.rs`).

use super::error::FieldError;
use super::table::PolicyTable;
use crate::duration::{format_duration, parse_duration};
use crate::holds::{End, Holding, DEFAULT_TTL, MAX_CONCURRENCY};
use crate::policy::Policy;
use crate::time::Nanos;

impl PolicyTable {
    /// What the table says of holds, checked.
    pub(super) fn holding(&self) -> Result<Holding, FieldError> {
        let concurrency = match self.concurrency {
            None => None,
            Some(n) if (1..=u64::from(MAX_CONCURRENCY)).contains(&n) => Some(n as u32),
            Some(n) => {
                return Err(FieldError::new(
                    "concurrency",
                    format!(
                        "{n} is out of range: at most 1 to {MAX_CONCURRENCY} holds of a key live at once"
                    ),
                ))
            }
        };
        let ttl = match &self.hold_ttl {
            None => DEFAULT_TTL,
            Some(text) => {
                let d =
                    parse_duration(text).map_err(|e| FieldError::new("hold_ttl", e.to_string()))?;
                Nanos::from(d)
            }
        };
        let on_expiry = match self.on_expiry.as_deref() {
            None | Some("charge") => End::Charge,
            Some("release") => End::Release,
            Some(other) => {
                return Err(FieldError::new(
                    "on_expiry",
                    format!("{other:?} is not what a hold's end does; use \"charge\" (the default: it stays counted) or \"release\" (it goes back)"),
                ))
            }
        };
        Holding {
            concurrency,
            ttl,
            on_expiry,
        }
        .checked()
        // The concurrency was checked above: what is left is the ttl.
        .map_err(|e| FieldError::new("hold_ttl", e.to_string()))
    }

    /// A policy of only `concurrency`: anything about limits is refused.
    pub(super) fn slots_only(&self, name: &str, holding: Holding) -> Result<Policy, FieldError> {
        let unused = [
            (self.algorithm.is_some(), "algorithm"),
            (self.local_budget, "local_budget"),
            (self.tz.is_some(), "tz"),
            (self.week_start.is_some(), "week_start"),
            (self.anchor_day.is_some(), "anchor_day"),
        ];
        if let Some((_, field)) = unused.iter().find(|(set, _)| *set) {
            return Err(FieldError::new(
                *field,
                "a policy without limits (only `concurrency`) takes no algorithm and nothing about limits; add limits or remove it",
            ));
        }
        Policy::slots_only(name, holding)
            .map(|p| p.with_mode(self.mode))
            .map_err(|e| FieldError::new("concurrency", e.to_string()))
    }

    /// The same table with `policy`'s hold fields, where they differ from
    /// the defaults.
    pub(super) fn with_holding_of(mut self, policy: &Policy) -> PolicyTable {
        let h = policy.holding();
        self.concurrency = h.concurrency.map(u64::from);
        self.hold_ttl = (h.ttl != DEFAULT_TTL).then(|| format_duration(h.ttl.into()));
        self.on_expiry = (h.on_expiry != End::Charge).then(|| h.on_expiry.as_str().to_string());
        self
    }
}
