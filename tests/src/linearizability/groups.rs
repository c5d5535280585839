//! The two-level model of a group (SPEC §17): could one exact limiter,
//! deciding an organisation's pool and its members' own limits together,
//! all or nothing, have given the answers a test recorded?
//!
//! Apart from the one-key checker ([`super::check`]) because a group's ops
//! are not one key's: an ask of member `m` is admitted iff both the org's
//! `used + cost <= org_limit` and `m`'s `used + cost <= member_limit`, and
//! then counts at both; a denial counts nothing at either. So members'
//! histories cannot be checked apart (they share the pool) and the one-key
//! search's shortcuts (argued for one counter) do not carry over. The
//! histories a group test records are short (hundreds of asks), so this is
//! the plain search of Wing & Gong with Lowe's memoization: at each step,
//! linearize an op called before the first return still pending, legal for
//! the model where it stands; backtrack when none is; never visit the same
//! set of linearized ops twice (the state is a function of the set, since
//! every op's effect is fixed by its answer: an [`Outcome::Unknown`] ask
//! linearized is one that counted, and one left out never took effect).

use super::history::Outcome;
use std::collections::HashSet;

/// One ask of a group's member, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupAsk {
    pub member: usize,
    pub cost: u64,
    /// When it was sent (ns, the recorder's monotonic clock).
    pub call: u64,
    /// When its answer came back; `None` for an Unknown one.
    pub ret: Option<u64>,
    pub outcome: Outcome,
}

/// The group's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimits {
    pub org: u64,
    pub member: u64,
    pub members: usize,
}

/// A history that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupChecked {
    pub ops: usize,
    /// The org's `used` at the end of the linearization found.
    pub org_used: u64,
    pub steps: u64,
}

/// The most steps a check takes before giving up.
pub const GROUP_MAX_STEPS: u64 = 5_000_000;

struct State {
    done: Vec<u64>,
    org: u64,
    members: Vec<u64>,
    answered_done: usize,
}

impl State {
    fn is_done(&self, i: usize) -> bool {
        self.done[i / 64] & (1 << (i % 64)) != 0
    }

    fn flip(&mut self, i: usize) {
        self.done[i / 64] ^= 1 << (i % 64);
    }

    fn fits(&self, limits: GroupLimits, ask: &GroupAsk) -> bool {
        self.org + ask.cost <= limits.org && self.members[ask.member] + ask.cost <= limits.member
    }

    /// Linearizes `ask` (index `i`), or undoes it.
    fn apply(&mut self, i: usize, ask: &GroupAsk, undo: bool) {
        self.flip(i);
        let counts = matches!(ask.outcome, Outcome::Admitted | Outcome::Unknown);
        let answered = ask.outcome != Outcome::Unknown;
        if undo {
            if counts {
                self.org -= ask.cost;
                self.members[ask.member] -= ask.cost;
            }
            self.answered_done -= usize::from(answered);
        } else {
            if counts {
                self.org += ask.cost;
                self.members[ask.member] += ask.cost;
            }
            self.answered_done += usize::from(answered);
        }
    }
}

/// Checks a group's history (NotDelivered asks are dropped first).
pub fn check_group(limits: GroupLimits, history: &[GroupAsk]) -> Result<GroupChecked, String> {
    let mut ops: Vec<GroupAsk> = history
        .iter()
        .copied()
        .filter(|a| a.outcome != Outcome::NotDelivered)
        .collect();
    if let Some(bad) = ops.iter().find(|a| {
        a.member >= limits.members
            || (a.outcome != Outcome::Unknown && a.ret.is_none_or(|r| r < a.call))
            || a.outcome == Outcome::Done
    }) {
        return Err(format!("bad history: {bad:?}"));
    }
    ops.sort_by_key(|a| a.call);
    let answered = ops.iter().filter(|a| a.outcome != Outcome::Unknown).count();
    let mut state = State {
        done: vec![0; ops.len().div_ceil(64)],
        org: 0,
        members: vec![0; limits.members],
        answered_done: 0,
    };
    let mut seen: HashSet<Vec<u64>> = HashSet::new();
    // Each frame: the candidates at that point and the next to try; the
    // op linearized to get below it.
    let mut stack: Vec<(Vec<usize>, usize, Option<usize>)> =
        vec![(candidates(&ops, &state, limits), 0, None)];
    let (mut steps, mut deepest, mut blocked) = (0u64, 0usize, None);
    while let Some((cands, next, _)) = stack.last_mut() {
        if state.answered_done == answered {
            return Ok(GroupChecked {
                ops: ops.len(),
                org_used: state.org,
                steps,
            });
        }
        steps += 1;
        if steps > GROUP_MAX_STEPS {
            return Err(format!(
                "the group search gave up after {steps} steps on {} ops",
                ops.len()
            ));
        }
        if *next >= cands.len() {
            let (_, _, via) = stack.pop().expect("a frame");
            if let Some(i) = via {
                state.apply(i, &ops[i], true);
            }
            continue;
        }
        let i = cands[*next];
        *next += 1;
        state.apply(i, &ops[i], false);
        if !seen.insert(state.done.clone()) {
            state.apply(i, &ops[i], true);
            continue;
        }
        if state.answered_done > deepest {
            deepest = state.answered_done;
            blocked = first_pending(&ops, &state);
        }
        let below = candidates(&ops, &state, limits);
        stack.push((below, 0, Some(i)));
    }
    let blamed = blocked.or_else(|| first_pending(&ops, &state));
    Err(format!(
        "not linearizable (org {}, member {}, {} asks): at most {deepest} answered asks \
         linearize; no order explains {}",
        limits.org,
        limits.member,
        ops.len(),
        blamed.map_or_else(|| "?".to_string(), |i| format!("ask #{i} {:?}", ops[i])),
    ))
}

