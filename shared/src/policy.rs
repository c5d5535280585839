//! Policies: an algorithm and one or more limits that must all hold.
//!
//! A [`Policy`] is valid by construction ([`Policy::new`], [`Limit::new`]):
//! no zero maxima, no zero windows, no empty limit list. Config and wire
//! types are converted into these at the edge, so the deciding code never
//! has to wonder.
//!
//! Decisions ([`Policy::decide`], [`Policy::record`]) are pure: the caller
//! passes the key's state and `now`, and stores the state back. A denied
//! request consumes nothing from any limit; an allowed one consumes from all.

mod blocks;
mod levels;
mod run;

use crate::algorithm;
pub use crate::holds::hold::Holding;
pub use crate::limit::{Algorithm, Decision, Limit, Mode, PolicyError, ThresholdUnits, Thresholds};
use crate::region::{RegionName, Scope};
use crate::time::Nanos;
pub use run::LimitState;
use run::{inspect_limits, run_limits, Run};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// How a global policy's units are spread across its regions
/// ([`Policy::spread`]; docs/GLOSSARY.md, "share" and "part").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// A fixed window of one limit: the home counts the window, each
    /// other region's share in it when it opens, and grants slices beyond
    /// them ([`crate::region::global`]).
    HomeCounts,
    /// Every region counts its own part, units moving between them by
    /// slices and gifts ([`crate::region::parts`]); a bucket or GCRA
    /// without parts (`on_cut` other than `"reserved"`) by slices alone.
    SplitParts,
    /// Every region counts its own part, and what a part cannot pay is
    /// forwarded to the home and decided there, ask by ask (a sliding log
    /// or window).
    PartsThenForward,
}

/// Who a slice of a key's budget goes to ([`Policy::grant`],
/// [`Policy::grant_to_region`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SliceFor {
    Client,
    Region,
}

/// The largest `max` a sliding log accepts: its state is one timestamp per unit.
pub const SLIDING_LOG_MAX: u64 = 100_000;

/// The policy of a request that names none; every config has it.
pub const DEFAULT_POLICY: &str = "default";

/// A named algorithm with limits that must all hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    name: String,
    algorithm: Algorithm,
    limits: Vec<Limit>,
    /// Owners grant clients slices of a key's budget to decide from
    /// locally ([`crate::budget`]).
    local_budget: bool,
    /// Enforce, or answer denials allowed (SPEC §14).
    mode: Mode,
    /// What it says of holds: concurrency, their ttl, their end (SPEC §13).
    holding: Holding,
    /// The longest an ask may wait for its start ([`crate::wait`]; zero:
    /// asks never wait).
    max_wait: Nanos,
    /// How long a denial blocks the key ([`crate::penalty`]; zero: no
    /// penalty).
    block_for: Nanos,
    /// In each region apart, or once across regions (SPEC §12).
    scope: Scope,
    /// The thresholds whose crossing is announced (SPEC §14), in
    /// units of each limit.
    alerts: ThresholdUnits,
    /// A global token bucket's or GCRA's part in each region that has one
    /// ([`crate::region::parts`]), as a regional policy of the part's
    /// limit; `None` when the policy is not split so.
    parts: Option<Arc<[(RegionName, Policy)]>>,
    /// A global policy with alerts: the policies of its tallies
    /// ([`crate::region::tally`]); `None` otherwise.
    tallies: Option<Arc<Tallies>>,
    /// The policy of the level above this one (SPEC §17, [`crate::group`]):
    /// an ask under this policy is decided against it too, on the key cut
    /// one token shorter; `None` for a policy of one level.
    parent: Option<Arc<str>>,
}

/// The policies a global policy with alerts keeps its tallies of what the
/// regions spent under ([`crate::region::tally`]): regional copies of it,
/// one whose thresholds fire (the home's tally of every region's
/// spending) and one without alerts (a region's own tally, and the
/// reports the home keeps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tallies {
    pub alerting: Policy,
    pub silent: Policy,
}

