//! The search behind [`check`](super::check): Wing & Gong's, with Lowe's
//! memoization, as porcupine runs it, plus shortcuts this model allows
//! (argued at [`Search::judge`], [`Search::order_candidates`] and
//! [`Search::outdone_run`]). The unit tests check them against a search of
//! every order on thousands of small random histories.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use super::history::{Budget, CheckError, Checked, GaveUp, Recorded, Violation, WindowRow};
use super::plan::{Effect, Plan, Planned};

/// Steps searched when sums alone show a history fails, only to report
/// its longest linearizable prefix.
const REPORT_STEPS: u64 = 100_000;

pub(super) fn run(limit: u64, history: &[Recorded], budget: Budget) -> Result<Checked, CheckError> {
    let plan = Plan::new(history).map_err(CheckError::BadInput)?;
    let contradiction = plan.contradiction(limit);
    let budget = match contradiction {
        Some(_) => Budget {
            max_steps: budget.max_steps.min(REPORT_STEPS),
        },
        None => budget,
    };
    let mut search = Search::new(limit, &plan, budget);
    let ended = search.search();
    match (ended, contradiction) {
        (Ended::Linearized, None) => Ok(search.checked()),
        (Ended::Linearized, Some(op)) => panic!(
            "the linearizability checker contradicts itself: sums say op #{} cannot be \
             answered so, yet the search linearized the history",
            plan.ops[op as usize].original
        ),
        (Ended::OutOfBudget, None) => Err(CheckError::GaveUp(GaveUp {
            steps: search.steps,
            ops: plan.ops.len(),
            deepest_answered: search.deepest.as_ref().map_or(0, |d| d.answered),
        })),
        (_, blame) => Err(CheckError::NotLinearizable(Box::new(
            search.violation(blame),
        ))),
    }
}

/// How a search ended.
enum Ended {
    Linearized,
    /// Every order tried failed.
    Exhausted,
    OutOfBudget,
}

/// Fingerprints are already random: hashing them again is wasted work.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

/// Sums over the ops in call order with point updates, for questions about
/// the ops not yet linearized among those that may come before an op.
struct Fenwick(Vec<u64>);

impl Fenwick {
    fn new(values: impl ExactSizeIterator<Item = u64>) -> Fenwick {
        let mut tree = vec![0; values.len() + 1];
        for (i, v) in values.enumerate() {
            let i = i + 1;
            tree[i] += v;
            let parent = i + (i & i.wrapping_neg());
            if parent < tree.len() {
                tree[parent] += tree[i];
            }
        }
        Fenwick(tree)
    }

    fn update(&mut self, at: usize, value: u64, add: bool) {
        let mut i = at + 1;
        while i < self.0.len() {
            if add {
                self.0[i] += value;
            } else {
                self.0[i] -= value;
            }
            i += i & i.wrapping_neg();
        }
    }

    /// The sum of the first `n` values.
    fn prefix(&self, n: usize) -> u64 {
        let (mut i, mut sum) = (n, 0);
        while i > 0 {
            sum += self.0[i];
            i &= i - 1;
        }
        sum
    }
}

/// How an op stands at a node of the search.
enum Judged {
    /// Not legal here.
    Skip,
    /// Try it: answered ops first, then (`TryLast`) Unknown ones.
    Try,
    TryLast,
    /// If any linearization goes on from here, one goes on with it: take
    /// it and nothing else here.
    Forced,
    /// It can never be placed: this node is a dead end.
    Impossible,
}

/// What the scan of a node's candidates saw, to decide whether taking an
/// Unknown op there can matter (see [`Search::order_candidates`]).
#[derive(Default)]
struct Seen {
    /// The least a denial that needs `used` higher than it is needs.
    least_shortfall: Option<u64>,
    /// The most a Hit or Settle could raise `used` by.
    most_raised: Option<u64>,
    /// The costs of the Unknown Allows, Reserves and Hits not yet taken.
    unknown_costs: u64,
    unknown_settle: bool,
    /// The costs (below 64) of the Unknown Allows or Reserves, and Hits,
    /// not yet taken, as bit sets.
    unknown_fits: u64,
    unknown_hits: u64,
}

/// A node of the search: the ops linearized so far (the path of `via`s).
struct Frame {
    /// The op linearized to reach it; `None` at the root.
    via: Option<u32>,
    /// Its candidates are `candidates[start..end]`; `next` is the next to try.
    start: usize,
    next: usize,
    end: usize,
    /// The op to blame if no candidate works out.
    blocking: u32,
}

