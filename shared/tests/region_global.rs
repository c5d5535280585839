//! A global fixed window (`sluice_core::region::global`, docs/REGIONS.md)
//! against a model of three regions on one injected clock: the home's
//! state and books of what it granted, two delegates, and the messages
//! between them, each of which may be lost, and delivered late in any
//! order, and delegates replaced by new owners that keep only the key's
//! counter (journal mode). Whatever the link does (cut, requests or
//! answers lost, refunds and reclaims lost or late), the units admitted in
//! one window over all regions never pass `max`.

use proptest::prelude::*;
use sluice_core::budget::{Grant, Refund};
use sluice_core::limit::{Algorithm, Decision, Limit};
use sluice_core::outstanding::{Outstanding, Returned};
use sluice_core::policy::{KeyState, Policy};
use sluice_core::region::global::{home_keeps, remote_shares, Delegates, Demand};
use sluice_core::region::{Global, OnCut, RegionName};
use sluice_core::time::Nanos;
use std::collections::BTreeMap;
use std::time::Duration;

const KEY: &str = "plan/k";
const MS: u64 = 1_000_000;
const WINDOW_MS: u64 = 1_000;
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
    /// The home asks a region for its share back; the refund may be lost.
    Reclaim {
        region: usize,
        lost: bool,
    },
    /// A region's owner is replaced (journal mode): its books are gone,
    /// its counter of the key (share spent or given back) is not.
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
        (r.clone(), any::<bool>()).prop_map(|(region, lost)| Event::Reclaim { region, lost }),
        r.prop_map(Event::Handover),
        (1..300u64).prop_map(Event::Advance),
    ]
}

struct Model {
    now: Nanos,
    policy: Policy,
    limit: Limit,
    global: Global,
    home: RegionName,
    remote: Vec<RegionName>,
    state: KeyState,
    books: Outstanding,
    home_demand: (Nanos, Demand),
    delegates: Vec<Delegates>,
    /// Per region: what its own counter of the key recorded of its share,
    /// by window.
    recorded: Vec<BTreeMap<Nanos, u64>>,
    /// Per region: requests on their way (want, sent).
    requests: Vec<Vec<(u64, Nanos)>>,
    /// Units admitted per window (by its start), over all regions.
    admitted: BTreeMap<Nanos, u64>,
}

impl Model {
    fn new(max: u64, weights: [i64; 3]) -> Model {
        let limit = Limit::new(max, Duration::from_millis(WINDOW_MS), None).unwrap();
        let regions: Vec<String> = ["east", "west", "south"].map(String::from).to_vec();
        let shares: Vec<(String, i64)> = regions.iter().cloned().zip(weights).collect();
        let global = Global::new("east", &regions, &shares, OnCut::Reserved).unwrap();
        let policy = Policy::new("plan", Algorithm::FixedWindow, vec![limit.clone()]).unwrap();
        let start = Nanos(1_000_000 * MS);
        Model {
            now: start,
            state: policy.new_state(),
            policy,
            limit,
            global,
            home: RegionName::new("east").unwrap(),
            remote: REMOTE.iter().map(|r| RegionName::new(r).unwrap()).collect(),
            books: Outstanding::default(),
            home_demand: (Nanos(0), Demand::default()),
            delegates: REMOTE.iter().map(|_| Delegates::default()).collect(),
            recorded: vec![BTreeMap::new(); REMOTE.len()],
            requests: vec![Vec::new(); REMOTE.len()],
            admitted: BTreeMap::new(),
        }
    }

    fn window(&self) -> Nanos {
        self.limit.window_start(self.now)
    }

    /// The home opens the key's window before anything it decides.
    fn open(&mut self) {
        let shares = remote_shares(&self.global, &self.home, self.limit.max());
        if let Some(start) = self.policy.open_at_home(&mut self.state, self.now, shares) {
            self.books.granted(KEY, start, shares);
        }
    }

    fn demand(&mut self) -> &mut Demand {
        let w = self.window();
        if self.home_demand.0 != w {
            self.home_demand = (w, Demand::default());
        }
        &mut self.home_demand.1
    }

    fn admit(&mut self, cost: u64) {
        *self.admitted.entry(self.window()).or_default() += cost;
    }

    fn take_refund(&mut self, refund: Refund) {
        if let Ok(Returned::Known) = self.books.refund(KEY, &refund, self.now) {
            self.policy
                .refund(&mut self.state, self.now, refund.units, refund.taken_at);
        }
    }

