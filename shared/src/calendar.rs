//! Calendar windows (SPEC §14): a fixed window whose `per` is `"day"`,
//! `"week"` or `"month"` of a policy's time zone, rather than a number of
//! nanoseconds counted from the epoch.
//!
//! A window starts at local midnight of the first day of its period and ends
//! where the next one starts, so a day is 23 or 25 hours long across a
//! daylight-saving change (23.5 or 24.5 on Lord Howe Island), and a month
//! anchored on day 31 ends on the last day of a shorter month. The zone
//! rules are jiff's, from the tzdb compiled into the binary (no
//! `/usr/share/zoneinfo` needed; every process of one build agrees).
//!
//! Boundaries are instants `B(d)` = the first instant whose local time is
//! 00:00 of date `d` or later (jiff's "compatible" choice: the earlier of a
//! repeated midnight, the end of a skipped one). [`Calendar::window`] finds
//! the `[B(start), B(end))` that holds an instant, stepping to a neighbour
//! period when local time runs backwards across midnight, so windows tile
//! time: every instant is in exactly one, and each starts where the one
//! before it ended (`shared/tests/calendar.rs` checks it by proptest).
//!
//! Finding a window costs about 100 ns of zone arithmetic; a decision pays
//! it only when the clock leaves the window found last: each
//! calendar keeps that window in one atomic word ([`Calendar::window`]),
//! shared by every key of the limit, since all of them cross a boundary
//! together.

use crate::time::Nanos;
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::Timestamp;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// The calendar periods a limit's `per` may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Period {
    Day,
    Week,
    Month,
}

impl Period {
    pub const ALL: [Period; 3] = [Period::Day, Period::Week, Period::Month];

    pub const fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    /// `"day"`, `"week"` or `"month"`; `None` for anything else (a duration).
    pub fn parse(text: &str) -> Option<Period> {
        Period::ALL.into_iter().find(|p| p.as_str() == text)
    }

    /// The length a period is reported with where one number is needed
    /// (`rl.inspect`'s `per_ms`, Envoy's unit): 1 day, 7 days, 31 days.
    pub const fn nominal(self) -> Nanos {
        const DAY: u64 = 86_400;
        Nanos::from_secs(match self {
            Period::Day => DAY,
            Period::Week => 7 * DAY,
            Period::Month => 31 * DAY,
        })
    }
}

/// The calendar settings of a policy: its zone, the first day of its weeks
/// and the day of the month its months start on.
#[derive(Clone)]
pub struct Zone {
    tz: TimeZone,
    /// The IANA name as the zone database spells it (`Europe/Berlin`).
    name: String,
    week_start: Weekday,
    anchor_day: u8,
}

/// Why calendar settings are refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    #[error("unknown time zone {0:?}; use an IANA zone name such as \"UTC\", \"Europe/Berlin\" or \"America/New_York\"")]
    UnknownZone(String),
    #[error("unknown week_start {0:?}; use one of monday, tuesday, wednesday, thursday, friday, saturday, sunday")]
    UnknownWeekday(String),
    #[error("anchor_day must be from 1 to 31 (a month without that day starts on its last day), found {0}")]
    AnchorDay(u64),
}

pub const DEFAULT_ZONE: &str = "UTC";
pub const DEFAULT_WEEK_START: &str = "monday";
pub const DEFAULT_ANCHOR_DAY: u8 = 1;

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("monday", Weekday::Monday),
    ("tuesday", Weekday::Tuesday),
    ("wednesday", Weekday::Wednesday),
    ("thursday", Weekday::Thursday),
    ("friday", Weekday::Friday),
    ("saturday", Weekday::Saturday),
    ("sunday", Weekday::Sunday),
];

impl Zone {
    /// Checks the three settings (each as written in a policy).
    pub fn new(tz: &str, week_start: &str, anchor_day: u64) -> Result<Zone, CalendarError> {
        let zone = TimeZone::get(tz).map_err(|_| CalendarError::UnknownZone(tz.to_string()))?;
        let name = zone.iana_name().unwrap_or(tz).to_string();
        let week_start = WEEKDAYS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(week_start))
            .map(|(_, d)| *d)
            .ok_or_else(|| CalendarError::UnknownWeekday(week_start.to_string()))?;
        let anchor_day = u8::try_from(anchor_day)
            .ok()
            .filter(|d| (1..=31).contains(d))
            .ok_or(CalendarError::AnchorDay(anchor_day))?;
        Ok(Zone {
            tz: zone,
            name,
            week_start,
            anchor_day,
        })
    }

    /// UTC, weeks from Monday, months from the 1st.
    pub fn utc() -> Zone {
        Zone::new(DEFAULT_ZONE, DEFAULT_WEEK_START, DEFAULT_ANCHOR_DAY.into())
            .expect("the defaults are valid")
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Lower-case, as written in a policy.
    pub fn week_start(&self) -> &'static str {
        WEEKDAYS
            .iter()
            .find(|(_, d)| *d == self.week_start)
            .map_or(DEFAULT_WEEK_START, |(n, _)| n)
    }

    pub fn anchor_day(&self) -> u8 {
        self.anchor_day
    }

    fn key(&self) -> (&str, Weekday, u8) {
        (&self.name, self.week_start, self.anchor_day)
    }

    /// The first and the next period's first date of the period of `period`
    /// that holds `date`.
    fn period_dates(&self, period: Period, date: Date) -> Option<(Date, Date)> {
        match period {
            Period::Day => Some((date, date.tomorrow().ok()?)),
            Period::Week => {
                let back = (date.weekday().to_monday_zero_offset()
                    - self.week_start.to_monday_zero_offset())
                .rem_euclid(7);
                let start = date.checked_sub(jiff::Span::new().days(back)).ok()?;
                Some((start, start.checked_add(jiff::Span::new().days(7)).ok()?))
            }
            Period::Month => {
                let here = self.anchor_in(date.year(), date.month())?;
                let first = date.first_of_month();
                let (start, end) = if date >= here {
                    let after = first.checked_add(one_month()).ok()?;
                    (here, self.anchor_in(after.year(), after.month())?)
                } else {
                    let before = first.checked_sub(one_month()).ok()?;
                    (self.anchor_in(before.year(), before.month())?, here)
                };
                Some((start, end))
            }
        }
    }

    /// The anchor day of a month: its last day when it has fewer days.
    fn anchor_in(&self, year: i16, month: i8) -> Option<Date> {
        let first = Date::new(year, month, 1).ok()?;
        let day = i8::try_from(self.anchor_day)
            .ok()?
            .min(first.days_in_month());
        Date::new(year, month, day).ok()
    }

    /// `B(date)`: the first instant at or after local 00:00 of `date`, in ns
    /// since the epoch (negative before it).
    fn boundary(&self, date: Date) -> Option<i128> {
        let ts = self
            .tz
            .to_ambiguous_timestamp(date.at(0, 0, 0, 0))
            .compatible()
            .ok()?;
        Some(ts.as_nanosecond())
    }
}

