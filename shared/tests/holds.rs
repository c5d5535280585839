//! Holds (SPEC §13) against a model: whatever reserves, settles,
//! extends and ends come in, never more counted than a fixed window's
//! `max` in a window, never more live slots than `concurrency`, a denied
//! reserve changes nothing, every hold ends once, and a reserve's check
//! foretells it.

use proptest::prelude::*;
use sluice_core::holds::{self, End, Hold, HoldId, Reservation, Reserved, Settle};
use sluice_core::limit::{Algorithm, Limit};
use sluice_core::outstanding::Outstanding;
use sluice_core::policy::{KeyState, Policy};
use sluice_core::time::Nanos;
use std::collections::BTreeMap;
use std::time::Duration;

const SEC: u64 = 1_000_000_000;
const KEY: &str = "llm/user-1";

fn policy(algorithm: Algorithm, max: u64, per: Duration) -> Policy {
    Policy::new("llm", algorithm, vec![Limit::new(max, per, None).unwrap()]).unwrap()
}

fn reservation(id: u128, cost: u64, ttl_s: u64, end: End, concurrency: Option<u32>) -> Reservation {
    Reservation {
        within: Nanos::ZERO,
        cost,
        ttl: Nanos(ttl_s * SEC),
        id: HoldId::new(id),
        end,
        concurrency,
    }
}

fn used(policy: &Policy, state: &KeyState, now: Nanos) -> u64 {
    policy.inspect(state, now)[0].used
}

#[test]
fn a_settle_for_less_gives_back_and_one_for_more_counts_the_excess() {
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 1_000, Duration::from_secs(60));
        let mut state = policy.new_state();
        let mut table = Outstanding::default();
        let now = Nanos(1_000 * 60 * SEC);
        let r = reservation(1, 400, 30, End::Charge, None);
        let Ok(Reserved::Held { decision, hold }) =
            holds::reserve(&policy, &mut state, &mut table, KEY, now, &r)
        else {
            panic!("{algorithm}: reserved");
        };
        assert!(decision.allowed, "{algorithm}");
        assert_eq!(used(&policy, &state, now), 400, "{algorithm}: held counts");
        let settle = Settle {
            id: hold.id,
            cost: 150,
            concurrency: None,
        };
        // At the same instant: a bucket refills nothing meanwhile.
        let later = now;
        let (after, settled) =
            holds::settle(&policy, &mut state, &mut table, KEY, later, &settle).unwrap();
        assert_eq!(settled.units, 400);
        assert_eq!(used(&policy, &state, later), 150, "{algorithm}: given back");
        assert!(after.allowed);
        assert_eq!(
            holds::settle(&policy, &mut state, &mut table, KEY, later, &settle),
            None,
            "{algorithm}: a hold is settled once"
        );

        let r = reservation(2, 100, 30, End::Charge, None);
        let Ok(Reserved::Held { hold, .. }) =
            holds::reserve(&policy, &mut state, &mut table, KEY, later, &r)
        else {
            panic!("{algorithm}: reserved again");
        };
        let more = Settle {
            id: hold.id,
            cost: 2_000,
            concurrency: None,
        };
        holds::settle(&policy, &mut state, &mut table, KEY, later, &more).unwrap();
        assert_eq!(
            used(&policy, &state, later),
            policy.limits()[0].reported().min(2_150),
            "{algorithm}: the excess is counted like a hit, past the limit"
        );
    }
}

