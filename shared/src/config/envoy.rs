//! `[envoy]`: how the gateway's Envoy rate limit service (SPEC §11)
//! turns a request's domain and descriptors into sluice keys and policies.
//!
//! envoyproxy/ratelimit keeps its limits in a YAML tree of descriptors per
//! domain, each node with its own `rate_limit`. sluice keeps limits in
//! policies, so a rule here only says which policy (and which key) a
//! descriptor counts under; the limits stay in `[policies]` or the policy
//! bucket, shared with every other way of asking. `docs/CONFIG.md` shows a
//! ratelimit YAML file and its translation.
//!
//! ```toml
//! [[envoy.rules]]
//! domain = "edge"
//! entries = [ { key = "remote_address" } ]       # any value
//! policy = "per_ip"
//!
//! [[envoy.rules]]
//! domain = "edge"
//! entries = [ { key = "remote_address", value = "10.0.0.1" } ]
//! unlimited = true                                # a value that is never limited
//!
//! [[envoy.rules]]
//! domain = "api"
//! entries = [ { key = "path", value = "/login*" }, { key = "user" } ]
//! policy = "login"
//! key = "login-{user}"                            # share the HTTP API's counter
//! ```
//!
//! A descriptor matches a rule when the domain is the same and its entries
//! have the rule's keys, in the rule's order and number, each with the
//! rule's value: any value when the rule gives none, a value starting with
//! what comes before a trailing `*`, or exactly the value. When several
//! rules match, the most specific wins, compared entry by entry from the
//! first: an exact value beats a prefix (a longer prefix beats a shorter
//! one), which beats any value. Two rules with the same domain and entries
//! are refused, so the choice never depends on the order of the file.
//!
//! The rules are checked here, once, at load: what the gateway does per
//! request is a lookup and, with a `key` template, a concatenation.

use super::defaults::MAX_POLICY_NAME_LEN;
use super::error::FieldError;
use crate::wire::is_valid_policy_name;
use serde::Deserialize;
use std::cmp::Ordering;

/// `[envoy]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnvoyTable {
    #[serde(default)]
    rules: Vec<RuleTable>,
}

/// One `[[envoy.rules]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleTable {
    domain: String,
    entries: Vec<EntryTable>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    levels: bool,
    #[serde(default)]
    unlimited: bool,
}

/// One `{ key = "...", value = "..." }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryTable {
    key: String,
    #[serde(default)]
    value: Option<String>,
}

/// The checked `[envoy]` table: its rules, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvoyConfig {
    rules: Vec<EnvoyRule>,
}

/// One rule: which descriptors it matches and what they count under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvoyRule {
    pub domain: String,
    pub entries: Vec<EntryMatch>,
    pub target: EnvoyTarget,
}

/// One entry of a rule: the descriptor entry's key, and what its value must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryMatch {
    pub key: String,
    pub value: ValueMatch,
}

/// What an entry's value must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueMatch {
    /// No `value` in the rule: every value.
    Any,
    /// `value = "abc*"`: values that start with `abc`.
    Prefix(String),
    /// `value = "abc"`: exactly `abc`.
    Exact(String),
}

/// What the descriptors a rule matches count under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvoyTarget {
    /// `policy = "P"`, and the key: the rule's template, or without one the
    /// default key of the descriptor (`<domain>|<key1>=<value1>|...`); with
    /// `levels = true`, the entries' values as a grouped key's tokens,
    /// outermost first (SPEC §17).
    Limit {
        policy: String,
        key: Option<KeyTemplate>,
        levels: bool,
    },
    /// `unlimited = true`: always OK, nothing counted (envoyproxy/ratelimit's
    /// `unlimited`).
    Unlimited,
}

/// A `key` template: text with `{entry}` placeholders, each replaced by the
/// value of the descriptor entry with that key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTemplate {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    /// The value of the rule's entry at this index.
    Entry(usize),
}

