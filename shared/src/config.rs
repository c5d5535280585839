//! The TOML config of SPEC §4, parsed and validated in one place.
//!
//! [`Config::from_toml`] is the only way a file becomes a [`Config`], and it
//! either returns a config in which every value is usable or one
//! [`ConfigError`] naming the file, the field path and the reason, e.g.
//!
//! ```text
//! sluice.toml: policies.login.limits[1].per: "1x" is not a duration; use an integer and a unit (ms, s, m, h, d), e.g. "10s"
//! ```
//!
//! It goes in two steps. serde reads the document into plain tables (see
//! `config/table.rs`): unknown fields are refused with a suggestion, so a
//! typo such as `partiton = 32` stops the program instead of being silently
//! ignored, and `serde_path_to_error` gives the field path of whatever does
//! not fit. Then the values are checked here (ranges, durations) and
//! policies are built by [`PolicyTable::to_policy`] with
//! [`Limit::new`](crate::policy::Limit::new) and [`Policy::new`], so the
//! rules for what makes a policy valid live in [`crate::policy`] and this
//! module only attaches field paths to them; a policy's calendar fields
//! (`tz`, `week_start`, `anchor_day`) are checked in `config/calendar.rs`.
//! [`PolicyTable`] is public because SPEC §7 stores one policy outside
//! the file, as the JSON form of one `[policies.X]` table.
//!
//! Without a file, [`Config::default`] applies: the built-in `default` policy
//! ([`Policy::builtin_default`], 15/s sliding window) and the defaults below.
//! A file that defines policies but no `default` gets the built-in one added.

mod alerts;
mod calendar;
mod defaults;
mod envoy;
mod error;
mod holding;
mod scope;
mod table;
mod usage;
mod values;

pub use crate::duration::{format_duration, parse_duration, DurationError};
use crate::policy::{Policy, DEFAULT_POLICY};
use crate::region::RegionName;
use crate::usage::UsageConfig;
/// One rule for policy names, shared with the wire protocol.
pub use crate::wire::is_valid_policy_name;
pub use alerts::{DEFAULT_ALERT_RETENTION, MIN_ALERT_RETENTION};
pub use defaults::{
    DEFAULT_LEASE_TTL, DEFAULT_MAX_KEYS, DEFAULT_PARTITIONS, DEFAULT_SNAPSHOT_INTERVAL,
    MAX_LEASE_TTL, MAX_PARTITIONS, MAX_POLICY_NAME_LEN, MIN_LEASE_TTL, MIN_SNAPSHOT_INTERVAL,
};
pub use envoy::{EntryMatch, EnvoyConfig, EnvoyRule, EnvoyTarget, KeyTemplate, ValueMatch};
pub(crate) use error::key_path;
pub use error::{ConfigError, FieldError};
pub use scope::check_region;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;
pub use table::{LimitTable, PolicyTable};

/// The environment variable naming the config file (SPEC §4).
pub const CONFIG_ENV: &str = "SLUICE_CONFIG";

/// What a partition owner persists besides periodic snapshots (SPEC §3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Counters are snapshotted every `snapshot_interval`; a crash loses the
    /// counts since the last snapshot.
    #[default]
    Snapshot,
    /// Counted requests since the last snapshot are also journaled and
    /// replayed by the next owner, so a crash loses no counts.
    Journal,
}

impl Durability {
    pub const ALL: [Durability; 2] = [Durability::Snapshot, Durability::Journal];

    pub const fn as_str(self) -> &'static str {
        match self {
            Durability::Snapshot => "snapshot",
            Durability::Journal => "journal",
        }
    }
}

/// What clients and the gateway do when no worker answers (SPEC §4, §6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// Allow the request.
    Open,
    /// Refuse it (the gateway answers 503).
    #[default]
    Closed,
    /// Decide with a limiter local to the caller.
    Local,
}

impl Fallback {
    pub const ALL: [Fallback; 3] = [Fallback::Open, Fallback::Closed, Fallback::Local];

