//! Durations as sluice's config writes them: an integer and a unit
//! (`"1500ms"`, `"10s"`, `"1m"`). Parsed by the config's checks and
//! formatted back by them and by usage history's tier names, so it sits
//! below both; [`crate::config`] re-exports it.

use std::time::Duration;

/// Why a string is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} is not a duration; use an integer and a unit (ms, s, m, h, d), e.g. \"10s\"")]
    Invalid(String),
    #[error("{0:?} is too long; the longest duration is {max}", max = format_duration(max_duration()))]
    TooLong(String),
}

/// Parses a duration written as an integer and a unit: `ms`, `s`, `m`, `h` or
/// `d` (`"1500ms"`, `"2s"`, `"1m"`, `"1h"`, `"1d"`). No sign, no fraction, no
/// spaces. Anything longer than 213503 days (the most whole days that fit in
/// `u64` nanoseconds) is refused.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(s.to_string());
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(invalid)?;
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(invalid());
    }
    let nanos_per_unit: u64 = match unit {
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        "d" => 86_400 * 1_000_000_000,
        _ => return Err(invalid()),
    };
    // Only digits are left, so the one way to fail is overflow.
    let too_long = || DurationError::TooLong(s.to_string());
    let n: u64 = digits.parse().map_err(|_| too_long())?;
    let nanos = n.checked_mul(nanos_per_unit).ok_or_else(too_long)?;
    let d = Duration::from_nanos(nanos);
    if d > max_duration() {
        return Err(too_long());
    }
    Ok(d)
}

fn max_duration() -> Duration {
    // The largest whole number of days that fits in u64 nanoseconds.
    Duration::from_secs(u64::MAX / 86_400_000_000_000 * 86_400)
}

/// Formats a duration in the config's syntax, in the largest unit that
/// represents it exactly (`"2s"`, `"1500ms"`, `"1h"`); sub-millisecond parts
/// are rounded down, which config values never have.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms != 0 && ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_duration_is_whole_days_within_u64_nanos() {
        let max = max_duration();
        assert_eq!(max.as_secs() % 86_400, 0);
        assert!(max.as_nanos() <= u128::from(u64::MAX));
        let days = max.as_secs() / 86_400;
        assert_eq!(parse_duration(&format!("{days}d")), Ok(max));
        assert!(matches!(
            parse_duration(&format!("{}d", days + 1)),
            Err(DurationError::TooLong(_))
        ));
    }
}