impl KeyTemplate {
    /// Parses `text` against the rule's entry keys; the reason when it
    /// names an entry the rule does not have, or has a stray brace.
    fn parse(text: &str, entries: &[EntryMatch]) -> Result<KeyTemplate, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let open = rest.find('{').unwrap_or(rest.len());
            let literal = &rest[..open];
            if literal.contains('}') {
                return Err(format!(
                    "{text:?} has a '}}' without its '{{'; placeholders are written {{entry-key}}"
                ));
            }
            if !literal.is_empty() {
                parts.push(Part::Text(literal.to_string()));
            }
            rest = &rest[open..];
            let Some(after) = rest.strip_prefix('{') else {
                break;
            };
            let close = after.find('}').ok_or_else(|| {
                format!(
                    "{text:?} has a '{{' without its '}}'; placeholders are written {{entry-key}}"
                )
            })?;
            let name = &after[..close];
            let index = entries.iter().position(|e| e.key == name).ok_or_else(|| {
                let keys: Vec<String> = entries.iter().map(|e| format!("{{{}}}", e.key)).collect();
                format!(
                    "{text:?} names {{{name}}}, which is not an entry of this rule; use {}",
                    keys.join(", ")
                )
            })?;
            parts.push(Part::Entry(index));
            rest = &after[close + 1..];
        }
        if parts.is_empty() {
            return Err("must not be empty; e.g. key = \"user-{user_id}\"".to_string());
        }
        Ok(KeyTemplate { parts })
    }

    /// The key for a descriptor whose entry values (in the rule's order)
    /// are `values`.
    pub fn render(&self, values: &[&str]) -> Vec<u8> {
        let mut key = Vec::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => key.extend_from_slice(t.as_bytes()),
                Part::Entry(i) => key.extend_from_slice(values.get(*i).unwrap_or(&"").as_bytes()),
            }
        }
        key
    }
}

impl ValueMatch {
    fn of(value: Option<String>) -> ValueMatch {
        match value {
            None => ValueMatch::Any,
            Some(v) => match v.strip_suffix('*') {
                Some(prefix) => ValueMatch::Prefix(prefix.to_string()),
                None => ValueMatch::Exact(v),
            },
        }
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            ValueMatch::Any => true,
            ValueMatch::Prefix(p) => value.starts_with(p.as_str()),
            ValueMatch::Exact(v) => value == v,
        }
    }

    /// Any < Prefix (shorter < longer) < Exact.
    fn specificity(&self) -> (u8, usize) {
        match self {
            ValueMatch::Any => (0, 0),
            ValueMatch::Prefix(p) => (1, p.len()),
            ValueMatch::Exact(_) => (2, 0),
        }
    }
}

impl EnvoyConfig {
    /// The rules, in file order.
    pub fn rules(&self) -> &[EnvoyRule] {
        &self.rules
    }

    /// The most specific rule for a descriptor of `domain` with these
    /// entries (key, value), if any matches.
    pub fn rule_for(&self, domain: &str, entries: &[(&str, &str)]) -> Option<&EnvoyRule> {
        self.rules
            .iter()
            .filter(|r| r.matches(domain, entries))
            .max_by(|a, b| a.cmp_specificity(b))
    }
}

impl EnvoyRule {
    fn matches(&self, domain: &str, entries: &[(&str, &str)]) -> bool {
        self.domain == domain
            && self.entries.len() == entries.len()
            && self
                .entries
                .iter()
                .zip(entries)
                .all(|(m, (key, value))| m.key == *key && m.value.matches(value))
    }

    fn cmp_specificity(&self, other: &EnvoyRule) -> Ordering {
        let a = self.entries.iter().map(|e| e.value.specificity());
        let b = other.entries.iter().map(|e| e.value.specificity());
        a.cmp(b)
    }
}

impl EnvoyTable {
    /// Checks every rule; field paths are relative to `[envoy]`.
    pub(super) fn check(self) -> Result<EnvoyConfig, FieldError> {
        let mut rules: Vec<EnvoyRule> = Vec::with_capacity(self.rules.len());
        for (i, table) in self.rules.into_iter().enumerate() {
            let rule = table.check().map_err(|e| e.below(&format!("rules[{i}]")))?;
            if let Some(j) = rules
                .iter()
                .position(|r| r.domain == rule.domain && r.entries == rule.entries)
            {
                return Err(FieldError::new(
                    format!("rules[{i}]"),
                    format!("matches the same descriptors as rules[{j}] (same domain and entries); keep one of them"),
                ));
            }
            rules.push(rule);
        }
        Ok(EnvoyConfig { rules })
    }
}

