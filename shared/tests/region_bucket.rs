//! A global token bucket or GCRA split into parts
//! (`sluice_core::region::parts`, docs/REGIONS.md) against a model of
//! three regions on one injected clock: the home's part and its books of
//! what it granted, two other regions' parts and books, and every message
//! between them (requests for slices, their answers, refunds, gifts), each
//! of which may be lost or come late; regions' owners replaced by new ones
//! that keep only the key's counter (journal mode).
//!
//! Two bounds of each of its limits, whatever the link does:
//! - from the start, the regions admit in all at most what one bucket of
//!   the whole limit can have made: `burst + rate × elapsed` (every unit
//!   admitted was taken out of some part first, and units only move);
//! - over any span, at most `burst + rate × (span + 2 × REGION_LEASE)`
//!   (a unit may be spent up to a lease after it left its part, and a gift
//!   is taken up to a lease after it left).

use proptest::prelude::*;
use sluice_core::budget::{Grant, Refund, REGION_LEASE};
use sluice_core::limit::{Algorithm, Decision, Limit};
use sluice_core::outstanding::{Outstanding, Returned};
use sluice_core::policy::{KeyState, Policy};
use sluice_core::region::global::{home_keeps, Delegates, Demand};
use sluice_core::region::parts::GIFT_FRESH;
use sluice_core::region::{Global, OnCut, RegionName, Scope};
use sluice_core::time::Nanos;
use std::time::Duration;

const KEY: &str = "plan/k";
const MS: u64 = 1_000_000;
const PER_MS: u64 = 1_000;
const REMOTE: [&str; 2] = ["west", "south"];

#[derive(Clone, Debug)]
enum Event {
    HomeAsk(u64),
    RegionAsk(usize, u64),
    /// The oldest request of a region reaches the home, or is lost; its
    /// answer reaches the region, or is lost.
    Request {
        region: usize,
        lost: bool,
        answer_lost: bool,
    },
    /// A region gives back what its slices have left at their end.
    Sweep {
        region: usize,
        lost: bool,
    },
    /// The home asks a region for units back: it takes its spare units
    /// out of its part and sends them.
    Reclaim(usize),
    /// The oldest gift on its way reaches the home, or is lost.
    Gift {
        lost: bool,
    },
    /// A region's owner is replaced (journal mode): its books are gone,
    /// its counter of the key (its part) is not.
    Handover(usize),
    Advance(u64),
}

fn event() -> impl Strategy<Value = Event> {
    let r = 0..REMOTE.len();
    prop_oneof![
        (1..4u64).prop_map(Event::HomeAsk),
        (r.clone(), 1..4u64).prop_map(|(r, c)| Event::RegionAsk(r, c)),
        (r.clone(), any::<bool>(), any::<bool>()).prop_map(|(region, a, b)| Event::Request {
            region,
            lost: a && b,
            answer_lost: a,
        }),
        (r.clone(), any::<bool>()).prop_map(|(region, lost)| Event::Sweep { region, lost }),
        r.clone().prop_map(Event::Reclaim),
        any::<bool>().prop_map(|lost| Event::Gift { lost }),
        r.prop_map(Event::Handover),
        (1..600u64).prop_map(Event::Advance),
    ]
}

struct Model {
    start: Nanos,
    now: Nanos,
    /// The first limit, which paces the books.
    whole: Limit,
    /// Every limit, each of which must hold.
    limits: Vec<Limit>,
    home_part: Policy,
    /// Per region: its part, if its share is a unit or more.
    parts: Vec<Option<Policy>>,
    home_state: KeyState,
    states: Vec<KeyState>,
    books: Outstanding,
    home_demand: (Nanos, Demand),
    delegates: Vec<Delegates>,
    /// Per region: requests on their way (want, sent).
    requests: Vec<Vec<(u64, Nanos)>>,
    /// Gifts on their way: (units, taken out at).
    gifts: Vec<(u64, Nanos)>,
    /// Every unit admitted, by when.
    admitted: Vec<(Nanos, u64)>,
}

/// A bucket of `max` a second with `burst`, and with `second` (max,
/// burst) another one of 5 s: every limit must hold.
fn policy(
    algorithm: Algorithm,
    (max, burst): (u64, u64),
    second: Option<(u64, u64)>,
    weights: [i64; 3],
) -> Policy {
    // A window has no burst, and one of a single limit is not split
    // (it shares itself out at the home, region_global.rs): two.
    let window = algorithm == Algorithm::FixedWindow;
    let with_burst = |b: u64| (!window).then_some(b);
    let second = if window {
        second.or(Some((3 * max, 1)))
    } else {
        second
    };
    let first = Duration::from_millis(PER_MS);
    let mut limits = vec![Limit::new(max, first, with_burst(burst)).unwrap()];
    if let Some((max, b)) = second {
        let per = Duration::from_millis(5 * PER_MS);
        limits.push(Limit::new(max, per, with_burst(b)).unwrap());
    }
    let regions: Vec<String> = ["east", "west", "south"].map(String::from).to_vec();
    let shares: Vec<(String, i64)> = regions.iter().cloned().zip(weights).collect();
    let global = Global::new("east", &regions, &shares, OnCut::Reserved).unwrap();
    Policy::new("plan", algorithm, limits)
        .unwrap()
        .with_scope(Scope::Global(global))
        .unwrap()
}