    pub const fn as_str(self) -> &'static str {
        match self {
            Fallback::Open => "open",
            Fallback::Closed => "closed",
            Fallback::Local => "local",
        }
    }
}

/// What a worker in journal mode answers when JetStream did not store the
/// records of what it counted (no quorum, stream full, a timeout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum JournalFailure {
    /// 503 for the asks of that append: the caller asked for durability,
    /// and could not get it. The counts stay in memory (the limit errs on
    /// the side of denying) until the next snapshot.
    #[default]
    Unavailable,
    /// Answer as decided: the counts live only in memory until the
    /// partition's next snapshot.
    Answer,
}

impl JournalFailure {
    pub const ALL: [JournalFailure; 2] = [JournalFailure::Unavailable, JournalFailure::Answer];

    pub const fn as_str(self) -> &'static str {
        match self {
            JournalFailure::Unavailable => "unavailable",
            JournalFailure::Answer => "answer",
        }
    }
}

macro_rules! str_enum_impls {
    ($ty:ident, $what:literal) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            /// The reason, ready for [`ConfigError::reason`].
            type Err = String;
            fn from_str(s: &str) -> Result<$ty, String> {
                $ty::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| {
                        let names: Vec<String> = $ty::ALL
                            .iter()
                            .map(|v| format!("{:?}", v.as_str()))
                            .collect();
                        format!("{s:?} is not {}; use {}", $what, or_list(&names))
                    })
            }
        }
    };
}

str_enum_impls!(Durability, "a durability");
str_enum_impls!(Fallback, "a fallback");
str_enum_impls!(JournalFailure, "a journal_failure");

/// A validated sluice configuration.
///
/// Build it with [`Config::from_toml`], [`Config::load`] or
/// [`Config::resolve`]; [`Config::default`] is what runs without a file. The
/// fields are public for reading; code that sets them directly must keep to
/// the ranges documented on each (the parser enforces them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Number of partitions, 1 to [`MAX_PARTITIONS`]. Must equal the `N` in
    /// the NATS server's `partition(N,1)` mapping.
    pub partitions: u32,
    pub durability: Durability,
    /// At least [`MIN_SNAPSHOT_INTERVAL`].
    pub snapshot_interval: Duration,
    pub fallback: Fallback,
    /// How long a worker's partition lease lives without renewal: whole
    /// seconds from [`MIN_LEASE_TTL`] to [`MAX_LEASE_TTL`].
    pub lease_ttl: Duration,
    /// Journal mode: what to answer when an append fails.
    pub journal_failure: JournalFailure,
    /// The most live counters one worker holds, at least 1; past it, the
    /// least valuable ones are forgotten (docs/CONFIG.md, `max_keys`).
    pub max_keys: u64,
    /// The most ask ids one partition remembers (SPEC §16), at least 1;
    /// past it, those whose asks stop counting soonest are forgotten
    /// (docs/CONFIG.md, `max_ids`).
    pub max_ids: u64,
    /// How long the stream `SLUICE_ALERTS` keeps an alert (SPEC §14).
    pub alert_retention: Duration,
    /// By name; always contains [`DEFAULT_POLICY`].
    pub policies: BTreeMap<String, Policy>,
    /// `[envoy]`: the Envoy rate limit service's mapping (SPEC §11);
    /// `None` without the table (every descriptor then counts under
    /// `default`, keyed by its domain and entries).
    pub envoy: Option<EnvoyConfig>,
    /// `[usage]`: usage history (SPEC §9); on by default.
    pub usage: UsageConfig,
    /// The region this process belongs to (SPEC §12); `None`: a system
    /// of one region, as without regions.
    pub region: Option<RegionName>,
}

