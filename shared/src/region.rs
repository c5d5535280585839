//! Regions (SPEC §12): a region's name, and what a policy says of where
//! it holds: in each region apart (`scope = "region"`, the default) or once
//! across regions (`scope = "global"`, with a `home` that keeps the count).
//!
//! The names and the rules for a global policy's fields live here, free of
//! I/O, so that the config file, `sluice policy set` and the policy bucket
//! refuse the same mistakes with the same reasons (`config/scope.rs`
//! attaches the field paths). A region's reserved share (what it may spend
//! on its own while it cannot reach the home) is computed here too: the
//! shares of all regions sum to at most the limit, which is what keeps a
//! global limit whole while the regions are cut apart (docs/REGIONS.md);
//! [`global`] is how the home and the other regions spend them,
//! [`state`] the state machine a partition's owner keeps of its global
//! keys (the link's events in, actions out) and [`transport`] the
//! messages those actions travel as.

use std::fmt;

pub mod global;
pub mod parts;
pub mod report;
pub mod state;
pub mod tally;
pub mod transport;

/// The longest region name.
pub const MAX_REGION_LEN: usize = 32;

/// The largest weight of one region in `region_shares`.
pub const MAX_SHARE_WEIGHT: u64 = 1_000_000;

/// A region's name: 1 to [`MAX_REGION_LEN`] characters from `a-z`, `0-9`
/// and `-`, so that it is one NATS subject token, one JetStream domain and
/// one KV key as it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionName(String);

impl RegionName {
    /// Checks `name`; the error says what a name may hold.
    pub fn new(name: &str) -> Result<RegionName, RegionError> {
        let ok = (1..=MAX_REGION_LEN).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(RegionName(name.to_string()))
        } else {
            Err(RegionError::BadName(name.to_string()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RegionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a region cut off from a global policy's home does with that
/// policy's asks (SPEC §12, `on_cut`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnCut {
    /// Decide from the region's reserved share: the global limit holds.
    #[default]
    Reserved,
    /// Deny every ask of the policy until the home answers again.
    Closed,
    /// Decide as a regional limit: up to (regions × max) over all regions.
    Open,
}

impl OnCut {
    pub const ALL: [OnCut; 3] = [OnCut::Reserved, OnCut::Closed, OnCut::Open];

    pub const fn as_str(self) -> &'static str {
        match self {
            OnCut::Reserved => "reserved",
            OnCut::Closed => "closed",
            OnCut::Open => "open",
        }
    }

    pub fn parse(text: &str) -> Result<OnCut, RegionError> {
        OnCut::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or_else(|| RegionError::BadOnCut(text.to_string()))
    }
}

/// Where a policy's limits hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Each region counts its own asks (the default, and the only scope of
    /// a system without regions).
    #[default]
    Region,
    /// One limit across the regions of [`Global`].
    Global(Global),
}

impl Scope {
    pub fn global(&self) -> Option<&Global> {
        match self {
            Scope::Region => None,
            Scope::Global(g) => Some(g),
        }
    }
}

/// A global policy's regions: its home, every region it holds across with
/// that region's weight, and what a region cut off from the home does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Global {
    home: RegionName,
    /// In the order `regions` lists them; weights are positive.
    weights: Vec<(RegionName, u64)>,
    on_cut: OnCut,
}

impl Global {
    /// Checks a global policy's fields: `regions` lists each region once,
    /// `home` among them; `shares` (by region name) name only listed regions
    /// with weights from 1 to [`MAX_SHARE_WEIGHT`]; an unnamed region
    /// weighs 1.
    pub fn new(
        home: &str,
        regions: &[String],
        shares: &[(String, i64)],
        on_cut: OnCut,
    ) -> Result<Global, RegionError> {
        if regions.is_empty() {
            return Err(RegionError::NoRegions);
        }
        let mut names: Vec<RegionName> = Vec::with_capacity(regions.len());
        for r in regions {
            let name = RegionName::new(r)?;
            if names.contains(&name) {
                return Err(RegionError::Duplicate(name));
            }
            names.push(name);
        }
        let home = RegionName::new(home)?;
        if !names.contains(&home) {
            return Err(RegionError::HomeNotListed(home, names));
        }
        let mut weights: Vec<(RegionName, u64)> = names.into_iter().map(|n| (n, 1)).collect();
        for (region, weight) in shares {
            let name = RegionName::new(region)?;
            let Some(slot) = weights.iter_mut().find(|(n, _)| *n == name) else {
                return Err(RegionError::ShareNotListed(name));
            };
            slot.1 = match u64::try_from(*weight) {
                Ok(w) if (1..=MAX_SHARE_WEIGHT).contains(&w) => w,
                _ => return Err(RegionError::BadWeight(name, *weight)),
            };
        }
        Ok(Global {
            home,
            weights,
            on_cut,
        })
    }

    pub fn home(&self) -> &RegionName {
        &self.home
    }

    pub fn on_cut(&self) -> OnCut {
        self.on_cut
    }

    /// The regions in listed order with their weights.
    pub fn weights(&self) -> &[(RegionName, u64)] {
        &self.weights
    }

    /// Every region but `here`, in listed order.
    pub fn others<'a>(&'a self, here: &'a RegionName) -> impl Iterator<Item = &'a RegionName> {
        self.weights
            .iter()
            .map(|(region, _)| region)
            .filter(move |region| *region != here)
    }

    /// Whether the policy holds in `region`.
    pub fn lists(&self, region: &RegionName) -> bool {
        self.weights.iter().any(|(n, _)| n == region)
    }