fn one_month() -> jiff::Span {
    jiff::Span::new().months(1)
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Zone")
            .field("tz", &self.name)
            .field("week_start", &self.week_start())
            .field("anchor_day", &self.anchor_day)
            .finish()
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Zone {}

impl Hash for Zone {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.key().hash(h)
    }
}

/// `[start, end)` in ns since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: Nanos,
    pub end: Nanos,
}

impl Window {
    pub fn contains(&self, t: Nanos) -> bool {
        self.start <= t && t < self.end
    }
}

/// One calendar limit's windows: a period of a zone, and the window found
/// last.
pub struct Calendar {
    period: Period,
    zone: Zone,
    /// The window found last, packed: start in seconds `<< LEN_BITS` | its
    /// length in seconds; 0 before the first. One word, so a reader never
    /// sees the start of one window with the length of another.
    last: AtomicU64,
}

/// Bits of a cached window's length in seconds: up to 48 days, more than a
/// month plus any zone's shift.
const LEN_BITS: u32 = 22;
const SECOND: u64 = 1_000_000_000;

impl Calendar {
    pub fn new(period: Period, zone: Zone) -> Calendar {
        Calendar {
            period,
            zone,
            last: AtomicU64::new(0),
        }
    }

    pub fn period(&self) -> Period {
        self.period
    }

    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The window that holds `t`.
    #[inline]
    pub fn window(&self, t: Nanos) -> Window {
        let packed = self.last.load(Ordering::Relaxed);
        if packed != 0 {
            let start = (packed >> LEN_BITS) * SECOND;
            let end = start + (packed & ((1 << LEN_BITS) - 1)) * SECOND;
            let w = Window {
                start: Nanos(start),
                end: Nanos(end),
            };
            if w.contains(t) {
                return w;
            }
        }
        let w = self.find(t);
        if let Some(packed) = pack(w) {
            self.last.store(packed, Ordering::Relaxed);
        }
        w
    }

    /// The window that holds `t`, from the zone's rules (no cache).
    pub fn find(&self, t: Nanos) -> Window {
        self.find_exact(t).unwrap_or(Window {
            // Outside the zone arithmetic's range (past year 9999): one
            // window to the end of time.
            start: Nanos::ZERO,
            end: Nanos::MAX,
        })
    }

    fn find_exact(&self, t: Nanos) -> Option<Window> {
        let at = i128::from(t.0);
        let local = self
            .zone
            .tz
            .to_datetime(Timestamp::from_nanosecond(at).ok()?);
        let (mut start, mut end) = self.zone.period_dates(self.period, local.date())?;
        let (mut from, mut to) = (self.zone.boundary(start)?, self.zone.boundary(end)?);
        // Local time ran backwards across midnight, or a skipped day made a
        // period empty: step to the neighbour that holds `t` (a few steps
        // at most; bounded in any case).
        for _ in 0..8 {
            if at < from {
                let before = start.yesterday().ok()?;
                (start, end) = self.zone.period_dates(self.period, before)?;
                (from, to) = (self.zone.boundary(start)?, self.zone.boundary(end)?);
            } else if at >= to {
                (start, end) = self.zone.period_dates(self.period, end)?;
                (from, to) = (self.zone.boundary(start)?, self.zone.boundary(end)?);
            } else {
                break;
            }
        }
        (from <= at && at < to).then(|| Window {
            start: Nanos(u64::try_from(from.max(0)).unwrap_or(0)),
            end: Nanos(u64::try_from(to).unwrap_or(u64::MAX)),
        })
    }
}

/// A window in one word, when its ends are whole seconds and it fits.
fn pack(w: Window) -> Option<u64> {
    let (start, end) = (w.start.0, w.end.0);
    if start % SECOND != 0 || end % SECOND != 0 {
        return None;
    }
    let len = (end - start) / SECOND;
    let start = start / SECOND;
    (len > 0 && len < (1 << LEN_BITS) && start < (1 << (64 - LEN_BITS)))
        .then_some((start << LEN_BITS) | len)
}

impl Clone for Calendar {
    fn clone(&self) -> Calendar {
        Calendar::new(self.period, self.zone.clone())
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calendar")
            .field("period", &self.period)
            .field("zone", &self.zone)
            .finish()
    }
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        self.period == other.period && self.zone == other.zone
    }
}

impl Eq for Calendar {}

impl Hash for Calendar {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.period.hash(h);
        self.zone.hash(h);
    }
}
