//! `[usage]`: whether usage is recorded and its tiers (SPEC §9).
//!
//! ```toml
//! [usage]
//! enabled = true
//! tiers = [
//!   { step = "1m", keep = "1d" },
//!   { step = "5m", keep = "7d" },
//!   { step = "1h", keep = "31d" },
//!   { step = "1d", keep = "730d" },
//! ]
//! ```
//!
//! The rules a list of tiers must follow are [`UsageConfig::check`]'s.

use super::error::FieldError;
use crate::duration::parse_duration;
use crate::usage::{Tier, UsageConfig};
use serde::Deserialize;

/// `[usage]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UsageTable {
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    tiers: Option<Vec<TierTable>>,
}

/// One `{ step = "1m", keep = "1d" }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TierTable {
    step: String,
    keep: String,
}

impl UsageTable {
    pub(super) fn check(self) -> Result<UsageConfig, FieldError> {
        let mut config = UsageConfig::default();
        if let Some(enabled) = self.enabled {
            config.enabled = enabled;
        }
        if let Some(tiers) = self.tiers {
            let mut checked = Vec::with_capacity(tiers.len());
            for (i, tier) in tiers.iter().enumerate() {
                let duration = |text: &str, name: &str| {
                    parse_duration(text)
                        .map_err(|e| FieldError::new(format!("tiers[{i}].{name}"), e.to_string()))
                };
                checked.push(Tier {
                    step: duration(&tier.step, "step")?,
                    keep: duration(&tier.keep, "keep")?,
                });
            }
            UsageConfig::check(&checked).map_err(|e| FieldError::new("tiers", e))?;
            config.tiers = checked;
        }
        Ok(config)
    }
}