    /// Whether every weight is 1 (then `region_shares` is left out when
    /// the policy is written back).
    pub fn equal_weights(&self) -> bool {
        self.weights.iter().all(|&(_, w)| w == 1)
    }

    /// `region`'s reserved share of `amount` (a window's `max`, a rate or a
    /// burst): its weight's fraction, rounded down, so the shares of all
    /// regions never sum past `amount`. 0 for a region not listed.
    pub fn reserved(&self, region: &RegionName, amount: u64) -> u64 {
        let total: u64 = self.weights.iter().map(|&(_, w)| w).sum();
        let weight = self
            .weights
            .iter()
            .find(|(n, _)| n == region)
            .map_or(0, |&(_, w)| w);
        // u128: amount × weight may pass u64 for a large limit.
        (u128::from(amount) * u128::from(weight) / u128::from(total.max(1))) as u64
    }
}

/// A worker's answer to a region hello (`sluice.region.hello` within its
/// region, `sluice-link.hello` and `sluice-link.<region>.hello` across the
/// link): who answers, from which region. JSON.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    pub region: String,
    pub worker: String,
}

/// Why a region name or a global policy's fields are refused. Each says
/// what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionError {
    BadName(String),
    BadOnCut(String),
    NoRegions,
    Duplicate(RegionName),
    HomeNotListed(RegionName, Vec<RegionName>),
    ShareNotListed(RegionName),
    BadWeight(RegionName, i64),
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionError::BadName(name) => write!(
                f,
                "{name:?} is not a region name; use 1 to {MAX_REGION_LEN} characters from a-z, 0-9 and -, e.g. \"eu-west\""
            ),
            RegionError::BadOnCut(text) => write!(
                f,
                "{text:?} is not what a cut-off region does; use \"reserved\" (the default: decide from its share), \"closed\" (deny) or \"open\" (decide as a regional limit)"
            ),
            RegionError::NoRegions => f.write_str(
                "a global policy lists the regions it holds across, e.g. regions = [\"east\", \"west\"]",
            ),
            RegionError::Duplicate(name) => write!(f, "region {name:?} is listed twice"),
            RegionError::HomeNotListed(home, names) => {
                let names: Vec<&str> = names.iter().map(RegionName::as_str).collect();
                write!(
                    f,
                    "home {:?} is not one of the policy's regions {names:?}; add it to regions or choose one of them",
                    home.as_str()
                )
            }
            RegionError::ShareNotListed(name) => write!(
                f,
                "region {:?} has a share but is not in the policy's regions; add it to regions or remove its share",
                name.as_str()
            ),
            RegionError::BadWeight(name, weight) => write!(
                f,
                "the share of region {:?} must be a whole number from 1 to {MAX_SHARE_WEIGHT}, found {weight}",
                name.as_str()
            ),
        }
    }
}

impl std::error::Error for RegionError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(shares: &[(&str, i64)]) -> Result<Global, RegionError> {
        let regions = ["east".to_string(), "west".to_string(), "south".to_string()];
        let shares: Vec<(String, i64)> = shares.iter().map(|(r, w)| (r.to_string(), *w)).collect();
        Global::new("east", &regions, &shares, OnCut::Reserved)
    }

    #[test]
    fn region_names_are_lowercase_tokens() {
        for good in ["east", "eu-west-1", "a", &"x".repeat(32)] {
            assert!(RegionName::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "East",
            "eu_west",
            "eu.west",
            "eu west",
            "*",
            &"x".repeat(33),
        ] {
            let e = RegionName::new(bad).unwrap_err();
            assert!(e.to_string().contains("a-z, 0-9 and -"), "{bad}: {e}");
        }
    }

    #[test]
    fn shares_default_to_equal_and_never_sum_past_the_amount() {
        let g = global(&[]).unwrap();
        assert!(g.equal_weights());
        let sum: u64 = g.weights().iter().map(|(r, _)| g.reserved(r, 100)).sum();
        assert_eq!(sum, 99, "33 each, rounded down");
        let g = global(&[("east", 2)]).unwrap();
        let east = RegionName::new("east").unwrap();
        let west = RegionName::new("west").unwrap();
        assert_eq!(g.reserved(&east, 100), 50);
        assert_eq!(g.reserved(&west, 100), 25);
        assert_eq!(g.reserved(&RegionName::new("north").unwrap(), 100), 0);
        assert_eq!(g.reserved(&east, u64::MAX), u64::MAX / 2);
    }

    #[test]
    fn bad_global_fields_are_refused_with_the_reason() {
        let regions = ["east".to_string(), "west".to_string()];
        let e = Global::new("north", &regions, &[], OnCut::Reserved).unwrap_err();
        assert!(
            e.to_string().contains("not one of the policy's regions"),
            "{e}"
        );
        let e = Global::new("east", &[], &[], OnCut::Reserved).unwrap_err();
        assert_eq!(e, RegionError::NoRegions);
        let twice = ["east".to_string(), "east".to_string()];
        let e = Global::new("east", &twice, &[], OnCut::Reserved).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
        for weight in [0, -1, 1_000_001] {
            let e = global(&[("west", weight)]).unwrap_err();
            assert!(e.to_string().contains("whole number from 1"), "{e}");
        }
        let e = global(&[("north", 1)]).unwrap_err();
        assert!(e.to_string().contains("not in the policy's regions"), "{e}");
        let e = OnCut::parse("maybe").unwrap_err();
        assert!(e.to_string().contains("\"reserved\""), "{e}");
    }
}
