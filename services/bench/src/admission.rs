//! Admission accounting for fixed-window limits: how many units each key
//! was allowed in each window, compared with what the limit allows.
//!
//! A fixed window of `max` per `per` counts in windows `[k·per, (k+1)·per)`
//! aligned to the Unix epoch (wall clock). For every (key, window) the
//! generator counts allowed and denied answers; then
//!
//! - **over-admission** = Σ max(0, allowed − max): units that passed the
//!   limit (a correct limiter has none);
//! - **under-admission** = Σ (max − allowed) over the (key, window) pairs
//!   with a denial: units the limit would have allowed but nobody got
//!   (a limiter that decides from slices of a key's budget may leave some
//!   unused; one that decides every ask in one place leaves none).
//!
//! Which window an answer counted in, the target tells ([`Window`]): Redis
//! INCR's script returns its window number; sluice answers carry `reset`,
//! the time until the window ends, rounded up to the millisecond. The
//! decision was made between the request's send and the answer's arrival,
//! so the window end lies in `(sent + reset − 1 ms, received + reset]`,
//! and it is a multiple of `per`: the unique multiple in that bracket
//! ([`window_of_reset`]). An answer whose bracket holds none or several
//! (a round trip longer than `per`) is counted as unplaced.
//!
//! Every answer counts, warm-up included (unlike throughput): a window cut
//! in two by the measured window's start would otherwise look under-used.
//! Answers lost to timeouts or errors are not seen, so a decision whose
//! reply was lost shows up as under-admission; the report's errors say how
//! many there were.

use serde::Serialize;
use sluice_core::policy::{Algorithm, Policy};
use std::time::Duration;

/// A fixed-window limit, as the accounting needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedLimit {
    pub max: u64,
    /// The window, in nanoseconds (at least 1).
    pub per_ns: u64,
}

impl FixedLimit {
    /// The limit of `policy` if it is a fixed window with one limit (the
    /// only case where "allowed per window" is the whole story).
    pub fn of(policy: &Policy) -> Option<FixedLimit> {
        match (policy.algorithm(), policy.limits()) {
            (Algorithm::FixedWindow, [limit]) => Some(FixedLimit {
                max: limit.max(),
                per_ns: limit.per().as_u64(),
            }),
            _ => None,
        }
    }
}

/// What an answer says about the window it counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The window's number `k` (it starts at `k·per`), as Redis INCR's
    /// script tells.
    Index(u64),
    /// The time from the decision until the window ends (sluice's `reset`:
    /// rounded up to the millisecond by a worker, exact from a local one).
    Reset(Duration),
}

/// The number of the window whose end is the only multiple of `per_ns` in
/// `(sent_ns + reset − slack, received_ns + reset]` (times in ns since the
/// Unix epoch), or `None` if there is none or more than one. The slack is
/// 1 ms (a worker's `reset` is rounded up to it) plus an eighth of the
/// window, at most 50 ms: an answer from a slice of a local budget counts
/// its reset from when the slice arrived, so it ends late by that trip
/// back (never early); window ends lie a whole window apart, so a wider
/// bracket still finds only the right one.
pub fn window_of_reset(
    reset: Duration,
    per_ns: u64,
    sent_ns: u64,
    received_ns: u64,
) -> Option<u64> {
    let reset = reset.as_nanos() as u64;
    let slack = 1_000_000 + (per_ns / 8).min(50_000_000);
    let lo = (sent_ns + reset).checked_sub(slack)?; // exclusive
    let hi = received_ns.max(sent_ns) + reset; // inclusive
    let end = (lo / per_ns + 1) * per_ns; // the first multiple above lo
    if end > hi || end + per_ns <= hi {
        return None;
    }
    (end / per_ns).checked_sub(1)
}

/// Answers of one key in one window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cell {
    window: u64,
    allowed: u64,
    denied: u64,
}

impl Cell {
    fn is_empty(&self) -> bool {
        self.allowed == 0 && self.denied == 0
    }

