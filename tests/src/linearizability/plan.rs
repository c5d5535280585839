//! A history made ready for the search: validated (a record the test could
//! not have made is bad input, not a violation), NotDelivered ops dropped,
//! the rest in call order with each op's fixed effect on the model, and the
//! call and return events in time order.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};

use super::history::{BadInput, Op, Outcome, Recorded};

/// What a linearized op does to the model, fixed by its answer.
#[derive(Debug, Clone, Copy)]
pub(super) enum Effect {
    /// Answered admitted (an Allow, or a Reserve that opens a hold).
    Admitted {
        opens_hold: bool,
    },
    Denied,
    Hit,
    /// `reserve`: the admitted Reserve op whose hold it closes.
    Settle {
        reserve: u32,
    },
    /// Unknown Allow or Reserve: linearized only where it fits (elsewhere
    /// it counts nothing, the same as leaving it out). Unknown ops of one
    /// `class` (same effect and cost) are interchangeable: `rank` orders
    /// them. An Unknown Reserve that took effect keeps a hold open that no
    /// settle names.
    MaybeFits {
        opens_hold: bool,
        class: u32,
        rank: u32,
    },
    MaybeHit {
        class: u32,
        rank: u32,
    },
    MaybeSettle {
        reserve: u32,
    },
}

/// A delivered op as the search sees it; ops are in call order.
pub(super) struct Planned {
    /// Index in the caller's history, and the op as recorded.
    pub(super) original: usize,
    pub(super) recorded: Recorded,
    pub(super) call: u64,
    /// `None` for Unknown: no deadline.
    pub(super) ret: Option<u64>,
    pub(super) cost: u64,
    /// How far past the limit it may be admitted ([`Op::room`]).
    pub(super) room: u64,
    pub(super) effect: Effect,
    /// Units it adds to `used` when linearized, and takes back (a settle
    /// takes back what its hold held).
    pub(super) add: u64,
    pub(super) sub: u64,
    /// How many ops were called no later than it returned: those that may
    /// be ordered before it (a prefix of the ops in call order).
    pub(super) called_by_ret: usize,
    /// Among the answered ops by return: its place, and how many returned
    /// no later than it.
    pub(super) ret_rank: usize,
    pub(super) returned_by_ret: usize,
    pub(super) zobrist: u128,
}

impl Planned {
    pub(super) fn answered(&self) -> bool {
        self.ret.is_some()
    }

    pub(super) fn rise(&self) -> u64 {
        self.add.saturating_sub(self.sub)
    }

    pub(super) fn fall(&self) -> u64 {
        self.sub.saturating_sub(self.add)
    }

    /// Where an Unknown Allow, Reserve or Hit goes in a run of Unknown ops
    /// taken one after another (see `Search::order_candidates`): Allows and
    /// Reserves first, then Hits, each the costliest first.
    pub(super) fn chain_rank(&self) -> Option<(bool, Reverse<u64>)> {
        match self.effect {
            Effect::MaybeFits { .. } => Some((false, Reverse(self.cost))),
            Effect::MaybeHit { .. } => Some((true, Reverse(self.cost))),
            _ => None,
        }
    }

    /// Salts the cache key of the node this op leads to when it is such an
    /// Unknown op: what may follow it there depends on its rank.
    pub(super) fn chain_salt(&self) -> u128 {
        // Keys far from those of ops (`zobrist_key(op)`, op < 2^32).
        self.chain_rank().map_or(0, |(hit, cost)| {
            zobrist_key(!cost.0.wrapping_mul(2).wrapping_add(u64::from(hit)))
        })
    }
}

