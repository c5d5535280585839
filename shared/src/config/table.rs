//! The tables of a config file as serde structs, before their values are
//! checked: the file's top level ([`FileTable`]), one `[policies.X]` table
//! ([`PolicyTable`]) and one limit ([`LimitTable`]).
//!
//! Deserializing checks only the shape of the document: no unknown fields
//! (`deny_unknown_fields`, so a typo such as `partiton = 32` stops the
//! program instead of being silently ignored), no missing ones, and the kind
//! of each value. `serde_path_to_error` names the field where that fails
//! (`policies.login.limits[1].per`), and [`field_error`] turns serde's own
//! sentences (unknown or missing fields) into ours, with a suggestion for a
//! near miss. A value of the wrong kind is refused by the field's own
//! `deserialize_with` function (`config/values.rs`), which says what was
//! expected and what was found, as the user wrote it (`found a string ("64")`).
//!
//! What the values mean (ranges, durations, policy names, the rules of
//! [`crate::policy`]) is checked afterwards, in `config.rs` and
//! [`PolicyTable::to_policy`], which attach field paths to the reasons.
//!
//! [`PolicyTable`] is public and `Serialize` because a policy also lives
//! outside the file: SPEC §7 stores one in a KV bucket as the JSON form
//! of one `[policies.X]` table ([`PolicyTable::from_json`]).

use super::defaults::MAX_POLICY_NAME_LEN;
use super::error::{field_error, key_path, FieldError};
use super::values::{
    algorithm_names, count, duration_text, expected, found_in_map, max_ids, max_keys, mode,
    partitions, some_algorithm, some_count, some_duration_text, some_string, visit_scalars, Found,
    TOML_DATETIME_KEY,
};
use crate::calendar::{Period, Zone, DEFAULT_ANCHOR_DAY, DEFAULT_WEEK_START, DEFAULT_ZONE};
use crate::duration::parse_duration;
use crate::policy::{Algorithm, Limit, Mode, Policy, PolicyError};
use crate::wire::is_valid_policy_name;
use serde::de::value::MapAccessDeserializer;
use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::marker::PhantomData;

/// The top level of a config file. Field order is the order of the
/// "expected one of" list in unknown-field errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTable {
    #[serde(default, deserialize_with = "partitions")]
    pub(super) partitions: Option<i128>,
    #[serde(default, deserialize_with = "some_string")]
    pub(super) durability: Option<String>,
    #[serde(default, deserialize_with = "some_duration_text")]
    pub(super) snapshot_interval: Option<String>,
    #[serde(default, deserialize_with = "some_string")]
    pub(super) fallback: Option<String>,
    #[serde(default, deserialize_with = "some_duration_text")]
    pub(super) lease_ttl: Option<String>,
    #[serde(default, deserialize_with = "some_string")]
    pub(super) journal_failure: Option<String>,
    #[serde(default, deserialize_with = "max_keys")]
    pub(super) max_keys: Option<i128>,
    #[serde(default, deserialize_with = "max_ids")]
    pub(super) max_ids: Option<i128>,
    #[serde(default, deserialize_with = "some_string")]
    pub(super) region: Option<String>,
    #[serde(default, deserialize_with = "some_duration_text")]
    pub(super) alert_retention: Option<String>,
    /// By name, in name order.
    #[serde(default, deserialize_with = "policies")]
    pub(super) policies: Vec<(String, PolicyTable)>,
    /// `[envoy]`, checked by `config/envoy.rs`.
    #[serde(default)]
    pub(super) envoy: Option<super::envoy::EnvoyTable>,
    /// `[usage]`, checked by `config/usage.rs`.
    #[serde(default)]
    pub(super) usage: Option<super::usage::UsageTable>,
}