#[test]
fn a_concurrency_slot_is_taken_by_a_reserve_and_freed_by_its_end() {
    // Limits that never bind: the slots decide.
    let only_slots = policy(Algorithm::TokenBucket, 1_000_000, Duration::from_secs(1));
    let mut state = only_slots.new_state();
    let mut table = Outstanding::default();
    let now = Nanos(100 * SEC);
    let mut held = Vec::new();
    for id in 0..3 {
        let r = reservation(id, 1, 10, End::Charge, Some(3));
        match holds::reserve(&only_slots, &mut state, &mut table, KEY, now, &r).unwrap() {
            Reserved::Held { decision, hold } => {
                assert_eq!(decision.remaining, 2 - id as u64);
                held.push(hold);
            }
            Reserved::Denied(d) => panic!("slot {id}: {d:?}"),
        }
    }
    let before = state.clone();
    let r = reservation(9, 1, 10, End::Charge, Some(3));
    let Reserved::Denied(d) =
        holds::reserve(&only_slots, &mut state, &mut table, KEY, now, &r).unwrap()
    else {
        panic!("a fourth slot")
    };
    assert_eq!((d.limit, d.remaining), (3, 0));
    assert_eq!(d.retry_after, Nanos(10 * SEC), "until the first slot ends");
    assert_eq!(
        state, before,
        "refused for a slot: the limits are not asked"
    );

    // One settled, one expired: both slots free at once.
    let settle = Settle {
        id: held[0].id,
        cost: 1,
        concurrency: Some(3),
    };
    holds::settle(&only_slots, &mut state, &mut table, KEY, now, &settle).unwrap();
    let expired = Nanos(now.0 + 10 * SEC);
    assert_eq!(table.holds_of(KEY, expired).slots, 0, "ended at their end");
    assert_eq!(table.ended(expired).len(), 2);
    assert_eq!(table.ended(expired).len(), 0, "each ends once");
}

#[test]
fn a_reserve_refused_by_a_limit_takes_no_slot() {
    let policy = policy(Algorithm::FixedWindow, 10, Duration::from_secs(60));
    let mut state = policy.new_state();
    let mut table = Outstanding::default();
    let now = Nanos(600 * SEC);
    let r = reservation(1, 11, 10, End::Charge, Some(5));
    assert!(matches!(
        holds::reserve(&policy, &mut state, &mut table, KEY, now, &r),
        Ok(Reserved::Denied(_))
    ));
    assert_eq!(table.holds_of(KEY, now).live, 0);
    assert_eq!(used(&policy, &state, now), 0);
}

/// A reserve that may wait (SPEC §18) is kept for its start, in order,
/// its ttl running from the start; one whose start would come after its
/// wait is denied, taking nothing; a slot is never waited for.
#[test]
fn a_reserve_that_may_wait_is_kept_for_its_start_and_its_ttl_runs_from_it() {
    // One every 100 ms, one at a time.
    let policy = Policy::new(
        "llm",
        Algorithm::Gcra,
        vec![Limit::new(10, Duration::from_secs(1), Some(1)).unwrap()],
    )
    .unwrap()
    .with_max_wait(Duration::from_secs(1))
    .unwrap();
    let mut state = policy.new_state();
    let mut table = Outstanding::default();
    let now = Nanos(1_000 * SEC);
    let ms = |n: u64| Nanos(n * 1_000_000);
    let waiting = |id: u128, within: Nanos| Reservation {
        within,
        ..reservation(id, 1, 5, End::Release, None)
    };
    let mut starts = Vec::new();
    for id in 0..3 {
        let r = waiting(id, ms(250));
        match holds::reserve(&policy, &mut state, &mut table, KEY, now, &r).unwrap() {
            Reserved::Held { decision, hold } => {
                assert!(decision.allowed);
                assert_eq!(hold.ends_at, Nanos(now.0 + decision.wait.0 + 5 * SEC));
                assert_eq!(hold.taken_at, now, "taken at once");
                starts.push(decision.wait);
            }
            denied => panic!("{id}: {denied:?}"),
        }
    }
    assert_eq!(starts, [Nanos::ZERO, ms(100), ms(200)]);
    // The next start is 300 ms off: past a wait of 250 ms, denied.
    let before = state.clone();
    let r = waiting(3, ms(250));
    let Reserved::Denied(d) =
        holds::reserve(&policy, &mut state, &mut table, KEY, now, &r).unwrap()
    else {
        panic!("denied");
    };
    assert!(!d.allowed && d.wait == Nanos::ZERO, "{d:?}");
    assert_eq!(state, before, "a denied reserve takes nothing");
    assert_eq!(table.holds_of(KEY, now).live, 3);

    // With a concurrency of 3 taken, a wait does not wait for a slot.
    let slotted = policy
        .clone()
        .with_holding(holds::Holding {
            concurrency: Some(3),
            ..Default::default()
        })
        .unwrap();
    let mut table = Outstanding::default();
    let mut state = slotted.new_state();
    for id in 0..3 {
        let r = Reservation {
            concurrency: Some(3),
            ..waiting(id, ms(1_000))
        };
        let held = holds::reserve(&slotted, &mut state, &mut table, KEY, now, &r).unwrap();
        let Reserved::Held { decision, .. } = held else {
            panic!("{id}: held");
        };
        assert_eq!(
            decision.wait,
            ms(100 * id as u64),
            "the wait survives the slots"
        );
    }
    let r = Reservation {
        concurrency: Some(3),
        ..waiting(3, ms(1_000))
    };
    assert!(matches!(
        holds::reserve(&slotted, &mut state, &mut table, KEY, now, &r),
        Ok(Reserved::Denied(_))
    ));
}

