//! The policies in force (SPEC §7): the config file's, overlaid by the
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
//! config file. A policy's chain of parents (SPEC §17) is not checked
//! here: entries arrive one by one, a child may come before its parent,
//! and a parent may be removed later; an ask under a chain that does not
//! hold is refused with the reason ([`crate::group::resolve`]).

pub mod export;

use crate::config::{check_region, Config, LimitTable, PolicyTable};
use crate::policy::{Policy, DEFAULT_POLICY};
use crate::region::RegionName;
use crate::storage::PolicyKey;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// The file's policies, the bucket's, and the bucket's per-key overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policies {
    file: BTreeMap<String, Policy>,
    bucket: BTreeMap<String, Policy>,
    /// `override.<policy>.<key>` as written, by policy and key token. An
    /// invalid value is refused before it gets here, so every table here
    /// was valid against its policy when written.
    override_tables: BTreeMap<String, BTreeMap<String, OverrideTable>>,
    /// The same, resolved against the policies in force (one key when an
    /// override changes, one policy's when the policy does; empty when
    /// there are none, so a lookup costs nothing then).
    overrides: HashMap<String, HashMap<String, Override>>,
    /// The reader's region: a bucket policy that cannot hold here (a
    /// global one that does not list it) is refused as invalid.
    region: Option<RegionName>,
}

/// The value of `override.<policy>.<key>`: limits that replace the policy's
/// for one key (SPEC §7). A limit with `max = 0` blocks the key.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideTable {
    pub limits: Vec<LimitTable>,
}

/// A per-key override in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Override {
    /// The key's limits under the policy (same name and algorithm).
    Limits(Box<Policy>),
    /// `max = 0`: every ask is denied.
    Blocked,
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
        Policies {
            region: config.region.clone(),
            ..Policies::new(config.policies.clone())
        }
    }

    /// `file`'s policies alone (a client's, say).
    pub fn new(file: BTreeMap<String, Policy>) -> Policies {
        Policies {
            file,
            bucket: BTreeMap::new(),
            override_tables: BTreeMap::new(),
            overrides: HashMap::new(),
            region: None,
        }
    }

    /// The override in force for `key_token` under `policy`, if any.
    pub fn override_of(&self, policy: &str, key_token: &str) -> Option<&Override> {
        if self.overrides.is_empty() {
            return None;
        }
        self.overrides.get(policy)?.get(key_token)
    }

    /// The limits in force for `key_token` under `base`: its override's,
    /// if it has one (a blocked key keeps `base`'s, which its counter was
    /// counted under).
    pub fn in_force<'p>(&'p self, base: &'p Policy, key_token: &str) -> &'p Policy {
        self.limits_for(base, key_token).unwrap_or(base)
    }

    /// The limits an ask of `key_token` under `base` is decided by: its
    /// override's, or `base`'s; `None` when an override blocks the key
    /// (`max = 0`: every ask that takes is denied).
    pub fn limits_for<'p>(&'p self, base: &'p Policy, key_token: &str) -> Option<&'p Policy> {
        match self.override_of(base.name(), key_token) {
            Some(Override::Limits(limits)) => Some(limits.as_ref()),
            Some(Override::Blocked) => None,
            None => Some(base),
        }
    }

    /// The override tables of `policy`, by key token (for `sluice status`
    /// and the commands).
    pub fn override_tables(&self, policy: &str) -> impl Iterator<Item = (&String, &OverrideTable)> {
        self.override_tables.get(policy).into_iter().flatten()
    }

    /// Resolves the override tables of `policy` against the policy in
    /// force now; while it is not in force they wait, unresolved. An
    /// override that no longer fits (a new algorithm refuses its limits) is
    /// not in force.
    fn resolve_policy(&mut self, policy: &str) {
        let Some(base) = self.get(policy) else {
            self.overrides.remove(policy);
            return;
        };
        let resolved: HashMap<String, Override> = self
            .override_tables(policy)
            .filter_map(|(token, table)| Some((token.clone(), resolve(base, table).ok()?)))
            .collect();
        if resolved.is_empty() {
            self.overrides.remove(policy);
        } else {
            self.overrides.insert(policy.to_string(), resolved);
        }
    }

    /// The policy called `name` in force.
    pub fn get(&self, name: &str) -> Option<&Policy> {
        self.bucket.get(name).or_else(|| self.file.get(name))
    }

    /// Whether the policy called `name` in force comes from the policy
    /// bucket (a live policy) rather than the config file.
    pub fn from_bucket(&self, name: &str) -> bool {
        self.bucket.contains_key(name)
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
            PolicyKey::Override { policy, key_token } => {
                match value {
                    None => {
                        if let Some(keys) = self.override_tables.get_mut(&policy) {
                            keys.remove(&key_token);
                        }
                        if let Some(keys) = self.overrides.get_mut(&policy) {
                            keys.remove(&key_token);
                            if keys.is_empty() {
                                self.overrides.remove(&policy);
                            }
                        }
                    }
                    Some(json) => {
                        let table = parse_override(&policy, json)?;
                        let resolved = match self.get(&policy) {
                            Some(base) => Some(resolve(base, &table)?),
                            None => None,
                        };
                        if let Some(o) = resolved {
                            self.overrides
                                .entry(policy.clone())
                                .or_default()
                                .insert(key_token.clone(), o);
                        }
                        self.override_tables
                            .entry(policy)
                            .or_default()
                            .insert(key_token, table);
                    }
                }
                return Ok(Applied::Override);
            }
            PolicyKey::Policy(name) => name,
        };
        match value {
            None => {
                self.bucket.remove(&name);
            }
            Some(json) => {
                let policy = parse(&name, json, self.region.as_ref())?;
                self.bucket.insert(name.clone(), policy);
            }
        }
        self.resolve_policy(&name);
        Ok(Applied::Policy(name))
    }
}

