//! `sluice policy export` and what `sluice policy apply` takes back: the
//! live policies and overrides of the `sluice-policies` bucket as one TOML
//! file (docs/CONFIG.md, "Export and apply").
//!
//! Live policies and overrides exist only in the bucket, so backing them
//! up, moving them to another deployment or reviewing them in a pull
//! request needs a file; `sluice policy list` prints JSON, and `apply`
//! takes TOML. The file is a config file's `[policies.X]` tables (so
//! `apply` checks them as it checks any config file) and one
//! `[overrides.<policy>]` table per policy with overrides, each key's
//! limits under its key token (SPEC §1: one spelling per key, whatever
//! bytes the key holds).
//!
//! Each policy is written as [`PolicyTable::of`] its parsed policy, the
//! form `apply` writes, so exporting what `apply` wrote gives the same
//! file again.

use crate::config::{key_path as key, PolicyTable};
use crate::key::KeyToken;
use crate::policies::OverrideTable;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the bucket holds, as the file has it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Export {
    /// The region the policies were checked in (global policies need it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// By name.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicyTable>,
    /// By policy, then by key token.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, BTreeMap<String, OverrideTable>>,
}

/// The first lines of an exported file.
const HEADER: &str = "\
# The live policies and overrides of the sluice-policies bucket, written by
# `sluice policy export`; `sluice policy apply FILE` sets them again.
# Overrides are keyed by key token (the key percent-encoded, SPEC §1).
";

impl Export {
    /// The file's text: a config file's layout, each policy a table of
    /// `key = value` lines with its limits inline, as people write them.
    pub fn render(&self) -> Result<String, String> {
        let mut out = format!("{HEADER}\n");
        if let Some(region) = &self.region {
            out.push_str(&format!("region = {}\n\n", inline(region)?));
        }
        for (name, table) in &self.policies {
            out.push_str(&format!("[policies.{}]\n", key(name)));
            let fields = toml::Table::try_from(table)
                .map_err(|e| format!("cannot write policy {name:?}: {e}"))?;
            for (field, value) in fields {
                out.push_str(&format!("{field} = {value}\n"));
            }
            out.push('\n');
        }
        for (policy, keys) in &self.overrides {
            out.push_str(&format!("[overrides.{}]\n", key(policy)));
            for (token, table) in keys {
                out.push_str(&format!("{} = {}\n", key(token), inline(table)?));
            }
            out.push('\n');
        }
        Ok(out.trim_end().to_string() + "\n")
    }
}

/// `value` as an inline TOML value.
fn inline(value: &impl Serialize) -> Result<String, String> {
    toml::Value::try_from(value)
        .map(|v| v.to_string())
        .map_err(|e| format!("cannot write the export: {e}"))
}

/// A file given to `sluice policy apply`, as [`read`] splits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToApply {
    /// Everything but `[overrides]`, for the config parser, which checks
    /// it; the file's own text when it has no `[overrides]`.
    pub config_text: String,
    /// The names of the file's `[policies.X]` tables: only those are set
    /// (not the built-in `default` a config file without one gets).
    pub policies: Vec<String>,
    /// `(policy, key token, limits)` of each override.
    pub overrides: Vec<(String, String, OverrideTable)>,
}