#[test]
fn a_released_hold_goes_back_a_charged_one_stays() {
    let policy = policy(Algorithm::Gcra, 100, Duration::from_secs(100));
    let mut table = Outstanding::default();
    let now = Nanos(1_000 * SEC);
    for (end, left) in [(End::Release, 0u64), (End::Charge, 40)] {
        let mut state = policy.new_state();
        let r = reservation(7, 40, 5, end, None);
        holds::reserve(&policy, &mut state, &mut table, KEY, now, &r).unwrap();
        let at = Nanos(now.0 + 5 * SEC);
        let ended = table.ended(at);
        assert_eq!(ended.len(), 1);
        holds::end(&policy, &mut state, at, &ended[0].1);
        // GCRA refills 1 a second meanwhile: 5 of the 40 are back by then.
        let expect = left.saturating_sub(5);
        assert_eq!(used(&policy, &state, at), expect, "{end:?}");
    }
}

#[test]
fn an_extended_hold_lives_on_and_the_table_carries_every_live_hold() {
    let policy = policy(Algorithm::SlidingLog, 50, Duration::from_secs(60));
    let mut state = policy.new_state();
    let mut table = Outstanding::default();
    let now = Nanos(60 * SEC);
    let r = reservation(3, 5, 2, End::Release, Some(2));
    let Ok(Reserved::Held { hold, .. }) =
        holds::reserve(&policy, &mut state, &mut table, KEY, now, &r)
    else {
        panic!("reserved")
    };
    let moved = table
        .extend(KEY, hold.id, Nanos(now.0 + 30 * SEC), Nanos(now.0 + SEC))
        .unwrap();
    assert_eq!(moved.ends_at, Nanos(now.0 + 30 * SEC));
    assert!(table.ended(Nanos(now.0 + 10 * SEC)).is_empty());
    let carried = table.carried_holds();
    let json = serde_json::to_string(&carried).unwrap();
    let mut next = Outstanding::default();
    next.take_over_holds(&serde_json::from_str::<Vec<_>>(&json).unwrap());
    assert_eq!(next.holds_of(KEY, now), table.holds_of(KEY, now));
    assert_eq!(
        next.settle(KEY, hold.id, Nanos(now.0 + 10 * SEC))
            .map(|h| h.units),
        Some(5)
    );
    // A reset forgets them: their slots are free.
    table.forget(KEY);
    assert_eq!(table.holds_len(), 0);
}

#[derive(Clone, Debug)]
enum Op {
    Reserve {
        cost: u64,
        ttl_s: u64,
        release: bool,
    },
    /// Settle the `n`-th hold ever reserved (may be gone) for `cost`.
    Settle {
        n: usize,
        cost: u64,
    },
    Extend {
        n: usize,
        ttl_s: u64,
    },
    Wait {
        s: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..=12u64, 1..=20u64, any::<bool>())
            .prop_map(|(cost, ttl_s, release)| Op::Reserve { cost, ttl_s, release }),
        3 => (0..16usize, 0..=14u64).prop_map(|(n, cost)| Op::Settle { n, cost }),
        1 => (0..16usize, 1..=20u64).prop_map(|(n, ttl_s)| Op::Extend { n, ttl_s }),
        2 => (1..=15u64).prop_map(|s| Op::Wait { s }),
    ]
}

