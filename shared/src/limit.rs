//! The terms a policy is made of, below everything that uses them: its
//! [`Algorithm`], a [`Limit`], why either is refused ([`PolicyError`]), and
//! the [`Decision`] a request gets.
//!
//! They live apart from [`crate::policy`] because the algorithms and the
//! local budgets need them while a policy needs the algorithms and the
//! budgets: here, each of those depends on this module and none on the
//! others' users. `crate::policy` re-exports them, so
//! `sluice_core::policy::Limit` is the name other crates use.

use crate::calendar::{Calendar, Period, Zone};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The limiter algorithm of a policy (SPEC §4 names).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    FixedWindow,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    Gcra,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Token bucket and GCRA have a bucket size separate from the rate.
    pub const fn has_burst(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Algorithm, PolicyError> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| PolicyError::UnknownAlgorithm(s.to_string()))
    }
}

/// The longest `max_wait` a policy may have (SPEC §18, [`crate::wait`]):
/// a caller kept waiting longer would be better told to come back.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// The longest `block_for` a policy may have (SPEC §18,
/// [`crate::penalty`]): a key kept out longer is better given an override
/// of `max = 0` (SPEC §7), which an operator lifts on purpose.
pub const MAX_BLOCK_FOR: Duration = Duration::from_secs(24 * 3600);

/// Why a policy or limit cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown algorithm {0:?}; use one of fixed_window, sliding_log, sliding_window, token_bucket, gcra")]
    UnknownAlgorithm(String),
    #[error(
        "max must be at least 1 (a limit of 0 would deny everything; remove the policy instead)"
    )]
    ZeroMax,
    #[error("the window must be longer than 0")]
    ZeroWindow,
    #[error("burst must be at least 1")]
    ZeroBurst,
    #[error("burst only applies to token_bucket and gcra; remove it or change the algorithm")]
    BurstNotSupported,
    #[error("a policy needs at least one limit")]
    NoLimits,
    #[error("sliding_log keeps one timestamp per allowed request, so max is capped at {max}; use sliding_window for larger limits")]
    LogTooLarge { max: u64 },
    #[error("local_budget needs fixed_window, token_bucket or gcra: under {0} a slice spent after it was granted would leave the window before its units were used, admitting more than the limit (docs/CLIENT.md, \"Local budgets\"); remove local_budget or change the algorithm")]
    BudgetNotSupported(Algorithm),
    #[error("calendar periods (day, week, month) only apply to fixed_window, not {0}; use a duration such as \"24h\" or change the algorithm")]
    CalendarNotSupported(Algorithm),
    #[error("unknown mode {0:?}; use \"enforce\" or \"shadow\"")]
    UnknownMode(String),
    #[error("concurrency must be 1 to {max}: the most holds of one key live at once")]
    Concurrency { max: u32 },
    #[error("hold_ttl must be 1 ms to 1 h: how long a hold lives unless the reserve names its own ttl_ms")]
    HoldTtl,
    #[error("a global policy (scope = \"global\") cannot have concurrency: a hold lives with one region's owner; use a regional policy for concurrency")]
    GlobalConcurrency,
    #[error("a global policy cannot have {0} in this version (SPEC §12, docs/REGIONS.md \"Known limits\"); remove it or use scope = \"region\"")]
    GlobalNotYet(String),
    #[error("a policy with a parent cannot have {0} in this version: the levels of a group are decided by one owner in one turn, and {0} decides elsewhere (SPEC §17); remove parent or {0}")]
    ParentNotYet(&'static str),
    #[error("a policy cannot be its own parent; name the policy of the level above (e.g. parent = \"org\") or remove parent")]
    OwnParent,
    #[error("max_wait needs token_bucket or gcra, not {0}: only they can admit an ask now for a later moment and count it then (SPEC §18); remove max_wait or change the algorithm")]
    WaitNotSupported(Algorithm),
    #[error("max_wait must be at most {}: an ask admitted for a later moment keeps its caller waiting that long; set a shorter max_wait", crate::duration::format_duration(MAX_WAIT))]
    MaxWaitTooLong,
    #[error("block_for must be at most {}: a longer penalty is a decision about the key, better made with an override of max = 0 (SPEC §7); set a shorter block_for", crate::duration::format_duration(MAX_BLOCK_FOR))]
    BlockForTooLong,
    #[error("block_for cannot go with local_budget = true: a client deciding from its slice neither starts nor sees a block (SPEC §18); remove one of them")]
    BlockWithBudget,
    #[error("an alert threshold must be 1 to 1000 (percent of each limit's max), found {0}")]
    AlertThreshold(i64),
    #[error("alerts need fixed_window, not {0}: a threshold is reached once per window, and {0} has no window whose count fills up (docs/USAGE.md, \"Alerts\"); remove alerts or change the algorithm")]
    AlertsNotSupported(Algorithm),
}

