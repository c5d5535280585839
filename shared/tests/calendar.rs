//! Calendar windows (SPEC §14): day, week and month windows
//! of a zone through daylight saving, short months and leap days, and a
//! proptest that windows tile time. Time is passed in; the expected
//! boundaries are written as UTC instants, worked out by hand from each
//! zone's published offsets.

use proptest::prelude::*;
use sluice_core::calendar::{Calendar, Period, Window, Zone};
use sluice_core::config::PolicyTable;
use sluice_core::policy::Policy;
use sluice_core::time::Nanos;

/// A UTC instant written `2026-03-28T23:00:00Z`.
fn at(utc: &str) -> Nanos {
    let ts: jiff::Timestamp = utc.parse().expect("a UTC instant");
    Nanos(u64::try_from(ts.as_nanosecond()).expect("after the epoch"))
}

fn calendar(period: Period, tz: &str, week_start: &str, anchor_day: u64) -> Calendar {
    Calendar::new(period, Zone::new(tz, week_start, anchor_day).unwrap())
}

fn day(tz: &str) -> Calendar {
    calendar(Period::Day, tz, "monday", 1)
}

fn window(start: &str, end: &str) -> Window {
    Window {
        start: at(start),
        end: at(end),
    }
}

const HOUR: u64 = 3_600_000_000_000;

#[test]
fn berlin_days_are_23_and_25_hours_long_when_the_clocks_change() {
    let berlin = day("Europe/Berlin");
    // 29 March 2026: 02:00 CET becomes 03:00 CEST.
    let spring = berlin.window(at("2026-03-29T10:00:00Z"));
    assert_eq!(
        spring,
        window("2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z")
    );
    assert_eq!(spring.end.0 - spring.start.0, 23 * HOUR);
    // 25 October 2026: 03:00 CEST becomes 02:00 CET.
    let autumn = berlin.window(at("2026-10-25T12:00:00Z"));
    assert_eq!(
        autumn,
        window("2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z")
    );
    assert_eq!(autumn.end.0 - autumn.start.0, 25 * HOUR);
    // The instant of the change itself, and one just before midnight.
    assert_eq!(berlin.window(at("2026-10-25T01:30:00Z")), autumn);
    assert_eq!(
        berlin.window(at("2026-10-25T22:59:59Z")).end,
        at("2026-10-25T23:00:00Z")
    );
}

#[test]
fn new_york_days_follow_its_own_changes() {
    let ny = day("America/New_York");
    // 8 March 2026: 02:00 EST becomes 03:00 EDT.
    assert_eq!(
        ny.window(at("2026-03-08T12:00:00Z")),
        window("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z")
    );
    // 1 November 2026: 02:00 EDT becomes 01:00 EST.
    assert_eq!(
        ny.window(at("2026-11-01T12:00:00Z")),
        window("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z")
    );
    // Midnight in New York is not midnight UTC (LiteLLM #34896).
    assert_eq!(
        ny.window(at("2026-06-15T02:00:00Z")),
        window("2026-06-14T04:00:00Z", "2026-06-15T04:00:00Z")
    );
}

#[test]
fn lord_howe_shifts_by_half_an_hour() {
    let lh = day("Australia/Lord_Howe");
    // 5 April 2026: 02:00 (+11) becomes 01:30 (+10:30): a day of 24.5 h.
    let long = lh.window(at("2026-04-05T06:00:00Z"));
    assert_eq!(long, window("2026-04-04T13:00:00Z", "2026-04-05T13:30:00Z"));
    assert_eq!(long.end.0 - long.start.0, 49 * HOUR / 2);
    // 4 October 2026: 02:00 (+10:30) becomes 02:30 (+11): 23.5 h.
    let short = lh.window(at("2026-10-04T06:00:00Z"));
    assert_eq!(
        short,
        window("2026-10-03T13:30:00Z", "2026-10-04T13:00:00Z")
    );
    assert_eq!(short.end.0 - short.start.0, 47 * HOUR / 2);
}

/// Months anchored on the 31st end on the last day of a shorter month; a
/// leap year's February has its 29th; a Berlin month runs from midnight
/// CET to midnight CEST.
#[test]
fn month_ends_and_leap_days() {
    let on_31 = calendar(Period::Month, "UTC", "monday", 31);
    let on_29 = calendar(Period::Month, "UTC", "monday", 29);
    let berlin = calendar(Period::Month, "Europe/Berlin", "monday", 1);
    let utc_day = day("UTC");
    for (c, t, start, end) in [
        (
            &on_31,
            "2026-02-10T00:00:00Z",
            "2026-01-31T00:00:00Z",
            "2026-02-28T00:00:00Z",
        ),
        (
            &on_31,
            "2026-02-28T00:00:00Z",
            "2026-02-28T00:00:00Z",
            "2026-03-31T00:00:00Z",
        ),
        (
            &on_31,
            "2026-04-30T12:00:00Z",
            "2026-04-30T00:00:00Z",
            "2026-05-31T00:00:00Z",
        ),
        (
            &on_31,
            "2024-02-10T00:00:00Z",
            "2024-01-31T00:00:00Z",
            "2024-02-29T00:00:00Z",
        ),
        (
            &on_29,
            "2024-03-01T00:00:00Z",
            "2024-02-29T00:00:00Z",
            "2024-03-29T00:00:00Z",
        ),
        (
            &on_29,
            "2025-03-01T00:00:00Z",
            "2025-02-28T00:00:00Z",
            "2025-03-29T00:00:00Z",
        ),
        (
            &berlin,
            "2026-03-15T00:00:00Z",
            "2026-02-28T23:00:00Z",
            "2026-03-31T22:00:00Z",
        ),
        (
            &utc_day,
            "2024-02-29T12:00:00Z",
            "2024-02-29T00:00:00Z",
            "2024-03-01T00:00:00Z",
        ),
    ] {
        assert_eq!(c.window(at(t)), window(start, end), "{c:?} at {t}");
    }
}