/// A model hold: what it holds and in which window it was counted.
#[derive(Clone, Copy, Debug)]
struct Modeled {
    units: u64,
    window: u64,
    ends_at: u64,
    release: bool,
}

proptest! {
    /// Fixed window of 20 a minute, 3 slots: the owner's count equals the
    /// model's (reserved − given back + charged beyond, per window), which
    /// stays within 20 while no settle charges more than it held; slots
    /// never pass 3; each hold ends exactly once (settled or at its end).
    #[test]
    fn holds_keep_the_limit_the_slots_and_end_once(ops in prop::collection::vec(op(), 1..60)) {
        const MAX: u64 = 20;
        const PER: u64 = 60 * SEC;
        let policy = policy(Algorithm::FixedWindow, MAX, Duration::from_secs(60));
        let mut state = policy.new_state();
        let mut table = Outstanding::default();
        let mut now = 6_000 * SEC;
        let mut ids: Vec<HoldId> = Vec::new();
        let mut live: BTreeMap<HoldId, Modeled> = BTreeMap::new();
        let mut counted: BTreeMap<u64, u64> = BTreeMap::new();
        let mut charged_beyond = false;
        let end_due = |now: u64, state: &mut KeyState, table: &mut Outstanding,
                       live: &mut BTreeMap<HoldId, Modeled>, counted: &mut BTreeMap<u64, u64>| {
            for (_, hold) in table.ended(Nanos(now)) {
                let m = live.remove(&hold.id).expect("a hold ends once");
                prop_assert!(m.ends_at <= now);
                holds::end(&policy, state, Nanos(now), &hold);
                if m.release && m.window == now - now % PER {
                    *counted.get_mut(&m.window).unwrap() -= m.units;
                }
            }
            prop_assert!(live.values().all(|m| m.ends_at > now), "every due hold ended");
            Ok(())
        };
        for op in ops {
            match op {
                Op::Wait { s } => {
                    now += s * SEC;
                    end_due(now, &mut state, &mut table, &mut live, &mut counted)?;
                }
                Op::Reserve { cost, ttl_s, release } => {
                    let id = HoldId::new(ids.len() as u128 + 1);
                    let end = if release { End::Release } else { End::Charge };
                    let r = reservation(0, cost, ttl_s, end, Some(3));
                    let r = Reservation { id, ..r };
                    let before = (state.clone(), table.holds_of(KEY, Nanos(now)));
                    let window = now - now % PER;
                    let in_window = *counted.get(&window).unwrap_or(&0);
                    let checked = holds::check_reserve(&policy, &mut state, &table, KEY, Nanos(now), &r);
                    let looked = policy.inspect(&state, Nanos(now));
                    prop_assert_eq!(policy.inspect(&before.0, Nanos(now)), looked, "a check takes nothing");
                    let reserved = holds::reserve(&policy, &mut state, &mut table, KEY, Nanos(now), &r).unwrap();
                    let decided = match reserved {
                        Reserved::Held { decision, .. } | Reserved::Denied(decision) => decision,
                    };
                    prop_assert_eq!(checked.allowed, decided.allowed, "the check foretells the reserve");
                    if !decided.allowed {
                        prop_assert_eq!(checked, decided, "a denial as the reserve gives it");
                    }
                    match reserved {
                        Reserved::Held { hold, .. } => {
                            prop_assert!(live.len() < 3, "a fourth slot");
                            prop_assert!(in_window + cost <= MAX || charged_beyond);
                            *counted.entry(window).or_default() += cost;
                            live.insert(hold.id, Modeled { units: cost, window, ends_at: now + ttl_s * SEC, release });
                            ids.push(hold.id);
                        }
                        Reserved::Denied(_) => {
                            prop_assert_eq!(&before.0, &state, "a denied reserve changes nothing");
                            prop_assert_eq!(before.1, table.holds_of(KEY, Nanos(now)));
                            prop_assert!(live.len() >= 3 || in_window + cost > MAX || cost == 0);
                            ids.push(id);
                        }
                    }
                }
                Op::Settle { n, cost } => {
                    let Some(&id) = ids.get(n) else { continue };
                    let s = Settle { id, cost, concurrency: Some(3) };
                    let settled = holds::settle(&policy, &mut state, &mut table, KEY, Nanos(now), &s);
                    match (settled, live.remove(&id)) {
                        (Some((_, hold)), Some(m)) => {
                            prop_assert_eq!(hold.units, m.units);
                            let window = now - now % PER;
                            if m.window == window {
                                let c = counted.get_mut(&window).unwrap();
                                *c = *c - m.units + cost;
                                charged_beyond |= cost > m.units;
                            } else if cost > m.units {
                                *counted.entry(window).or_default() += cost - m.units;
                                charged_beyond = true;
                            }
                        }
                        (None, None) => {}
                        (got, model) => prop_assert!(false, "settle {:?}: {:?} vs model {:?}", id, got, model),
                    }
                }
                Op::Extend { n, ttl_s } => {
                    let Some(&id) = ids.get(n) else { continue };
                    let ends_at = now + ttl_s * SEC;
                    let moved = table.extend(KEY, id, Nanos(ends_at), Nanos(now));
                    match (moved, live.get_mut(&id)) {
                        (Some(h), Some(m)) => {
                            prop_assert_eq!(h.ends_at, Nanos(ends_at));
                            m.ends_at = ends_at;
                        }
                        (None, None) => {}
                        (got, model) => prop_assert!(false, "extend {:?}: {:?} vs {:?}", id, got, model),
                    }
                }
            }
            let window = now - now % PER;
            let model = *counted.get(&window).unwrap_or(&0);
            prop_assert_eq!(used(&policy, &state, Nanos(now)), model.min(MAX));
            if !charged_beyond {
                prop_assert!(model <= MAX, "held plus counted within max");
            }
            prop_assert!(table.holds_of(KEY, Nanos(now)).slots <= 3);
            prop_assert_eq!(table.holds_of(KEY, Nanos(now)).live as usize, live.len());
        }
    }
}