/// One `[policies.X]` table, as written: in the config file, or as JSON in
/// the KV bucket of SPEC §7 (`{"algorithm":"sliding_log","limits":
/// [{"max":10,"per":"1m"}]}`). [`PolicyTable::to_policy`] checks it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyTable {
    /// Needed with limits; a policy of only `concurrency` has none.
    #[serde(
        default,
        deserialize_with = "some_algorithm",
        skip_serializing_if = "Option::is_none"
    )]
    pub algorithm: Option<Algorithm>,
    /// All must hold.
    #[serde(
        default,
        deserialize_with = "limits",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub limits: Vec<LimitTable>,
    /// Owners grant clients slices of a hot key's budget to decide from
    /// locally (`sluice_core::budget`); fixed_window, token_bucket and gcra
    /// only.
    #[serde(default, skip_serializing_if = "is_false")]
    pub local_budget: bool,
    /// `"enforce"` (the default) or `"shadow"`: decided and counted alike,
    /// a shadow policy's denials are answered allowed (SPEC §14).
    #[serde(default, deserialize_with = "mode", skip_serializing_if = "is_enforce")]
    pub mode: Mode,
    /// The longest an ask may wait for a later start instead of being
    /// denied (SPEC §18, `sluice_core::wait`): a duration up to 60 s,
    /// token_bucket and gcra only; absent, asks never wait.
    #[serde(
        default,
        deserialize_with = "some_duration_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_wait: Option<String>,
    /// How long a denial blocks the key (SPEC §18,
    /// `sluice_core::penalty`): a duration up to 24 h; absent, no penalty.
    #[serde(
        default,
        deserialize_with = "some_duration_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub block_for: Option<String>,
    /// The calendar of the limits whose `per` is `"day"`, `"week"` or
    /// `"month"` (SPEC §14): an IANA zone (default UTC), the first day
    /// of a week (default monday), the day months start on (default 1).
    /// Each is refused where no limit uses it.
    #[serde(
        default,
        deserialize_with = "some_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub tz: Option<String>,
    #[serde(
        default,
        deserialize_with = "some_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub week_start: Option<String>,
    #[serde(
        default,
        deserialize_with = "some_count",
        skip_serializing_if = "Option::is_none"
    )]
    pub anchor_day: Option<u64>,
    /// Holds (SPEC §13): at most this many of a key live at once, a
    /// hold's ttl when its reserve names none, and what an unsettled
    /// hold's end does (`"charge"` or `"release"`); checked in
    /// `config/holding.rs`.
    #[serde(
        default,
        deserialize_with = "some_count",
        skip_serializing_if = "Option::is_none"
    )]
    pub concurrency: Option<u64>,
    #[serde(
        default,
        deserialize_with = "some_duration_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub hold_ttl: Option<String>,
    #[serde(
        default,
        deserialize_with = "some_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub on_expiry: Option<String>,
    /// Regions (SPEC §12): `"region"` (the default) or `"global"`; a
    /// global policy's `home`, `regions`, `region_shares` (weights by
    /// region) and `on_cut`; checked in `config/scope.rs`.
    #[serde(
        default,
        deserialize_with = "some_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub scope: Option<String>,
    #[serde(
        default,
        deserialize_with = "some_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub home: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region_shares: Option<std::collections::BTreeMap<String, i64>>,
    #[serde(
        default,
        deserialize_with = "some_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub on_cut: Option<String>,
    /// Thresholds in percent of each limit's `max` (1 to 1000) whose
    /// crossing is announced once per window (SPEC §14); checked in
    /// `config/alerts.rs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<i64>,
    /// The policy of the level above (SPEC §17): an ask under this policy
    /// for a grouped key (`org.key`, `org.team.key`) is decided against
    /// the parent too, on the key one token shorter; checked against the
    /// other policies by `sluice_core::group`.
    #[serde(
        default,
        deserialize_with = "some_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub parent: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_enforce(m: &Mode) -> bool {
    *m == Mode::Enforce
}

