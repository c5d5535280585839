//! Asks that may wait (SPEC §18) in the model: a Wait admitted past the
//! limit, within its room, puts the key into debt; asks without a wait are
//! denied while it lasts, and later Waits queue behind it. Wrong histories
//! of each kind fail, and so does one that passes only if Waits were read
//! as Allows.

use super::*;

fn wait(cost: u64, room: u64) -> Op {
    Op::Wait { cost, room }
}

#[test]
fn a_wait_goes_into_debt_and_later_asks_queue_behind_it() {
    let history = [
        op(0, allow(3), 0, 1, Admitted),
        op(0, allow(1), 2, 3, Denied),
        // Past the limit of 3, within a room of 2: into debt.
        op(0, wait(1, 2), 4, 5, Admitted),
        // In debt: an ask without a wait is denied; a peek too.
        op(0, allow(1), 6, 7, Denied),
        op(0, allow(0), 8, 9, Denied),
        // The next Wait queues behind the first, up to the room.
        op(0, wait(1, 2), 10, 11, Admitted),
        op(0, wait(1, 2), 12, 13, Denied),
        // A longer wait (more room) goes further.
        op(0, wait(1, 3), 14, 15, Admitted),
    ];
    let checked = check(3, &history).unwrap();
    assert_eq!(checked.used, 6);

    // Read as plain allows, the admitted waits are wrong.
    let as_allows = history.map(|r| match r.op {
        Op::Wait { cost, .. } => Recorded {
            op: allow(cost),
            ..r
        },
        _ => r,
    });
    violation(3, &as_allows);
}

#[test]
fn answers_a_debt_cannot_explain_fail() {
    let full = op(0, allow(3), 0, 1, Admitted);
    for (why, wrong) in [
        (
            "an allow admitted in debt",
            [
                op(0, wait(1, 2), 2, 3, Admitted),
                op(0, allow(1), 4, 5, Admitted),
            ],
        ),
        (
            "a wait admitted past its room",
            [
                op(0, wait(2, 2), 2, 3, Admitted),
                op(0, wait(1, 2), 4, 5, Admitted),
            ],
        ),
        (
            "a wait denied within its room",
            [
                op(0, wait(1, 1), 2, 3, Denied),
                op(0, allow(0), 4, 5, Denied),
            ],
        ),
    ] {
        let history = [full, wrong[0], wrong[1]];
        let found = violation(3, &history);
        assert!(found.impossible >= 1, "{why}: {found}");
    }
}

#[test]
fn an_allow_and_a_wait_in_flight_together_pass_in_the_one_legal_order() {
    // Limit 1: the allow must come first (the wait fits after it, in
    // debt); the other way round the allow would find the key in debt.
    let together = [
        op(0, allow(1), 0, 10, Admitted),
        op(1, wait(1, 1), 0, 10, Admitted),
    ];
    check(1, &together).unwrap();
    // Sent after the wait came back, the allow finds the key in debt.
    let after = [
        op(1, wait(1, 1), 0, 10, Admitted),
        op(0, allow(1), 11, 20, Admitted),
    ];
    violation(1, &after);
}

#[test]
fn a_random_legal_history_with_waits_passes_and_one_flipped_wait_fails() {
    // Reserves have no room: thresholds are mixed, and the search runs
    // without its shortcuts for runs of Unknown ops.
    let mix = Mix {
        limit: 1_500,
        hits: 3,
        most_cost: 3,
        burst_every: Some(1_000),
        room: Some(40),
    };
    let history = simulate(0x3a17, 4_000, 16, &mix);
    let waits_in_debt = history
        .iter()
        .filter(|r| matches!(r.op, Op::Wait { .. }))
        .count();
    assert!(waits_in_debt > 1_000, "{waits_in_debt}");
    let started = Instant::now();
    let checked = check(mix.limit, &history).unwrap();
    eprintln!(
        "4,000 ops with waits: {checked:?} in {:?}",
        started.elapsed()
    );

    // The last Wait admitted while everything sent before its return left
    // it within its room, whatever the order: denied, it is wrong.
    let rise = |r: &Recorded| match r.outcome {
        Denied | NotDelivered => 0,
        _ => r.op.cost(),
    };
    let flipped = (0..history.len())
        .filter(|&i| history[i].outcome == Admitted && history[i].op.room() > 0)
        .take_while(|&i| {
            let ret = history[i].ret.expect("answered");
            let sent: u64 = history.iter().filter(|r| r.call <= ret).map(rise).sum();
            sent <= mix.limit + 40
        })
        .last()
        .expect("an early wait");
    let mut broken = history;
    broken[flipped].outcome = Denied;
    assert_eq!(violation(mix.limit, &broken).impossible, flipped);
}