/// Whether a policy's denials are answered (SPEC §14).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// An ask that does not fit is denied.
    #[default]
    Enforce,
    /// Decided and counted as enforcement would, but answered allowed: a
    /// denial becomes `shadow_denied` (a new limit tried on live traffic).
    Shadow,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Enforce, Mode::Shadow];

    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }

    /// The answer to give for enforcement's `decision`: itself, or in
    /// shadow mode a denial turned into an allowed answer flagged
    /// `shadow_denied` (nothing was consumed: enforcement denied it).
    pub fn answer(self, decision: Decision) -> Decision {
        if self == Mode::Shadow && !decision.allowed {
            return Decision {
                allowed: true,
                retry_after: Nanos::ZERO,
                shadow_denied: true,
                ..decision
            };
        }
        decision
    }
}

impl FromStr for Mode {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Mode, PolicyError> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| PolicyError::UnknownMode(s.to_string()))
    }
}

/// `max` units per `per`; for token bucket and GCRA, a bucket of `burst`
/// units. A fixed window's `per` may instead be a calendar period
/// ([`Limit::calendar`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    max: NonZeroU64,
    /// A calendar limit's: its period's nominal length ([`Period::nominal`]).
    per: NonZeroU64,
    burst: NonZeroU64,
    /// Windows that follow a zone's calendar instead of `per` (SPEC §14).
    calendar: Option<Arc<Calendar>>,
}

impl Limit {
    /// `burst` defaults to `max`.
    pub fn new(max: u64, per: Duration, burst: Option<u64>) -> Result<Limit, PolicyError> {
        let max = NonZeroU64::new(max).ok_or(PolicyError::ZeroMax)?;
        let per = NonZeroU64::new(Nanos::from(per).as_u64()).ok_or(PolicyError::ZeroWindow)?;
        let burst = match burst {
            None => max,
            Some(b) => NonZeroU64::new(b).ok_or(PolicyError::ZeroBurst)?,
        };
        Ok(Limit {
            max,
            per,
            burst,
            calendar: None,
        })
    }

    /// `max` units per calendar `period` of `zone` (fixed window only,
    /// which [`crate::policy::Policy::new`] checks).
    pub fn per_period(max: u64, period: Period, zone: Zone) -> Result<Limit, PolicyError> {
        let mut limit = Limit::new(max, period.nominal().into(), None)?;
        limit.calendar = Some(Arc::new(Calendar::new(period, zone)));
        Ok(limit)
    }

    /// The calendar of a limit whose `per` is a calendar period.
    pub fn calendar(&self) -> Option<&Calendar> {
        self.calendar.as_deref()
    }

    /// The start of the fixed window that holds `t`: a multiple of `per`
    /// since the epoch, or a calendar boundary.
    #[inline]
    pub fn window_start(&self, t: Nanos) -> Nanos {
        match &self.calendar {
            None => Nanos(t.0 - t.0 % self.per.get()),
            Some(c) => c.window(t).start,
        }
    }

    /// The end of the fixed window that started at `start`.
    #[inline]
    pub fn window_end(&self, start: Nanos) -> Nanos {
        match &self.calendar {
            None => start.saturating_add(self.per()),
            Some(c) => c.window(start).end,
        }
    }

    pub fn max(&self) -> u64 {
        self.max.get()
    }

    /// The window (or, for rates, the period over which `max` units accrue).
    pub fn per(&self) -> Nanos {
        Nanos(self.per.get())
    }

    pub fn burst(&self) -> u64 {
        self.burst.get()
    }

    /// `per` as a config writes it: a calendar period's name (`"month"`)
    /// or a duration (`"1m"`).
    pub fn per_text(&self) -> String {
        match self.calendar() {
            Some(c) => c.period().as_str().to_string(),
            None => crate::duration::format_duration(self.per().into()),
        }
    }

    /// The `limit` a decision reports for this limit: `max`, or `burst`
    /// when bigger (a token bucket or GCRA then holds more than `max` at
    /// once), so that `remaining` never exceeds `limit`.
    pub fn reported(&self) -> u64 {
        self.max().max(self.burst())
    }
}

