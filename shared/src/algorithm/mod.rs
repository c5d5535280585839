//! The five limiter algorithms, each a pure function of (limit, state, now, cost).
//!
//! Every algorithm implements [`Algo`]: bookkeeping (`advance`), a side-effect
//! free question (`check`), an unconditional `consume`, and a `usage` report.
//! Keeping "would it fit?" apart from "take it" is what lets a policy with
//! several limits consume from all of them only when all of them allow
//! (envoy ratelimit #185/#440 increment denied requests; we don't).
//!
//! State is plain data (a few integers, or at most `max` timestamps for the
//! sliding log) and serde-serializable, because it goes into snapshots.
//! `docs/ALGORITHMS.md` lists the bytes per key of each.

pub mod fixed_window;
pub mod gcra;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

use crate::limit::Limit;
use crate::time::Nanos;

/// Whether `cost` fits now, and if not, how long until it would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    pub allowed: bool,
    /// Zero when allowed; otherwise the earliest wait after which the same
    /// cost fits, assuming nothing else is consumed meanwhile.
    pub retry_after: Nanos,
}

/// What is left of a limit as seen at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Units that could still be taken now.
    pub remaining: u64,
    /// Time until the limit is fully available again (nothing counted against it).
    pub reset: Nanos,
}

/// One limiter algorithm. Implementations never read a clock and never panic,
/// whatever the state holds (it may come from an old snapshot).
pub trait Algo {
    type State: Clone + Default + std::fmt::Debug + PartialEq;

    /// Brings `state` up to `now`: rolls windows, drops expired timestamps,
    /// refills. Bookkeeping only: it never changes what `check` answers.
    /// `now` earlier than the state's own time (a clock step back) is treated
    /// as the state's time.
    fn advance(limit: &Limit, state: &mut Self::State, now: Nanos);

    /// Would `cost` fit at `now`? `state` has been advanced to `now`.
    /// `cost` is at most the limit's capacity (callers refuse larger ones).
    fn check(limit: &Limit, state: &Self::State, now: Nanos, cost: u64) -> Check;

    /// Takes `cost` at `now`, even past the limit (a `hit` records usage that
    /// was already served). `state` has been advanced to `now`.
    fn consume(limit: &Limit, state: &mut Self::State, now: Nanos, cost: u64);

    /// Remaining and reset at `now`. `state` has been advanced to `now`.
    fn usage(limit: &Limit, state: &Self::State, now: Nanos) -> Usage;

    /// Gives back `units` that were taken at `taken_at` and not used (the
    /// unspent part of a local budget, [`crate::budget`]): afterwards the
    /// state is what it would be had they never been taken, as far as
    /// later decisions can tell, and never emptier than that. `state` has
    /// been advanced to `now`. Algorithms that cannot give back exactly
    /// keep the default, which gives back nothing (a policy refuses
    /// budgets for them, [`crate::budget::supports`]).
    fn refund(
        _limit: &Limit,
        _state: &mut Self::State,
        _now: Nanos,
        _units: u64,
        _taken_at: Nanos,
    ) {
    }
}
