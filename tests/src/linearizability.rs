//! A linearizability checker for one key's fixed window: could a single,
//! exact limiter have given the answers a test recorded? (And, in
//! [`groups`], for a group's two levels, SPEC §17.)
//!
//! Why: the fault tests send real asks while workers are killed (kill -9)
//! and record each one: who sent it, what it asked, when it was sent, when
//! the answer came back and what it said. Totals ("never more admitted than
//! the limit") miss half of what can go wrong, such as a key denied while it
//! had room because a count was applied twice. So the records are checked
//! the way outsiders check exactness (Jepsen's Knossos, etcd's porcupine):
//! the history is linearizable if some order of its operations respects real
//! time (an op that returned before another was called comes first) and
//! gives every op the answer it got from the sequential model below.
//!
//! The model is one key's fixed window with a `limit`. Its state is `used`
//! (units counted) and the holds open:
//!
//! - `Allow { cost }` is admitted iff `used + cost <= limit`, then counts
//!   `cost`; a denial counts nothing.
//! - `Wait { cost, room }`, an allow that may wait for a later start (SPEC
//!   §18), is admitted iff `used + cost <= limit + room` and counts `cost`
//!   at its decision: the key goes into debt (`used` past the limit), so
//!   later Allows are denied and later Waits queue behind it. `room` is
//!   what the ask's wait lets the limit go past it by, in units (a wait of
//!   a minute at one unit a minute: 1); the model has no time, so a test
//!   that uses it must keep refills out of its run. Its wait is not
//!   checked here (the pacing tests check the starts).
//! - `Hit { cost }` always counts `cost`, even past the limit.
//! - `Reserve { cost, hold }` is admitted as an Allow is and then keeps the
//!   hold open, holding `cost`; the caller labels it `hold`.
//! - `Settle { hold, cost }` replaces what the hold held by the real `cost`
//!   (`used = used - held + cost`) and closes it.
//!
//! An [`Outcome::Unknown`] op (a timeout, a 503) may have taken effect at
//! any point after its call, or never: it has no deadline (its return is
//! taken as +infinity, as porcupine does) and may stay out of the order.
//! If it takes effect, the model decides what it does: an Unknown Allow that
//! does not fit counts nothing. [`Outcome::NotDelivered`] ("no responders")
//! certainly took no effect and is dropped before checking.
//!
//! The search is Wing & Gong's with Lowe's memoization, as porcupine runs it:
//! the call and return events in time order in a doubly linked list; at each
//! step, linearize an op called before the first remaining return, which
//! removes both its events; backtrack when that first return's op cannot be
//! placed; never visit the same set of linearized ops twice. In this model
//! the state is a function of that set (each op's effect is fixed by its
//! answer), so the set alone is the cache key, kept as a 128-bit Zobrist
//! fingerprint. It runs on an explicit stack, not recursion: a key's history
//! can hold 20,000 ops.
//!
//! Before searching, sums over the history find the answers no order can
//! explain (a denial that all the ops before its return could not fill,
//! admissions that cannot all fit by the time they are due, an admission
//! sent after a denial on a key it found full...): such a history fails at
//! once, with a short search only to report its longest linearizable
//! prefix; the search would meet the contradiction deep down, after trying
//! every order above it.
//!
//! Shortcuts specific to the model keep the search fast on real histories;
//! each keeps it complete (argued in `search.rs`, and checked against a
//! search of every order on small random histories, Waits among them):
//! each op is held to its own threshold (`limit` plus its room), and where
//! admissions have different ones the shortcuts about runs of Unknown ops,
//! argued for one threshold, are not taken.
//!
//! - an op that some linearization can take next whenever any goes on is
//!   taken with no alternative tried: a denial legal where it stands, or an
//!   admission, hit or settle that cannot crowd out an op that may come
//!   before it;
//! - a branch ends as soon as some answer cannot be given any more (a
//!   denial that all the ops before its return could not fill, admissions
//!   due by some time that cannot all fit by then);
//! - Unknown ops of one kind and cost are interchangeable; they are tried
//!   only where taking one can matter (a denial short of `used`, or a raise
//!   it would not fit after), in runs built in one order, and a run that
//!   one coarser op could replace is left to that op.
//!
//! Candidates are tried by how soon their answer is due. What is left is
//! exponential in the worst case: which of many Unknown ops of mixed costs
//! took effect is a subset-sum choice, and near the limit, settles that
//! free room concurrently with admissions and denials can leave many
//! orders to rule out before a wrong answer is proven wrong. A [`Budget`]
//! bounds it, so such a history gives up instead of hanging.

pub mod groups;
mod history;
mod plan;
mod search;
pub mod sent;
#[cfg(test)]
mod tests;

pub use history::{
    BadInput, Budget, CheckError, Checked, GaveUp, Op, Outcome, Recorded, Violation, WindowRow,
};

/// Checks one key's history against the model with `limit` and the default
/// [`Budget`]. Linearizability is compositional: group a history by key and
/// check each key on its own.
pub fn check(limit: u64, history: &[Recorded]) -> Result<Checked, CheckError> {
    check_with(limit, history, Budget::default())
}

/// [`check`] with a chosen budget.
pub fn check_with(limit: u64, history: &[Recorded], budget: Budget) -> Result<Checked, CheckError> {
    search::run(limit, history, budget)
}
