use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;
use Outcome::{Admitted, Denied, Done, NotDelivered, Unknown};

mod waits;

const MS: u64 = 1_000_000;

/// An answered op from `call` to `ret`, in ms.
fn op(client: usize, op: Op, call: u64, ret: u64, outcome: Outcome) -> Recorded {
    Recorded {
        client,
        op,
        call: call * MS,
        ret: Some(ret * MS),
        outcome,
    }
}

/// An op that never came back, called at `call` ms.
fn lost(client: usize, op: Op, call: u64) -> Recorded {
    Recorded {
        client,
        op,
        call: call * MS,
        ret: None,
        outcome: Unknown,
    }
}

fn allow(cost: u64) -> Op {
    Op::Allow { cost }
}

fn violation(limit: u64, history: &[Recorded]) -> Violation {
    match check(limit, history) {
        Err(CheckError::NotLinearizable(violation)) => *violation,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn sequential_histories_of_each_kind_pass() {
    let history = [
        op(0, allow(2), 0, 1, Admitted),
        op(0, allow(4), 2, 3, Denied),
        op(0, Op::Reserve { cost: 3, hold: 1 }, 4, 5, Admitted),
        op(0, allow(1), 6, 7, Denied),
        op(0, Op::Settle { hold: 1, cost: 1 }, 8, 9, Done),
        op(0, allow(2), 10, 11, Admitted),
        op(0, Op::Hit { cost: 4 }, 12, 13, Done),
        op(0, Op::Reserve { cost: 1, hold: 2 }, 14, 15, Denied),
        // Past the limit even a peek is denied.
        op(0, allow(0), 16, 17, Denied),
    ];
    let checked = check(5, &history).unwrap();
    assert_eq!((checked.ops, checked.unknown, checked.used), (9, 0, 9));
    // The same answers with a limit one higher are wrong.
    violation(6, &history);
}

#[test]
fn overlapping_allows_at_the_limit_pass_in_the_one_legal_order() {
    // The denied ask was sent first; only ordering the admitted one before
    // it explains both answers.
    let overlapping = [
        op(0, allow(1), 0, 10, Denied),
        op(1, allow(1), 5, 15, Admitted),
    ];
    check(1, &overlapping).unwrap();
    // Had the denial come back before the other was sent, the key had room.
    let apart = [
        op(0, allow(1), 0, 4, Denied),
        op(1, allow(1), 5, 15, Admitted),
    ];
    assert_eq!(violation(1, &apart).impossible, 0);
}

#[test]
fn admitted_past_the_limit_fails() {
    let sequential = [
        op(0, allow(1), 0, 1, Admitted),
        op(1, allow(1), 2, 3, Admitted),
        op(0, allow(1), 4, 5, Admitted),
    ];
    let found = violation(2, &sequential);
    assert_eq!(
        (found.impossible, found.prefix_answered, found.prefix_used),
        (2, 2, 2)
    );
    let concurrent = [
        op(0, allow(1), 0, 10, Admitted),
        op(1, allow(1), 1, 10, Admitted),
        op(2, allow(1), 2, 10, Admitted),
    ];
    violation(2, &concurrent);
    check(3, &concurrent).unwrap();
}

#[test]
fn a_denial_while_the_key_had_room_fails() {
    // The bug chased: a count applied twice, so the key denies one unit
    // short of its limit. Admissions of 8 of 10, some concurrent, then a
    // cost-1 ask denied with nothing running beside it.
    let mut history = vec![
        op(0, allow(2), 0, 3, Admitted),
        op(1, allow(2), 1, 4, Admitted),
        op(0, allow(2), 5, 6, Admitted),
        op(1, allow(2), 5, 7, Admitted),
    ];
    history.push(op(2, allow(1), 10, 11, Denied));
    let found = violation(10, &history);
    assert_eq!(
        (found.impossible, found.prefix_answered, found.prefix_used),
        (4, 4, 8)
    );
    // At the limit the same denial is right.
    history.insert(4, op(3, allow(2), 8, 9, Admitted));
    check(10, &history).unwrap();
}

#[test]
fn a_stale_answer_fails() {
    // A denial says the key was full, and it never empties: an admission
    // sent after the denial came back is an answer from a stale count.
    let stale = [
        op(0, allow(1), 0, 10, Admitted),
        op(1, allow(1), 20, 30, Denied),
        op(2, allow(1), 40, 50, Admitted),
    ];
    let found = violation(2, &stale);
    assert_eq!(found.impossible, 1, "{found}");
    // Overlapping the denial, the admission may have come first.
    let overlapping = [
        op(0, allow(1), 0, 10, Admitted),
        op(1, allow(1), 20, 30, Denied),
        op(2, allow(1), 25, 50, Admitted),
    ];
    check(2, &overlapping).unwrap();
}

#[test]
fn a_settle_that_frees_room_makes_a_later_denial_illegal() {
    let reserve = op(0, Op::Reserve { cost: 5, hold: 7 }, 0, 1, Admitted);
    let settle = op(0, Op::Settle { hold: 7, cost: 1 }, 2, 3, Done);
    let after = [reserve, settle, op(1, allow(3), 4, 5, Denied)];
    assert_eq!(violation(5, &after).impossible, 2);
    check(5, &[reserve, settle, op(1, allow(3), 4, 5, Admitted)]).unwrap();
    // Sent while the settle was running, it may have come before it.
    check(5, &[reserve, settle, op(1, allow(3), 2, 5, Denied)]).unwrap();
}

#[test]
fn an_unknown_allow_may_have_taken_effect() {
    // Only the lost ask explains the denial.
    let history = [
        lost(0, allow(1), 0),
        op(1, allow(1), 10, 20, Admitted),
        op(1, allow(1), 30, 40, Denied),
    ];
    let checked = check(2, &history).unwrap();
    assert_eq!(
        (checked.unknown, checked.unknown_taken, checked.used),
        (1, 1, 2)
    );
    // Lost after the denial came back, it cannot explain it.
    let too_late = [
        op(1, allow(1), 10, 20, Admitted),
        op(1, allow(1), 30, 40, Denied),
        lost(0, allow(1), 41),
    ];
    violation(2, &too_late);
}

#[test]
fn an_unknown_allow_may_have_taken_no_effect() {
    let history = [
        lost(0, allow(1), 0),
        op(1, allow(1), 10, 20, Admitted),
        op(1, allow(1), 30, 40, Admitted),
    ];
    let checked = check(2, &history).unwrap();
    assert_eq!((checked.unknown_taken, checked.used), (0, 2));
    // Answered admitted, the same op is one too many.
    let mut answered = history;
    answered[0] = op(0, allow(1), 0, 5, Admitted);
    violation(2, &answered);
}

#[test]
fn an_unknown_allow_legal_neither_way_fails() {
    // Taken before the denial, it leaves no room for the last admission;
    // not taken, the denial had room.
    let history = [
        lost(0, allow(1), 0),
        op(1, allow(1), 10, 20, Admitted),
        op(1, allow(1), 30, 40, Denied),
        op(1, allow(1), 50, 60, Admitted),
    ];
    let found = violation(2, &history);
    assert!([2, 3].contains(&found.impossible), "{found}");
}

#[test]
fn unknown_hits_and_settles_count_or_not() {
    // A lost hit that counted explains the denial.
    let hit = [
        lost(0, Op::Hit { cost: 3 }, 0),
        op(1, allow(1), 10, 11, Denied),
    ];
    assert_eq!(check(3, &hit).unwrap().unknown_taken, 1);
    // A lost settle that freed the hold explains the admission.
    let settle = [
        op(0, Op::Reserve { cost: 3, hold: 1 }, 0, 1, Admitted),
        lost(0, Op::Settle { hold: 1, cost: 0 }, 2),
        op(1, allow(3), 10, 11, Admitted),
    ];
    assert_eq!(check(3, &settle).unwrap().used, 3);
    violation(
        3,
        &settle[..1]
            .iter()
            .chain(&settle[2..])
            .copied()
            .collect::<Vec<_>>(),
    );
}

#[test]
fn not_delivered_ops_are_ignored() {
    let mut history = [
        op(0, Op::Hit { cost: 1 }, 0, 1, NotDelivered),
        op(1, allow(1), 2, 3, Admitted),
        op(0, allow(1), 4, 5, NotDelivered),
    ];
    let checked = check(1, &history).unwrap();
    assert_eq!(
        (checked.ops, checked.not_delivered, checked.used),
        (1, 2, 1)
    );
    history[0].outcome = Done;
    violation(1, &history);
}

#[test]
fn impossible_records_are_bad_input_not_violations() {
    let expect_bad = |history: &[Recorded], index: usize| match check(10, history) {
        Err(CheckError::BadInput(bad)) => assert_eq!(bad.index, index, "{bad}"),
        other => panic!("expected bad input, got {other:?}"),
    };
    let reserve = |outcome| op(0, Op::Reserve { cost: 2, hold: 1 }, 0, 1, outcome);
    let settle = |call| op(0, Op::Settle { hold: 1, cost: 1 }, call, call + 1, Done);
    expect_bad(&[settle(2)], 0);
    expect_bad(&[reserve(Denied), settle(2)], 1);
    expect_bad(&[reserve(Admitted), settle(2), settle(4)], 2);
    expect_bad(&[reserve(Admitted), settle(0)], 1);
    expect_bad(&[op(0, allow(1), 0, 1, Done)], 0);
    expect_bad(&[op(0, Op::Hit { cost: 1 }, 0, 1, Admitted)], 0);
    expect_bad(&[op(0, allow(1), 5, 4, Admitted)], 0);
    check(10, &[reserve(Admitted), settle(2)]).unwrap();
}

#[test]
fn the_display_shows_the_window_around_the_impossible_op() {
    let history = [
        op(0, allow(1), 1, 2, Admitted),
        op(1, allow(1), 3, 9, Denied),
        op(2, Op::Hit { cost: 1 }, 4, 5, Done),
        op(0, allow(1), 6, 7, Admitted),
        op(3, allow(1), 20, 21, Denied),
    ];
    let found = violation(2, &history);
    let text = found.to_string();
    assert!(
        text.contains("no order explains op #3 (client 0: allow 1, admitted"),
        "{text}"
    );
    assert!(
        text.contains("3 answered ops and 0 unknown ones taken, leaving used 2 of 2"),
        "{text}"
    );
    let marked: Vec<&str> = text.lines().filter(|line| line.starts_with("=>")).collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(
        marked[0].contains("5.000") && marked[0].contains("6.000"),
        "{text}"
    );
    // Op 1 overlaps it; the hit returned before it was sent.
    let rows: Vec<usize> = found.window.iter().map(|row| row.index).collect();
    assert_eq!(rows, [1, 3], "{text}");
    assert_eq!(
        format!("{:?}", CheckError::NotLinearizable(Box::new(found))),
        text
    );
}

#[test]
fn a_contradiction_no_order_avoids_is_found_without_a_search_of_every_order() {
    // 40 concurrent hits, too many to fit, then an admission sent after
    // they all came back: no order avoids it, and only once all 40 are
    // placed would the search meet it, after trying their 2^40 subsets.
    let mut history: Vec<Recorded> = (0..40)
        .map(|client| op(client, Op::Hit { cost: 1 }, 0, 100 + client as u64, Done))
        .collect();
    history.push(op(40, allow(1), 200, 201, Admitted));
    let started = Instant::now();
    let found = violation(10, &history);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        (found.impossible, found.prefix_answered),
        (40, 40),
        "{found}"
    );
}

#[test]
fn a_pathological_history_gives_up_within_its_budget() {
    // 60 lost asks of costs 1,010 to 1,600 (none the sum of others), then a
    // denial that needs the key at 9,991 or more and an admission that
    // needs it at 9,999 at most. Only the lost asks can fill it, and their
    // sums are all multiples of 10: no order works, no sum shows it, and
    // the search tries every subset that stays within the limit.
    let mut history: Vec<Recorded> = (0..60)
        .map(|client| lost(client, allow(1_010 + 10 * client as u64), 0))
        .collect();
    history.push(op(60, allow(10), 10, 11, Denied));
    history.push(op(60, allow(1), 20, 21, Admitted));
    let started = Instant::now();
    match check_with(10_000, &history, Budget { max_steps: 100_000 }) {
        Err(CheckError::GaveUp(gave_up)) => assert_eq!(gave_up.steps, 100_000, "{gave_up}"),
        other => panic!("expected to give up, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // With one lost ask of cost 1,005 among them, 10,000 - 5 is reachable
    // and the history is legal.
    history[0].op = allow(1_005);
    check(10_000, &history).unwrap();
}

/// xorshift64: a seeded RNG, enough for test histories.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn per_mille(&mut self, n: u64) -> bool {
        self.below(1000) < n
    }
}

/// What a simulated history is made of.
struct Mix {
    limit: u64,
    /// Hits among the asks that are not settles, in per cent (25 are
    /// reserves, the rest allows).
    hits: u64,
    /// Costs of allows and hits go up to this, of reserves 2 more; 1 makes
    /// every cost 1.
    most_cost: u64,
    /// Every this many ops, all asks in flight are lost (a worker killed).
    burst_every: Option<usize>,
    /// With a room, every allow is a Wait of that room (SPEC §18).
    room: Option<u64>,
}

/// A legal history: `clients` clients each send one op at a time; each op
/// takes effect at a random point of its span, where the model answers it.
/// Some are lost (Unknown: half of those take effect) or not delivered
/// (and settles not delivered are sent again).
fn simulate(seed: u64, ops: usize, clients: usize, mix: &Mix) -> Vec<Recorded> {
    struct Flight {
        op: Op,
        call: u64,
        at: u64,
        ret: u64,
        fate: Outcome,
    }
    let mut rng = XorShift(seed);
    let cost = |rng: &mut XorShift, most: u64| {
        if mix.most_cost == 1 {
            1
        } else {
            1 + rng.below(most)
        }
    };
    let mut next_hold = 0;
    let mut launch = |rng: &mut XorShift, holding: Option<(u64, u64)>, after: u64| {
        let op = match holding {
            Some((hold, held)) => Op::Settle {
                hold,
                cost: rng.below(held + 2),
            },
            None => match rng.below(100) {
                n if n + mix.hits < 75 => match mix.room {
                    Some(room) => Op::Wait {
                        cost: cost(rng, mix.most_cost),
                        room,
                    },
                    None => allow(cost(rng, mix.most_cost)),
                },
                n if n < 75 => Op::Hit {
                    cost: cost(rng, mix.most_cost),
                },
                _ => {
                    next_hold += 1;
                    Op::Reserve {
                        cost: cost(rng, mix.most_cost + 2),
                        hold: next_hold,
                    }
                }
            },
        };
        let call = after + rng.below(100_000);
        let ret = call + 20_000 + rng.below(3 * MS);
        let fate = match rng.below(1000) {
            0..2 => Unknown,
            2..3 => NotDelivered,
            _ => Done,
        };
        let at = call + rng.below(ret - call + 1);
        Flight {
            op,
            call,
            at,
            ret,
            fate,
        }
    };
    let mut used = 0u64;
    let mut holds: HashMap<u64, u64> = HashMap::new();
    let mut holding: Vec<Option<(u64, u64)>> = vec![None; clients];
    let mut flights: Vec<Flight> = (0..clients)
        .map(|c| launch(&mut rng, holding[c], 0))
        .collect();
    let mut history = Vec::with_capacity(ops);
    while history.len() < ops {
        if mix
            .burst_every
            .is_some_and(|every| history.len() % every == every / 2)
        {
            for f in flights.iter_mut().filter(|f| f.fate == Done) {
                f.fate = Unknown;
            }
        }
        let client = (0..clients)
            .min_by_key(|&c| flights[c].at)
            .expect("clients");
        let f = &flights[client];
        let takes_effect = match f.fate {
            NotDelivered => false,
            Unknown => rng.per_mille(500),
            _ => true,
        };
        let fits = used + f.op.cost() <= mix.limit + f.op.room();
        let answer = match f.op {
            Op::Allow { cost } | Op::Wait { cost, .. } if takes_effect && fits => {
                used += cost;
                Admitted
            }
            Op::Reserve { cost, hold } if takes_effect && fits => {
                used += cost;
                holds.insert(hold, cost);
                Admitted
            }
            Op::Allow { .. } | Op::Wait { .. } | Op::Reserve { .. } => Denied,
            Op::Hit { cost } => {
                used += if takes_effect { cost } else { 0 };
                Done
            }
            Op::Settle { hold, cost } => {
                if takes_effect {
                    used = used - holds.remove(&hold).expect("open") + cost;
                }
                Done
            }
        };
        let outcome = if f.fate == Done { answer } else { f.fate };
        holding[client] = match (f.op, outcome) {
            (Op::Reserve { cost, hold }, Admitted) => Some((hold, cost)),
            // Not delivered: the client sends its settle again.
            (Op::Settle { .. }, NotDelivered) => holding[client],
            (Op::Settle { .. }, _) => None,
            _ => holding[client],
        };
        let lost_for_good = outcome == Unknown && rng.per_mille(500);
        history.push(Recorded {
            client,
            op: f.op,
            call: f.call,
            ret: (!lost_for_good).then_some(f.ret),
            outcome,
        });
        flights[client] = launch(&mut rng, holding[client], f.ret);
    }
    history
}

#[test]
fn a_large_random_legal_history_passes_and_one_flipped_answer_fails() {
    // Mixed costs, and the key fills about halfway, with Unknown ops of
    // all kinds pending: the hard part is choosing which took effect.
    let mix = Mix {
        limit: 12_000,
        hits: 3,
        most_cost: 3,
        burst_every: None,
        room: None,
    };
    let history = simulate(0x5eed, 20_000, 24, &mix);
    let unknown = history.iter().filter(|r| r.outcome == Unknown).count();
    assert!(unknown >= 20, "{unknown} unknown ops");
    let started = Instant::now();
    let checked = check(mix.limit, &history).unwrap();
    let took = started.elapsed();
    eprintln!("20,000 ops: {checked:?} in {took:?}");
    assert_eq!(checked.unknown, unknown);
    assert!(took < Duration::from_secs(20), "took {took:?}");

    // Flip the last admission that had room whatever the order: all that
    // was sent before it returned could not have filled the key.
    let rise = |r: &Recorded| match r.outcome {
        Denied | NotDelivered => 0,
        _ => r.op.cost(),
    };
    let flipped = (0..history.len())
        .filter(|&i| history[i].outcome == Admitted && matches!(history[i].op, Op::Allow { .. }))
        .take_while(|&i| {
            let ret = history[i].ret.expect("answered");
            let before: u64 = history.iter().filter(|r| r.call <= ret).map(rise).sum();
            before <= mix.limit
        })
        .last()
        .expect("an early admission");
    assert!(
        flipped > 1000,
        "flipped #{flipped}: the key filled too soon"
    );
    let mut broken = history.clone();
    broken[flipped].outcome = Denied;
    let started = Instant::now();
    let found = violation(mix.limit, &broken);
    eprintln!("flipped #{flipped}: found in {:?}", started.elapsed());
    assert_eq!(found.impossible, flipped, "{found}");
}

#[test]
fn bursts_of_lost_asks_as_in_a_kill_pass() {
    // Every 5,000 ops all 24 asks in flight are lost, as when a worker is
    // killed; then the key fills.
    let mix = Mix {
        limit: 6_000,
        hits: 3,
        most_cost: 1,
        burst_every: Some(5_000),
        room: None,
    };
    let history = simulate(0xb0057, 20_000, 24, &mix);
    let checked = check(mix.limit, &history).unwrap();
    assert!(checked.unknown >= 80, "{checked:?}");
}

#[test]
fn an_unknown_allow_that_only_fit_before_a_hit() {
    // The denial needs the lost ask, which fit only before the hit filled
    // the key, and was sent before the denial was.
    let history = [
        op(0, allow(5), 0, 1, Admitted),
        lost(1, allow(5), 2),
        op(2, Op::Hit { cost: 3 }, 10, 20, Done),
        op(0, allow(1), 30, 40, Denied),
    ];
    assert_eq!(check(10, &history).unwrap().unknown_taken, 1);
    // Sent after the hit came back, it could not have fit.
    let mut late = history;
    late[1].call = 25 * MS;
    violation(10, &late);
}

/// Every order that respects real time, tried one by one: the reference
/// the search and its shortcuts must agree with, for small histories.
fn brute_force(limit: u64, history: &[Recorded]) -> bool {
    fn go(limit: u64, left: &mut Vec<Recorded>, used: u64, open: &mut Vec<(u64, u64)>) -> bool {
        if left.iter().all(|r| r.outcome == Unknown) {
            return true;
        }
        for i in 0..left.len() {
            let r = left[i];
            // Another op that returned before this one was called goes first.
            if left
                .iter()
                .any(|o| o.outcome != Unknown && o.ret.unwrap() < r.call)
            {
                continue;
            }
            let fits = used + r.op.cost() <= limit + r.op.room();
            let (after, opened, closed) = match (r.op, r.outcome) {
                (Op::Allow { cost } | Op::Wait { cost, .. }, Admitted | Unknown) if fits => {
                    (used + cost, None, None)
                }
                (Op::Reserve { cost, hold }, Admitted) if fits => {
                    (used + cost, Some((hold, cost)), None)
                }
                (Op::Reserve { cost, .. }, Unknown) if fits => (used + cost, None, None),
                (Op::Allow { .. } | Op::Wait { .. } | Op::Reserve { .. }, Denied) if !fits => {
                    (used, None, None)
                }
                (Op::Hit { cost }, _) => (used + cost, None, None),
                (Op::Settle { hold, cost }, _) => match open.iter().position(|&(h, _)| h == hold) {
                    Some(at) => (used - open[at].1 + cost, None, Some(at)),
                    None => continue,
                },
                _ => continue,
            };
            left.remove(i);
            let closed = closed.map(|at| open.remove(at));
            open.extend(opened);
            let found = go(limit, left, after, open);
            // By label: an undone settle put its hold back at the end.
            open.retain(|&hold| Some(hold) != opened);
            if let Some(hold) = closed {
                open.push(hold);
            }
            left.insert(i, r);
            if found {
                return true;
            }
        }
        false
    }
    let mut left: Vec<Recorded> = history
        .iter()
        .filter(|r| r.outcome != NotDelivered)
        .copied()
        .collect();
    go(limit, &mut left, 0, &mut Vec::new())
}

/// A small history with random answers, most of them illegal: each client
/// sends its ops one after another, and settles only what it was admitted.
/// `lost_allows` makes most allows Unknown; with `waits`, half the allows
/// are Waits of a room of 0 to 2, so admissions have mixed thresholds.
fn random_small(
    rng: &mut XorShift,
    clients: usize,
    most_cost: u64,
    (lost_allows, waits): (bool, bool),
) -> Vec<Recorded> {
    let mut history = Vec::new();
    for client in 0..clients {
        let mut at = rng.below(4);
        let mut held = None;
        for _ in 0..1 + rng.below(3) {
            let call = at + rng.below(3);
            let ret = call + rng.below(6);
            let cost = rng.below(most_cost + 1);
            let pick = |rng: &mut XorShift, outcomes: &[Outcome]| {
                outcomes[rng.below(outcomes.len() as u64) as usize]
            };
            let (op, outcome) = match (held.take(), rng.below(4)) {
                (Some(hold), 0 | 1) => (Op::Settle { hold, cost }, pick(rng, &[Done, Unknown])),
                (_, 0) => (Op::Hit { cost }, pick(rng, &[Done, Unknown, NotDelivered])),
                (_, 1) => {
                    let hold = (client * 10 + history.len()) as u64;
                    let outcome = pick(rng, &[Admitted, Denied, Unknown]);
                    held = (outcome == Admitted).then_some(hold);
                    (Op::Reserve { cost, hold }, outcome)
                }
                _ if lost_allows => (
                    allow(cost),
                    pick(rng, &[Admitted, Denied, Unknown, Unknown]),
                ),
                _ => (
                    allow(cost),
                    pick(rng, &[Admitted, Admitted, Denied, Unknown]),
                ),
            };
            let op = match op {
                Op::Allow { cost } if waits && rng.below(2) == 0 => Op::Wait {
                    cost,
                    room: rng.below(3),
                },
                op => op,
            };
            history.push(Recorded {
                client,
                op,
                call,
                ret: Some(ret),
                outcome,
            });
            at = ret + 1;
        }
    }
    history
}

#[test]
fn the_search_agrees_with_trying_every_order_on_small_histories() {
    let mut rng = XorShift(0xfeed_beef);
    let (mut legal, mut illegal) = (0, 0);
    for (clients, most_cost, most_limit, kinds, runs) in [
        (3, 2, 4, (false, false), 3_000),
        (4, 3, 7, (true, false), 1_500),
        (3, 2, 4, (false, true), 3_000),
        (4, 3, 7, (true, true), 1_500),
    ] {
        for _ in 0..runs {
            let history = random_small(&mut rng, clients, most_cost, kinds);
            let limit = rng.below(most_limit + 1);
            let expected = brute_force(limit, &history);
            let got = check(limit, &history);
            assert_eq!(
                got.is_ok(),
                expected,
                "limit {limit}, {history:#?}: {got:?}"
            );
            if expected {
                legal += 1;
            } else {
                illegal += 1;
            }
        }
    }
    assert!(
        legal > 1_600 && illegal > 1_600,
        "{legal} legal, {illegal} illegal"
    );
}