/// One limit: `max` units per `per` (a duration as written, e.g. `"1m"`);
/// for token bucket and GCRA, a bucket of `burst` units (default `max`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitTable {
    #[serde(deserialize_with = "count")]
    pub max: u64,
    #[serde(deserialize_with = "duration_text")]
    pub per: String,
    #[serde(
        default,
        deserialize_with = "some_count",
        skip_serializing_if = "Option::is_none"
    )]
    pub burst: Option<u64>,
}

const LIMITS_EXAMPLE: &str = "e.g. limits = [ { max = 10, per = \"1m\" } ]";

impl PolicyTable {
    /// A table with these limits and every other field at its default
    /// (what a table that names only `algorithm` and `limits` reads as).
    pub fn new(algorithm: Algorithm, limits: Vec<LimitTable>) -> PolicyTable {
        PolicyTable {
            algorithm: Some(algorithm),
            limits,
            ..PolicyTable::empty()
        }
    }

    /// A table of nothing: no algorithm, no limits, every field at its
    /// default (a policy of only `concurrency` starts from it).
    pub fn empty() -> PolicyTable {
        PolicyTable {
            algorithm: None,
            limits: Vec::new(),
            local_budget: false,
            mode: Mode::Enforce,
            max_wait: None,
            block_for: None,
            tz: None,
            week_start: None,
            anchor_day: None,
            concurrency: None,
            hold_ttl: None,
            on_expiry: None,
            scope: None,
            home: None,
            regions: None,
            region_shares: None,
            on_cut: None,
            alerts: Vec::new(),
            parent: None,
        }
    }

    /// The table a policy is written as (what `sluice policy get` prints and
    /// `sluice policy apply` stores): a `burst` only where it differs from
    /// `max`.
    pub fn of(policy: &Policy) -> PolicyTable {
        let zone = policy
            .limits()
            .iter()
            .find_map(|l| l.calendar())
            .map(|c| c.zone());
        let table = PolicyTable {
            algorithm: (!policy.limits().is_empty()).then(|| policy.algorithm()),
            limits: policy
                .limits()
                .iter()
                .map(|l| LimitTable {
                    max: l.max(),
                    per: l.per_text(),
                    burst: (policy.algorithm().has_burst() && l.burst() != l.max())
                        .then_some(l.burst()),
                })
                .collect(),
            local_budget: policy.local_budget(),
            mode: policy.mode(),
            max_wait: (policy.max_wait() > crate::time::Nanos::ZERO)
                .then(|| crate::duration::format_duration(policy.max_wait().into())),
            block_for: (policy.block_for() > crate::time::Nanos::ZERO)
                .then(|| crate::duration::format_duration(policy.block_for().into())),
            // The calendar's settings where they differ from the defaults.
            tz: zone
                .map(|z| z.name().to_string())
                .filter(|n| n != DEFAULT_ZONE),
            week_start: zone
                .map(|z| z.week_start().to_string())
                .filter(|d| d != DEFAULT_WEEK_START),
            anchor_day: zone
                .map(|z| u64::from(z.anchor_day()))
                .filter(|&d| d != u64::from(DEFAULT_ANCHOR_DAY)),
            alerts: policy
                .alerts()
                .percents()
                .iter()
                .map(|&p| i64::from(p))
                .collect(),
            parent: policy.parent().map(str::to_string),
            ..PolicyTable::empty()
        };
        table.with_holding_of(policy).with_scope_of(policy)
    }