/// The thresholds a global policy's own counters watch: none (its
/// tallies' do, [`Policy::threshold_units`]).
static NO_THRESHOLDS: std::sync::LazyLock<ThresholdUnits> =
    std::sync::LazyLock::new(ThresholdUnits::default);

impl Policy {
    pub fn new(
        name: impl Into<String>,
        algorithm: Algorithm,
        limits: Vec<Limit>,
    ) -> Result<Policy, PolicyError> {
        if limits.is_empty() {
            return Err(PolicyError::NoLimits);
        }
        for l in &limits {
            if !algorithm.has_burst() && l.burst() != l.max() {
                return Err(PolicyError::BurstNotSupported);
            }
            if l.calendar().is_some() && algorithm != Algorithm::FixedWindow {
                return Err(PolicyError::CalendarNotSupported(algorithm));
            }
            if algorithm == Algorithm::SlidingLog && l.max() > SLIDING_LOG_MAX {
                return Err(PolicyError::LogTooLarge {
                    max: SLIDING_LOG_MAX,
                });
            }
        }
        Ok(Policy {
            name: name.into(),
            algorithm,
            limits,
            local_budget: false,
            mode: Mode::Enforce,
            holding: Holding::default(),
            max_wait: Nanos::ZERO,
            block_for: Nanos::ZERO,
            scope: Scope::Region,
            alerts: ThresholdUnits::default(),
            parts: None,
            tallies: None,
            parent: None,
        })
    }

    /// A policy of only concurrency slots (SPEC §13: "one with only
    /// `concurrency` needs no `algorithm`"): no limits, so its holds count
    /// nothing but their slots.
    pub fn slots_only(name: impl Into<String>, holding: Holding) -> Result<Policy, PolicyError> {
        if holding.concurrency.is_none() {
            return Err(PolicyError::NoLimits);
        }
        Ok(Policy {
            name: name.into(),
            algorithm: Algorithm::FixedWindow,
            limits: Vec::new(),
            local_budget: false,
            mode: Mode::Enforce,
            holding: holding.checked()?,
            max_wait: Nanos::ZERO,
            block_for: Nanos::ZERO,
            scope: Scope::Region,
            alerts: ThresholdUnits::default(),
            parts: None,
            tallies: None,
            parent: None,
        })
    }

    /// The same policy with `holding` ([`Holding::checked`]).
    pub fn with_holding(mut self, holding: Holding) -> Result<Policy, PolicyError> {
        self.holding = holding.checked()?;
        Ok(self)
    }

    /// What this policy says of holds.
    pub fn holding(&self) -> Holding {
        self.holding
    }

    /// The same policy letting asks wait up to `max_wait` for their start
    /// ([`crate::wait::max_wait`] says which are refused).
    pub fn with_max_wait(mut self, max_wait: Duration) -> Result<Policy, PolicyError> {
        self.max_wait = crate::wait::max_wait(self.algorithm, max_wait)?;
        self.global_not_yet()?;
        Ok(self)
    }

    /// The longest an ask may wait for its start (zero: asks never wait).
    pub fn max_wait(&self) -> Nanos {
        self.max_wait
    }

    /// The same policy blocking a key for `block_for` once it is denied
    /// ([`crate::penalty`]; zero: no penalty).
    pub fn with_block_for(mut self, block_for: Duration) -> Result<Policy, PolicyError> {
        self.block_for = crate::penalty::block_for(block_for)?;
        self.global_not_yet()?;
        Ok(self)
    }

    /// How long a denial blocks the key (zero: no penalty).
    pub fn block_for(&self) -> Nanos {
        self.block_for
    }

    /// Until when `state` is blocked at `now` under this policy
    /// (`rl.inspect`): `None` when it is not, its block has ended, or the
    /// policy has no `block_for` (any more).
    pub fn blocked_until(&self, state: &KeyState, now: Nanos) -> Option<Nanos> {
        state
            .blocked_at(now)
            .filter(|_| self.block_for > Nanos::ZERO)
    }