    fn share(&self, region: usize) -> u64 {
        self.global.reserved(&self.remote[region], self.limit.max())
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::HomeAsk(cost) => {
                self.open();
                let d = self.policy.decide(&mut self.state, self.now, cost);
                if d.allowed {
                    self.admit(cost);
                    let now = self.now;
                    self.demand().took(now, cost);
                }
            }
            Event::RegionAsk(r, cost) => {
                let share = self.share(r);
                let w = self.window();
                let recorded = self.recorded[r].get(&w).copied().unwrap_or(0);
                let decided =
                    self.delegates[r].decide(KEY, &self.limit, share, self.now, cost, || recorded);
                *self.recorded[r].entry(w).or_default() += decided.from_share;
                if decided.decision.allowed {
                    self.admit(cost);
                }
                if let Some(want) = decided.want {
                    self.delegates[r].asked(KEY, self.now);
                    self.requests[r].push((want, self.now));
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
                    self.open();
                    let home_share = self.global.reserved(&self.home, self.limit.max());
                    let now = self.now;
                    let demand = *self.demand();
                    let keep = home_keeps(&demand, home_share, &self.limit, now);
                    let (d, g) = self
                        .policy
                        .grant_to_region(&mut self.state, now, want, keep);
                    if let Some(g) = g.filter(|g| g.units > 0) {
                        self.books.granted(KEY, g.taken_at, g.units);
                    }
                    (d, g)
                });
                if let Some((d, g)) = answer.filter(|_| !answer_lost) {
                    self.delegates[region].answered(KEY, sent, self.now, g.as_ref(), &d);
                }
            }
            Event::Sweep { region, lost } => {
                for (_, refund) in self.delegates[region].sweep(self.now) {
                    if !lost {
                        self.take_refund(refund);
                    }
                }
            }
            Event::Reclaim { region, lost } => {
                let share = self.share(region);
                let w = self.window();
                let recorded = self.recorded[region].get(&w).copied().unwrap_or(0);
                let refund =
                    self.delegates[region]
                        .reclaim(KEY, &self.limit, share, w, self.now, || recorded);
                if let Some(refund) = refund {
                    *self.recorded[region].entry(w).or_default() += refund.units;
                    if !lost {
                        self.take_refund(refund);
                    }
                }
            }
            Event::Handover(region) => {
                self.delegates[region] = Delegates::default();
                self.requests[region].clear();
            }
            Event::Advance(ms) => self.now = Nanos(self.now.0 + ms * MS),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn no_window_admits_more_than_max_whatever_the_link_does(
        max in 3..200u64,
        weights in [1..4i64, 1..4i64, 1..4i64],
        events in proptest::collection::vec(event(), 1..300),
    ) {
        let mut model = Model::new(max, weights);
        for event in events {
            model.apply(event.clone());
            for (window, admitted) in &model.admitted {
                prop_assert!(
                    *admitted <= max,
                    "window {window:?}: {admitted} admitted over {max} after {event:?}"
                );
            }
        }
    }
}

/// With nothing lost and every region asking in turn, a window admits
/// close to `max`: the shares and slices all end up spent.
#[test]
fn linked_and_nothing_lost_a_window_fills_up() {
    let mut model = Model::new(100, [1, 1, 1]);
    for _ in 0..200 {
        model.apply(Event::HomeAsk(1));
        for region in 0..REMOTE.len() {
            model.apply(Event::RegionAsk(region, 1));
            model.apply(Event::Request {
                region,
                lost: false,
                answer_lost: false,
            });
        }
        model.apply(Event::Advance(1));
    }
    let admitted = model.admitted.values().next().copied().unwrap_or(0);
    assert!((95..=100).contains(&admitted), "{admitted} of 100");
}

/// In shadow mode the home still grants other regions slices: each
/// region answers its own asks in the mode (a client's local budget gets
/// none in shadow, since only the owner tells a shadow denial).
#[test]
fn a_shadow_home_grants_slices_to_other_regions() {
    use sluice_core::policy::Mode;
    let limit = Limit::new(100, Duration::from_millis(WINDOW_MS), None).unwrap();
    let policy = Policy::new("plan", Algorithm::FixedWindow, vec![limit])
        .unwrap()
        .with_mode(Mode::Shadow);
    let mut state = policy.new_state();
    let now = Nanos(1_000_000 * MS);
    let (decision, grant) = policy.grant_to_region(&mut state, now, 10, 0);
    assert!(decision.within_limits());
    assert_eq!(grant.map(|g| g.units), Some(10));
    // Once nothing is left, none.
    policy.record(&mut state, now, 90);
    let (_, grant) = policy.grant_to_region(&mut state, now, 10, 0);
    assert!(grant.is_none_or(|g| g.units == 0), "{grant:?}");
}
