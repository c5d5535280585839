//! The gateway's `/metrics`: requests by route and outcome, decisions by
//! source, fallbacks, the client's round trips and batches, and a latency
//! histogram per route.
//!
//! Counters are atomics bumped on the request path; the page is rendered on
//! demand with [`sluice_core::metrics::Exposition`]. The histogram is written
//! by hand after it, because `Exposition` has no histogram type.

use sluice_client::ClientStats;
use sluice_core::metrics::{Exposition, Kind};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Which endpoint served a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/v1/allow/{key}`
    Allow,
    /// Proxy mode: any other path.
    Proxy,
    /// `--grpc-listen`: Envoy's `ShouldRateLimit` (OK is `allowed`,
    /// OVER_LIMIT `denied`).
    Envoy,
}

impl Route {
    const ALL: [Route; 3] = [Route::Allow, Route::Proxy, Route::Envoy];

    fn as_str(self) -> &'static str {
        match self {
            Route::Allow => "allow",
            Route::Proxy => "proxy",
            Route::Envoy => "envoy",
        }
    }
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 200 (or, proxied, forwarded upstream).
    Allowed,
    /// 429.
    Denied,
    BadRequest,
    UnknownPolicy,
    TooLarge,
    /// 503: no worker answered and the fallback is `closed`.
    Unavailable,
    /// Proxy mode: the upstream could not be reached (502).
    UpstreamError,
}

impl Outcome {
    const ALL: [Outcome; 7] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::BadRequest,
        Outcome::UnknownPolicy,
        Outcome::TooLarge,
        Outcome::Unavailable,
        Outcome::UpstreamError,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::BadRequest => "bad_request",
            Outcome::UnknownPolicy => "unknown_policy",
            Outcome::TooLarge => "too_large",
            Outcome::Unavailable => "unavailable",
            Outcome::UpstreamError => "upstream_error",
        }
    }

    fn index(self) -> usize {
        Outcome::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

#[derive(Default)]
struct Histogram {
    /// Per bucket (not cumulative), plus the overflow bucket.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

#[derive(Default)]
pub struct Metrics {
    requests: [[AtomicU64; 7]; 3],
    latency: [Histogram; 3],
}

impl Metrics {
    pub fn observe(&self, route: Route, outcome: Outcome, took: Duration) {
        let r = route as usize;
        self.requests[r][outcome.index()].fetch_add(1, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(BUCKETS.len());
        let h = &self.latency[r];
        h.counts[bucket].fetch_add(1, Ordering::Relaxed);
        h.sum_ns.fetch_add(
            u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The Prometheus text page.
    pub fn render(&self, client: &ClientStats, nats_connected: bool) -> String {
        let mut e = Exposition::new();
        let name = "sluice_gateway_requests_total";
        e.family(
            name,
            Kind::Counter,
            "Requests answered, by route (HTTP, or envoy for the gRPC rate limit service) and outcome.",
        );
        for route in Route::ALL {
            for outcome in Outcome::ALL {
                let n = self.requests[route as usize][outcome.index()].load(Ordering::Relaxed);
                e.sample(
                    name,
                    &[("route", route.as_str()), ("outcome", outcome.as_str())],
                    n as f64,
                );
            }
        }
        let name = "sluice_gateway_decisions_total";
        e.family(
            name,
            Kind::Counter,
            "Decisions by who made them: a worker, the deny cache, or a fallback.",
        );
        for (source, n) in [
            ("worker", client.worker),
            ("deny_cache", client.deny_cache),
            ("fallback_open", client.fallback_open),
            ("fallback_local", client.fallback_local),
        ] {
            e.sample(name, &[("source", source)], n as f64);
        }
        let name = "sluice_gateway_fallbacks_total";
        e.family(
            name,
            Kind::Counter,
            "Asks no worker answered, by the fallback applied (closed ones were answered 503).",
        );
        for (fallback, n) in [
            ("open", client.fallback_open),
            ("closed", client.fallback_closed),
            ("local", client.fallback_local),
        ] {
            e.sample(name, &[("fallback", fallback)], n as f64);
        }
        for (name, help, n) in [
            (
                "sluice_gateway_nats_requests_total",
                "NATS requests sent to workers (single asks, batches, retries).",
                client.round_trips,
            ),
            (
                "sluice_gateway_batches_total",
                "Batches sent (several asks of one partition in one request).",
                client.batches,
            ),
            (
                "sluice_gateway_batched_asks_total",
                "Asks that travelled in a batch.",
                client.batched_asks,
            ),
            (
                "sluice_gateway_no_responders_total",
                "NATS 'no responders' answers (a partition without an owner).",
                client.no_responders,
            ),
            (
                "sluice_gateway_retries_total",
                "Requests re-sent after 'no responders' or a 503.",
                client.retries,
            ),
            (
                "sluice_gateway_timeouts_total",
                "Asks that ran out of time waiting for a worker.",
                client.timeouts,
            ),
        ] {
            e.single(name, Kind::Counter, help, n as f64);
        }
        e.single(
            "sluice_gateway_nats_connected",
            Kind::Gauge,
            "1 while the NATS connection is up.",
            if nats_connected { 1.0 } else { 0.0 },
        );
        let mut text = e.finish();
        self.render_latency(&mut text);
        text
    }

    fn render_latency(&self, out: &mut String) {
        let name = "sluice_gateway_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time to answer (proxy: until the upstream's response headers), by route.\n# TYPE {name} histogram"
        );
        for route in Route::ALL {
            let h = &self.latency[route as usize];
            let r = route.as_str();
            let mut cumulative = 0;
            for (i, le) in BUCKETS.iter().enumerate() {
                cumulative += h.counts[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{name}_bucket{{route=\"{r}\",le=\"{le}\"}} {cumulative}"
                );
            }
            cumulative += h.counts[BUCKETS.len()].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{route=\"{r}\",le=\"+Inf\"}} {cumulative}"
            );
            let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "{name}_sum{{route=\"{r}\"}} {sum}");
            let _ = writeln!(out, "{name}_count{{route=\"{r}\"}} {cumulative}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_cumulative_and_counts_everything() {
        let m = Metrics::default();
        m.observe(Route::Allow, Outcome::Allowed, Duration::from_micros(300));
        m.observe(Route::Allow, Outcome::Denied, Duration::from_millis(3));
        m.observe(Route::Allow, Outcome::Denied, Duration::from_secs(3));
        let text = m.render(&ClientStats::default(), true);
        assert!(
            text.contains("sluice_gateway_requests_total{route=\"allow\",outcome=\"denied\"} 2\n")
        );
        assert!(text.contains(
            "sluice_gateway_request_duration_seconds_bucket{route=\"allow\",le=\"0.0005\"} 1\n"
        ));
        assert!(text.contains(
            "sluice_gateway_request_duration_seconds_bucket{route=\"allow\",le=\"0.005\"} 2\n"
        ));
        assert!(text.contains(
            "sluice_gateway_request_duration_seconds_bucket{route=\"allow\",le=\"+Inf\"} 3\n"
        ));
        assert!(text.contains("sluice_gateway_request_duration_seconds_count{route=\"allow\"} 3\n"));
        assert!(text.contains("sluice_gateway_nats_connected 1\n"));
    }
}
