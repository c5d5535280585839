//! The usage chart: one stacked bar per point (used below, denied above),
//! drawn as SVG on the server, so the page needs no script.
//!
//! Each point is a `<g class="point">` carrying its numbers as data
//! attributes (`data-t-ms`, `data-step-ms`, `data-used`, `data-denied`), a
//! `<title>` for the tooltip, and a link that zooms in around it; the
//! `<svg>` carries the totals (`data-points`, `data-used`, `data-denied`).
//! So what is drawn can be checked through the DOM, and what a test reads
//! is what a person sees.

use maud::{html, Markup};
use sluice_core::time::utc_minute;
use sluice_core::usage::Part;
use sluice_core::wire::usage::Point;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// Draws `points` (oldest first, each part's points at its step); `zoom`
/// gives the address a click on a point goes to.
pub(crate) fn usage_chart(
    points: &[Point],
    parts: &[Part],
    zoom: impl Fn(u64) -> String,
) -> Markup {
    let step_of = |t: u64| {
        parts
            .iter()
            .find(|p| p.from_ms <= t && t < p.to_ms)
            .or(parts.last())
            .map_or(60_000, |p| p.step_ms)
    };
    let start = points.first().map_or(0, |p| p.t_ms);
    let end = points.last().map_or(1, |p| p.t_ms + step_of(p.t_ms));
    let span = end.saturating_sub(start).max(1) as f64;
    let highest = points.iter().map(|p| p.used + p.denied).max().unwrap_or(0);
    let top = nice_ceiling(highest);
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |t: u64| LEFT + (t - start) as f64 / span * plot_w;
    let y = |v: u64| TOP + plot_h - v as f64 / top as f64 * plot_h;
    let used: u64 = points.iter().map(|p| p.used).sum();
    let denied: u64 = points.iter().map(|p| p.denied).sum();
    let ticks = [0, top / 2, top];
    let labels = [start, start + (end - start) / 2, end];
    html! {
        svg.chart xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {HEIGHT}"))
            role="img" aria-label=(format!("used {used} and denied {denied} in {} points", points.len()))
            data-points=(points.len()) data-used=(used) data-denied=(denied) {
            @for v in ticks {
                line.grid x1=(LEFT) x2=(WIDTH - RIGHT) y1=(f(y(v))) y2=(f(y(v))) {}
                text.axis x=(LEFT - 6.0) y=(f(y(v) + 4.0)) text-anchor="end" { (v) }
            }
            @for (i, t) in labels.iter().enumerate() {
                text.axis x=(f(x(*t))) y=(HEIGHT - 8.0)
                    text-anchor=(match i { 0 => "start", 1 => "middle", _ => "end" }) {
                    (utc_minute(*t)) " UTC"
                }
            }
            @for p in points {
                @let step = step_of(p.t_ms);
                @let (x0, w) = (x(p.t_ms), (step as f64 / span * plot_w).max(0.5));
                a href=(zoom(p.t_ms + step / 2)) {
                    g.point data-t-ms=(p.t_ms) data-step-ms=(step) data-used=(p.used) data-denied=(p.denied) {
                        title { (utc_minute(p.t_ms)) " UTC: used " (p.used) ", denied " (p.denied) }
                        rect.hit x=(f(x0)) y=(TOP) width=(f(w)) height=(f(plot_h)) {}
                        rect.used x=(f(x0)) y=(f(y(p.used))) width=(f(w)) height=(f(y(0) - y(p.used))) {}
                        rect.denied x=(f(x0)) y=(f(y(p.used + p.denied))) width=(f(w))
                            height=(f(y(p.used) - y(p.used + p.denied))) {}
                    }
                }
            }
        }
    }
}

/// One decimal: enough for a pixel, short in the page.
fn f(v: f64) -> String {
    format!("{v:.1}")
}

/// The smallest 1, 2 or 5 times a power of ten at or above `v` (1 for 0).
fn nice_ceiling(v: u64) -> u64 {
    let mut power = 1u64;
    loop {
        for m in [1, 2, 5] {
            let candidate = power.saturating_mul(m);
            if candidate >= v || candidate == u64::MAX {
                return candidate;
            }
        }
        power = power.saturating_mul(10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_ends_on_a_round_number() {
        let cases = [
            (0, 1),
            (1, 1),
            (3, 5),
            (7, 10),
            (11, 20),
            (150, 200),
            (501, 1000),
        ];
        for (v, want) in cases {
            assert_eq!(nice_ceiling(v), want, "{v}");
        }
        assert!(nice_ceiling(u64::MAX) >= u64::MAX / 10);
    }

    #[test]
    fn every_point_is_drawn_with_its_numbers() {
        let points = [
            Point {
                t_ms: 0,
                used: 3,
                denied: 0,
            },
            Point {
                t_ms: 60_000,
                used: 5,
                denied: 2,
            },
        ];
        let parts = [Part {
            from_ms: 0,
            to_ms: 120_000,
            step_ms: 60_000,
        }];
        let svg = usage_chart(&points, &parts, |t| format!("/ui/usage?at={t}")).into_string();
        assert_eq!(svg.matches("<g class=\"point\"").count(), 2);
        assert!(svg.contains("data-points=\"2\" data-used=\"8\" data-denied=\"2\""));
        assert!(svg.contains(
            "data-t-ms=\"60000\" data-step-ms=\"60000\" data-used=\"5\" data-denied=\"2\""
        ));
        assert!(svg.contains("href=\"/ui/usage?at=90000\""));
        // SVG in HTML: every element closed, none self-closed by the parser.
        assert_eq!(svg.matches("<rect").count(), svg.matches("</rect>").count());
    }
}