impl Default for Config {
    /// The configuration without a file: every default and the built-in
    /// `default` policy (15/s, sliding window).
    fn default() -> Config {
        let mut policies = BTreeMap::new();
        policies.insert(DEFAULT_POLICY.to_string(), Policy::builtin_default());
        Config {
            partitions: DEFAULT_PARTITIONS,
            durability: Durability::default(),
            snapshot_interval: DEFAULT_SNAPSHOT_INTERVAL,
            fallback: Fallback::default(),
            lease_ttl: DEFAULT_LEASE_TTL,
            journal_failure: JournalFailure::default(),
            max_keys: DEFAULT_MAX_KEYS,
            max_ids: crate::ask_ids::DEFAULT_MAX_IDS as u64,
            alert_retention: alerts::DEFAULT_ALERT_RETENTION,
            policies,
            envoy: None,
            usage: UsageConfig::default(),
            region: None,
        }
    }
}

impl Config {
    /// Parses and validates a config file's text. `file` is only used to name
    /// the file in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Config, ConfigError> {
        let document =
            toml::de::Deserializer::parse(text).map_err(|e| syntax_error(file, text, &e))?;
        let table: table::FileTable = serde_path_to_error::deserialize(document)
            .map_err(|e| error::field_error(e.path(), e.inner().message()).in_file(file))?;
        config_of(table).map_err(|e| e.in_file(file))
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(&file, "", format!("cannot read the config file: {e}"))
        })?;
        Config::from_toml(&text, &file)
    }

    /// The config a command runs with: the file given by `--config FILE` or
    /// `SLUICE_CONFIG` (the caller resolves which one and passes it), else
    /// [`Config::default`].
    pub fn resolve(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        match explicit {
            Some(path) => Config::load(path),
            None => Ok(Config::default()),
        }
    }

    /// The policy called `name`, if configured.
    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.policies.get(name)
    }

    /// The policy used when a request names none. Always present.
    pub fn default_policy(&self) -> &Policy {
        self.policies
            .get(DEFAULT_POLICY)
            .expect("a Config always has a default policy")
    }
}

/// Checks the values of a file's tables; the first problem found, in the
/// order of the fields in the file's documentation.
fn config_of(table: table::FileTable) -> Result<Config, FieldError> {
    let mut config = Config::default();
    if let Some(n) = table.partitions {
        let field = "partitions";
        config.partitions = match u32::try_from(n) {
            Ok(n) if (1..=MAX_PARTITIONS).contains(&n) => n,
            _ => {
                return Err(FieldError::new(
                    field,
                    format!(
                        "must be from 1 to {MAX_PARTITIONS}, found {n} (it must also match the NATS server's partition mapping)"
                    ),
                ))
            }
        };
    }
    if let Some(s) = table.durability {
        config.durability = s.parse().map_err(|e| FieldError::new("durability", e))?;
    }
    if let Some(text) = table.snapshot_interval {
        let field = "snapshot_interval";
        let d = duration(&text, field)?;
        if d < MIN_SNAPSHOT_INTERVAL {
            return Err(FieldError::new(
                field,
                format!(
                    "must be at least {}, found {text:?}",
                    format_duration(MIN_SNAPSHOT_INTERVAL)
                ),
            ));
        }
        config.snapshot_interval = d;
    }
    if let Some(s) = table.fallback {
        config.fallback = s.parse().map_err(|e| FieldError::new("fallback", e))?;
    }
    if let Some(text) = table.lease_ttl {
        config.lease_ttl = lease_ttl(&text)?;
    }
    if let Some(s) = table.journal_failure {
        config.journal_failure = s
            .parse()
            .map_err(|e| FieldError::new("journal_failure", e))?;
    }
    if let Some(n) = table.max_keys {
        config.max_keys = at_least_one(
            "max_keys",
            n,
            "the live counters one worker may hold, e.g. 2_000_000",
        )?;
    }
    if let Some(n) = table.max_ids {
        config.max_ids = at_least_one(
            "max_ids",
            n,
            "the ask ids one partition remembers, e.g. 8_192",
        )?;
    }
    if let Some(name) = table.region {
        config.region =
            Some(RegionName::new(&name).map_err(|e| FieldError::new("region", e.to_string()))?);
    }
    if let Some(text) = table.alert_retention {
        config.alert_retention = alerts::alert_retention(&text)?;
    }
    for (name, table) in table.policies {
        let below = |e: FieldError| e.below(&format!("policies.{}", key_path(&name)));
        let policy = table.to_policy(&name).map_err(below)?;
        scope::check_region(&policy, config.region.as_ref()).map_err(below)?;
        config.policies.insert(name, policy);
    }
    crate::group::check_chains(|n| config.policies.get(n), config.policies.values()).map_err(
        |(name, e)| {
            FieldError::new("parent", e.to_string()).below(&format!("policies.{}", key_path(&name)))
        },
    )?;
    if let Some(envoy) = table.envoy {
        config.envoy = Some(envoy.check().map_err(|e| e.below("envoy"))?);
    }
    if let Some(usage) = table.usage {
        config.usage = usage.check().map_err(|e| e.below("usage"))?;
    }
    Ok(config)
}