/// The answered op not linearized yet whose answer is due first.
fn first_pending(ops: &[GroupAsk], state: &State) -> Option<usize> {
    (0..ops.len())
        .filter(|&i| !state.is_done(i) && ops[i].outcome != Outcome::Unknown)
        .min_by_key(|&i| ops[i].ret)
}

/// The ops that may be linearized next: called before the first return
/// still pending, and legal where they stand (an admission or an Unknown
/// ask that counts must fit, a denial must not).
fn candidates(ops: &[GroupAsk], state: &State, limits: GroupLimits) -> Vec<usize> {
    let Some(due) = first_pending(ops, state).and_then(|i| ops[i].ret) else {
        return Vec::new();
    };
    let mut out: Vec<usize> = (0..ops.len())
        .take_while(|&i| ops[i].call < due)
        .filter(|&i| !state.is_done(i))
        .filter(|&i| {
            let fits = state.fits(limits, &ops[i]);
            match ops[i].outcome {
                Outcome::Admitted | Outcome::Unknown => fits,
                Outcome::Denied => !fits,
                Outcome::Done | Outcome::NotDelivered => false,
            }
        })
        .collect();
    // Answers due soonest first.
    out.sort_by_key(|&i| ops[i].ret.unwrap_or(u64::MAX));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: GroupLimits = GroupLimits {
        org: 3,
        member: 2,
        members: 2,
    };

    fn ask(member: usize, call: u64, ret: u64, outcome: Outcome) -> GroupAsk {
        GroupAsk {
            member,
            cost: 1,
            call,
            ret: (outcome != Outcome::Unknown).then_some(ret),
            outcome,
        }
    }

    use Outcome::{Admitted, Denied, Unknown};

    #[test]
    fn concurrent_asks_that_fill_a_member_then_the_org_pass() {
        let history = [
            ask(0, 0, 10, Admitted),
            ask(0, 1, 11, Admitted),
            // Member 0 full, the org not.
            ask(0, 20, 21, Denied),
            ask(1, 5, 30, Admitted),
            // The org full (3), member 1 not.
            ask(1, 31, 32, Denied),
        ];
        let checked = check_group(LIMITS, &history).unwrap();
        assert_eq!(checked.org_used, 3);
    }

    #[test]
    fn an_org_over_its_pool_fails() {
        let history = [
            ask(0, 0, 10, Admitted),
            ask(0, 1, 11, Admitted),
            ask(1, 2, 12, Admitted),
            ask(1, 20, 21, Admitted),
        ];
        let e = check_group(LIMITS, &history).unwrap_err();
        assert!(
            e.contains("not linearizable") && e.contains("ask #3"),
            "{e}"
        );
    }

    #[test]
    fn a_denial_with_room_at_both_levels_fails_and_an_unknown_can_explain_one() {
        let denied_with_room = [ask(0, 0, 10, Admitted), ask(1, 20, 21, Denied)];
        assert!(check_group(LIMITS, &denied_with_room).is_err());
        // Two asks of member 1 that may have counted (a timeout): member 1
        // may be full, and its denial explained.
        let explained = [
            ask(1, 0, 0, Unknown),
            ask(1, 1, 0, Unknown),
            ask(1, 20, 21, Denied),
        ];
        assert!(check_group(LIMITS, &explained).is_ok());
        // One is not enough: the org (3) and member 1 (2) still have room.
        assert!(check_group(LIMITS, &explained[1..]).is_err());
    }

    #[test]
    fn an_order_that_respects_real_time_is_needed() {
        // Member 0's admission returned before member 1's call: it comes
        // first, so member 1's later denial (org room left: 2) fails.
        let history = [ask(0, 0, 1, Admitted), ask(1, 5, 6, Denied)];
        assert!(check_group(LIMITS, &history).is_err());
        // Overlapping with two admissions of member 1 that filled it: fine.
        let history = [
            ask(1, 0, 10, Admitted),
            ask(1, 0, 10, Admitted),
            ask(1, 5, 12, Denied),
            ask(0, 11, 13, Admitted),
        ];
        assert!(check_group(LIMITS, &history).is_ok());
    }
}
