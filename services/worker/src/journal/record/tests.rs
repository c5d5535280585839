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

/// An id's record of an allow, whose first answer started at `start`.
fn named(start: u64) -> NamedOf<String> {
    NamedOf {
        id: "ask-1".to_string(),
        verb: "allow".to_string(),
        held: None,
        remaining: 3,
        limit: 10,
        reset: 60,
        until: 99,
        start,
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
    let named = named(0);
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

/// An id whose first answer starts later (SPEC §18) carries its start as
/// an eighth field of the id, and only then: its message is journal
/// format 8, and an id without one is written as format 7 wrote it.
#[test]
fn an_id_waiting_for_its_start_alone_moves_the_journal_to_format_8() {
    let of = ("p", "k");
    let at_once = Record::id_remembered(1, of, 1, named(0), Nanos(9));
    assert_eq!(at_once.format(), format::JOURNAL_IDS);
    let id_fields = |record: &Record| {
        let bytes = rmp_serde::to_vec(record).unwrap();
        let value: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
        value.as_array().unwrap()[14].as_array().unwrap().len()
    };
    assert_eq!(id_fields(&at_once), 7, "as format 7 wrote it");

    let later = Record::id_remembered(1, of, 1, named(50), Nanos(9));
    assert_eq!(later.format(), format::JOURNAL);
    assert_eq!(format::JOURNAL, 8);
    assert_eq!(id_fields(&later), 8);
    let bytes = rmp_serde::to_vec(&later).unwrap();
    let read: RecordRef<'_> = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(read.to_owned(), later);
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
