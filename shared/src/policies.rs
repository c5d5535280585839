//! The policies in force (CONTRACT §7): the config file's, overlaid by the
//! JetStream KV bucket `sluice-policies`, which wins where both name a
//! policy.
//!
//! The bucket is not seeded with the file's policies: the overlay gives the
//! same answer ("the file is what a fresh system starts with, the bucket
//! wins") without a write that two workers starting together could race on,
//! and removing a policy from the bucket brings the file's back, if any.
//! `default` always exists: the file (or the built-in one) has it.
//!
//! Every reader of the bucket (workers, gateways) applies its entries here,
//! so a value that is not valid is refused the same way everywhere: the
//! previous version stays in force and the reason names the field, as in a
//! config file.

use crate::config::{Config, PolicyTable};
use crate::policy::{Policy, DEFAULT_POLICY};
use crate::storage::PolicyKey;
use std::collections::BTreeMap;

/// The file's policies and the bucket's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policies {
    file: BTreeMap<String, Policy>,
    bucket: BTreeMap<String, Policy>,
}

/// What one bucket entry did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// A policy is set (or back to the file's, or gone).
    Policy(String),
    /// Not a policy: a per-key override, for the readers that keep them.
    Override,
}

impl Policies {
    /// The file's policies alone (before the bucket is read).
    pub fn from_config(config: &Config) -> Policies {
        Policies::new(config.policies.clone())
    }

    /// `file`'s policies alone (a client's, say).
    pub fn new(file: BTreeMap<String, Policy>) -> Policies {
        Policies {
            file,
            bucket: BTreeMap::new(),
        }
    }

    /// The policy called `name` in force.
    pub fn get(&self, name: &str) -> Option<&Policy> {
        self.bucket.get(name).or_else(|| self.file.get(name))
    }

    /// Every policy in force, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Policy> {
        let from_file = self
            .file
            .iter()
            .filter(|(name, _)| !self.bucket.contains_key(*name))
            .map(|(_, p)| p);
        let mut all: Vec<&Policy> = from_file.chain(self.bucket.values()).collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all.into_iter()
    }

    /// Applies the bucket entry `key`: its value, or `None` when it was
    /// deleted. An invalid value changes nothing and says why.
    pub fn apply(&mut self, key: &str, value: Option<&[u8]>) -> Result<Applied, String> {
        let Some(parsed) = PolicyKey::parse(key) else {
            return Err(format!(
                "{key:?} is neither a policy name nor override.<policy>.<key>"
            ));
        };
        let name = match parsed {
            PolicyKey::Override { .. } => return Ok(Applied::Override),
            PolicyKey::Policy(name) => name,
        };
        match value {
            None => {
                self.bucket.remove(&name);
            }
            Some(json) => {
                let policy = parse(&name, json)?;
                self.bucket.insert(name.clone(), policy);
            }
        }
        Ok(Applied::Policy(name))
    }
}

/// A bucket value: the JSON form of one `[policies.X]` table, checked as
/// the config file's are.
pub fn parse(name: &str, json: &[u8]) -> Result<Policy, String> {
    PolicyTable::from_json(json)
        .and_then(|table| table.to_policy(name))
        .map_err(|e| {
            if e.field.is_empty() {
                format!("policy {name:?}: {}", e.reason)
            } else {
                format!("policy {name:?}: {}: {}", e.field, e.reason)
            }
        })
}

/// Why `name` may not be removed from the bucket (only `default`, which
/// every request without a policy uses, and which the file always has).
pub fn removable(name: &str) -> Result<(), String> {
    if name == DEFAULT_POLICY {
        return Err(format!(
            "{DEFAULT_POLICY:?} cannot be removed: requests that name no policy use it; set it to other limits instead"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_wins_and_a_removal_brings_the_file_back() {
        let mut p = Policies::from_config(&Config::default());
        assert_eq!(p.get("default").unwrap().limits()[0].max(), 15);
        let json = br#"{"algorithm":"fixed_window","limits":[{"max":3,"per":"1m"}]}"#;
        assert_eq!(
            p.apply("default", Some(json)),
            Ok(Applied::Policy("default".into()))
        );
        assert_eq!(p.get("default").unwrap().limits()[0].max(), 3);
        p.apply("login", Some(json)).unwrap();
        assert_eq!(
            p.iter().map(|p| p.name()).collect::<Vec<_>>(),
            ["default", "login"]
        );
        p.apply("default", None).unwrap();
        assert_eq!(p.get("default").unwrap().limits()[0].max(), 15);
        p.apply("login", None).unwrap();
        assert!(p.get("login").is_none());
        assert_eq!(
            p.apply("override.login.bob", Some(b"{}")),
            Ok(Applied::Override)
        );
    }

    #[test]
    fn an_invalid_value_changes_nothing_and_says_why() {
        let mut p = Policies::from_config(&Config::default());
        let before = p.clone();
        let e = p.apply("login", Some(b"{not json")).unwrap_err();
        assert!(e.contains("invalid JSON"), "{e}");
        let e = p
            .apply(
                "login",
                Some(br#"{"algorithm":"fixed_window","limits":[{"max":3,"per":"1x"}]}"#),
            )
            .unwrap_err();
        assert!(e.contains("limits[0].per"), "{e}");
        let e = p
            .apply("login", Some(br#"{"algorithm":"nope","limits":[]}"#))
            .unwrap_err();
        assert!(e.contains("login"), "{e}");
        assert_eq!(p, before);
        assert!(removable("default").is_err());
        assert!(removable("login").is_ok());
    }
}
