//! The record's encodings and its typed kinds, each round trip and each
//! kind read back from the fields it was written with.

use super::*;
use sluice_core::holds::HoldId;

fn hold() -> Hold {
    Hold {
        id: HoldId::parse("0123456789abcdef0123456789abcdef").unwrap(),
        taken_at: Nanos(7),
        units: 3,
        ends_at: Nanos(90),
        end: End::Release,
        slot: true,
    }
}

/// Each kind's constructor writes the fields every release wrote for
/// it, and the record reads back, through its encoding, as that kind.
#[test]
fn each_kind_is_written_as_before_and_reads_back_as_itself() {
    let base = Record::new(1, "p", "k", 5, Nanos(9));
    let back = Refund {
        units: 2,
        spent: 1,
        taken_at: Nanos(4),
    };
    let hold = hold();
    let id = hold.id.to_string();
    let named = NamedOf {
        id: "ask-1".to_string(),
        verb: "allow".to_string(),
        held: None,
        remaining: 3,
        limit: 10,
        reset: 60,
        until: 99,
    };
    let cases: Vec<(Record, Record, Kind<'_, String>, bool)> = vec![
        (
            Record::counted(1, "p", "k", 5, Nanos(9)),
            base.clone(),
            Kind::Counted { units: 5 },
            true,
        ),
        (
            Record::booked(1, "p", "k", 5, Nanos(9)),
            Record {
                v: NOT_USAGE,
                ..base.clone()
            },
            Kind::Counted { units: 5 },
            false,
        ),
        (
            Record::reset(1, "p", "k", Nanos(9)),
            Record {
                c: 0,
                r: true,
                ..base.clone()
            },
            Kind::Reset,
            true,
        ),
        (
            Record::denied(1, "p", "k", 5, Nanos(9)),
            Record {
                d: true,
                ..base.clone()
            },
            Kind::Denied {
                units: 5,
                blocked_until: None,
            },
            true,
        ),
        (
            Record::blocked(1, "p", "k", 5, Nanos(9), Nanos(60)),
            Record {
                d: true,
                e: 60,
                ..base.clone()
            },
            Kind::Denied {
                units: 5,
                blocked_until: Some(Nanos(60)),
            },
            true,
        ),
        (
            Record::used_only(1, "p", "k", 5, Nanos(9)),
            Record {
                v: USED_ONLY,
                ..base.clone()
            },
            Kind::UsedOnly { units: 5 },
            true,
        ),
        (
            Record::sliced(1, "p", "k", 5, Nanos(9)),
            Record {
                s: true,
                ..base.clone()
            },
            Kind::Sliced { units: 5 },
            true,
        ),
        (
            Record::refunded(1, "p", "k", &back, Nanos(9)),
            Record {
                c: 2,
                g: 4,
                u: 1,
                ..base.clone()
            },
            Kind::Refunded(back),
            true,
        ),
        (
            Record::hold_reserved(1, "p", "k", &hold),
            Record {
                c: 3,
                t: 7,
                s: true,
                h: Some(id.clone()),
                e: 90,
                x: RELEASE | SLOT,
                ..base.clone()
            },
            Kind::HoldReserved {
                hold: &id,
                units: 3,
                ends_at: Nanos(90),
                end: End::Release,
                slot: true,
            },
            true,
        ),
        (
            Record::hold_extended(1, "p", "k", &hold, Nanos(9)),
            Record {
                c: 0,
                h: Some(id.clone()),
                e: 90,
                x: RELEASE | SLOT,
                ..base.clone()
            },
            Kind::HoldExtended {
                hold: &id,
                ends_at: Nanos(90),
            },
            true,
        ),
        (
            Record::hold_ended(1, ("p", "k"), &hold, &back, Nanos(9)),
            Record {
                c: 2,
                g: 7,
                u: 1,
                h: Some(id.clone()),
                e: 90,
                x: RELEASE | SLOT,
                ..base.clone()
            },
            Kind::HoldEnded {
                hold: &id,
                back: Refund {
                    taken_at: Nanos(7),
                    ..back
                },
            },
            true,
        ),
        (
            Record::id_remembered(1, ("p", "k"), 5, named.clone(), Nanos(9)),
            Record {
                v: NOT_USAGE,
                i: Some(named.clone()),
                ..base.clone()
            },
            Kind::IdRemembered {
                cost: 5,
                named: &named,
            },
            false,
        ),
    ];
    for (made, fields, kind, is_usage) in cases {
        assert_eq!(made, fields);
        let bytes = rmp_serde::to_vec(&made).unwrap();
        let read: RecordRef<'_> = rmp_serde::from_slice(&bytes).unwrap();
        let read = read.to_owned();
        assert_eq!(read, made);
        let typed = read.typed();
        let want = match kind {
            Kind::IdRemembered { cost, .. } => Kind::IdRemembered {
                cost,
                named: read.i.as_ref().unwrap(),
            },
            kind => kind,
        };
        assert_eq!(
            typed,
            Typed {
                kind: want,
                is_usage
            },
            "{made:?}"
        );
    }
}

/// A refund of a slice taken at 0 is still a refund: `g` is nonzero.
#[test]
fn a_refund_taken_at_zero_is_still_a_refund() {
    let back = Refund {
        units: 1,
        spent: 0,
        taken_at: Nanos(0),
    };
    let record = Record::refunded(0, "p", "k", &back, Nanos(3));
    let Kind::Refunded(read) = record.typed().kind else {
        panic!("{record:?}");
    };
    assert_eq!(read.taken_at, Nanos(1));
}