/// The deepest node the search reached, for the report.
struct Deepest {
    answered: usize,
    unknown_taken: usize,
    blocking: u32,
    used: u64,
    open_holds: usize,
    linearized: Vec<u64>,
}

/// The sentinel before the first event of the list; event `e` is node
/// `e + 1`, and the tail sentinel comes last.
const HEAD: u32 = 0;

struct Search<'p> {
    plan: &'p Plan,
    limit: u64,
    /// The least and the most threshold of an admission: `limit` plus the
    /// least and the most room ([`Plan::rooms`]).
    low: u64,
    high: u64,
    /// Admissions have different thresholds (Waits beside Allows, or
    /// Waits of different rooms): the shortcuts about runs of Unknown ops,
    /// argued for one threshold, are not taken.
    mixed: bool,
    budget: Budget,
    steps: u64,
    /// The doubly linked list of the events of ops not yet linearized.
    next: Vec<u32>,
    prev: Vec<u32>,
    tail: u32,
    /// The model's state, and the set of linearized ops it is a function of.
    used: u64,
    open_holds: usize,
    linearized: Vec<u64>,
    fingerprint: u128,
    answered_left: usize,
    answered_done: usize,
    unknown_taken: usize,
    /// Unknown ops taken per class: always its first ones.
    taken: Vec<u32>,
    /// Per op not yet linearized: how much it may raise `used`, how much it
    /// may lower it, and whether it is a denial.
    rises: Fenwick,
    falls: Fenwick,
    denials: Fenwick,
    /// The costs of the admissions not yet linearized, by return.
    admissions: Fenwick,
    seen: HashSet<u128, BuildHasherDefault<FingerprintHasher>>,
    frames: Vec<Frame>,
    candidates: Vec<u32>,
    unknown_candidates: Vec<u32>,
    deepest: Option<Deepest>,
}