/// Splits a file given to `sluice policy apply` ([`ToApply`]).
pub fn read(text: &str) -> Result<ToApply, String> {
    let mut table: toml::Table = match text.parse() {
        Ok(t) => t,
        // The config parser says what is wrong, with the line.
        Err(_) => {
            return Ok(ToApply {
                config_text: text.to_string(),
                policies: Vec::new(),
                overrides: Vec::new(),
            })
        }
    };
    let policies = match table.get("policies") {
        Some(toml::Value::Table(t)) => t.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let Some(overrides) = table.remove("overrides") else {
        return Ok(ToApply {
            config_text: text.to_string(),
            policies,
            overrides: Vec::new(),
        });
    };
    let by_policy: BTreeMap<String, BTreeMap<String, OverrideTable>> =
        overrides.try_into().map_err(|e| {
            format!(
                "[overrides]: {e}; write [overrides.<policy>] with \
                 \"<key token>\" = {{ limits = [{{ max = 10, per = \"1m\" }}] }}"
            )
        })?;
    let mut found = Vec::new();
    for (policy, keys) in by_policy {
        for (token, limits) in keys {
            KeyToken::parse(&token)
                .map_err(|e| format!("[overrides.{policy}] key {token:?} is no key token: {e}"))?;
            found.push((policy.clone(), token, limits));
        }
    }
    let config_text = toml::to_string(&table).map_err(|e| format!("cannot read the file: {e}"))?;
    Ok(ToApply {
        config_text,
        policies,
        overrides: found,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::limit::Algorithm;

    fn exported() -> Export {
        let config = Config::from_toml(
            r#"
[policies.monthly]
tz = "Europe/Paris"
alerts = [80, 100]
algorithm = "fixed_window"
limits = [ { max = 100000, per = "month" } ]

[policies.login]
algorithm = "sliding_log"
limits = [ { max = 10, per = "1m" }, { max = 500, per = "1h" } ]
"#,
            "test.toml",
        )
        .unwrap();
        let mut export = Export::default();
        for p in config.policies.values().filter(|p| p.name() != "default") {
            export
                .policies
                .insert(p.name().to_string(), PolicyTable::of(p));
        }
        let limits = |max| OverrideTable {
            limits: vec![crate::config::LimitTable {
                max,
                per: "1m".into(),
                burst: None,
            }],
        };
        export.overrides.insert(
            "login".into(),
            BTreeMap::from([
                ("bob%40x%2Eio".into(), limits(100)),
                ("mallory".into(), limits(0)),
            ]),
        );
        export
    }

    #[test]
    fn an_export_splits_into_a_config_and_its_overrides_and_renders_the_same_again() {
        let export = exported();
        let text = export.render().unwrap();
        assert!(text.starts_with("# The live policies"), "{text}");
        assert!(
            text.contains("[policies.login]\nalgorithm = \"sliding_log\"\nlimits = [{ max = 10, per = \"1m\" }, { max = 500, per = \"1h\" }]\n"),
            "{text}"
        );
        assert!(
            text.contains("[overrides.login]\n\"bob%40x%2Eio\" = { limits = [{ max = 100, per = \"1m\" }] }\nmallory = "),
            "{text}"
        );
        let to_apply = read(&text).unwrap();
        assert_eq!(to_apply.policies, ["login", "monthly"]);
        let config = Config::from_toml(&to_apply.config_text, "export.toml").unwrap();
        let mut again = Export::default();
        for name in &to_apply.policies {
            let p = config.policy(name).unwrap();
            again.policies.insert(name.clone(), PolicyTable::of(p));
        }
        for (policy, token, limits) in to_apply.overrides {
            again
                .overrides
                .entry(policy)
                .or_default()
                .insert(token, limits);
        }
        assert_eq!(again, export);
        assert_eq!(again.render().unwrap(), text);
        assert_eq!(
            config.policy("login").unwrap().algorithm(),
            Algorithm::SlidingLog
        );
    }

    #[test]
    fn a_config_file_without_overrides_is_left_as_it_is() {
        let text =
            "# mine\n[policies.x]\nalgorithm = \"gcra\"\nlimits = [ { max = 1, per = \"1s\" } ]\n";
        let to_apply = read(text).unwrap();
        assert_eq!(to_apply.config_text, text);
        assert_eq!(
            (to_apply.policies, to_apply.overrides),
            (vec!["x".to_string()], vec![])
        );
    }

    #[test]
    fn overrides_that_are_not_limits_or_not_key_tokens_are_refused_with_the_form() {
        let bad = "[overrides.login]\nbob = { max = 1 }\n";
        let e = read(bad).unwrap_err();
        assert!(e.contains("[overrides]") && e.contains("limits = ["), "{e}");
        let not_a_token =
            "[overrides.login]\n\"b b\" = { limits = [ { max = 1, per = \"1m\" } ] }\n";
        let e = read(not_a_token).unwrap_err();
        assert!(e.contains("no key token"), "{e}");
    }
}