/// The history made ready: validated, in call order, as a list of events.
pub(super) struct Plan {
    pub(super) ops: Vec<Planned>,
    pub(super) not_delivered: usize,
    pub(super) classes: usize,
    /// The least and the most `room` of its Allows, Waits and Reserves:
    /// the same when every admission has one threshold (`limit + room`),
    /// as in a history without waits; otherwise the search drops the
    /// shortcuts that need one (see `Search::mixed`).
    pub(super) rooms: (u64, u64),
    /// Events by time, calls before returns at equal times (ops whose
    /// events touch are concurrent): `(op, is_call)`.
    pub(super) events: Vec<(u32, bool)>,
    /// Each op's call and return events, as indices into `events`.
    pub(super) call_event: Vec<u32>,
    pub(super) return_event: Vec<Option<u32>>,
}

impl Plan {
    pub(super) fn new(history: &[Recorded]) -> Result<Plan, BadInput> {
        let bad = |index: usize, reason: &str| BadInput {
            index,
            recorded: history[index],
            reason: reason.to_owned(),
        };
        let mut delivered = Vec::with_capacity(history.len());
        let mut not_delivered = 0;
        for (index, r) in history.iter().enumerate() {
            match (r.op, r.outcome) {
                (_, Outcome::NotDelivered) => {
                    not_delivered += 1;
                    continue;
                }
                (Op::Allow { .. } | Op::Wait { .. } | Op::Reserve { .. }, Outcome::Done)
                | (Op::Hit { .. } | Op::Settle { .. }, Outcome::Admitted | Outcome::Denied) => {
                    return Err(bad(index, "its outcome is not an answer this op can get"));
                }
                _ => {}
            }
            if r.outcome != Outcome::Unknown {
                match r.ret {
                    None => return Err(bad(index, "answered, but with no return time")),
                    Some(ret) if ret < r.call => {
                        return Err(bad(index, "returned before it was called"))
                    }
                    Some(_) => {}
                }
            }
            delivered.push(index);
        }
        delivered.sort_by_key(|&i| (history[i].call, i));

        let mut reserves: HashMap<u64, u32> = HashMap::new();
        for (at, &i) in delivered.iter().enumerate() {
            if let (Op::Reserve { hold, .. }, Outcome::Admitted) =
                (history[i].op, history[i].outcome)
            {
                if reserves.insert(hold, at as u32).is_some() {
                    return Err(bad(i, "a second admitted reserve with this hold label"));
                }
            }
        }
        let mut settled = HashSet::new();
        let mut classes: HashMap<(bool, u64, u64), (u32, u32)> = HashMap::new();
        let mut ops = Vec::with_capacity(delivered.len());
        for (at, &i) in delivered.iter().enumerate() {
            let r = &history[i];
            let cost = r.op.cost();
            let unknown = r.outcome == Outcome::Unknown;
            let (effect, add, sub) = match r.op {
                Op::Settle { hold, cost } => {
                    // The test settles a hold only once its reserve was
                    // answered admitted; anything else is a recording bug.
                    let Some(&reserve) = reserves.get(&hold) else {
                        return Err(bad(i, "settles a hold no reserve was admitted for"));
                    };
                    if !settled.insert(hold) {
                        return Err(bad(i, "settles a hold already settled"));
                    }
                    let reserved = &history[delivered[reserve as usize]];
                    if reserved.ret.is_some_and(|ret| r.call < ret) {
                        return Err(bad(i, "settles a hold before its reserve was answered"));
                    }
                    let effect = if unknown {
                        Effect::MaybeSettle { reserve }
                    } else {
                        Effect::Settle { reserve }
                    };
                    (effect, cost, reserved.op.cost())
                }
                Op::Allow { .. } | Op::Wait { .. } | Op::Reserve { .. } | Op::Hit { .. }
                    if unknown =>
                {
                    let hit = matches!(r.op, Op::Hit { .. });
                    let next = classes.len() as u32;
                    let class_of = (hit, cost, r.op.room());
                    let (class, members) = classes.entry(class_of).or_insert((next, 0));
                    let (class, rank) = (*class, *members);
                    *members += 1;
                    let effect = if hit {
                        Effect::MaybeHit { class, rank }
                    } else {
                        let opens_hold = matches!(r.op, Op::Reserve { .. });
                        Effect::MaybeFits {
                            opens_hold,
                            class,
                            rank,
                        }
                    };
                    (effect, cost, 0)
                }
                Op::Hit { .. } => (Effect::Hit, cost, 0),
                Op::Allow { .. } | Op::Wait { .. } | Op::Reserve { .. } => match r.outcome {
                    Outcome::Admitted => {
                        let opens_hold = matches!(r.op, Op::Reserve { .. });
                        (Effect::Admitted { opens_hold }, cost, 0)
                    }
                    _ => (Effect::Denied, 0, 0),
                },
            };
            let ret = if unknown { None } else { r.ret };
            let called_by_ret = match ret {
                Some(ret) => delivered.partition_point(|&j| history[j].call <= ret),
                None => delivered.len(),
            };
            ops.push(Planned {
                original: i,
                recorded: *r,
                call: r.call,
                ret,
                cost,
                room: r.op.room(),
                effect,
                add,
                sub,
                called_by_ret,
                ret_rank: 0,
                returned_by_ret: 0,
                zobrist: zobrist_key(at as u64),
            });
        }
        let mut by_ret: Vec<(u64, usize)> = (ops.iter().enumerate())
            .filter_map(|(at, op)| Some((op.ret?, at)))
            .collect();
        by_ret.sort_unstable();
        for (rank, &(ret, at)) in by_ret.iter().enumerate() {
            ops[at].ret_rank = rank;
            ops[at].returned_by_ret = by_ret.partition_point(|&(r, _)| r <= ret);
        }

        let mut timed: Vec<(u64, bool, u32)> = Vec::with_capacity(2 * ops.len());
        for (at, op) in ops.iter().enumerate() {
            // `false` sorts first: calls before returns at equal times.
            timed.push((op.call, false, at as u32));
            if let Some(ret) = op.ret {
                timed.push((ret, true, at as u32));
            }
        }
        timed.sort_unstable();
        let mut call_event = vec![0; ops.len()];
        let mut return_event = vec![None; ops.len()];
        let events = timed
            .iter()
            .enumerate()
            .map(|(e, &(_, is_return, op))| {
                if is_return {
                    return_event[op as usize] = Some(e as u32);
                } else {
                    call_event[op as usize] = e as u32;
                }
                (op, !is_return)
            })
            .collect();
        let rooms = ops
            .iter()
            .filter(|op| !matches!(op.recorded.op, Op::Hit { .. } | Op::Settle { .. }))
            .map(|op| op.room)
            .fold(None, |seen: Option<(u64, u64)>, room| {
                Some(seen.map_or((room, room), |(lo, hi)| (lo.min(room), hi.max(room))))
            })
            .unwrap_or((0, 0));
        Ok(Plan {
            ops,
            not_delivered,
            classes: classes.len(),
            rooms,
            events,
            call_event,
            return_event,
        })
    }
}

