//! The time range a page shows and the moves from it (zoom in on a point,
//! zoom out, earlier, later), and the step a usage chart is drawn at.
//! Pure: `now_ms` is an argument.
//!
//! A page's address holds either `last=<duration>` (a range that ends now,
//! and moves on when the page is reloaded) or `from=` and `to=` in ms since
//! the epoch (a fixed range, what the zooms give), so every view can be
//! bookmarked and shared.

use sluice_core::config::parse_duration;
use sluice_core::usage::UsageConfig;

/// The ranges offered in the forms.
pub(crate) const PRESETS: &[&str] = &["15m", "1h", "6h", "24h", "7d", "30d", "1y"];
/// Without `last`, `from` or `to`.
pub(crate) const DEFAULT_LAST: &str = "1h";
/// The narrowest a zoom goes.
const MIN_SPAN_MS: u64 = 5 * 60_000;
/// The widest a range may be (the coarsest tier keeps two years).
const MAX_SPAN_MS: u64 = 2 * 366 * 86_400_000;
/// The most points an automatically chosen step gives.
pub(crate) const AUTO_POINTS: u64 = 720;

/// `[from_ms, to_ms)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub from_ms: u64,
    pub to_ms: u64,
}

impl Range {
    /// From a page's query: `from` and `to` win, else `last` (default 1h)
    /// ending at `now_ms`.
    pub(crate) fn of(
        now_ms: u64,
        from: Option<&str>,
        to: Option<&str>,
        last: Option<&str>,
    ) -> Result<Range, String> {
        let ms = |name: &str, v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("{name} is a time in milliseconds since the epoch, not {v:?}"))
        };
        let (from, to, last) = (nonempty(from), nonempty(to), nonempty(last));
        let range = match (from, to) {
            (Some(f), Some(t)) => Range {
                from_ms: ms("from", f)?,
                to_ms: ms("to", t)?,
            },
            (Some(f), None) => Range {
                from_ms: ms("from", f)?,
                to_ms: now_ms,
            },
            (None, Some(_)) => return Err("give from with to".into()),
            (None, None) => {
                let last = last.unwrap_or(DEFAULT_LAST).trim();
                let span = parse_duration(last)
                    .map_err(|e| format!("the range {last:?}: {e} (e.g. 1h, 24h, 7d)"))?
                    .as_millis() as u64;
                Range {
                    from_ms: now_ms.saturating_sub(span),
                    to_ms: now_ms,
                }
            }
        };
        if range.from_ms >= range.to_ms {
            return Err("the range must start before it ends".into());
        }
        if range.span() > MAX_SPAN_MS {
            return Err("the range is longer than the two years usage is kept".into());
        }
        Ok(range)
    }

    pub(crate) fn span(&self) -> u64 {
        self.to_ms - self.from_ms
    }

    /// A quarter of the span around `t_ms`, no narrower than 5 minutes.
    pub(crate) fn zoom_in(&self, t_ms: u64, now_ms: u64) -> Range {
        Range::around(t_ms, (self.span() / 4).max(MIN_SPAN_MS), now_ms)
    }

    /// Four times the span around its middle.
    pub(crate) fn zoom_out(&self, now_ms: u64) -> Range {
        let middle = self.from_ms + self.span() / 2;
        Range::around(middle, (self.span() * 4).min(MAX_SPAN_MS), now_ms)
    }

    /// The span before this one.
    pub(crate) fn earlier(&self) -> Range {
        let from_ms = self.from_ms.saturating_sub(self.span());
        Range {
            from_ms,
            to_ms: from_ms + self.span(),
        }
    }

    /// The span after this one; `None` when this one reaches now.
    pub(crate) fn later(&self, now_ms: u64) -> Option<Range> {
        (self.to_ms < now_ms).then(|| {
            let to_ms = (self.to_ms + self.span()).min(now_ms);
            Range {
                from_ms: to_ms - self.span(),
                to_ms,
            }
        })
    }

    /// `span` centred on `t_ms`, moved back so that it ends by `now_ms`.
    fn around(t_ms: u64, span: u64, now_ms: u64) -> Range {
        let to_ms = (t_ms.saturating_add(span / 2)).min(now_ms).max(span);
        Range {
            from_ms: to_ms - span,
            to_ms,
        }
    }
}