/// The answer to one request, before wire encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// [`Limit::reported`] of the limit that decided (the most restrictive
    /// one): its `max`, or its `burst` when bigger.
    pub limit: u64,
    /// What is left of that limit after this request.
    pub remaining: u64,
    /// Time until that limit is fully available again.
    pub reset: Nanos,
    /// Zero when allowed; otherwise the earliest wait after which the same request fits.
    pub retry_after: Nanos,
    /// A shadow policy's answer to an ask enforcement would deny: allowed,
    /// nothing consumed ([`Mode::answer`]).
    pub shadow_denied: bool,
    /// Zero unless allowed for a later moment ([`crate::wait`]): how long
    /// from now the asker must wait before it goes on.
    pub wait: Nanos,
    /// A denial (or a shadow one) because the key is blocked (SPEC §18,
    /// [`crate::penalty`]): its `retry_after` is the block's rest.
    pub blocked: bool,
}

impl Decision {
    /// The limits had room: allowed, and not only by a shadow policy. What
    /// counts as used, may be cached as allowed, or grants a slice.
    pub const fn within_limits(&self) -> bool {
        self.allowed && !self.shadow_denied
    }
}

/// Alert thresholds (SPEC §14, [`crate::alerts`]): the smallest and largest threshold, in percent of a limit's `max`
/// (over 100: a hit counts past `max`, and a shadow policy admits past it).
pub const THRESHOLD_RANGE: std::ops::RangeInclusive<i64> = 1..=1000;

/// A policy's alert thresholds in percent: each 1 to 1000, ascending,
/// each once. Empty: no alerts (the default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Thresholds(Box<[u16]>);

impl Thresholds {
    /// The thresholds of `alerts = [...]`, in any order; a repeated one
    /// counts once.
    pub fn new(percents: &[i64]) -> Result<Thresholds, PolicyError> {
        let mut checked = Vec::with_capacity(percents.len());
        for &p in percents {
            if !THRESHOLD_RANGE.contains(&p) {
                return Err(PolicyError::AlertThreshold(p));
            }
            checked.push(p as u16);
        }
        checked.sort_unstable();
        checked.dedup();
        Ok(Thresholds(checked.into_boxed_slice()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Ascending.
    pub fn percents(&self) -> &[u16] {
        &self.0
    }
}

/// The count at which `pct` percent of `max` is reached: `max·pct/100`
/// rounded up (80 % of 3 is reached at 3, not at 2.4), at least 1.
pub fn units(max: u64, pct: u16) -> u64 {
    // In u64 whenever it fits (a division by a constant, a few cycles: this
    // runs on every counted decision of a policy with alerts); in u128 for
    // maxima near u64::MAX.
    let units = match max.checked_mul(u64::from(pct)) {
        Some(scaled) => scaled.div_ceil(100),
        None => {
            let scaled = (u128::from(max) * u128::from(pct)).div_ceil(100);
            u64::try_from(scaled).unwrap_or(u64::MAX)
        }
    };
    units.max(1)
}

/// A policy's thresholds in units of each of its limits ([`units`]),
/// computed once when the policy is built
/// ([`crate::policy::Policy::with_alerts`]): a decision then compares its
/// counts with them and does no arithmetic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThresholdUnits {
    thresholds: Thresholds,
    /// Per limit, the units of each threshold, ascending (limit after limit).
    units: Box<[u64]>,
    /// Per limit, the units of its lowest threshold: a count below it has
    /// reached none. Empty: no alerts.
    floors: Box<[u64]>,
}

impl ThresholdUnits {
    /// `thresholds` in units of each of `limits`.
    pub fn new(limits: &[Limit], thresholds: Thresholds) -> ThresholdUnits {
        let pcts = thresholds.percents();
        if pcts.is_empty() {
            return ThresholdUnits::default();
        }
        let units: Box<[u64]> = limits
            .iter()
            .flat_map(|l| pcts.iter().map(|&pct| units(l.max(), pct)))
            .collect();
        let floors = units.chunks(pcts.len()).map(|row| row[0]).collect();
        ThresholdUnits {
            thresholds,
            units,
            floors,
        }
    }

    /// The thresholds in percent.
    pub fn thresholds(&self) -> &Thresholds {
        &self.thresholds
    }

    /// Per limit, the count at which its lowest threshold is reached
    /// (empty: no alerts).
    pub fn floors(&self) -> &[u64] {
        &self.floors
    }

    /// The thresholds the count of the limit at `limit` going from
    /// `before` to `after` within one window reaches: those whose units
    /// are above `before` and at most `after`.
    pub fn crossed(&self, limit: usize, before: u64, after: u64) -> impl Iterator<Item = u16> + '_ {
        let pcts = self.thresholds.percents();
        let row = self
            .units
            .get(limit * pcts.len()..(limit + 1) * pcts.len())
            .unwrap_or_default();
        pcts.iter()
            .zip(row)
            .filter(move |&(_, &at)| before < at && at <= after)
            .map(|(&pct, _)| pct)
    }
}
