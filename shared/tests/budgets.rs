//! Local budgets against the exact algorithm (`sluice_core::budget`).
//!
//! A model of one hot key: `k` clients, each holding at most one slice and
//! asking the owner for a new one whenever it has none that can pay (the
//! worst case for under-admission: every client always holds what it
//! could), slices given back when they end, and the owner deciding with
//! `Policy::grant` and `Policy::refund` on one state. The same asks go to
//! an exact limiter deciding each at its time. No network delay: the
//! client's lease starts when the owner granted it.
//!
//! What must hold, as docs/CLIENT.md ("Local budgets") says:
//! - fixed window: in every window, at most `max` admitted, and at least
//!   what the exact limiter admitted less `k` slices;
//! - token bucket and GCRA: admitted up to any instant never more than
//!   `burst + rate · elapsed`, in any span at most `burst + rate · (span +
//!   lease)`, and, between two moments at which the bucket is at rest (both
//!   the owner's and the exact one full, and no unspent slice out), at least
//!   what the exact limiter admitted less `k` slices. Not in total: a slice
//!   takes its units early, an ask refused meanwhile is admitted by the
//!   exact bucket, and the budgets make up for it only if the bucket does not
//!   fill to the brim first; once both rest, what was lost stays lost, so
//!   over many busy stretches the losses add up, `k` slices in each.

use proptest::prelude::*;
use sluice_core::budget::{self, Slice};
use sluice_core::policy::{Algorithm, Decision, Limit, Policy};
use sluice_core::time::Nanos;
use std::time::Duration;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const T0: u64 = 1_000_000 * SEC;

#[derive(Clone, Debug)]
struct Case {
    algorithm: Algorithm,
    max: u64,
    burst: u64,
    clients: usize,
    /// Per client: the slice it asks for (what `budget::want` gives it).
    wants: Vec<u64>,
    /// (ns after the previous ask, client)
    asks: Vec<(u64, usize)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            Just(Algorithm::FixedWindow),
            Just(Algorithm::TokenBucket),
            Just(Algorithm::Gcra)
        ],
        5u64..300,
        1usize..=4,
    )
        .prop_flat_map(|(algorithm, max, clients)| {
            let burst = if algorithm == Algorithm::FixedWindow {
                Just(max).boxed()
            } else {
                (1..=max * 2).boxed()
            };
            (
                Just(algorithm),
                Just(max),
                burst,
                Just(clients),
                proptest::collection::vec(1u64..200, clients),
                proptest::collection::vec((0..40 * MS, 0..clients), 1..400),
            )
        })
        .prop_map(|(algorithm, max, burst, clients, asks_per_lease, asks)| {
            let capacity = if algorithm == Algorithm::FixedWindow {
                max
            } else {
                burst
            };
            Case {
                algorithm,
                max,
                burst,
                clients,
                wants: asks_per_lease
                    .into_iter()
                    .map(|a| budget::want(a, 1, capacity))
                    .collect(),
                asks,
            }
        })
}

struct Run {
    /// Time of each admitted ask, with budgets.
    admitted: Vec<u64>,
    /// Time of each admitted ask, exact.
    exact: Vec<u64>,
    /// The largest slice granted.
    largest_slice: u64,
    /// Times of the asks before which the bucket was at rest: both states
    /// fresh, no unspent slice out (token bucket and GCRA).
    rests: Vec<u64>,
}