#[test]
fn a_check_foretells_a_reserve_that_may_wait_under_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 10, Duration::from_secs(10));
        let mut state = policy.new_state();
        let mut table = Outstanding::default();
        let mut now = Nanos(1_000 * SEC);
        for n in 0..30u128 {
            let r = Reservation {
                within: Nanos(if n % 2 == 0 { 0 } else { 2 * SEC }),
                ..reservation(n + 1, 2, 30, End::Release, Some(4))
            };
            let before = policy.inspect(&state, now);
            let checked = holds::check_reserve(&policy, &mut state, &table, KEY, now, &r);
            let after = policy.inspect(&state, now);
            assert_eq!(before, after, "{algorithm}: a check takes nothing");
            let decided = match holds::reserve(&policy, &mut state, &mut table, KEY, now, &r) {
                Ok(Reserved::Held { decision, .. } | Reserved::Denied(decision)) => decision,
                Err(e) => panic!("{algorithm}: {e}"),
            };
            assert_eq!(checked.allowed, decided.allowed, "{algorithm}: reserve {n}");
            assert_eq!(
                checked.wait, decided.wait,
                "{algorithm}: reserve {n}'s start"
            );
            if !decided.allowed {
                assert_eq!(checked, decided, "{algorithm}: reserve {n}'s denial");
            }
            now = now.saturating_add(Nanos(SEC / 3));
            for (_, hold) in table.ended(now) {
                holds::end(&policy, &mut state, now, &hold);
            }
        }
    }
}

#[test]
fn a_hold_is_found_only_under_its_own_key() {
    let policy = policy(Algorithm::TokenBucket, 10, Duration::from_secs(1));
    let mut state = policy.new_state();
    let mut table = Outstanding::default();
    let r = reservation(42, 1, 10, End::Charge, None);
    let Ok(Reserved::Held { hold, .. }) =
        holds::reserve(&policy, &mut state, &mut table, KEY, Nanos(SEC), &r)
    else {
        panic!()
    };
    let s = Settle {
        id: hold.id,
        cost: 0,
        concurrency: None,
    };
    for other in ["llm/user-2", "other/user-1"] {
        assert_eq!(
            holds::settle(&policy, &mut state, &mut table, other, Nanos(SEC), &s),
            None,
            "{other}"
        );
    }
    assert_eq!(table.holds_len(), 1);
    let _: Hold = hold;
}