impl RuleTable {
    fn check(self) -> Result<EnvoyRule, FieldError> {
        if self.domain.is_empty() {
            return Err(FieldError::new(
                "domain",
                "must not be empty; use the domain Envoy sends (its rate limit filter's `domain`)",
            ));
        }
        if self.entries.is_empty() {
            return Err(FieldError::new(
                "entries",
                "must name at least one entry, e.g. entries = [ { key = \"remote_address\" } ]",
            ));
        }
        let mut entries = Vec::with_capacity(self.entries.len());
        for (i, e) in self.entries.into_iter().enumerate() {
            if e.key.is_empty() {
                return Err(FieldError::new(
                    format!("entries[{i}].key"),
                    "must not be empty; use the descriptor entry's key, e.g. \"remote_address\"",
                ));
            }
            entries.push(EntryMatch {
                key: e.key,
                value: ValueMatch::of(e.value),
            });
        }
        let target = match (self.policy, self.unlimited) {
            (Some(_), true) => {
                return Err(FieldError::new(
                    "unlimited",
                    "a rule has either a policy or unlimited = true, not both",
                ))
            }
            (None, true) => {
                if self.levels {
                    return Err(FieldError::new(
                        "levels",
                        "an unlimited rule counts nothing, so it has no levels; remove it",
                    ));
                }
                if self.key.is_some() {
                    return Err(FieldError::new(
                        "key",
                        "an unlimited rule counts nothing, so it takes no key; remove it",
                    ));
                }
                EnvoyTarget::Unlimited
            }
            (None, false) => {
                return Err(FieldError::new(
                    "policy",
                    "missing; name the policy these descriptors count under (e.g. policy = \"default\"), or set unlimited = true",
                ))
            }
            (Some(policy), false) => {
                if !is_valid_policy_name(&policy) {
                    return Err(FieldError::new(
                        "policy",
                        format!("{policy:?} is not a valid policy name; use 1 to {MAX_POLICY_NAME_LEN} characters from A-Z, a-z, 0-9, _ and -"),
                    ));
                }
                if self.levels && self.key.is_some() {
                    return Err(FieldError::new(
                        "levels",
                        "a rule with levels = true asks the entries' values as a grouped key (org, then user); it takes no key template: remove key or levels",
                    ));
                }
                if self.levels && !(2..=crate::key::MAX_TOKENS).contains(&entries.len()) {
                    return Err(FieldError::new(
                        "levels",
                        format!(
                            "levels = true takes 2 or 3 entries, one per level, outermost first (e.g. entries = [ {{ key = \"org\" }}, {{ key = \"user\" }} ]); this rule has {}",
                            entries.len()
                        ),
                    ));
                }
                let key = self
                    .key
                    .map(|k| KeyTemplate::parse(&k, &entries))
                    .transpose()
                    .map_err(|reason| FieldError::new("key", reason))?;
                EnvoyTarget::Limit {
                    policy,
                    key,
                    levels: self.levels,
                }
            }
        };
        Ok(EnvoyRule {
            domain: self.domain,
            entries,
            target,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn envoy(toml: &str) -> EnvoyConfig {
        Config::from_toml(toml, "t.toml")
            .unwrap()
            .envoy
            .expect("an [envoy] table")
    }

    fn error(toml: &str) -> String {
        Config::from_toml(toml, "t.toml").unwrap_err().to_string()
    }

    const RULES: &str = r#"
[[envoy.rules]]
domain = "edge"
entries = [ { key = "remote_address" } ]
policy = "per_ip"

[[envoy.rules]]
domain = "edge"
entries = [ { key = "remote_address", value = "10.*" } ]
policy = "internal"

[[envoy.rules]]
domain = "edge"
entries = [ { key = "remote_address", value = "10.0.0.1" } ]
unlimited = true

[[envoy.rules]]
domain = "api"
entries = [ { key = "path", value = "/login*" }, { key = "user" } ]
policy = "login"
key = "login-{user}"
"#;

    fn target_of(config: &EnvoyConfig, domain: &str, entries: &[(&str, &str)]) -> Option<String> {
        config.rule_for(domain, entries).map(|r| match &r.target {
            EnvoyTarget::Limit { policy, .. } => policy.clone(),
            EnvoyTarget::Unlimited => "unlimited".to_string(),
        })
    }

    #[test]
    fn the_most_specific_rule_wins() {
        let c = envoy(RULES);
        let ip = |v| target_of(&c, "edge", &[("remote_address", v)]);
        assert_eq!(ip("1.2.3.4").as_deref(), Some("per_ip"));
        assert_eq!(ip("10.9.9.9").as_deref(), Some("internal"));
        assert_eq!(ip("10.0.0.1").as_deref(), Some("unlimited"));
        assert_eq!(
            target_of(&c, "other", &[("remote_address", "1.2.3.4")]),
            None
        );
        assert_eq!(target_of(&c, "edge", &[("user", "bob")]), None);
        assert_eq!(
            target_of(&c, "edge", &[("remote_address", "1"), ("user", "bob")]),
            None,
            "a rule matches descriptors with exactly its entries"
        );
    }

    #[test]
    fn a_key_template_takes_entry_values() {
        let c = envoy(RULES);
        let rule = c
            .rule_for("api", &[("path", "/login/form"), ("user", "bob@x.io")])
            .unwrap();
        let EnvoyTarget::Limit { key: Some(t), .. } = &rule.target else {
            panic!("{rule:?}");
        };
        assert_eq!(t.render(&["/login/form", "bob@x.io"]), b"login-bob@x.io");
        assert!(c
            .rule_for("api", &[("path", "/logout"), ("user", "bob")])
            .is_none());
    }

    #[test]
    fn bad_rules_are_refused_with_their_field() {
        let rule = |body: &str| format!("[[envoy.rules]]\n{body}\n");
        for (body, field, words) in [
            (
                "domain = \"\"\nentries = [ { key = \"a\" } ]\npolicy = \"default\"",
                "envoy.rules[0].domain",
                "must not be empty",
            ),
            (
                "domain = \"d\"\nentries = []\npolicy = \"default\"",
                "envoy.rules[0].entries",
                "at least one entry",
            ),
            (
                "domain = \"d\"\nentries = [ { key = \"a\" } ]",
                "envoy.rules[0].policy",
                "unlimited = true",
            ),
            (
                "domain = \"d\"\nentries = [ { key = \"a\" } ]\npolicy = \"a.b\"",
                "envoy.rules[0].policy",
                "not a valid policy name",
            ),
            (
                "domain = \"d\"\nentries = [ { key = \"a\" } ]\npolicy = \"p\"\nunlimited = true",
                "envoy.rules[0].unlimited",
                "not both",
            ),
            (
                "domain = \"d\"\nentries = [ { key = \"a\" } ]\npolicy = \"p\"\nkey = \"x-{b}\"",
                "envoy.rules[0].key",
                "{b}, which is not an entry",
            ),
            (
                "domain = \"d\"\nentries = [ { key = \"a\" } ]\npolicy = \"p\"\nkey = \"x-{a\"",
                "envoy.rules[0].key",
                "without its '}'",
            ),
            (
                "domain = \"d\"\nentries = [ { key = \"a\", vaule = \"x\" } ]\npolicy = \"p\"",
                "envoy.rules[0].entries[0]",
                "did you mean \"value\"",
            ),
        ] {
            let e = error(&rule(body));
            assert!(e.contains(field) && e.contains(words), "{body}: {e}");
        }
        let twice = format!(
            "{}{}",
            rule("domain = \"d\"\nentries = [ { key = \"a\" } ]\npolicy = \"p\""),
            rule("domain = \"d\"\nentries = [ { key = \"a\" } ]\npolicy = \"q\"")
        );
        let e = error(&twice);
        assert!(
            e.contains("envoy.rules[1]") && e.contains("rules[0]"),
            "{e}"
        );
    }

    #[test]
    fn no_envoy_table_is_none_and_an_empty_one_has_no_rules() {
        assert_eq!(Config::from_toml("", "t.toml").unwrap().envoy, None);
        assert_eq!(envoy("[envoy]\n").rules().len(), 0);
    }

    #[test]
    fn levels_take_two_or_three_entries_and_no_key_template() {
        let rule = |entries: &str, extra: &str| {
            format!("[[envoy.rules]]\ndomain = \"api\"\nentries = [ {entries} ]\npolicy = \"user\"\nlevels = true\n{extra}")
        };
        let e = error(&rule("{ key = \"user\" }", ""));
        assert!(
            e.contains("envoy.rules[0].levels") && e.contains("2 or 3 entries"),
            "{e}"
        );
        let e = error(&rule(
            "{ key = \"org\" }, { key = \"user\" }",
            "key = \"{user}\"",
        ));
        assert!(e.contains("takes no key template"), "{e}");
        let ok = envoy(&rule(
            "{ key = \"org\" }, { key = \"team\" }, { key = \"user\" }",
            "",
        ));
        assert!(matches!(
            ok.rules()[0].target,
            EnvoyTarget::Limit { levels: true, .. }
        ));
    }
}