impl Model {
    fn new(policy: &Policy) -> Model {
        let home = RegionName::new("east").unwrap();
        let home_part = policy.part_in(&home).cloned().unwrap_or(policy.clone());
        let parts: Vec<Option<Policy>> = REMOTE
            .iter()
            .map(|r| policy.part_in(&RegionName::new(r).unwrap()).cloned())
            .collect();
        let start = Nanos(1_000_000 * MS);
        Model {
            start,
            now: start,
            whole: policy.limits()[0].clone(),
            limits: policy.limits().to_vec(),
            home_state: home_part.new_state(),
            states: REMOTE.iter().map(|_| home_part.new_state()).collect(),
            home_part,
            parts,
            books: Outstanding::default(),
            home_demand: (Nanos(0), Demand::default()),
            delegates: REMOTE.iter().map(|_| Delegates::default()).collect(),
            requests: vec![Vec::new(); REMOTE.len()],
            gifts: Vec::new(),
            admitted: Vec::new(),
        }
    }

    fn demand(&mut self) -> &mut Demand {
        let w = self.whole.window_start(self.now);
        if self.home_demand.0 != w {
            self.home_demand = (w, Demand::default());
        }
        &mut self.home_demand.1
    }

    /// What region `r`'s part holds now, of every limit (0 without one).
    fn part_left(&self, r: usize) -> u64 {
        self.parts[r].as_ref().map_or(0, |part| {
            part.inspect(&self.states[r], self.now)
                .iter()
                .map(|l| l.remaining)
                .min()
                .unwrap_or(0)
        })
    }

    fn apply(&mut self, event: Event) {
        let now = self.now;
        match event {
            Event::HomeAsk(cost) => {
                if self
                    .home_part
                    .decide(&mut self.home_state, now, cost)
                    .allowed
                {
                    self.admitted.push((now, cost));
                    self.demand().took(now, cost);
                }
            }
            Event::RegionAsk(r, cost) => {
                let by_part = self.parts[r]
                    .as_ref()
                    .is_some_and(|part| part.decide(&mut self.states[r], now, cost).allowed);
                let left = self.part_left(r);
                let want = if by_part {
                    self.admitted.push((now, cost));
                    self.delegates[r].paid_by_part(KEY, &self.whole, now, cost, left)
                } else {
                    let decided = self.delegates[r].from_slices(KEY, &self.whole, now, cost, left);
                    if decided.decision.allowed {
                        self.admitted.push((now, cost));
                    }
                    decided.want
                };
                if let Some(want) = want {
                    self.delegates[r].asked(KEY, now);
                    self.requests[r].push((want, now));
                }
            }
            Event::Request {
                region,
                lost,
                answer_lost,
            } => {
                if self.requests[region].is_empty() {
                    return;
                }
                let (want, sent) = self.requests[region].remove(0);
                let answer: Option<(Decision, Option<Grant>)> = (!lost).then(|| {
                    let demand = *self.demand();
                    let own = self.home_part.limits()[0].max();
                    let keep = home_keeps(&demand, own, &self.whole, now);
                    let (d, g) =
                        self.home_part
                            .grant_to_region(&mut self.home_state, now, want, keep);
                    if let Some(g) = g.filter(|g| g.units > 0) {
                        self.books.granted(KEY, g.taken_at, g.units);
                    }
                    (d, g)
                });
                if let Some((d, g)) = answer.filter(|_| !answer_lost) {
                    self.delegates[region].answered(KEY, sent, now, g.as_ref(), &d);
                }
            }
            Event::Sweep { region, lost } => {
                for (_, refund) in self.delegates[region].sweep(now) {
                    if !lost {
                        self.take_refund(refund);
                    }
                }
            }
            Event::Reclaim(r) => {
                let left = self.part_left(r);
                let spare = self.delegates[r].spare(KEY, &self.whole, now, left);
                if let (Some(part), true) = (&self.parts[r], spare > 0) {
                    part.record(&mut self.states[r], now, spare);
                    self.gifts.push((spare, now));
                }
            }
            Event::Gift { lost } => {
                if self.gifts.is_empty() {
                    return;
                }
                let (units, taken_at) = self.gifts.remove(0);
                if !lost && now <= taken_at.saturating_add(GIFT_FRESH) {
                    // Into the window the units left, for a window's part.
                    self.home_part
                        .refund(&mut self.home_state, now, units, taken_at);
                }
            }
            Event::Handover(r) => {
                self.delegates[r] = Delegates::default();
                self.requests[r].clear();
            }
            Event::Advance(ms) => self.now = Nanos(now.0 + ms * MS),
        }
    }

