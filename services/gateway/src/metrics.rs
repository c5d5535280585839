//! The gateway's `/metrics`: requests by route and outcome, decisions by
//! source, fallbacks, the client's round trips and batches, and a latency
//! histogram per route, through the Prometheus client library
//! ([`sluice_core::metrics`]).
//!
//! Requests and their latency are the library's counters and histograms,
//! one handle per route and outcome made up front, so a request bumps its
//! own (an atomic add, and the histogram's observe) without looking a label
//! set up. The client's counters live in [`sluice_client::ClientStats`];
//! they are read when the page is scraped, by a collector.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use sluice_client::ClientStats;
use sluice_core::metrics::{self as page, ConstCounter, Registry};
use std::fmt::{self, Write as _};
use std::time::Duration;

/// Which endpoint served a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// `/v1/allow/{key}`
    Allow,
    /// `/v1/hit/{key}`
    Hit,
    /// Each ask of `/v1/batch`.
    Batch,
    /// Proxy mode: any other path.
    Proxy,
    /// `/v1/reserve|settle|extend/{key}` (holds).
    Hold,
    /// `--grpc-listen`: Envoy's `ShouldRateLimit` (OK is `allowed`,
    /// OVER_LIMIT `denied`).
    Envoy,
}

impl Route {
    const ALL: [Route; 6] = [
        Route::Allow,
        Route::Hit,
        Route::Batch,
        Route::Proxy,
        Route::Hold,
        Route::Envoy,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Route::Allow => "allow",
            Route::Hit => "hit",
            Route::Batch => "batch",
            Route::Proxy => "proxy",
            Route::Hold => "hold",
            Route::Envoy => "envoy",
        }
    }
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// 404: a settle or extend of a hold the key has not.
    UnknownHold,
    /// 409: an ask's id was first used by another ask (SPEC §16).
    IdReused,
}

impl Outcome {
    const ALL: [Outcome; 9] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::BadRequest,
        Outcome::UnknownPolicy,
        Outcome::TooLarge,
        Outcome::Unavailable,
        Outcome::UpstreamError,
        Outcome::UnknownHold,
        Outcome::IdReused,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::BadRequest => "bad_request",
            Outcome::UnknownPolicy => "unknown_policy",
            Outcome::UnknownHold => "unknown_hold",
            Outcome::IdReused => "id_reused",
            Outcome::TooLarge => "too_large",
            Outcome::Unavailable => "unavailable",
            Outcome::UpstreamError => "upstream_error",
        }
    }

    fn index(self) -> usize {
        Outcome::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

impl EncodeLabelValue for Route {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    route: Route,
    outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    route: Route,
}

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    /// The handles of `requests` and `latency`, by route and outcome.
    by_route: [([Counter; Outcome::ALL.len()], Histogram); 6],
}

impl Default for Metrics {
    fn default() -> Metrics {
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let by_route = Route::ALL.map(|route| {
            let counters = Outcome::ALL
                .map(|outcome| requests.get_or_create_owned(&RequestLabels { route, outcome }));
            (
                counters,
                latency.get_or_create_owned(&RouteLabels { route }),
            )
        });
        Metrics {
            requests,
            latency,
            by_route,
        }
    }
}

impl Metrics {
    pub fn observe(&self, route: Route, outcome: Outcome, took: Duration) {
        let (requests, latency) = &self.by_route[route as usize];
        requests[outcome.index()].inc();
        latency.observe(took.as_secs_f64());
    }

    /// The Prometheus text page.
    pub fn render(&self, client: &ClientStats, nats_connected: bool) -> Result<String, fmt::Error> {
        let mut registry = Registry::default();
        registry.register(
            "sluice_gateway_requests",
            "Requests answered, by route (HTTP, or envoy for the gRPC rate limit service) and outcome.",
            self.requests.clone(),
        );
        registry.register_collector(Box::new(ClientValues {
            stats: *client,
            nats_connected,
        }));
        registry.register(
            "sluice_gateway_request_duration_seconds",
            "Time to answer (proxy: until the upstream's response headers), by route.",
            self.latency.clone(),
        );
        page::render(&registry)
    }
}

/// The client's counters as they were when the page was asked for.
#[derive(Debug)]
struct ClientValues {
    stats: ClientStats,
    nats_connected: bool,
}

impl Collector for ClientValues {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let c = &self.stats;
        page::family(
            &mut e,
            "sluice_gateway_decisions",
            "Decisions by who made them: a worker, the deny cache, a slice of a hot key's budget, or a fallback.",
            [
                ("worker", c.worker),
                ("deny_cache", c.deny_cache),
                ("budget", c.budget),
                ("fallback_open", c.fallback_open),
                ("fallback_local", c.fallback_local),
            ]
            .map(|(source, n)| ([("source", source)], ConstCounter::new(n))),
        )?;
        page::family(
            &mut e,
            "sluice_gateway_fallbacks",
            "Asks no worker answered, by the fallback applied (closed ones were answered 503).",
            [
                ("open", c.fallback_open),
                ("closed", c.fallback_closed),
                ("local", c.fallback_local),
            ]
            .map(|(fallback, n)| ([("fallback", fallback)], ConstCounter::new(n))),
        )?;
        for (name, help, n) in [
            (
                "sluice_gateway_nats_requests",
                "NATS requests sent to workers (single asks, batches, retries).",
                c.round_trips,
            ),
            (
                "sluice_gateway_batches",
                "Batches sent (several asks of one partition in one request).",
                c.batches,
            ),
            (
                "sluice_gateway_batched_asks",
                "Asks that travelled in a batch.",
                c.batched_asks,
            ),
            (
                "sluice_gateway_no_responders",
                "NATS 'no responders' answers (a partition without an owner).",
                c.no_responders,
            ),
            (
                "sluice_gateway_retries",
                "Requests re-sent after 'no responders' or a 503.",
                c.retries,
            ),
            (
                "sluice_gateway_timeouts",
                "Asks that ran out of time waiting for a worker.",
                c.timeouts,
            ),
        ] {
            page::counter(&mut e, name, help, n)?;
        }
        page::gauge(
            &mut e,
            "sluice_gateway_nats_connected",
            "1 while the NATS connection is up.",
            i64::from(self.nats_connected),
        )
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
        let text = m.render(&ClientStats::default(), true).unwrap();
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