impl<'p> Search<'p> {
    fn new(limit: u64, plan: &'p Plan, budget: Budget) -> Search<'p> {
        let nodes = plan.events.len() as u32 + 2;
        let is_denial = |op: &Planned| u64::from(matches!(op.effect, Effect::Denied));
        Search {
            plan,
            limit,
            low: limit.saturating_add(plan.rooms.0),
            high: limit.saturating_add(plan.rooms.1),
            mixed: plan.rooms.0 != plan.rooms.1,
            budget,
            steps: 0,
            next: (1..=nodes).collect(),
            prev: (0..nodes).map(|n| n.saturating_sub(1)).collect(),
            tail: nodes - 1,
            used: 0,
            open_holds: 0,
            linearized: vec![0; plan.ops.len().div_ceil(64)],
            fingerprint: 0,
            answered_left: plan.ops.iter().filter(|op| op.answered()).count(),
            answered_done: 0,
            unknown_taken: 0,
            taken: vec![0; plan.classes],
            rises: Fenwick::new(plan.ops.iter().map(Planned::rise)),
            falls: Fenwick::new(plan.ops.iter().map(Planned::fall)),
            denials: Fenwick::new(plan.ops.iter().map(is_denial)),
            admissions: {
                let mut costs = vec![0; plan.ops.iter().filter(|op| op.answered()).count()];
                for op in &plan.ops {
                    if let Effect::Admitted { .. } = op.effect {
                        costs[op.ret_rank] = op.cost;
                    }
                }
                Fenwick::new(costs.into_iter())
            },
            seen: HashSet::default(),
            frames: Vec::new(),
            candidates: Vec::new(),
            unknown_candidates: Vec::new(),
            deepest: None,
        }
    }

    fn search(&mut self) -> Ended {
        if self.answered_left == 0 {
            return Ended::Linearized;
        }
        self.open_node(None);
        while let Some(frame) = self.frames.last_mut() {
            if frame.next == frame.end {
                let frame = self.frames.pop().expect("the loop saw it");
                self.note_dead_end(frame.blocking);
                self.candidates.truncate(frame.start);
                if let Some(op) = frame.via {
                    self.undo(op);
                }
                continue;
            }
            let op = self.candidates[frame.next];
            frame.next += 1;
            if self.steps == self.budget.max_steps {
                return Ended::OutOfBudget;
            }
            self.steps += 1;
            // Reached before means explored before, and it failed.
            let p = &self.plan.ops[op as usize];
            if !self
                .seen
                .insert(self.fingerprint ^ p.zobrist ^ p.chain_salt())
            {
                continue;
            }
            self.apply(op);
            if self.answered_left == 0 {
                return Ended::Linearized;
            }
            self.open_node(Some(op));
        }
        Ended::Exhausted
    }

    /// Pushes the node the search is at, with its candidates: the ops
    /// called before the first return left that [`Self::judge`] finds
    /// legal, or the one op it finds Forced, or none if it finds one
    /// Impossible (or [`Self::outdone_run`] finds the node outdone).
    fn open_node(&mut self, via: Option<u32>) {
        let start = self.candidates.len();
        self.unknown_candidates.clear();
        let mut seen = Seen::default();
        let mut settled = None;
        let mut event = self.next[HEAD as usize];
        while event != self.tail {
            let (op, is_call) = self.plan.events[event as usize - 1];
            if !is_call {
                break;
            }
            match self.judge(op, &mut seen) {
                Judged::Skip => {}
                Judged::Try => self.candidates.push(op),
                Judged::TryLast => self.unknown_candidates.push(op),
                judged @ (Judged::Forced | Judged::Impossible) => {
                    settled = Some((judged, op));
                    break;
                }
            }
            event = self.next[event as usize];
        }
        if settled.is_none() && via.is_some_and(|op| self.outdone_run(op, &seen)) {
            settled = Some((Judged::Impossible, self.first_return()));
        }
        let blocking = match settled {
            Some((Judged::Impossible, op)) => {
                self.candidates.truncate(start);
                op
            }
            Some((_forced, op)) => {
                self.candidates.truncate(start);
                self.candidates.push(op);
                self.first_return()
            }
            None => {
                self.order_candidates(start, via, &seen);
                self.first_return()
            }
        };
        let end = self.candidates.len();
        self.frames.push(Frame {
            via,
            start,
            next: start,
            end,
            blocking,
        });
    }

    /// Keeps, of the candidates found at a node, those worth trying, in the
    /// order most likely to succeed first.
    ///
    /// Unknown Allows, Reserves and Hits are offered only where taking one
    /// can matter. Any linearization can be rewritten so that each of them
    /// it takes is followed by another Unknown op, by a denial that needed
    /// it, or by a Hit or Settle after which it would not have fit: swapped
    /// with anything else that follows it (an admission, a settle that
    /// lowers `used`, a denial that holds without it, a raise it still fits
    /// after), every answer stays right, and one at the very end can be
    /// dropped. So a run of them starts where the op after it is already a
    /// candidate, and there either a denial needs more than `used`, or a
    /// raise plus all the Unknown ops not taken would pass the limit; and
    /// after the run comes that denial (Forced then) or a raise that would
    /// pass the limit. Such a run can also be reordered: Allows first (they
    /// all fit, since the last one did), costliest first, then Hits,
    /// costliest first. So the search builds runs only in that order, which
    /// keeps them short too: a denial a run makes legal is Forced at once,
    /// so the run ends with the cheapest op the denial needed. The cache key
    /// tells apart the nodes reached by such an op, since what may follow
    /// depends on its rank.
    ///
    /// Order, which only decides what is tried first: answered ops whose
    /// answer is due first (their linearization point is the most pressed),
    /// but while a denial needs more, those that raise `used` before the
    /// settles that lower it; then Unknown ops, the costliest that does not
    /// overshoot the need of the neediest denial first, then the cheapest
    /// that does.
    fn order_candidates(&mut self, start: usize, via: Option<u32>, seen: &Seen) {
        let ops = &self.plan.ops;
        let after_run = via
            .filter(|_| !self.mixed)
            .and_then(|v| ops[v as usize].chain_rank());
        if let Some((after_hit, _)) = after_run {
            // One threshold (not mixed): `low` is every op's.
            let (used, limit) = (self.used, self.low);
            let blocks = |p: &Planned| {
                !after_hit
                    && matches!(p.effect, Effect::Hit | Effect::Settle { .. })
                    && used.saturating_add(p.rise()) > limit
            };
            let mut kept = start;
            for at in start..self.candidates.len() {
                let op = self.candidates[at];
                if blocks(&ops[op as usize]) {
                    self.candidates[kept] = op;
                    kept += 1;
                }
            }
            self.candidates.truncate(kept);
        }
        let short = seen.least_shortfall.is_some();
        self.candidates[start..].sort_by_key(|&op| {
            let p = &ops[op as usize];
            (short && p.fall() > 0, p.ret)
        });

        let raise_may_block = seen.most_raised.is_some_and(|raised| {
            let most = self.used.saturating_add(raised);
            most.saturating_add(seen.unknown_costs) > self.low
        });
        let may_matter = self.mixed || short || seen.unknown_settle || raise_may_block;
        self.unknown_candidates
            .retain(|&op| match ops[op as usize].chain_rank() {
                Some(rank) => may_matter && after_run.is_none_or(|after| rank >= after),
                None => true,
            });
        let need = seen.least_shortfall.unwrap_or(u64::MAX);
        self.unknown_candidates.sort_by_key(|&op| {
            let p = &ops[op as usize];
            let hit = matches!(p.effect, Effect::MaybeHit { .. });
            match p.chain_rank() {
                Some(_) if p.cost <= need => (0, need - p.cost, hit),
                Some(_) => (1, p.cost - need, hit),
                None => (2, 0, hit),
            }
        });
        self.candidates.extend_from_slice(&self.unknown_candidates);
    }

    /// Whether the run of Unknown ops just ended by `last` is outdone by
    /// another the search also tries: when some of its ops, `last` among
    /// them, add up to the cost of one Unknown op of their kind not taken,
    /// taking that one instead reaches the same `used` and leaves finer ops
    /// to take later, which can do all the coarser one could. (Its run,
    /// in order, is one the search builds too: none of its ops is cheaper
    /// than `last`.) Costs of 64 and more are left out of this shortcut.
    fn outdone_run(&self, last: u32, seen: &Seen) -> bool {
        if self.mixed {
            return false;
        }
        let last = &self.plan.ops[last as usize];
        let Some((hit, _)) = last.chain_rank() else {
            return false;
        };
        let available = if hit {
            seen.unknown_hits
        } else {
            seen.unknown_fits
        };
        // Sums (below 64) of the ops of that kind taken just before it.
        let mut sums = 1u64;
        for frame in self.frames.iter().rev() {
            let Some(p) = frame.via.map(|op| &self.plan.ops[op as usize]) else {
                break;
            };
            if p.chain_rank().map(|(h, _)| h) != Some(hit) {
                break;
            }
            sums |= sums.checked_shl(p.cost as u32).unwrap_or(0);
        }
        (last.cost + 1..64)
            .any(|cost| available & (1 << cost) != 0 && sums & (1 << (cost - last.cost)) != 0)
    }

    /// The op of the first return event left: it must be linearized before
    /// anything called after it returned.
    fn first_return(&self) -> u32 {
        let mut event = self.next[HEAD as usize];
        while event != self.tail {
            let (op, is_call) = self.plan.events[event as usize - 1];
            if !is_call {
                return op;
            }
            event = self.next[event as usize];
        }
        unreachable!("an answered op is left, so is its return event")
    }

    /// How `op`, called before the first return left, stands here. Each
    /// shortcut keeps the search complete: if any linearization goes on
    /// from here, one goes on through the candidates it leaves. "Before
    /// it" below means the ops not yet linearized that were called no
    /// later than it returned: only those may be ordered before it. An
    /// op's threshold is the limit plus its room (a Wait's, else 0): an
    /// admission fits, and a denial is legal, against its own.
    ///
    /// - A denial legal here is Forced: it changes nothing, so moving it
    ///   here from later in an order changes no other answer.
    /// - An admission that fits, a Hit, or a Settle that raises `used` is
    ///   Forced if `used` plus all the ops before it could add stays within
    ///   the lowest threshold: moved here, every admission it passes still
    ///   fits.
    /// - An admission that fits is Forced if nothing before it can lower
    ///   `used` and its threshold is the lowest: moved here, it raises by
    ///   its cost the ops it passes, whose `used` only grew up to it, where
    ///   it still fit under a threshold no higher than theirs.
    /// - A Settle that lowers `used` is Forced if no denial is before it:
    ///   moved here, it only lowers `used` for admissions and raises.
    /// - A denial that all the ops before it could not fill is Impossible;
    ///   so is an admission when it and the admissions that return before
    ///   it (all of which are placed by then, after ops called no later)
    ///   cannot all fit under the highest threshold, even with all the room
    ///   the ops before it could free.
    /// - Unknown ops of one effect and cost are interchangeable once called
    ///   (none has a deadline), so only the first not yet taken is tried.
    fn judge(&self, op: u32, seen: &mut Seen) -> Judged {
        let p = &self.plan.ops[op as usize];
        let before = p.called_by_ret;
        let threshold = self.limit.saturating_add(p.room);
        let fits = self
            .used
            .checked_add(p.cost)
            .is_some_and(|u| u <= threshold);
        match p.effect {
            Effect::Denied if !fits => Judged::Forced,
            Effect::Denied => {
                let highest = self.used.saturating_add(self.rises.prefix(before));
                if highest.saturating_add(p.cost) <= threshold {
                    return Judged::Impossible;
                }
                let shortfall = (threshold - self.used - p.cost).saturating_add(1);
                seen.least_shortfall =
                    Some(seen.least_shortfall.map_or(shortfall, |s| s.min(shortfall)));
                Judged::Skip
            }
            Effect::Admitted { .. } => {
                // It and the admissions that return before it all fit by
                // then, with at most the room all the ops before it free.
                let crowd = self.admissions.prefix(p.returned_by_ret);
                let falls = self.falls.prefix(before);
                // The last of them placed fits under at most the highest
                // threshold.
                if self.used.saturating_add(crowd).saturating_sub(falls) > self.high {
                    Judged::Impossible
                } else if !fits {
                    Judged::Skip
                } else if (falls == 0 && threshold <= self.low) || self.room_for_all_before(p) {
                    Judged::Forced
                } else {
                    Judged::Try
                }
            }
            Effect::Settle { reserve } if !self.is_linearized(reserve) => Judged::Skip,
            Effect::Settle { .. } if p.rise() == 0 => {
                if self.denials.prefix(before) == 0 {
                    Judged::Forced
                } else {
                    Judged::Try
                }
            }
            Effect::Hit | Effect::Settle { .. } => {
                seen.most_raised = seen.most_raised.max(Some(p.rise()));
                if self.room_for_all_before(p) {
                    Judged::Forced
                } else {
                    Judged::Try
                }
            }
            Effect::MaybeFits { class, rank, .. } => {
                seen.unknown_costs += p.cost;
                seen.unknown_fits |= 1u64.checked_shl(p.cost as u32).unwrap_or(0);
                if fits && self.taken[class as usize] == rank {
                    Judged::TryLast
                } else {
                    Judged::Skip
                }
            }
            Effect::MaybeHit { class, rank } => {
                seen.unknown_costs += p.cost;
                seen.unknown_hits |= 1u64.checked_shl(p.cost as u32).unwrap_or(0);
                if self.taken[class as usize] == rank {
                    Judged::TryLast
                } else {
                    Judged::Skip
                }
            }
            Effect::MaybeSettle { reserve } if self.is_linearized(reserve) => {
                seen.unknown_settle = true;
                Judged::TryLast
            }
            Effect::MaybeSettle { .. } => Judged::Skip,
        }
    }

    /// `used` stays within the lowest threshold (so every admission's)
    /// whatever the ops before `p` (it included) add.
    fn room_for_all_before(&self, p: &Planned) -> bool {
        let rise = self.rises.prefix(p.called_by_ret);
        self.used.checked_add(rise).is_some_and(|u| u <= self.low)
    }

    fn is_linearized(&self, op: u32) -> bool {
        self.linearized[op as usize / 64] & (1 << (op % 64)) != 0
    }

    fn apply(&mut self, op: u32) {
        self.remove_events(op);
        self.account(op, true);
    }

    fn undo(&mut self, op: u32) {
        self.account(op, false);
        self.restore_events(op);
    }

    /// Moves the model and the bookkeeping by `op`'s effect, forward (it is
    /// linearized) or back (it is taken out again).
    fn account(&mut self, op: u32, forward: bool) {
        let p = &self.plan.ops[op as usize];
        let count = |n: &mut usize, up: bool| {
            if up == forward {
                *n += 1;
            } else {
                *n -= 1;
            }
        };
        self.used = if forward {
            self.used + p.add - p.sub
        } else {
            self.used + p.sub - p.add
        };
        self.linearized[op as usize / 64] ^= 1 << (op % 64);
        self.fingerprint ^= p.zobrist;
        self.rises.update(op as usize, p.rise(), !forward);
        self.falls.update(op as usize, p.fall(), !forward);
        match p.effect {
            Effect::Denied => self.denials.update(op as usize, 1, !forward),
            Effect::Admitted { .. } => self.admissions.update(p.ret_rank, p.cost, !forward),
            _ => {}
        }
        if p.answered() {
            count(&mut self.answered_done, true);
            count(&mut self.answered_left, false);
        } else {
            count(&mut self.unknown_taken, true);
        }
        match p.effect {
            Effect::Admitted { opens_hold } | Effect::MaybeFits { opens_hold, .. }
                if opens_hold =>
            {
                count(&mut self.open_holds, true)
            }
            Effect::Settle { .. } | Effect::MaybeSettle { .. } => {
                count(&mut self.open_holds, false)
            }
            _ => {}
        }
        if let Effect::MaybeFits { class, .. } | Effect::MaybeHit { class, .. } = p.effect {
            let taken = &mut self.taken[class as usize];
            *taken = if forward { *taken + 1 } else { *taken - 1 };
        }
    }

    /// Takes `op`'s events out of the list. Dancing links: each keeps its
    /// neighbours, and `restore_events` undoes in the reverse order.
    fn remove_events(&mut self, op: u32) {
        self.unlink(self.plan.call_event[op as usize] + 1);
        if let Some(ret) = self.plan.return_event[op as usize] {
            self.unlink(ret + 1);
        }
    }

    fn restore_events(&mut self, op: u32) {
        if let Some(ret) = self.plan.return_event[op as usize] {
            self.relink(ret + 1);
        }
        self.relink(self.plan.call_event[op as usize] + 1);
    }

    fn unlink(&mut self, node: u32) {
        let (prev, next) = (self.prev[node as usize], self.next[node as usize]);
        self.next[prev as usize] = next;
        self.prev[next as usize] = prev;
    }

    fn relink(&mut self, node: u32) {
        let (prev, next) = (self.prev[node as usize], self.next[node as usize]);
        self.next[prev as usize] = node;
        self.prev[next as usize] = node;
    }

    fn note_dead_end(&mut self, blocking: u32) {
        if self
            .deepest
            .as_ref()
            .is_some_and(|d| d.answered >= self.answered_done)
        {
            return;
        }
        self.deepest = Some(Deepest {
            answered: self.answered_done,
            unknown_taken: self.unknown_taken,
            blocking,
            used: self.used,
            open_holds: self.open_holds,
            linearized: self.linearized.clone(),
        });
    }

    fn checked(&self) -> Checked {
        Checked {
            ops: self.plan.ops.len(),
            unknown: self.plan.ops.iter().filter(|op| !op.answered()).count(),
            unknown_taken: self.unknown_taken,
            not_delivered: self.plan.not_delivered,
            used: self.used,
            steps: self.steps,
        }
    }

    /// The report of a failed search, blaming `blame` if given, else the op
    /// blamed at the deepest dead end.
    fn violation(&self, blame: Option<u32>) -> Violation {
        let deepest = self.deepest.as_ref();
        let blamed = blame.or(deepest.map(|d| d.blocking));
        let ops = &self.plan.ops;
        let impossible = &ops[blamed.expect("a dead end or a contradiction") as usize];
        let in_prefix =
            |j: usize| deepest.is_some_and(|d| d.linearized[j / 64] & (1 << (j % 64)) != 0);
        // Called no later than it returned, returned no earlier than it was
        // called: the ops that may be ordered either side of it.
        let overlapping = (0..impossible.called_by_ret)
            .filter(|&j| ops[j].ret.is_none_or(|ret| ret >= impossible.call));
        let first_answered_call = overlapping
            .clone()
            .find(|&j| ops[j].answered())
            .map_or(impossible.call, |j| ops[j].call);
        let (mut before, mut before_taken) = (0, 0);
        let mut window = Vec::new();
        for j in overlapping {
            if !ops[j].answered() && ops[j].call < first_answered_call {
                before += 1;
                before_taken += usize::from(in_prefix(j));
                continue;
            }
            window.push(WindowRow {
                index: ops[j].original,
                recorded: ops[j].recorded,
                in_prefix: in_prefix(j),
            });
        }
        Violation {
            limit: self.limit,
            ops: ops.len(),
            impossible: impossible.original,
            prefix_answered: deepest.map_or(0, |d| d.answered),
            prefix_unknown_taken: deepest.map_or(0, |d| d.unknown_taken),
            prefix_used: deepest.map_or(0, |d| d.used),
            prefix_open_holds: deepest.map_or(0, |d| d.open_holds),
            window,
            unknown_before_window: before,
            unknown_before_window_taken: before_taken,
            origin: ops.first().map_or(0, |op| op.call),
        }
    }
}