/// A random-looking 128-bit key per op (splitmix64): the fingerprint of a
/// set of ops is the xor of theirs. Two sets share one with probability
/// about 2^-128 per pair: a collision could only prune a branch (a false
/// violation, never a false pass), and would need ~2^64 cached sets.
fn zobrist_key(op: u64) -> u128 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let twice = op.wrapping_mul(2);
    (u128::from(mix(twice)) << 64) | u128::from(mix(twice.wrapping_add(1)))
}

impl Plan {
    /// An answered op that no order can explain, found from sums alone:
    /// the one of these due first, if any. Each is a bound any order
    /// obeys, so a history found here needs no search to fail (the search
    /// would meet it deep down and first try every order above it).
    ///
    /// - A denial, when all that the ops called by its return could add,
    ///   minus what the ops that returned before its call took back, leaves
    ///   room for it.
    /// - An admission, when it and the admissions due by its return, minus
    ///   all that the ops called by then could free, pass the limit.
    /// - An admission, when what the ops that returned before its call
    ///   added, minus all that could be freed by its return, leaves it no
    ///   room.
    /// - A denial, when the admissions sent after it returned (which come
    ///   after it, on a key it found full) cost at least its cost more than
    ///   all that could be freed after it.
    ///
    /// Each op is held to its own threshold, `limit` plus its room (a
    /// Wait's, [`Op::room`]); a bound on several admissions, to the
    /// highest of theirs (the last of them placed fits under its own).
    pub(super) fn contradiction(&self, limit: u64) -> Option<u32> {
        let highest_threshold = limit.saturating_add(self.rooms.1);
        let prefix_sums = |values: &mut dyn Iterator<Item = u64>| {
            let mut sums = vec![0u64];
            for v in values {
                sums.push(sums.last().copied().unwrap_or(0).saturating_add(v));
            }
            sums
        };
        let admitted = |op: &Planned| match op.effect {
            Effect::Admitted { .. } => op.cost,
            _ => 0,
        };
        let is_admitted = |op: &Planned| u64::from(matches!(op.effect, Effect::Admitted { .. }));
        // Over the ops in call order.
        let rise_by_call = prefix_sums(&mut self.ops.iter().map(Planned::rise));
        let fall_by_call = prefix_sums(&mut self.ops.iter().map(Planned::fall));
        let admitted_by_call = prefix_sums(&mut self.ops.iter().map(admitted));
        let admissions_by_call = prefix_sums(&mut self.ops.iter().map(is_admitted));
        // Over the answered ops in return order.
        let mut by_ret: Vec<&Planned> = self.ops.iter().filter(|op| op.answered()).collect();
        by_ret.sort_by_key(|op| op.ret_rank);
        let rets: Vec<u64> = by_ret.iter().filter_map(|op| op.ret).collect();
        let rise_by_ret = prefix_sums(&mut by_ret.iter().map(|op| op.rise()));
        let fall_by_ret = prefix_sums(&mut by_ret.iter().map(|op| op.fall()));
        let admitted_by_ret = prefix_sums(&mut by_ret.iter().map(|op| admitted(op)));
        let unknown_falls: u64 = self
            .ops
            .iter()
            .filter(|op| !op.answered())
            .map(Planned::fall)
            .sum();
        let calls = self.ops.len();

        let mut first: Option<(u64, u32)> = None;
        for (at, op) in self.ops.iter().enumerate() {
            let Some(ret) = op.ret else { continue };
            let returned_before_call = rets.partition_point(|&r| r < op.call);
            let threshold = limit.saturating_add(op.room);
            let impossible = match op.effect {
                Effect::Denied => {
                    // What may come before it adds at most its rises; what
                    // returned before its call certainly takes back its falls.
                    let highest = rise_by_call[op.called_by_ret]
                        .saturating_sub(fall_by_ret[returned_before_call]);
                    let sent_after = op.called_by_ret;
                    let later_admitted = admitted_by_call[calls] - admitted_by_call[sent_after];
                    let later_admissions =
                        admissions_by_call[calls] - admissions_by_call[sent_after];
                    // Ops that need not come before it: returned no earlier
                    // than its call, or never.
                    let later_falls =
                        fall_by_ret[rets.len()] - fall_by_ret[returned_before_call] + unknown_falls;
                    // The last of the later admissions fits under at most
                    // the highest threshold, which may be above this one's.
                    let above = highest_threshold - threshold;
                    highest.saturating_add(op.cost) <= threshold
                        || (later_admissions > 0
                            && later_admitted
                                >= op.cost.saturating_add(later_falls).saturating_add(above))
                }
                Effect::Admitted { .. } => {
                    let falls = fall_by_call[op.called_by_ret];
                    let crowd = admitted_by_ret[op.returned_by_ret];
                    let before = rise_by_ret[returned_before_call].saturating_add(op.cost);
                    crowd.saturating_sub(falls) > highest_threshold
                        || before.saturating_sub(falls) > threshold
                }
                _ => false,
            };
            if impossible && first.is_none_or(|(due, _)| ret < due) {
                first = Some((ret, at as u32));
            }
        }
        first.map(|(_, op)| op)
    }
}
