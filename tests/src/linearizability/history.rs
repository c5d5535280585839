//! The history a test records and what the check answers: the ops and
//! their outcomes, the budget, and the reports of a pass, a violation, bad
//! input or a search that gave up (with how each prints). Apart from the
//! search so that the search and the plan read these types without
//! importing the module that runs them.

use std::fmt;

/// What a client asked of the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Admitted iff `used + cost <= limit`; a denial counts nothing.
    Allow { cost: u64 },
    /// An allow that may wait for a later start (SPEC §18): admitted iff
    /// `used + cost <= limit + room`, `room` being the units the limit may
    /// go into debt by within the ask's wait; counted at its decision,
    /// like any admission, so later asks queue behind it. A denial counts
    /// nothing.
    Wait { cost: u64, room: u64 },
    /// Always counts `cost`, even past the limit.
    Hit { cost: u64 },
    /// A hold: admitted as an Allow is, then holds `cost` until settled.
    /// `hold` is the caller's label for it, named by the [`Op::Settle`].
    Reserve { cost: u64, hold: u64 },
    /// Replaces what `hold` held by the real `cost`, and closes the hold.
    Settle { hold: u64, cost: u64 },
}

impl Op {
    pub fn cost(&self) -> u64 {
        match *self {
            Op::Allow { cost } | Op::Hit { cost } => cost,
            Op::Wait { cost, .. } => cost,
            Op::Reserve { cost, .. } | Op::Settle { cost, .. } => cost,
        }
    }

    /// The units past the limit it may be admitted into: a waiting
    /// allow's `room`, 0 for any other.
    pub fn room(&self) -> u64 {
        match *self {
            Op::Wait { room, .. } => room,
            _ => 0,
        }
    }

    fn label(&self) -> String {
        match *self {
            Op::Allow { .. } => "allow".to_owned(),
            Op::Wait { room, .. } => format!("wait +{room}"),
            Op::Hit { .. } => "hit".to_owned(),
            Op::Reserve { hold, .. } => format!("reserve h{hold}"),
            Op::Settle { hold, .. } => format!("settle h{hold}"),
        }
    }
}

/// How an op ended, as the recording client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An Allow, Wait or Reserve answered yes.
    Admitted,
    /// An Allow, Wait or Reserve answered no.
    Denied,
    /// A Hit or Settle answered (its answer carries nothing to check).
    Done,
    /// A timeout or an error that may or may not have taken effect.
    Unknown,
    /// No responders: nobody received it, so it took no effect.
    NotDelivered,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Admitted => "admitted",
            Outcome::Denied => "denied",
            Outcome::Done => "done",
            Outcome::Unknown => "unknown",
            Outcome::NotDelivered => "not delivered",
        })
    }
}

/// One op of a history, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub client: usize,
    pub op: Op,
    /// When it was sent: ns on the recording process's monotonic clock.
    pub call: u64,
    /// When the answer came back (same clock); `None`: never. Not used for
    /// [`Outcome::Unknown`], whose effect may land any time after its call.
    pub ret: Option<u64>,
    pub outcome: Outcome,
}

/// How much searching [`check_with`] may do before giving up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Ops tried (linearized or found in the cache) before giving up; each
    /// costs about the number of ops pending at that point.
    pub max_steps: u64,
}

impl Budget {
    /// Legal histories take about one step per op (the 20,000-op test takes
    /// about that many); this leaves room for real backtracking and stops a
    /// pathological history within seconds.
    pub const DEFAULT_MAX_STEPS: u64 = 2_000_000;
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_steps: Budget::DEFAULT_MAX_STEPS,
        }
    }
}

/// A history that passed: one linearization was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Ops checked: the history without its NotDelivered ones.
    pub ops: usize,
    /// Of those, Unknown ones.
    pub unknown: usize,
    /// Unknown ones that took effect in the linearization found (another
    /// order may take others).
    pub unknown_taken: usize,
    /// NotDelivered ops dropped.
    pub not_delivered: usize,
    /// `used` at the end of the linearization found.
    pub used: u64,
    /// Search steps taken.
    pub steps: u64,
}

/// Why [`check`] found no linearization.
pub enum CheckError {
    /// No order explains the answers: the limiter was not exact.
    NotLinearizable(Box<Violation>),
    /// The history cannot have been recorded from real asks: a bug of the
    /// test, not of the limiter.
    BadInput(BadInput),
    /// The budget ran out before the search could decide.
    GaveUp(GaveUp),
}

/// An op the recorder could not have recorded as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadInput {
    /// Index of the op in the history.
    pub index: usize,
    pub recorded: Recorded,
    pub reason: String,
}

/// The search ran out of budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaveUp {
    pub steps: u64,
    /// Ops checked.
    pub ops: usize,
    /// The most answered ops linearized at once before giving up.
    pub deepest_answered: usize,
}