fn nonempty(v: Option<&str>) -> Option<&str> {
    v.filter(|v| !v.trim().is_empty())
}

/// The finest configured step that draws the range in at most
/// [`AUTO_POINTS`] points (the coarsest when none does).
pub(crate) fn auto_step(usage: &UsageConfig, range: Range) -> Option<String> {
    let tiers = &usage.tiers;
    tiers
        .iter()
        .find(|t| range.span().div_ceil(t.step_ms().max(1)) <= AUTO_POINTS)
        .or(tiers.last())
        .map(|t| t.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;
    const HOUR: u64 = 3_600_000;

    #[test]
    fn a_range_is_the_last_duration_or_from_and_to() {
        let last = Range::of(NOW, None, None, None).unwrap();
        assert_eq!(
            last,
            Range {
                from_ms: NOW - HOUR,
                to_ms: NOW
            }
        );
        let day = Range::of(NOW, Some(""), Some(""), Some("24h")).unwrap();
        assert_eq!(day.span(), 24 * HOUR);
        let fixed = Range::of(NOW, Some("1000"), Some("2000"), Some("24h")).unwrap();
        assert_eq!(
            fixed,
            Range {
                from_ms: 1000,
                to_ms: 2000
            }
        );
        for bad in [
            Range::of(NOW, Some("2000"), Some("1000"), None),
            Range::of(NOW, Some("x"), Some("1000"), None),
            Range::of(NOW, None, Some("1000"), None),
            Range::of(NOW, None, None, Some("a while")),
            Range::of(NOW, None, None, Some("5y")),
        ] {
            assert!(bad.is_err(), "{bad:?}");
        }
    }

    #[test]
    fn zooms_stay_in_the_past_and_keep_their_spans() {
        let r = Range {
            from_ms: NOW - 4 * HOUR,
            to_ms: NOW,
        };
        let z = r.zoom_in(NOW - 2 * HOUR, NOW);
        assert_eq!(
            z,
            Range {
                from_ms: NOW - 2 * HOUR - HOUR / 2,
                to_ms: NOW - 2 * HOUR + HOUR / 2
            }
        );
        // Near now, the zoom ends now.
        assert_eq!(r.zoom_in(NOW - 1, NOW).to_ms, NOW);
        // Never narrower than 5 minutes.
        let narrow = Range {
            from_ms: NOW - 60_000,
            to_ms: NOW,
        };
        assert_eq!(narrow.zoom_in(NOW - 30_000, NOW).span(), MIN_SPAN_MS);
        let out = r.zoom_out(NOW);
        assert_eq!((out.span(), out.to_ms), (16 * HOUR, NOW));
        assert_eq!(
            r.earlier(),
            Range {
                from_ms: NOW - 8 * HOUR,
                to_ms: NOW - 4 * HOUR
            }
        );
        assert_eq!(r.later(NOW), None);
        assert_eq!(r.earlier().later(NOW), Some(r));
    }

    #[test]
    fn the_automatic_step_is_the_finest_within_the_points() {
        let usage = UsageConfig::default();
        let step = |span| {
            auto_step(
                &usage,
                Range {
                    from_ms: NOW - span,
                    to_ms: NOW,
                },
            )
            .unwrap()
        };
        assert_eq!(step(HOUR), "1m");
        assert_eq!(step(12 * HOUR), "1m");
        assert_eq!(step(24 * HOUR), "5m");
        assert_eq!(step(7 * 24 * HOUR), "1h");
        assert_eq!(step(365 * 24 * HOUR), "1d");
    }
}