fn duration(text: &str, field: &str) -> Result<Duration, FieldError> {
    parse_duration(text).map_err(|e| FieldError::new(field, e.to_string()))
}

fn lease_ttl(text: &str) -> Result<Duration, FieldError> {
    let field = "lease_ttl";
    let d = duration(text, field)?;
    if d < MIN_LEASE_TTL || d > MAX_LEASE_TTL {
        return Err(FieldError::new(
            field,
            format!(
                "must be from {} to {}, found {text:?}",
                format_duration(MIN_LEASE_TTL),
                format_duration(MAX_LEASE_TTL)
            ),
        ));
    }
    if d.subsec_nanos() != 0 {
        return Err(FieldError::new(
            field,
            format!(
                "must be a whole number of seconds (JetStream TTLs have one-second granularity), found {text:?}"
            ),
        ));
    }
    Ok(d)
}

fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// A TOML syntax error as one line: its line and column, the parser's
/// message and the offending line's text.
fn syntax_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim().replace('\n', "; ");
    let Some(span) = e.span() else {
        return ConfigError::new(file, "", format!("invalid TOML: {message}"));
    };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line_no = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let source = text[line_start..line_end].trim_end_matches('\r').trim();
    let mut reason = format!("line {line_no}, column {column}: invalid TOML: {message}");
    if !source.is_empty() {
        reason.push_str(&format!(" (in `{source}`)"));
    }
    ConfigError::new(file, "", reason)
}

/// A bound of at least 1 (`max_keys`, `max_ids`); `what` says what it
/// bounds, with an example, for the error.
fn at_least_one(field: &'static str, n: i128, what: &str) -> Result<u64, FieldError> {
    match u64::try_from(n) {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(FieldError::new(
            field,
            format!("must be at least 1, found {n} ({what})"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_on_by_default_and_its_tiers_are_checked() {
        let config = Config::from_toml("", "t.toml").unwrap();
        assert!(config.usage.enabled);
        assert_eq!(config.usage.tiers.len(), 4);
        let off = Config::from_toml("[usage]\nenabled = false", "t.toml").unwrap();
        assert!(!off.usage.enabled);
        let short = Config::from_toml(
            "[usage]\ntiers = [{ step = \"1s\", keep = \"20s\" }, { step = \"2s\", keep = \"1m\" }]",
            "t.toml",
        )
        .unwrap();
        assert_eq!(short.usage.tiers[1].name(), "2s");
        let bad = Config::from_toml(
            "[usage]\ntiers = [{ step = \"1m\", keep = \"1d\" }, { step = \"90s\", keep = \"1d\" }]",
            "t.toml",
        )
        .unwrap_err();
        assert_eq!(bad.field, "usage.tiers");
        assert!(bad.reason.contains("whole multiple"), "{bad}");
        let typo = Config::from_toml("[usage]\nenable = false", "t.toml").unwrap_err();
        assert!(typo.to_string().contains("enable"), "{typo}");
        let bad_step = Config::from_toml(
            "[usage]\ntiers = [{ step = \"soon\", keep = \"1d\" }]",
            "t.toml",
        )
        .unwrap_err();
        assert_eq!(bad_step.field, "usage.tiers[0].step");
    }
}