/// A history no order explains, with what a person needs to see why: the
/// longest linearizable prefix found and the ops around the answer that
/// could not be given after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub limit: u64,
    /// Ops checked.
    pub ops: usize,
    /// Index in the history of the op blamed at the deepest point of the
    /// search: the first impossible answer (the op whose answer was due
    /// first and could not be placed, or one that no order could place).
    pub impossible: usize,
    /// The longest linearizable prefix found: answered ops in it, Unknown
    /// ones it took, and the model's state after it.
    pub prefix_answered: usize,
    pub prefix_unknown_taken: usize,
    pub prefix_used: u64,
    pub prefix_open_holds: usize,
    /// The ops overlapping the impossible one in time (it included), by
    /// call: those that could be ordered either side of it.
    pub window: Vec<WindowRow>,
    /// Unknown ops called before the window's answered ones (they have no
    /// deadline, so they overlap it too), and how many the prefix took.
    pub unknown_before_window: usize,
    pub unknown_before_window_taken: usize,
    /// The first call of the history; the table's times are relative to it.
    pub origin: u64,
}

/// One op of a [`Violation`]'s window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRow {
    /// Index of the op in the history.
    pub index: usize,
    pub recorded: Recorded,
    /// In the longest linearizable prefix found.
    pub in_prefix: bool,
}

/// The most rows a [`Violation`] prints, around the impossible op.
const MAX_ROWS: usize = 80;

/// `ns` after `origin` in ms with 3 decimals.
fn millis(ns: u64, origin: u64) -> String {
    let since = ns.saturating_sub(origin);
    format!("{}.{:03}", since / 1_000_000, since % 1_000_000 / 1_000)
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self
            .window
            .iter()
            .position(|row| row.index == self.impossible);
        if let Some(r) = at.map(|at| &self.window[at].recorded) {
            writeln!(
                f,
                "not linearizable (limit {}, {} ops): no order explains op #{} \
                 (client {}: {} {}, {}, called at {} ms)",
                self.limit,
                self.ops,
                self.impossible,
                r.client,
                r.op.label(),
                r.op.cost(),
                r.outcome,
                millis(r.call, self.origin),
            )?;
        }
        writeln!(
            f,
            "longest linearizable prefix found: {} answered ops and {} unknown ones taken, \
             leaving used {} of {} with {} hold(s) open",
            self.prefix_answered,
            self.prefix_unknown_taken,
            self.prefix_used,
            self.limit,
            self.prefix_open_holds,
        )?;
        writeln!(
            f,
            "ops overlapping it in time, by call (ms from the first call; \
             prefix: in that prefix; => the impossible one):\n\
             \x20      #  client  op                cost     call ms   return ms  outcome    prefix"
        )?;
        let first = at.unwrap_or(0).saturating_sub(MAX_ROWS / 2);
        let shown = first..(first + MAX_ROWS).min(self.window.len());
        if shown.start > 0 {
            writeln!(f, "  ({} earlier rows not shown)", shown.start)?;
        }
        for row in &self.window[shown.clone()] {
            let r = &row.recorded;
            writeln!(
                f,
                "{} {:>6}  {:>6}  {:<16} {:>5} {:>11} {:>11}  {:<10} {}",
                if row.index == self.impossible {
                    "=>"
                } else {
                    "  "
                },
                row.index,
                r.client,
                r.op.label(),
                r.op.cost(),
                millis(r.call, self.origin),
                r.ret
                    .map_or_else(|| "-".to_owned(), |ret| millis(ret, self.origin)),
                r.outcome.to_string(),
                if row.in_prefix { "yes" } else { "no" },
            )?;
        }
        if shown.end < self.window.len() {
            writeln!(
                f,
                "  ({} later rows not shown)",
                self.window.len() - shown.end
            )?;
        }
        if self.unknown_before_window > 0 {
            writeln!(
                f,
                "and {} unknown op(s) called earlier, with no deadline ({} taken in the prefix)",
                self.unknown_before_window, self.unknown_before_window_taken,
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.recorded;
        write!(
            f,
            "bad history: op #{} (client {}: {} {}, {}, call {}, return {:?}) {}",
            self.index,
            r.client,
            r.op.label(),
            r.op.cost(),
            r.outcome,
            r.call,
            r.ret,
            self.reason,
        )
    }
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the linearizability search gave up after {} steps on {} ops \
             (at most {} answered ops linearized at once): raise Budget::max_steps \
             or check a shorter history",
            self.steps, self.ops, self.deepest_answered,
        )
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::NotLinearizable(violation) => violation.fmt(f),
            CheckError::BadInput(bad) => bad.fmt(f),
            CheckError::GaveUp(gave_up) => gave_up.fmt(f),
        }
    }
}

/// As Display: `check(..).unwrap()` in a test then prints the table, not
/// a struct dump.
impl fmt::Debug for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for CheckError {}