    fn add(&mut self, allowed: bool) {
        if allowed {
            self.allowed += 1;
        } else {
            self.denied += 1;
        }
    }
}

/// Allowed and denied answers per key and window, of one load thread
/// (merged at the end). Keys are the generator's key numbers.
///
/// Counting is on the load's hot path, so a key's latest window is a flat
/// slot indexed by the key (one memory access per answer); a window the key
/// left behind, or a late answer for one, is appended to `closed`, and
/// cells of the same (key, window) are added up only when the admission is
/// computed.
#[derive(Debug, Default)]
pub struct AnswerCounts {
    /// By key number: the latest window it was answered in (empty: none yet).
    current: Vec<Cell>,
    /// (key, cell) for earlier windows, in no particular order, possibly
    /// several per (key, window).
    closed: Vec<(usize, Cell)>,
    unplaced: u64,
}

impl AnswerCounts {
    /// Counts one decision (`allowed` or denied) of `key`. `window` is what
    /// the answer said, `sent_ns` / `received_ns` when it was asked and
    /// answered (ns since the Unix epoch).
    pub fn count(
        &mut self,
        limit: &FixedLimit,
        key: usize,
        allowed: bool,
        window: Option<Window>,
        sent_ns: u64,
        received_ns: u64,
    ) {
        let index = match window {
            Some(Window::Index(k)) => Some(k),
            Some(Window::Reset(reset)) => {
                window_of_reset(reset, limit.per_ns, sent_ns, received_ns)
            }
            None => None,
        };
        let Some(window) = index else {
            self.unplaced += 1;
            return;
        };
        if self.current.len() <= key {
            self.current.resize(key + 1, Cell::default());
        }
        let cell = &mut self.current[key];
        if cell.is_empty() || cell.window == window {
            cell.window = window;
            cell.add(allowed);
            return;
        }
        let mut fresh = Cell {
            window,
            ..Cell::default()
        };
        fresh.add(allowed);
        if window > cell.window {
            self.closed.push((key, std::mem::replace(cell, fresh)));
        } else {
            // A late answer for a window the key has left.
            self.closed.push((key, fresh));
        }
    }

    pub fn merge(&mut self, other: AnswerCounts) {
        self.unplaced += other.unplaced;
        self.closed.extend(other.closed);
        let cells = other.current.into_iter().enumerate();
        self.closed.extend(cells.filter(|(_, c)| !c.is_empty()));
    }

    /// Every (key, window) with an answer, once, with all its answers.
    fn cells(&self) -> Vec<Cell> {
        let current = self.current.iter().copied().enumerate();
        let mut all: Vec<(usize, Cell)> = current.filter(|(_, c)| !c.is_empty()).collect();
        all.extend_from_slice(&self.closed);
        all.sort_unstable_by_key(|(key, c)| (*key, c.window));
        let mut out: Vec<((usize, u64), Cell)> = Vec::with_capacity(all.len());
        for (key, c) in all {
            match out.last_mut() {
                Some((at, sum)) if *at == (key, c.window) => {
                    sum.allowed += c.allowed;
                    sum.denied += c.denied;
                }
                _ => out.push(((key, c.window), c)),
            }
        }
        out.into_iter().map(|(_, c)| c).collect()
    }

    /// Over- and under-admission against `limit`, each allowed answer
    /// having consumed `cost` units.
    pub fn admission(&self, limit: &FixedLimit, cost: u64) -> Admission {
        let mut a = Admission {
            max: limit.max,
            per_ms: limit.per_ns as f64 / 1e6,
            unplaced: self.unplaced,
            ..Admission::default()
        };
        for c in self.cells() {
            let allowed = c.allowed * cost;
            a.key_windows += 1;
            a.allowed += allowed;
            if allowed > limit.max {
                a.over_admitted += allowed - limit.max;
                a.over_windows += 1;
            }
            if c.denied > 0 {
                a.limited_windows += 1;
                a.limited_allowed += allowed;
                if allowed < limit.max {
                    a.under_admitted += limit.max - allowed;
                    a.under_windows += 1;
                }
            }
        }
        a
    }
}