    /// Reads the JSON form of one table (SPEC §7). Fields are refused as
    /// in the config file; their paths are relative to the table
    /// (`limits[0].per`).
    ///
    /// ```
    /// use sluice_core::config::PolicyTable;
    ///
    /// let json = br#"{"algorithm":"sliding_log","limits":[{"max":10,"per":"1m"}]}"#;
    /// let policy = PolicyTable::from_json(json).unwrap().to_policy("login").unwrap();
    /// assert_eq!(policy.limits()[0].max(), 10);
    ///
    /// let e = PolicyTable::from_json(br#"{"algorithm":"gcra","limits":[{"max":1,"pre":"1s"}]}"#)
    ///     .unwrap_err();
    /// assert_eq!(e.field, "limits[0].pre");
    /// ```
    pub fn from_json(json: &[u8]) -> Result<PolicyTable, FieldError> {
        // Through a `Value`, so that serde_json's errors carry no "at line 1
        // column 12" (the field path says where).
        let value: serde_json::Value = serde_json::from_slice(json)
            .map_err(|e| FieldError::new("", format!("invalid JSON: {e}")))?;
        let what = r#"a policy table like {"algorithm":"gcra","limits":[{"max":10,"per":"1m"}]}"#;
        let mut track = serde_path_to_error::Track::new();
        TableOf::<PolicyTable>::new(what.to_string())
            .deserialize(serde_path_to_error::Deserializer::new(value, &mut track))
            .map_err(|e| field_error(&track.path(), &e.to_string()))
    }

