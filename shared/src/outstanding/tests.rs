//! The table of what an owner granted, against its rules: refunds, bounds, handovers, holds.

use super::*;

fn refund(units: u64, spent: u64, taken_at: u64) -> Refund {
    Refund {
        units,
        spent,
        taken_at: Nanos(taken_at),
    }
}

#[test]
fn a_refund_gives_back_at_most_its_own_slice_once() {
    let mut held = Outstanding::default();
    held.granted("p/k", Nanos(100), 10);
    let over = held.refund("p/k", &refund(8, 3, 100), Nanos(150));
    assert_eq!(
        over,
        Err(Overclaim {
            claimed: 11,
            held: 10,
            taken_at: 100
        })
    );
    assert_eq!(held.len(), 1, "a refused refund changes nothing");
    assert_eq!(
        held.refund("p/k", &refund(7, 3, 100), Nanos(150)),
        Ok(Returned::Known)
    );
    assert!(held.is_empty());
    assert_eq!(
        held.refund("p/k", &refund(7, 3, 100), Nanos(160)),
        Ok(Returned::Unknown),
        "the same slice again gives nothing back"
    );
}

#[test]
fn a_refund_no_grant_explains_gives_nothing_back() {
    let mut held = Outstanding::default();
    held.granted("p/k", Nanos(100), 10);
    for (key, taken_at) in [("p/other", 100), ("p/k", 99), ("q/k", 100)] {
        assert_eq!(
            held.refund(key, &refund(1, 0, taken_at), Nanos(150)),
            Ok(Returned::Unknown),
            "{key} at {taken_at}"
        );
    }
    assert_eq!(held.len(), 1);
}

#[test]
fn slices_granted_together_add_up_and_come_back_apart() {
    let mut held = Outstanding::default();
    held.granted("p/k", Nanos(100), 4);
    held.granted("p/k", Nanos(100), 6);
    held.granted("p/k", Nanos(200), 5);
    assert_eq!(held.len(), 2);
    assert_eq!(
        held.refund("p/k", &refund(2, 2, 100), Nanos(300)),
        Ok(Returned::Known)
    );
    assert_eq!(
        held.refund("p/k", &refund(6, 0, 100), Nanos(300)),
        Ok(Returned::Known)
    );
    assert_eq!(
        held.refund("p/k", &refund(1, 0, 100), Nanos(300)),
        Ok(Returned::Unknown)
    );
    assert_eq!(
        held.refund("p/k", &refund(0, 5, 200), Nanos(300)),
        Ok(Returned::Known)
    );
    assert!(held.is_empty());
}

#[test]
fn slices_are_forgotten_after_a_while_on_reset_and_past_the_bound() {
    let mut held = Outstanding::default();
    held.granted("p/k", Nanos(0), 10);
    let late = Nanos(GRANT_KEPT.0);
    assert_eq!(
        held.refund("p/k", &refund(10, 0, 0), late),
        Ok(Returned::Unknown)
    );
    held.granted("p/k", late, 10);
    held.forget("p/k");
    assert_eq!(
        held.refund("p/k", &refund(1, 0, late.0), late),
        Ok(Returned::Unknown)
    );
    assert_eq!(held.len(), 0);
    for i in 0..=MOST_OUTSTANDING as u64 {
        held.granted(&format!("p/{i}"), Nanos(late.0 + i), 1);
    }
    assert_eq!(held.len(), MOST_OUTSTANDING);
    assert_eq!(
        held.refund("p/0", &refund(1, 0, late.0), late),
        Ok(Returned::Unknown),
        "the oldest went first"
    );
    assert_eq!(
        held.refund("p/1", &refund(1, 0, late.0 + 1), late),
        Ok(Returned::Known)
    );
}