    fn take_refund(&mut self, refund: Refund) {
        if let Ok(Returned::Known) = self.books.refund(KEY, &refund, self.now) {
            self.home_part.refund(
                &mut self.home_state,
                self.now,
                refund.units,
                refund.taken_at,
            );
        }
    }

    /// Checks both bounds of every limit over what was admitted so far.
    fn check(&self) -> Result<(), String> {
        self.limits.iter().try_for_each(|limit| {
            self.check_limit(limit)?;
            match self.home_part.algorithm() {
                Algorithm::FixedWindow => self.check_windows(limit),
                _ => Ok(()),
            }
        })
    }

    /// A fixed window's: at most `max` in every window of `limit`.
    fn check_windows(&self, limit: &Limit) -> Result<(), String> {
        let mut windows: std::collections::BTreeMap<Nanos, u64> = Default::default();
        for (at, cost) in &self.admitted {
            *windows.entry(limit.window_start(*at)).or_default() += cost;
        }
        match windows.iter().find(|(_, n)| **n > limit.max()) {
            Some((start, n)) => Err(format!(
                "{n} in the window at {start:?}, over {}",
                limit.max()
            )),
            None => Ok(()),
        }
    }

    fn check_limit(&self, limit: &Limit) -> Result<(), String> {
        // Units one bucket of the whole limit makes in `span` (rounded up).
        let made_in = |span: Nanos| {
            let made = u128::from(limit.max()) * u128::from(span.0);
            made.div_ceil(u128::from(limit.per().0)) as u64
        };
        let burst = limit.burst();
        let total: u64 = self.admitted.iter().map(|(_, c)| c).sum();
        let cap = burst + made_in(self.now.saturating_sub(self.start));
        if total > cap {
            return Err(format!("{total} admitted in all, over {cap}"));
        }
        let slack = Nanos(2 * REGION_LEASE.0);
        for (i, (from, _)) in self.admitted.iter().enumerate() {
            let mut sum = 0;
            for (at, cost) in &self.admitted[i..] {
                sum += cost;
                let cap = burst + made_in(at.saturating_sub(*from).saturating_add(slack));
                if sum > cap {
                    return Err(format!(
                        "{sum} admitted from {from:?} to {at:?}, over {cap}"
                    ));
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_regions_never_admit_more_than_one_bucket_of_the_limit(
        algorithm in prop_oneof![
            Just(Algorithm::TokenBucket),
            Just(Algorithm::Gcra),
            Just(Algorithm::FixedWindow),
        ],
        max in 3..120u64,
        burst in 1..120u64,
        second in proptest::option::of((3..200u64, 1..120u64)),
        weights in [1..4i64, 1..4i64, 1..4i64],
        events in proptest::collection::vec(event(), 1..400),
    ) {
        let mut model = Model::new(&policy(algorithm, (max, burst), second, weights));
        for event in events {
            model.apply(event.clone());
            if let Err(e) = model.check() {
                prop_assert!(false, "{e} after {event:?}");
            }
        }
    }
}

/// Linked, nothing lost, the home asking hard and one region asking
/// little: the quiet region gets all it asks for, and the home, by
/// reclaims, most of what the quiet region does not use (far more than
/// its own part's rate).
#[test]
fn a_busy_home_gets_what_a_quiet_region_does_not_use() {
    let policy = policy(Algorithm::TokenBucket, (100, 100), None, [1, 1, 1]);
    let mut model = Model::new(&policy);
    let mut quiet_admitted = 0;
    for step in 0..10_000u64 {
        for _ in 0..3 {
            model.apply(Event::HomeAsk(1));
        }
        if step % 100 == 0 {
            let before = model.admitted.len();
            model.apply(Event::RegionAsk(0, 1));
            quiet_admitted += model.admitted.len() - before;
        }
        if step % 50 == 0 {
            for region in 0..REMOTE.len() {
                model.apply(Event::Reclaim(region));
            }
        }
        if step % 50 == 25 {
            while !model.gifts.is_empty() {
                model.apply(Event::Gift { lost: false });
            }
        }
        model.apply(Event::Advance(1));
    }
    model.check().unwrap();
    assert_eq!(quiet_admitted, 100, "the quiet region asked 100 times");
    // 10 s of a bucket of 100 a second: ~1,100 in all; the home's part
    // alone makes ~334 + 34.
    let total: u64 = model.admitted.iter().map(|(_, c)| c).sum();
    assert!(total >= 900, "{total} admitted in all");
}