    /// Checks the table's values and builds the policy called `name`. Field
    /// paths are relative to the table (`limits[1].per`; empty for the name).
    pub fn to_policy(&self, name: &str) -> Result<Policy, FieldError> {
        check_name(name).map_err(|reason| FieldError::new("", reason))?;
        let holding = self.holding()?;
        let scope = self.scope()?;
        let alerts = self.thresholds()?;
        if self.limits.is_empty() && holding.concurrency.is_some() {
            return self
                .slots_only(name, holding)?
                .with_scope(scope)
                .map_err(|e| FieldError::new("scope", e.to_string()))?
                .with_parent(self.parent()?)
                .map_err(|e| FieldError::new("parent", e.to_string()));
        }
        let Some(algorithm) = self.algorithm else {
            return Err(FieldError::new(
                "algorithm",
                format!(
                    "missing; use one of {}, with limits (or give only `concurrency`: a policy of concurrency slots)",
                    algorithm_names()
                ),
            ));
        };
        if self.limits.is_empty() {
            return Err(FieldError::new(
                "limits",
                format!("missing; {}, {LIMITS_EXAMPLE}", PolicyError::NoLimits),
            ));
        }
        let zone = self.zone()?;
        let limits = self
            .limits
            .iter()
            .enumerate()
            .map(|(i, l)| l.to_limit(name, algorithm, &zone, &format!("limits[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        // Each limit was checked against the algorithm above; what is left
        // for Policy::new to refuse concerns the whole list.
        Policy::new(name, algorithm, limits)
            .map_err(|e| FieldError::new("limits", e.to_string()))?
            .with_local_budget(self.local_budget)
            .map_err(|e| FieldError::new("local_budget", e.to_string()))?
            .with_mode(self.mode)
            .with_holding(holding)
            .map_err(|e| FieldError::new("", e.to_string()))?
            .with_scope(scope)
            .map_err(|e| FieldError::new("scope", e.to_string()))?
            .with_max_wait(self.max_wait()?)
            .map_err(|e| FieldError::new("max_wait", e.to_string()))?
            .with_block_for(self.duration("block_for", &self.block_for, "block_for = \"5m\"")?)
            .map_err(|e| FieldError::new("block_for", e.to_string()))?
            .with_alerts(alerts)
            .map_err(|e| FieldError::new("alerts", e.to_string()))?
            .with_parent(self.parent()?)
            .map_err(|e| FieldError::new("parent", e.to_string()))
    }
}

impl PolicyTable {
    /// `parent`, a policy name if given.
    fn parent(&self) -> Result<Option<&str>, FieldError> {
        let Some(parent) = self.parent.as_deref() else {
            return Ok(None);
        };
        check_name(parent).map_err(|reason| FieldError::new("parent", reason))?;
        Ok(Some(parent))
    }

    /// `max_wait` as a duration (absent: zero, asks never wait).
    fn max_wait(&self) -> Result<std::time::Duration, FieldError> {
        self.duration("max_wait", &self.max_wait, "max_wait = \"2s\"")
    }

    /// An optional duration `field` (absent: zero); `example` says how
    /// one is written.
    fn duration(
        &self,
        field: &str,
        text: &Option<String>,
        example: &str,
    ) -> Result<std::time::Duration, FieldError> {
        match text {
            None => Ok(std::time::Duration::ZERO),
            Some(text) => parse_duration(text)
                .map_err(|e| FieldError::new(field, format!("{e}; e.g. {example}"))),
        }
    }
}

/// The rule for policy names ([`is_valid_policy_name`]), as a reason.
fn check_name(name: &str) -> Result<(), String> {
    if is_valid_policy_name(name) {
        return Ok(());
    }
    Err(format!(
        "{name:?} is not a valid policy name; use 1 to {MAX_POLICY_NAME_LEN} characters from A-Z, a-z, 0-9, _ and -"
    ))
}

impl LimitTable {
    /// `path` is this limit's (`limits[1]`), for the field of an error.
    /// A calendar period's windows are `zone`'s.
    fn to_limit(
        &self,
        name: &str,
        algorithm: Algorithm,
        zone: &Zone,
        path: &str,
    ) -> Result<Limit, FieldError> {
        let field = |f: &str| format!("{path}.{f}");
        let period = Period::parse(&self.per);
        let per = match period {
            Some(p) => p.nominal().into(),
            None => parse_duration(&self.per).map_err(|e| {
                FieldError::new(
                    field("per"),
                    format!("{e}, or (fixed_window only) a calendar period: \"day\", \"week\" or \"month\""),
                )
            })?,
        };
        if self.burst.is_some() && !algorithm.has_burst() {
            return Err(FieldError::new(
                field("burst"),
                PolicyError::BurstNotSupported.to_string(),
            ));
        }
        // Which of this limit's fields a PolicyError is about.
        let field_of = |e: &PolicyError| match e {
            PolicyError::ZeroMax | PolicyError::LogTooLarge { .. } => field("max"),
            PolicyError::ZeroWindow | PolicyError::CalendarNotSupported(_) => field("per"),
            PolicyError::ZeroBurst | PolicyError::BurstNotSupported => field("burst"),
            PolicyError::UnknownAlgorithm(_)
            | PolicyError::UnknownMode(_)
            | PolicyError::NoLimits
            | PolicyError::Concurrency { .. }
            | PolicyError::HoldTtl
            | PolicyError::GlobalConcurrency
            | PolicyError::GlobalNotYet(_)
            | PolicyError::AlertThreshold(_)
            | PolicyError::AlertsNotSupported(_)
            | PolicyError::WaitNotSupported(_)
            | PolicyError::MaxWaitTooLong
            | PolicyError::BlockForTooLong
            | PolicyError::BlockWithBudget
            | PolicyError::ParentNotYet(_)
            | PolicyError::OwnParent
            | PolicyError::BudgetNotSupported(_) => path.to_string(),
        };
        // Policy::new holds the per-limit rules that depend on the algorithm
        // (e.g. the sliding log's cap on max); checking one limit at a time
        // lets the error name it.
        let limit = match period {
            Some(p) => Limit::per_period(self.max, p, zone.clone()),
            None => Limit::new(self.max, per, self.burst),
        };
        limit
            .and_then(|limit| Policy::new(name, algorithm, vec![limit.clone()]).map(|_| limit))
            .map_err(|e| FieldError::new(field_of(&e), e.to_string()))
    }
}

fn policies<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, PolicyTable)>, D::Error> {
    struct V;
    impl V {
        fn other<E: de::Error>(self, found: Found) -> Result<Vec<(String, PolicyTable)>, E> {
            Err(expected(
                "a table of policies ([policies.NAME] sections)",
                &found,
            ))
        }
    }
    impl<'de> Visitor<'de> for V {
        type Value = Vec<(String, PolicyTable)>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of policies")
        }
        visit_scalars!();
        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            self.other(Found::Array)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut policies = Vec::new();
            while let Some(name) = map.next_key::<String>()? {
                if policies.is_empty() && name == TOML_DATETIME_KEY {
                    return self.other(Found::Datetime(map.next_value()?));
                }
                let table = map.next_value_seed(PolicySeed(&name))?;
                policies.push((name, table));
            }
            Ok(policies)
        }
    }
    d.deserialize_any(V)
}