    /// The same policy held in `scope`. A global policy holds no holds:
    /// a hold's slot lives with one owner, and a global key has one in
    /// every region.
    pub fn with_scope(mut self, scope: Scope) -> Result<Policy, PolicyError> {
        if scope.global().is_some() && self.holding.concurrency.is_some() {
            return Err(PolicyError::GlobalConcurrency);
        }
        self.scope = scope;
        self.global_not_yet()?;
        self.parts = self.split();
        self.tallies = self.tallies_of();
        Ok(self)
    }

    /// Its tallies' policies, when it is a global policy with alerts.
    fn tallies_of(&self) -> Option<Arc<Tallies>> {
        self.scope.global()?;
        if self.alerts.thresholds().is_empty() {
            return None;
        }
        let alerting = Policy {
            mode: Mode::Enforce,
            scope: Scope::Region,
            parts: None,
            tallies: None,
            ..self.clone()
        };
        let silent = Policy {
            alerts: ThresholdUnits::default(),
            ..alerting.clone()
        };
        Some(Arc::new(Tallies { alerting, silent }))
    }

    /// The policies of its tallies of what the regions spent: a global
    /// policy with alerts (SPEC §14 across regions), `None` otherwise.
    pub fn tallies(&self) -> Option<&Tallies> {
        self.tallies.as_deref()
    }

    /// Its parts, one per region that keeps one, when it is a global
    /// policy other than a fixed window whose cut-off regions decide from
    /// their shares ([`crate::region::parts::parts`]).
    fn split(&self) -> Option<Arc<[(RegionName, Policy)]>> {
        let global = self.scope.global()?;
        // A window of one limit shares itself out at the home instead.
        if self.algorithm == Algorithm::FixedWindow && self.limits.len() == 1 {
            return None;
        }
        let parts = crate::region::parts::parts(global, &self.limits);
        if parts.is_empty() {
            return None;
        }
        let parts = parts.into_iter().map(|(region, limits)| {
            // Parts decide as enforced; the region answers in the mode.
            // Parts fire no alerts: the tallies do.
            let part = Policy {
                limits,
                mode: Mode::Enforce,
                scope: Scope::Region,
                parts: None,
                tallies: None,
                alerts: ThresholdUnits::default(),
                ..self.clone()
            };
            (region, part)
        });
        Some(parts.collect())
    }

    /// `region`'s part of a global policy split into parts
    /// ([`crate::region::parts`]): the policy its counter of a key is
    /// decided under there. `None` when the policy is not split, or
    /// `region` keeps no part (its share is under one unit: it decides
    /// from slices alone).
    pub fn part_in(&self, region: &RegionName) -> Option<&Policy> {
        self.parts
            .as_deref()?
            .iter()
            .find(|(r, _)| r == region)
            .map(|(_, part)| part)
    }

    /// The `limit` a decision of `part` (one of this policy's parts)
    /// reports, as the whole limit it is a part of: what a region answers.
    pub fn whole_reported(&self, part: &Policy, reported: u64) -> u64 {
        part.limits
            .iter()
            .position(|l| l.reported() == reported)
            .and_then(|i| self.limits.get(i))
            .map_or(reported, Limit::reported)
    }

    /// How a global policy's units are spread across its regions
    /// (docs/REGIONS.md); `None` for a regional one.
    pub fn spread(&self) -> Option<Spread> {
        self.scope.global()?;
        Some(match self.algorithm {
            Algorithm::SlidingLog | Algorithm::SlidingWindow => Spread::PartsThenForward,
            Algorithm::FixedWindow if self.parts.is_none() => Spread::HomeCounts,
            Algorithm::FixedWindow | Algorithm::TokenBucket | Algorithm::Gcra => Spread::SplitParts,
        })
    }

    /// The policy a key's counter of this policy is decided under in
    /// `region` (none: a system without regions): its part there, if it
    /// keeps one, else this policy.
    pub fn counted_under(&self, region: Option<&RegionName>) -> &Policy {
        region.and_then(|r| self.part_in(r)).unwrap_or(self)
    }

