//! The region fields of a policy table (SPEC §12): `scope`, `home`,
//! `regions`, `region_shares` and `on_cut`, checked into the policy's
//! [`Scope`] by the rules of [`crate::region`], which this module only
//! gives field paths. Apart from `table.rs`, which reads the table's shape,
//! as the hold fields are (`config/holding.rs`).

use super::error::FieldError;
use super::table::PolicyTable;
use crate::policy::Policy;
use crate::region::{Global, OnCut, RegionError, RegionName, Scope};

impl PolicyTable {
    /// What the table says of regions, checked. The global fields are
    /// refused on a regional policy, so that a policy meant to be global
    /// but missing `scope = "global"` does not hold in each region apart
    /// unnoticed.
    pub(super) fn scope(&self) -> Result<Scope, FieldError> {
        match self.scope.as_deref() {
            None | Some("region") => {
                let global_only = [
                    (self.home.is_some(), "home"),
                    (self.regions.is_some(), "regions"),
                    (self.region_shares.is_some(), "region_shares"),
                    (self.on_cut.is_some(), "on_cut"),
                ];
                match global_only.iter().find(|(set, _)| *set) {
                    Some((_, field)) => Err(FieldError::new(
                        *field,
                        "only a global policy takes it; add scope = \"global\" (with home and regions) or remove it",
                    )),
                    None => Ok(Scope::Region),
                }
            }
            Some("global") => self.global().map(Scope::Global),
            Some(other) => Err(FieldError::new(
                "scope",
                format!("{other:?} is not a scope; use \"region\" (the default: each region counts its own asks) or \"global\" (one limit across regions, with home and regions)"),
            )),
        }
    }

    fn global(&self) -> Result<Global, FieldError> {
        let Some(home) = &self.home else {
            return Err(FieldError::new(
                "home",
                "missing; a global policy names the region that keeps its count, e.g. home = \"east\"",
            ));
        };
        let Some(regions) = &self.regions else {
            return Err(FieldError::new(
                "regions",
                "missing; a global policy lists the regions it holds across, e.g. regions = [\"east\", \"west\"]",
            ));
        };
        let on_cut = match &self.on_cut {
            None => OnCut::default(),
            Some(text) => {
                OnCut::parse(text).map_err(|e| FieldError::new("on_cut", e.to_string()))?
            }
        };
        let shares: Vec<(String, i64)> = self
            .region_shares
            .iter()
            .flatten()
            .map(|(r, w)| (r.clone(), *w))
            .collect();
        Global::new(home, regions, &shares, on_cut).map_err(|e| {
            let field = match &e {
                RegionError::HomeNotListed(..) => "home".to_string(),
                RegionError::ShareNotListed(name) | RegionError::BadWeight(name, _) => {
                    format!("region_shares.{name}")
                }
                RegionError::BadName(name) if regions.contains(name) => "regions".to_string(),
                RegionError::BadName(name) if *name == *home => "home".to_string(),
                RegionError::BadName(_) => "region_shares".to_string(),
                RegionError::BadOnCut(_) => "on_cut".to_string(),
                _ => "regions".to_string(),
            };
            FieldError::new(field, e.to_string())
        })
    }

    /// The same table with `policy`'s region fields, where they differ
    /// from the defaults.
    pub(super) fn with_scope_of(mut self, policy: &Policy) -> PolicyTable {
        if let Some(g) = policy.scope().global() {
            self.scope = Some("global".to_string());
            self.home = Some(g.home().to_string());
            self.regions = Some(g.weights().iter().map(|(r, _)| r.to_string()).collect());
            self.region_shares = (!g.equal_weights()).then(|| {
                g.weights()
                    .iter()
                    .map(|(r, w)| (r.to_string(), *w as i64))
                    .collect()
            });
            self.on_cut = (g.on_cut() != OnCut::default()).then(|| g.on_cut().as_str().to_string());
        }
        self
    }
}

/// Whether `policy` can be decided by a process of `region` (the config's
/// top-level `region`; `None` without regions): a global policy needs a
/// region, and one that lists it. Checked for the config file's policies
/// and for every live one (SPEC §7) a worker takes.
pub fn check_region(policy: &Policy, region: Option<&RegionName>) -> Result<(), FieldError> {
    let Some(global) = policy.scope().global() else {
        return Ok(());
    };
    match region {
        None => Err(FieldError::new(
            "scope",
            "a global policy needs regions: set region = \"<name>\" at the top of the config of every region (docs/REGIONS.md)",
        )),
        Some(region) if !global.lists(region) => Err(FieldError::new(
            "regions",
            format!("this region ({region}) is not listed; a global policy holds only in the regions it lists, so add {region:?} or use another policy here"),
        )),
        Some(_) => Ok(()),
    }
}
