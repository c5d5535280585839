//! Time as the core sees it: plain nanoseconds, passed in by the caller.
//!
//! Nothing in `sluice-core` reads a clock on its own. Decisions take `now` as an
//! argument so that tests can replay exact timelines (see [`ManualClock`]) and
//! so that a worker's decisions only depend on the worker's own clock
//! (SPEC §1: clients send no timestamps). Nanoseconds keep sub-millisecond
//! rates exact: GCRA at 10 000/s has a 100 µs emission interval, which a
//! millisecond clock would round to zero (redis-cell #11/#80).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point in time or a span, in nanoseconds. Points count from the Unix epoch,
/// which keeps snapshots meaningful across worker processes and machines.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MAX: Nanos = Nanos(u64::MAX);

    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s.saturating_mul(1_000_000_000))
    }

    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Whole milliseconds, rounded up, so "retry after" is never too early.
    pub const fn as_millis_ceil(self) -> u64 {
        self.0.div_ceil(1_000_000)
    }

    /// Whole seconds, rounded up (the RateLimit-Reset / Retry-After header unit).
    pub const fn as_secs_ceil(self) -> u64 {
        self.0.div_ceil(1_000_000_000)
    }

    pub const fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }

    pub const fn saturating_add(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(other.0))
    }
}

impl From<Duration> for Nanos {
    fn from(d: Duration) -> Nanos {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl From<Nanos> for Duration {
    fn from(n: Nanos) -> Duration {
        Duration::from_nanos(n.0)
    }
}

/// Where "now" comes from. Services use [`SystemClock`]; tests use [`ManualClock`].
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Nanos;
}

/// Wall-clock time since the Unix epoch.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(Nanos::from)
            .unwrap_or(Nanos::ZERO)
    }
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(start: Nanos) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(start.0)))
    }

    pub fn set(&self, t: Nanos) {
        self.0.store(t.0, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(Nanos::from(by).0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        Nanos(self.0.load(Ordering::SeqCst))
    }
}

/// `2026-11-25 04:12`: ms since the epoch as a UTC date and minute, for
/// people to read (the CLI's tables, the dashboard). Civil from days
/// (Howard Hinnant's algorithm), valid for any `u64` ms.
pub fn utc_minute(ms: u64) -> String {
    let minutes = ms / 60_000;
    let (hour, minute) = ((minutes / 60) % 24, minutes % 60);
    let z = (minutes / 1_440) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}")
}

#[cfg(test)]
mod utc_tests {
    use super::utc_minute;

    #[test]
    fn utc_minute_reads_as_the_calendar_does() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00");
        // 2024-02-29 23:59:59.999 UTC, a leap day.
        assert_eq!(utc_minute(1_709_251_199_999), "2024-02-29 23:59");
        assert_eq!(utc_minute(1_709_251_200_000), "2024-03-01 00:00");
        assert_eq!(utc_minute(1_798_761_600_000), "2027-01-01 00:00");
    }
}