fn run(case: &Case) -> Run {
    let burst = (case.algorithm != Algorithm::FixedWindow).then_some(case.burst);
    let limit = Limit::new(case.max, Duration::from_secs(1), burst).unwrap();
    let policy = Policy::new("hot", case.algorithm, vec![limit])
        .unwrap()
        .with_local_budget(true)
        .unwrap();
    let mut owner = policy.new_state();
    let mut exact_state = policy.new_state();
    let mut slices: Vec<Option<Slice>> = vec![None; case.clients];
    let mut out = Run {
        admitted: Vec::new(),
        exact: Vec::new(),
        largest_slice: 0,
        rests: Vec::new(),
    };
    let mut now = T0;
    for &(dt, client) in &case.asks {
        now += dt;
        let at = Nanos(now);
        // Slices whose lease ended go back (the client's sweep).
        for slice in slices.iter_mut() {
            if slice.as_ref().is_some_and(|s| s.expired(at)) {
                let r = slice.take().unwrap().refund();
                policy.refund(&mut owner, at, r.units, r.taken_at);
            }
        }
        let at_rest = |state: &mut _| policy.idle_expiry(state, at) == Nanos::ZERO;
        if at_rest(&mut owner)
            && at_rest(&mut exact_state)
            && slices.iter().flatten().all(|s| s.left() == 0)
        {
            out.rests.push(now);
        }
        if policy.decide(&mut exact_state, at, 1).allowed {
            out.exact.push(now);
        }
        if let Some(slice) = slices[client].as_mut() {
            if slice.take(1, at).is_some() {
                out.admitted.push(now);
                continue;
            }
            let r = slices[client].take().unwrap().refund();
            policy.refund(&mut owner, at, r.units, r.taken_at);
        }
        let (decision, grant): (Decision, _) = policy.grant(&mut owner, at, 1, case.wants[client]);
        if decision.allowed {
            out.admitted.push(now);
        }
        if let Some(grant) = grant.filter(|g| g.units > 0) {
            out.largest_slice = out.largest_slice.max(grant.units);
            slices[client] = Some(Slice::new(&grant, at, at, &decision));
        }
    }
    out
}

fn per_window(times: &[u64]) -> std::collections::BTreeMap<u64, u64> {
    let mut windows = std::collections::BTreeMap::new();
    for t in times {
        *windows.entry(t / SEC).or_insert(0) += 1;
    }
    windows
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn budgets_never_admit_past_the_limit_and_lose_at_most_a_slice_per_client(case in case()) {
        let r = run(&case);
        let slack = case.clients as u64 * r.largest_slice;
        prop_assert!(r.largest_slice <= (case.max.max(case.burst) / budget::SHARE_OF_CAPACITY).max(1));
        match case.algorithm {
            Algorithm::FixedWindow => {
                let got = per_window(&r.admitted);
                let exact = per_window(&r.exact);
                for (w, n) in &got {
                    prop_assert!(*n <= case.max, "window {w}: {n} admitted, max {}", case.max);
                }
                for (w, n) in &exact {
                    let g = got.get(w).copied().unwrap_or(0);
                    prop_assert!(g + slack >= *n, "window {w}: {g} admitted, exact {n}, slack {slack}");
                }
            }
            _ => {
                // Rate: max per second, in units per ns.
                let bound = |span: u64| case.burst as u128 + (case.max as u128 * span as u128) / SEC as u128;
                for (i, t) in r.admitted.iter().enumerate() {
                    let count = i as u128 + 1;
                    prop_assert!(count <= bound(t - T0), "{count} admitted by {}", t - T0);
                }
                let lease = budget::LEASE.as_u64();
                for (i, a) in r.admitted.iter().enumerate() {
                    for (j, b) in r.admitted.iter().enumerate().skip(i) {
                        let count = (j - i + 1) as u128;
                        prop_assert!(count <= bound(b - a + lease), "{count} admitted within {} ns", b - a);
                    }
                }
                let stretches = |times: &[u64]| {
                    let mut n = std::collections::BTreeMap::new();
                    for t in times {
                        let rest = r.rests.partition_point(|rest| rest <= t);
                        *n.entry(rest).or_insert(0u64) += 1;
                    }
                    n
                };
                let got = stretches(&r.admitted);
                for (stretch, n) in stretches(&r.exact) {
                    let g = got.get(&stretch).copied().unwrap_or(0);
                    prop_assert!(g + slack >= n,
                        "busy stretch {stretch}: {g} admitted, exact {n}, slack {slack}");
                }
            }
        }
    }
}