    /// What a global policy cannot have yet, whichever was set first (the
    /// scope or the rest): local budgets.
    fn global_not_yet(&self) -> Result<(), PolicyError> {
        if self.scope.global().is_some() && self.local_budget {
            return Err(PolicyError::GlobalNotYet("local_budget = true".to_string()));
        }
        if self.scope.global().is_some() && self.max_wait > Nanos::ZERO {
            return Err(PolicyError::GlobalNotYet("max_wait".to_string()));
        }
        if self.scope.global().is_some() && self.block_for > Nanos::ZERO {
            return Err(PolicyError::GlobalNotYet("block_for".to_string()));
        }
        if self.local_budget && self.block_for > Nanos::ZERO {
            return Err(PolicyError::BlockWithBudget);
        }
        self.parent_not_yet()
    }

    /// Where this policy's limits hold (SPEC §12).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The same policy in `mode`: a change of mode keeps every count, since
    /// both modes count alike.
    pub fn with_mode(mut self, mode: Mode) -> Policy {
        self.mode = mode;
        self
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The same policy announcing when a key's count in a window reaches
    /// each of `alerts` ([`crate::alerts`]); refused for algorithms other
    /// than the fixed window and for a policy of only concurrency slots.
    /// On a global policy its thresholds count what every region spent
    /// (its tallies, SPEC §14 across regions).
    pub fn with_alerts(mut self, alerts: Thresholds) -> Result<Policy, PolicyError> {
        if !alerts.is_empty()
            && (self.algorithm != Algorithm::FixedWindow || self.limits.is_empty())
        {
            return Err(PolicyError::AlertsNotSupported(self.algorithm));
        }
        self.alerts = ThresholdUnits::new(&self.limits, alerts);
        self.tallies = self.tallies_of();
        Ok(self)
    }

    /// Its alert thresholds (empty: none).
    pub fn alerts(&self) -> &Thresholds {
        self.alerts.thresholds()
    }

    /// The alert thresholds its counters watch, in units of each of its
    /// limits: none for a global policy, whose key counters do not hold
    /// what was spent (its [`Policy::tallies`] watch them).
    pub fn threshold_units(&self) -> &ThresholdUnits {
        match self.scope.global() {
            Some(_) => &NO_THRESHOLDS,
            None => &self.alerts,
        }
    }

    /// The same policy with local budgets on or off ([`crate::budget`]);
    /// refused for algorithms that cannot grant them exactly.
    pub fn with_local_budget(mut self, on: bool) -> Result<Policy, PolicyError> {
        if on && !crate::budget::supports(self.algorithm) {
            return Err(PolicyError::BudgetNotSupported(self.algorithm));
        }
        self.local_budget = on;
        self.global_not_yet()?;
        Ok(self)
    }

    /// Whether owners grant slices of this policy's keys' budgets.
    pub fn local_budget(&self) -> bool {
        self.local_budget
    }

    /// The built-in policy used without a config file: 15 per second, sliding window.
    pub fn builtin_default() -> Policy {
        Policy::new(
            DEFAULT_POLICY,
            Algorithm::SlidingWindow,
            vec![Limit::new(15, Duration::from_secs(1), None).expect("15/s is valid")],
        )
        .expect("the built-in default is valid")
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// The largest cost one `allow` can ever be granted. A larger cost is an
    /// error ("can never pass"), not a denial ("retry later").
    pub fn capacity(&self) -> u64 {
        self.limits
            .iter()
            .map(|l| {
                if self.algorithm.has_burst() {
                    l.burst()
                } else {
                    l.max()
                }
            })
            .min()
            .unwrap_or(0)
    }

    /// A fresh state for a key that has never been seen (or has gone idle).
    pub fn new_state(&self) -> KeyState {
        let n = self.limits.len();
        match self.algorithm {
            Algorithm::FixedWindow => KeyState::FixedWindow(vec![Default::default(); n]),
            Algorithm::SlidingLog => KeyState::SlidingLog(vec![Default::default(); n]),
            Algorithm::SlidingWindow => KeyState::SlidingWindow(vec![Default::default(); n]),
            Algorithm::TokenBucket => KeyState::TokenBucket(vec![Default::default(); n]),
            Algorithm::Gcra => KeyState::Gcra(vec![Default::default(); n]),
        }
    }

    /// `allow`: takes `cost` from every limit if every limit has room, else
    /// nothing from any. `cost = 0` takes nothing and answers whether a cost
    /// of 1 would be allowed now (a "peek"). The caller must have refused
    /// `cost > self.capacity()`.
    /// A shadow policy answers a denial allowed ([`Mode::answer`]).
    pub fn decide(&self, state: &mut KeyState, now: Nanos, cost: u64) -> Decision {
        self.decide_within(state, now, cost, Nanos::ZERO)
    }

    /// [`Policy::decide`] of an ask that may start up to `within` from
    /// now (SPEC §18, [`crate::wait`]): when it fits every limit by then,
    /// it is allowed now for the earliest moment it does, taken at once
    /// so that later asks start after it, and the decision's `wait` says
    /// how long from now that is; when it does not, it is denied, taking
    /// nothing. A peek says the same of a cost of 1 and takes nothing.
    /// The caller must have refused a `within` over [`Policy::max_wait`]
    /// ([`crate::ask::admit_wait`]).
    ///
    /// With `block_for` ([`crate::penalty`]): an ask (a peek too) of a
    /// blocked key is denied, taking nothing, until the block ends; a
    /// denied ask of a cost of 1 or more starts a block. Both answers
    /// are `blocked`, `retry_after` the block's rest.
    pub fn decide_within(
        &self,
        state: &mut KeyState,
        now: Nanos,
        cost: u64,
        within: Nanos,
    ) -> Decision {
        let blocked = self.blocked_until(state, now);
        let decision = match blocked {
            Some(_) => self.run(
                state,
                now,
                0,
                Run::Allow {
                    within: Nanos::ZERO,
                },
            ),
            None => self.run(state, now, cost, Run::Allow { within }),
        };
        let blocked = match blocked {
            None if self.block_for > Nanos::ZERO && cost > 0 && !decision.allowed => {
                let until = now.saturating_add(self.block_for);
                state.block(until);
                Some(until)
            }
            other => other,
        };
        let decision = match blocked {
            Some(until) => crate::penalty::denial(decision, until, now),
            None => decision,
        };
        self.mode.answer(decision)
    }

    /// `hit`: records `cost` whether or not it fits (usage already served),
    /// then answers what a peek would answer.
    pub fn record(&self, state: &mut KeyState, now: Nanos, cost: u64) -> Decision {
        self.mode.answer(self.run(state, now, cost, Run::Record))
    }

    /// `allow` of `cost` that also asks for a slice of up to `want` more
    /// units for the asker to decide from locally ([`crate::budget`]).
    /// When the ask is allowed and the policy has local budgets, the slice
    /// is taken at once like an ask of its size (so nothing can be admitted
    /// past the limit), at most half of what is left after the ask (the
    /// rest stays for the other askers), and the decision tells what is
    /// left after both. `None` when the policy has no local budgets, or
    /// the ask was denied, or the policy is in shadow (its asks all go to
    /// the owner, which alone tells a shadow denial); a grant of 0 units
    /// says "none left to slice".
    pub fn grant(
        &self,
        state: &mut KeyState,
        now: Nanos,
        cost: u64,
        want: u64,
    ) -> (Decision, Option<crate::budget::Grant>) {
        if !self.local_budget {
            return (self.decide(state, now, cost), None);
        }
        self.slice(state, now, cost, want, 0, SliceFor::Client)
    }

    /// A grant to another region's owner of a global key (SPEC §12,
    /// [`crate::region::global`]): the slice protocol one level up, so
    /// without `local_budget` and with a lease long enough to cross the
    /// link and back ([`crate::budget::REGION_LEASE`]).
    /// `keep` units of what is left are not sliced (the home's own need,
    /// home_keeps of [`crate::region::global`]). In shadow mode too: the
    /// other region tells its own asks' shadow denials.
    pub fn grant_to_region(
        &self,
        state: &mut KeyState,
        now: Nanos,
        want: u64,
        keep: u64,
    ) -> (Decision, Option<crate::budget::Grant>) {
        self.slice(state, now, 0, want, keep, SliceFor::Region)
    }

    fn slice(
        &self,
        state: &mut KeyState,
        now: Nanos,
        cost: u64,
        want: u64,
        keep: u64,
        to: SliceFor,
    ) -> (Decision, Option<crate::budget::Grant>) {
        let decision = self.decide(state, now, cost);
        if (self.mode == Mode::Shadow && to == SliceFor::Client) || !decision.within_limits() {
            return (decision, None);
        }
        let longest = match to {
            SliceFor::Client => crate::budget::LEASE,
            SliceFor::Region => crate::budget::REGION_LEASE,
        };
        let units = want.min(decision.remaining.saturating_sub(keep) / 2);
        let decision = if units > 0 {
            self.decide(state, now, units)
        } else {
            decision
        };
        let grant = crate::budget::Grant {
            units,
            lease: crate::budget::lease(&self.limits, self.algorithm, now, longest),
            taken_at: now,
        };
        // Nothing else decides on the state between the two, so the slice
        // fits whenever `remaining` said it would.
        debug_assert!(decision.allowed, "a slice of what remained is allowed");
        (decision, Some(grant))
    }

    /// Opens `state`'s window of a global policy at its home (SPEC
    /// §12, [`crate::region::global`]), before anything else is decided in
    /// it: when the window holds nothing yet, counts `shares` (the other
    /// regions' reserved shares) as a slice taken at the window's start,
    /// and returns that start (the slice's `taken_at`, which the other
    /// regions know without asking and give their shares back under).
    /// `None` when the window was open already, or there is nothing to
    /// count.
    pub fn open_at_home(&self, state: &mut KeyState, now: Nanos, shares: u64) -> Option<Nanos> {
        let limit = self.limits.first()?;
        if shares == 0 || self.inspect(state, now).first()?.used > 0 {
            return None;
        }
        self.record(state, now, shares);
        Some(limit.window_start(now))
    }

    /// Until when an owner remembers units it granted of this policy's
    /// key at `taken_at` ([`crate::outstanding::Outstanding::granted_until`]):
    /// a global window's shares, counted at its start
    /// ([`Policy::open_at_home`]), until its end, since a region gives
    /// them back as late as that; anything else for the usual while
    /// ([`Nanos::ZERO`]).
    pub fn grant_kept_until(&self, taken_at: Nanos) -> Nanos {
        match (self.scope.global(), self.limits.first()) {
            (Some(_), Some(limit)) if limit.window_start(taken_at) == taken_at => {
                limit.window_end(taken_at)
            }
            _ => Nanos::ZERO,
        }
    }

    /// Gives back `units` of a slice taken at `taken_at` and not spent
    /// ([`crate::budget`]), then answers what a peek would. Nothing for
    /// algorithms without budgets; for a fixed window, only while the
    /// window the slice was taken in lasts.
    pub fn refund(
        &self,
        state: &mut KeyState,
        now: Nanos,
        units: u64,
        taken_at: Nanos,
    ) -> Decision {
        self.mode
            .answer(self.run(state, now, 0, Run::Refund { units, taken_at }))
    }

    /// How long until this state is indistinguishable from a fresh one, if no
    /// more requests come: after that the key can be forgotten.
    /// A blocked key is kept at least until its block ends.
    pub fn idle_expiry(&self, state: &mut KeyState, now: Nanos) -> Nanos {
        let reset = self.run(state, now, 0, Run::Expiry).reset;
        match self.blocked_until(state, now) {
            Some(until) => reset.max(until.saturating_sub(now)),
            None => reset,
        }
    }

    /// Every limit's state at `now`, changing nothing (`rl.inspect`,
    /// SPEC §8): the limit, what is used and left of it, and when it is
    /// whole again.
    pub fn inspect(&self, state: &KeyState, now: Nanos) -> Vec<LimitState> {
        let mut state = state.clone();
        state.lift_block(now, self.block_for == Nanos::ZERO);
        self.conform(&mut state);
        if let KeyState::Blocked(b) = state {
            return self.inspect(&b.counters, now);
        }
        match &mut state {
            KeyState::FixedWindow(s) => {
                inspect_limits::<algorithm::fixed_window::FixedWindow>(&self.limits, s, now)
            }
            KeyState::SlidingLog(s) => {
                inspect_limits::<algorithm::sliding_log::SlidingLog>(&self.limits, s, now)
            }
            KeyState::SlidingWindow(s) => {
                inspect_limits::<algorithm::sliding_window::SlidingWindow>(&self.limits, s, now)
            }
            KeyState::TokenBucket(s) => {
                inspect_limits::<algorithm::token_bucket::TokenBucket>(&self.limits, s, now)
            }
            KeyState::Gcra(s) => inspect_limits::<algorithm::gcra::Gcra>(&self.limits, s, now),
            KeyState::Blocked(_) => unreachable!("a blocked state was unwrapped above"),
        }
    }

    /// Runs the algorithm over the key's counters (inside its block, if it
    /// is blocked; a block that ended is lifted first).
    fn run(&self, state: &mut KeyState, now: Nanos, cost: u64, mode: Run) -> Decision {
        state.lift_block(now, self.block_for == Nanos::ZERO);
        self.conform(state);
        match state {
            KeyState::FixedWindow(s) => {
                run_limits::<algorithm::fixed_window::FixedWindow>(&self.limits, s, now, cost, mode)
            }
            KeyState::SlidingLog(s) => {
                run_limits::<algorithm::sliding_log::SlidingLog>(&self.limits, s, now, cost, mode)
            }
            KeyState::SlidingWindow(s) => run_limits::<algorithm::sliding_window::SlidingWindow>(
                &self.limits,
                s,
                now,
                cost,
                mode,
            ),
            KeyState::TokenBucket(s) => {
                run_limits::<algorithm::token_bucket::TokenBucket>(&self.limits, s, now, cost, mode)
            }
            KeyState::Gcra(s) => {
                run_limits::<algorithm::gcra::Gcra>(&self.limits, s, now, cost, mode)
            }
            KeyState::Blocked(b) => self.run(&mut b.counters, now, cost, mode),
        }
    }

    /// Makes a state (possibly restored from a snapshot taken under another
    /// config) fit this policy: another algorithm starts fresh; limits are
    /// matched by position, extra ones dropped, missing ones fresh.
    fn conform(&self, state: &mut KeyState) {
        if let KeyState::Blocked(b) = state {
            return self.conform(&mut b.counters);
        }
        let n = self.limits.len();
        let fits = match (self.algorithm, &mut *state) {
            (Algorithm::FixedWindow, KeyState::FixedWindow(v)) => {
                v.resize(n, Default::default());
                true
            }
            (Algorithm::SlidingLog, KeyState::SlidingLog(v)) => {
                v.resize(n, Default::default());
                true
            }
            (Algorithm::SlidingWindow, KeyState::SlidingWindow(v)) => {
                v.resize(n, Default::default());
                true
            }
            (Algorithm::TokenBucket, KeyState::TokenBucket(v)) => {
                v.resize(n, Default::default());
                true
            }
            (Algorithm::Gcra, KeyState::Gcra(v)) => {
                v.resize(n, Default::default());
                true
            }
            _ => false,
        };
        if !fits {
            *state = self.new_state();
        }
    }
}

/// One key's counters under one policy: a state per limit, for the policy's
/// algorithm; or, while the key is blocked (SPEC §18), those counters and
/// when the block ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum KeyState {
    FixedWindow(Vec<algorithm::fixed_window::State>),
    SlidingLog(Vec<algorithm::sliding_log::State>),
    SlidingWindow(Vec<algorithm::sliding_window::State>),
    TokenBucket(Vec<algorithm::token_bucket::State>),
    Gcra(Vec<algorithm::gcra::State>),
    /// A blocked key ([`crate::penalty`]): written into a snapshot only
    /// while one is, in snapshot format 4 (docs/ARCHITECTURE.md, "Formats").
    Blocked(Box<crate::penalty::Blocked<KeyState>>),
}