/// A bucket value: the JSON form of one `[policies.X]` table, checked as
/// the config file's are, against the region of whoever reads it.
pub fn parse(name: &str, json: &[u8], region: Option<&RegionName>) -> Result<Policy, String> {
    PolicyTable::from_json(json)
        .and_then(|table| table.to_policy(name))
        .and_then(|policy| check_region(&policy, region).map(|()| policy))
        .map_err(|e| {
            if e.field.is_empty() {
                format!("policy {name:?}: {}", e.reason)
            } else {
                format!("policy {name:?}: {}: {}", e.field, e.reason)
            }
        })
}

/// An override's value: `{"limits":[...]}`.
pub fn parse_override(policy: &str, json: &[u8]) -> Result<OverrideTable, String> {
    let table: OverrideTable = serde_json::from_slice(json)
        .map_err(|e| format!("override of policy {policy:?}: {e}; write {{\"limits\":[{{\"max\":10,\"per\":\"1m\"}}]}}"))?;
    if table.limits.is_empty() {
        return Err(format!(
            "override of policy {policy:?}: give at least one limit"
        ));
    }
    Ok(table)
}

/// An override table against its policy: blocked if any limit is 0, else
/// the policy's algorithm with the table's limits.
pub fn resolve(base: &Policy, table: &OverrideTable) -> Result<Override, String> {
    if table.limits.iter().any(|l| l.max == 0) {
        return Ok(Override::Blocked);
    }
    PolicyTable::of(base)
        .with_limits(table.limits.clone())
        .to_policy(base.name())
        .map(|policy| Override::Limits(Box::new(policy)))
        .map_err(|e| {
            format!(
                "override of policy {:?}: {}: {}",
                base.name(),
                e.field,
                e.reason
            )
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
        assert!(p.apply("override.login.bob", Some(b"{}")).is_err());
    }

    #[test]
    fn an_override_replaces_one_keys_limits_and_zero_blocks_it() {
        let mut p = Policies::from_config(&Config::default());
        assert_eq!(p.override_of("default", "bob"), None);
        p.apply(
            "override.default.bob",
            Some(br#"{"limits":[{"max":100,"per":"1m"}]}"#),
        )
        .unwrap();
        let Some(Override::Limits(bob)) = p.override_of("default", "bob") else {
            panic!("no override for bob");
        };
        assert_eq!((bob.name(), bob.limits()[0].max()), ("default", 100));
        assert_eq!(bob.algorithm(), p.get("default").unwrap().algorithm());
        assert_eq!(p.override_of("default", "alice"), None);
        // Written with `=` for `%` in the key, looked up by the token.
        p.apply(
            "override.default.x=40y",
            Some(br#"{"limits":[{"max":0,"per":"1m"}]}"#),
        )
        .unwrap();
        assert_eq!(p.override_of("default", "x%40y"), Some(&Override::Blocked));
        let base = p.get("default").unwrap();
        let limit_of = |token: &str| p.limits_for(base, token).map(|l| l.limits()[0].max());
        assert_eq!(
            (limit_of("bob"), limit_of("alice"), limit_of("x%40y")),
            (Some(100), Some(base.limits()[0].max()), None),
            "the override's, the base's, blocked"
        );
        assert_eq!(p.in_force(base, "x%40y").name(), "default");
        // An override of a policy not in force waits for it.
        p.apply(
            "override.later.k",
            Some(br#"{"limits":[{"max":1,"per":"1s"}]}"#),
        )
        .unwrap();
        assert_eq!(p.override_of("later", "k"), None);
        p.apply(
            "later",
            Some(br#"{"algorithm":"gcra","limits":[{"max":5,"per":"1s"}]}"#),
        )
        .unwrap();
        assert!(matches!(
            p.override_of("later", "k"),
            Some(Override::Limits(_))
        ));
        p.apply("override.default.bob", None).unwrap();
        assert_eq!(p.override_of("default", "bob"), None);
        assert!(p
            .apply("override.default.bob", Some(br#"{"limits":[]}"#))
            .is_err());
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