fn limits<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<LimitTable>, D::Error> {
    struct V;
    impl V {
        fn other<E: de::Error>(self, found: Found) -> Result<Vec<LimitTable>, E> {
            Err(expected(
                &format!("a list of limits, {LIMITS_EXAMPLE}"),
                &found,
            ))
        }
    }
    impl<'de> Visitor<'de> for V {
        type Value = Vec<LimitTable>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of limits")
        }
        visit_scalars!();
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut limits = Vec::new();
            let what = "a limit like { max = 10, per = \"1m\" }";
            while let Some(l) = seq.next_element_seed(TableOf::<LimitTable>::new(what.into()))? {
                limits.push(l);
            }
            Ok(limits)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            self.other(found_in_map(map)?)
        }
    }
    d.deserialize_any(V)
}

/// The table of the policy called `.0` in a file: its name is checked
/// first (as [`PolicyTable::to_policy`] does again), so that a bad name is
/// reported before whatever is wrong in its table.
struct PolicySeed<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for PolicySeed<'_> {
    type Value = PolicyTable;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<PolicyTable, D::Error> {
        check_name(self.0).map_err(de::Error::custom)?;
        let what = format!(
            "a policy table ([policies.{}] with algorithm and limits)",
            key_path(self.0)
        );
        TableOf::new(what).deserialize(d)
    }
}

/// Where a table `T` is expected: a map goes to `T`'s derived
/// `Deserialize`; anything else is refused as "expected {what}, found ...".
struct TableOf<T> {
    what: String,
    table: PhantomData<T>,
}

impl<T> TableOf<T> {
    fn new(what: String) -> TableOf<T> {
        TableOf {
            what,
            table: PhantomData,
        }
    }

    fn other<E: de::Error>(self, found: Found) -> Result<T, E> {
        Err(expected(&self.what, &found))
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for TableOf<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for TableOf<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }

    visit_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        self.other(Found::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(TableAccess {
            map,
            first: Some(self),
        }))
    }
}

/// The entries of a table for `T`'s derived `Deserialize`, except that a
/// TOML datetime (a map with [`TOML_DATETIME_KEY`]) is refused like any
/// other value that is not a table: its first key is looked at first.
struct TableAccess<A, T> {
    map: A,
    /// Until the first key has been read.
    first: Option<TableOf<T>>,
}

impl<'de, A: MapAccess<'de>, T: Deserialize<'de>> MapAccess<'de> for TableAccess<A, T> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(table) = self.first.take() else {
            return self.map.next_key_seed(seed);
        };
        match self.map.next_key_seed(FirstKey(seed))? {
            None => Ok(None),
            Some(FirstKeyOf::Field(key)) => Ok(Some(key)),
            Some(FirstKeyOf::Datetime) => {
                let text = self.map.next_value()?;
                table.other(Found::Datetime(text)).map(|_| None)
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// Reads a table's first key: [`TOML_DATETIME_KEY`], or a key for the
/// derived `Deserialize`'s own seed (so an unknown one fails here, where
/// `serde_path_to_error` sees its name).
struct FirstKey<K>(K);

enum FirstKeyOf<V> {
    Field(V),
    Datetime,
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for FirstKey<K> {
    type Value = FirstKeyOf<K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let key = String::deserialize(d)?;
        if key == TOML_DATETIME_KEY {
            return Ok(FirstKeyOf::Datetime);
        }
        let key: de::value::StringDeserializer<D::Error> = key.into_deserializer();
        self.0.deserialize(key).map(FirstKeyOf::Field)
    }
}