#[test]
fn weeks_start_on_week_start() {
    // Wednesday 10 June 2026.
    let t = at("2026-06-10T12:00:00Z");
    assert_eq!(
        calendar(Period::Week, "UTC", "monday", 1).window(t),
        window("2026-06-08T00:00:00Z", "2026-06-15T00:00:00Z")
    );
    assert_eq!(
        calendar(Period::Week, "UTC", "sunday", 1).window(t),
        window("2026-06-07T00:00:00Z", "2026-06-14T00:00:00Z")
    );
    assert_eq!(
        calendar(Period::Week, "Asia/Tokyo", "wednesday", 1).window(t),
        window("2026-06-09T15:00:00Z", "2026-06-16T15:00:00Z")
    );
}

#[test]
fn bad_settings_are_refused_with_the_reason() {
    let e = Zone::new("Mars/Olympus", "monday", 1).unwrap_err();
    assert!(
        e.to_string().contains("unknown time zone \"Mars/Olympus\""),
        "{e}"
    );
    for d in [0, 32] {
        let e = Zone::new("UTC", "monday", d).unwrap_err();
        assert!(
            e.to_string().contains("anchor_day must be from 1 to 31"),
            "{e}"
        );
    }
    let e = Zone::new("UTC", "someday", 1).unwrap_err();
    assert!(e.to_string().contains("unknown week_start"), "{e}");
}

fn policy(json: &str) -> Policy {
    PolicyTable::from_json(json.as_bytes())
        .unwrap()
        .to_policy("quota")
        .unwrap()
}

/// A day limit beside a minute limit: the minute one decides until the
/// day's quota is spent, then the day's: denied until local midnight, and
/// `reset` and `retry_after` name it to the nanosecond.
#[test]
fn a_day_quota_beside_a_minute_limit_resets_at_local_midnight() {
    let p = policy(
        r#"{"algorithm":"fixed_window","tz":"America/New_York",
            "limits":[{"max":3,"per":"1m"},{"max":5,"per":"day"}]}"#,
    );
    let mut state = p.new_state();
    let t = at("2026-11-01T23:00:00Z"); // 18:00 EST, the 25-hour day
    let midnight = at("2026-11-02T05:00:00Z");
    for _ in 0..3 {
        assert!(p.decide(&mut state, t, 1).allowed);
    }
    let d = p.decide(&mut state, t, 1);
    assert!(!d.allowed);
    assert_eq!((d.limit, d.retry_after), (3, Nanos::from_secs(60)));
    let later = Nanos(t.0 + 60 * 1_000_000_000);
    assert!(p.decide(&mut state, later, 1).allowed);
    assert!(p.decide(&mut state, later, 1).allowed);
    let d = p.decide(&mut state, later, 1);
    assert!(!d.allowed);
    assert_eq!(d.limit, 5);
    assert_eq!(d.retry_after, midnight.saturating_sub(later));
    assert_eq!(d.reset, midnight.saturating_sub(later));
    // One nanosecond before midnight: still the old day; at midnight, a new one.
    assert!(!p.decide(&mut state, Nanos(midnight.0 - 1), 1).allowed);
    assert!(p.decide(&mut state, midnight, 1).allowed);
}

/// The zones the proptest walks: every kind of change the tzdb has
/// (an hour, half an hour, a skipped day, midnight changes).
const ZONES: [&str; 9] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "America/Havana",
    "America/Santiago",
    "Asia/Kathmandu",
    "Africa/Casablanca",
];

fn any_calendar() -> impl Strategy<Value = Calendar> {
    (
        0..ZONES.len(),
        0..3usize,
        prop::sample::select(vec!["monday", "thursday", "sunday"]),
        1..=31u64,
    )
        .prop_map(|(z, p, w, a)| calendar(Period::ALL[p], ZONES[z], w, a))
}

proptest! {
    /// Every instant is in exactly one window: the window found for `t`
    /// holds it, the next starts where it ends, and the instant before it
    /// starts belongs to the window before. The cached answer is the
    /// uncached one.
    #[test]
    fn windows_tile_time(c in any_calendar(), t in 0u64..4_102_444_800_000_000_000) {
        let t = Nanos(t);
        let w = c.window(t);
        prop_assert!(w.contains(t), "{c:?}: {w:?} does not hold {t:?}");
        prop_assert_eq!(w, c.find(t));
        let next = c.window(w.end);
        prop_assert_eq!(next.start, w.end);
        prop_assert!(next.end > next.start);
        if w.start.0 > 0 {
            prop_assert_eq!(c.window(Nanos(w.start.0 - 1)).end, w.start);
        }
    }
}