#[test]
fn the_next_owner_takes_over_the_slices_not_back_yet() {
    let mut old = Outstanding::default();
    old.granted("p/a", Nanos(100), 10);
    old.granted("p/a", Nanos(200), 5);
    old.granted("p/b", Nanos(150), 7);
    assert_eq!(
        old.refund("p/a", &refund(3, 2, 100), Nanos(300)),
        Ok(Returned::Known)
    );
    old.granted("p/gone", Nanos(0), 1);
    assert_eq!(
        old.refund("p/gone", &refund(1, 0, 0), Nanos(300)),
        Ok(Returned::Known)
    );
    let mut carried = old.carried(Nanos(300));
    carried.sort_by_key(|h| h.taken_at);
    let slice = |key: &str, taken_at, units| HeldSlice {
        key: key.into(),
        taken_at,
        units,
        until: 0,
    };
    assert_eq!(
        carried,
        [
            slice("p/a", 100, 5),
            slice("p/b", 150, 7),
            slice("p/a", 200, 5)
        ]
    );
    // Through the manifest's JSON and back.
    let carried: Vec<HeldSlice> =
        serde_json::from_slice(&serde_json::to_vec(&carried).unwrap()).unwrap();
    let mut new = Outstanding::default();
    new.take_over(&carried, Nanos(400));
    // The journal replays the grants and a refund after the snapshot:
    // a carried slice keeps its count, a refund takes off what it took.
    new.replayed_grant("p/a", Nanos(100), 10, Nanos::ZERO);
    new.replayed_grant("p/c", Nanos(300), 4, Nanos::ZERO);
    new.replayed_refund("p/c", Nanos(300), 1);
    assert_eq!(
        new.refund("p/c", &refund(4, 0, 300), Nanos(400)),
        Err(Overclaim {
            claimed: 4,
            held: 3,
            taken_at: 300
        })
    );
    assert_eq!(
        new.refund("p/a", &refund(6, 0, 100), Nanos(400)),
        Err(Overclaim {
            claimed: 6,
            held: 5,
            taken_at: 100
        })
    );
    assert_eq!(
        new.refund("p/a", &refund(5, 0, 100), Nanos(400)),
        Ok(Returned::Known)
    );
    assert_eq!(
        new.refund("p/b", &refund(7, 0, 150), Nanos(400)),
        Ok(Returned::Known)
    );
    // Too old by the time the next owner starts: not taken over.
    let mut late = Outstanding::default();
    late.take_over(&carried, Nanos(150 + GRANT_KEPT.0));
    assert_eq!(
        late.len(),
        1,
        "only the slice taken at 200 is recent enough"
    );
    // At most the newest MOST_CARRIED.
    let mut many = Outstanding::default();
    for i in 0..MOST_CARRIED as u64 + 10 {
        many.granted(&format!("p/{i}"), Nanos(1_000 + i), 1);
    }
    let carried = many.carried(Nanos(2_000));
    assert_eq!(carried.len(), MOST_CARRIED);
    assert!(carried.iter().all(|h| h.taken_at >= 1_010));
}

#[test]
fn a_global_windows_shares_are_kept_until_the_window_ends_and_no_longer() {
    let hour = 3_600_000_000_000;
    let (start, end) = (Nanos(hour), Nanos(2 * hour));
    let mut held = Outstanding::default();
    held.granted_until("g/k", start, 50, end);
    // Past a minute, and past a flood of ordinary slices, still held.
    let later = Nanos(start.0 + 10 * GRANT_KEPT.0);
    for i in 0..=MOST_OUTSTANDING as u64 {
        held.granted(&format!("p/{i}"), Nanos(later.0 + i), 1);
    }
    assert_eq!(held.units("g/k", start), 50);
    assert_eq!(
        held.refund("g/k", &refund(20, 0, start.0), later),
        Ok(Returned::Known)
    );
    // The next owner takes it over with its end, after GRANT_KEPT too.
    let carried: Vec<HeldSlice> = held
        .carried(later)
        .into_iter()
        .filter(|h| h.key == "g/k")
        .collect();
    assert_eq!(carried.len(), 1);
    assert_eq!((carried[0].units, carried[0].until), (30, end.0));
    let mut next = Outstanding::default();
    next.take_over(&carried, later);
    assert_eq!(next.units("g/k", start), 30);
    // A journal's replay of the same grant keeps it as long.
    let mut replayed = Outstanding::default();
    replayed.replayed_grant("g/k", start, 50, end);
    replayed.expire(later);
    assert_eq!(replayed.units("g/k", start), 50);
    // At the window's end it is forgotten.
    assert_eq!(
        next.refund("g/k", &refund(1, 0, start.0), end),
        Ok(Returned::Unknown)
    );
    assert!(next.kept_long.is_empty());
}

#[test]
fn grants_kept_longer_leave_their_order_when_back_reset_or_past_the_bound() {
    let end = Nanos(1_000 * GRANT_KEPT.0);
    let mut held = Outstanding::default();
    held.granted_until("g/a", Nanos(0), 5, end);
    held.granted_until("g/b", Nanos(0), 5, end);
    assert_eq!(
        held.refund("g/a", &refund(5, 0, 0), Nanos(1)),
        Ok(Returned::Known)
    );
    held.forget("g/b");
    assert!(
        held.kept_long.is_empty(),
        "nothing stale left to crowd the bound"
    );
    // Granted again at the same instant, kept longer: one entry, the later end.
    held.granted("g/c", Nanos(0), 1);
    held.granted_until("g/c", Nanos(0), 2, end);
    assert_eq!(held.units("g/c", Nanos(0)), 3);
    held.expire(Nanos(GRANT_KEPT.0 + 1));
    assert_eq!(
        held.units("g/c", Nanos(0)),
        3,
        "its first ordinary grant does not forget it"
    );
    for i in 1..=MOST_KEPT_LONG as u64 {
        held.granted_until(
            &format!("g/{i}"),
            Nanos(GRANT_KEPT.0 + 1),
            1,
            Nanos(end.0 + i),
        );
    }
    assert_eq!(held.kept_long.len(), MOST_KEPT_LONG);
    assert_eq!(
        held.units("g/c", Nanos(0)),
        0,
        "the one ending first went first"
    );
}