/// The report's `admission` object (all answers of the run, warm-up included).
#[derive(Serialize, Debug, Default, Clone, PartialEq)]
pub struct Admission {
    /// The limit: `max` units per `per_ms`.
    pub max: u64,
    pub per_ms: f64,
    /// (key, window) pairs with at least one answer.
    pub key_windows: u64,
    /// Units allowed in all of them.
    pub allowed: u64,
    /// Σ max(0, allowed − max) over (key, window): units past the limit.
    pub over_admitted: u64,
    /// (key, window) pairs with over-admission.
    pub over_windows: u64,
    /// (key, window) pairs with at least one denial: the limit was reached.
    pub limited_windows: u64,
    /// Units allowed in those.
    pub limited_allowed: u64,
    /// Σ (max − allowed) over the limited pairs: units the limit would have
    /// allowed but nobody got.
    pub under_admitted: u64,
    /// Limited pairs with under-admission.
    pub under_windows: u64,
    /// Decisions whose window could not be told (not counted above).
    pub unplaced: u64,
}

/// Now, in nanoseconds since the Unix epoch.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const SEC: u64 = 1_000 * MS;
    const T: u64 = 1_800_000_000 * SEC; // a window start, 1 s windows

    #[test]
    fn reset_places_the_answer_in_the_window_that_ends_in_the_bracket() {
        // Decided 300.4 ms into window T: reset 699.6 ms, sent as 700 ms.
        let sent = T + 300 * MS;
        let received = T + 301 * MS;
        let k = window_of_reset(Duration::from_millis(700), SEC, sent, received);
        assert_eq!(k, Some(T / SEC));
        // An exact (local) reset works too.
        let k = window_of_reset(Duration::from_nanos(699_600_000), SEC, sent, received);
        assert_eq!(k, Some(T / SEC));
        // So does one from a slice, late by the trip back of its grant.
        let k = window_of_reset(Duration::from_millis(704), SEC, sent, sent);
        assert_eq!(k, Some(T / SEC));
    }

    #[test]
    fn an_answer_just_before_the_window_end_stays_in_its_window() {
        // Decided 50 µs before T (reset rounds up to 1 ms), answered after T.
        let sent = T - 200_000;
        let received = T + 400_000;
        let k = window_of_reset(Duration::from_millis(1), SEC, sent, received);
        assert_eq!(k, Some(T / SEC - 1));
        // Decided 50 µs after T: a full window left (rounded up: 1000 ms).
        let k = window_of_reset(Duration::from_millis(1000), SEC, sent, received);
        assert_eq!(k, Some(T / SEC));
    }

    #[test]
    fn a_round_trip_longer_than_the_window_cannot_be_placed() {
        // 100 ms windows, 250 ms between send and answer: two window ends fit.
        let per = 100 * MS;
        let k = window_of_reset(Duration::from_millis(50), per, T, T + 250 * MS);
        assert_eq!(k, None);
        // A reset that puts no window end in the bracket (a wrong clock).
        let k = window_of_reset(Duration::from_millis(30), per, T + 10 * MS, T + 11 * MS);
        assert_eq!(k, None);
    }

    #[test]
    fn over_and_under_admission_per_key_and_window() {
        let limit = FixedLimit {
            max: 3,
            per_ns: SEC,
        };
        let mut a = AnswerCounts::default();
        let mut b = AnswerCounts::default();
        let w = |k: u64| Some(Window::Index(T / SEC + k));
        // Key 0, window 0: 4 allowed across two threads (1 over), 1 denied.
        for _ in 0..2 {
            a.count(&limit, 0, true, w(0), 0, 0);
            b.count(&limit, 0, true, w(0), 0, 0);
        }
        a.count(&limit, 0, false, w(0), 0, 0);
        // Key 0, window 1: 1 allowed, then denied: 2 under.
        b.count(&limit, 0, true, w(1), 0, 0);
        b.count(&limit, 0, false, w(1), 0, 0);
        // Key 7: 2 allowed, never denied: neither over nor under.
        a.count(&limit, 7, true, w(0), 0, 0);
        a.count(&limit, 7, true, w(0), 0, 0);
        // Key 2: exactly max, then denied.
        for _ in 0..3 {
            b.count(&limit, 2, true, w(0), 0, 0);
        }
        b.count(&limit, 2, false, w(0), 0, 0);
        // One answer without a window.
        a.count(&limit, 1, true, None, 0, 0);
        a.merge(b);
        let got = a.admission(&limit, 1);
        assert_eq!(
            got,
            Admission {
                max: 3,
                per_ms: 1000.0,
                key_windows: 4,
                allowed: 4 + 1 + 2 + 3,
                over_admitted: 1,
                over_windows: 1,
                limited_windows: 3,
                limited_allowed: 4 + 1 + 3,
                under_admitted: 2,
                under_windows: 1,
                unplaced: 1,
            }
        );
        // At cost 2 each allowed answer is 2 units.
        let got = a.admission(&limit, 2);
        assert_eq!((got.over_admitted, got.under_admitted), (5 + 3 + 1, 1));
    }

    #[test]
    fn late_answers_and_merged_threads_add_up_per_key_and_window() {
        let limit = FixedLimit {
            max: 2,
            per_ns: SEC,
        };
        let w = |k: u64| Some(Window::Index(k));
        let mut a = AnswerCounts::default();
        // Key 3: window 5, then 6, then a late answer for 5, then 6 again.
        a.count(&limit, 3, true, w(5), 0, 0);
        a.count(&limit, 3, true, w(6), 0, 0);
        a.count(&limit, 3, true, w(5), 0, 0);
        a.count(&limit, 3, false, w(6), 0, 0);
        // Another thread saw key 3 in window 5 too (now 3 allowed: 1 over).
        let mut b = AnswerCounts::default();
        b.count(&limit, 3, true, w(5), 0, 0);
        a.merge(b);
        let got = a.admission(&limit, 1);
        assert_eq!(got.key_windows, 2);
        assert_eq!((got.over_admitted, got.over_windows), (1, 1));
        // Window 6: 1 allowed, then a denial: 1 under.
        assert_eq!((got.limited_windows, got.under_admitted), (1, 1));
    }

    #[test]
    fn reset_answers_are_counted_in_their_window() {
        let limit = FixedLimit {
            max: 1,
            per_ns: SEC,
        };
        let mut t = AnswerCounts::default();
        // Two allowed answers in the same window, one in the next.
        let at = |ms: u64| (T + ms * MS, T + ms * MS + 500_000);
        let (s, r) = at(100);
        t.count(
            &limit,
            0,
            true,
            Some(Window::Reset(Duration::from_millis(900))),
            s,
            r,
        );
        let (s, r) = at(998);
        t.count(
            &limit,
            0,
            true,
            Some(Window::Reset(Duration::from_millis(2))),
            s,
            r,
        );
        let (s, r) = at(1500);
        t.count(
            &limit,
            0,
            true,
            Some(Window::Reset(Duration::from_millis(500))),
            s,
            r,
        );
        let got = t.admission(&limit, 1);
        assert_eq!(
            (got.key_windows, got.over_admitted, got.unplaced),
            (2, 1, 0)
        );
    }

    #[test]
    fn only_single_limit_fixed_windows_are_accounted() {
        let config = sluice_core::config::Config::from_toml(
            r#"
[policies.fw]
algorithm = "fixed_window"
limits = [ { max = 2000, per = "1s" } ]

[policies.two]
algorithm = "fixed_window"
limits = [ { max = 10, per = "1s" }, { max = 100, per = "1m" } ]

[policies.log]
algorithm = "sliding_log"
limits = [ { max = 10, per = "1s" } ]
"#,
            "test.toml",
        )
        .unwrap();
        let of = |name| FixedLimit::of(config.policy(name).unwrap());
        assert_eq!(
            of("fw"),
            Some(FixedLimit {
                max: 2000,
                per_ns: SEC
            })
        );
        assert_eq!(of("two"), None);
        assert_eq!(of("log"), None);
    }
}
