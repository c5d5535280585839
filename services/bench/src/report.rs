//! What a run measured: outcomes counted per kind, latencies in an HDR
//! histogram, and the report printed at the end (text or one JSON object).

use crate::admission::{Admission, AnswerCounts};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// How one request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    /// NATS answered "no responders" (no worker owns the partition).
    NoResponders,
    /// No answer within `--timeout`.
    Timeout,
    /// An error reply (`Nats-Service-Error-Code`, or a client error) with its code.
    ErrorReply(u16),
    /// Anything else (connection trouble, a malformed reply, an error of the target's client).
    Other,
}

impl Outcome {
    /// Whether a decision or an error reply came back (the request made a
    /// full round trip, so its latency means something).
    pub fn answered(self) -> bool {
        matches!(
            self,
            Outcome::Allowed | Outcome::Denied | Outcome::ErrorReply(_)
        )
    }
}

/// Counts and latencies of one thread (merged at the end).
pub struct Recorder {
    pub hist: Histogram<u64>,
    pub allowed: u64,
    pub denied: u64,
    pub no_responders: u64,
    pub timeouts: u64,
    pub error_replies: BTreeMap<u16, u64>,
    pub other: u64,
    /// The first few "other" errors, to say what went wrong.
    pub samples: Vec<String>,
    /// Decisions per key and fixed window (every decision, not only the
    /// measured window's; empty unless admission is accounted).
    pub answers: AnswerCounts,
}

/// Latencies are recorded in microseconds, 1 µs to 100 s, 3 significant digits.
const HIST_MAX_US: u64 = 100_000_000;

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            hist: Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("valid histogram bounds"),
            allowed: 0,
            denied: 0,
            no_responders: 0,
            timeouts: 0,
            error_replies: BTreeMap::new(),
            other: 0,
            samples: Vec::new(),
            answers: AnswerCounts::default(),
        }
    }
}

impl Recorder {
    pub fn record(&mut self, outcome: Outcome, latency: Duration) {
        match outcome {
            Outcome::Allowed => self.allowed += 1,
            Outcome::Denied => self.denied += 1,
            Outcome::NoResponders => self.no_responders += 1,
            Outcome::Timeout => self.timeouts += 1,
            Outcome::ErrorReply(code) => *self.error_replies.entry(code).or_default() += 1,
            Outcome::Other => self.other += 1,
        }
        if outcome.answered() {
            let us = (latency.as_nanos() as u64 / 1000).clamp(1, HIST_MAX_US);
            self.hist.saturating_record(us);
        }
    }

    pub fn note_other(&mut self, what: impl FnOnce() -> String) {
        if self.samples.len() < 5 {
            self.samples.push(what());
        }
    }

    pub fn merge(&mut self, other: Recorder) {
        self.hist.add(&other.hist).expect("same histogram bounds");
        self.allowed += other.allowed;
        self.denied += other.denied;
        self.no_responders += other.no_responders;
        self.timeouts += other.timeouts;
        for (code, n) in other.error_replies {
            *self.error_replies.entry(code).or_default() += n;
        }
        self.other += other.other;
        self.answers.merge(other.answers);
        for s in other.samples {
            if self.samples.len() < 5 {
                self.samples.push(s);
            }
        }
    }

    pub fn total(&self) -> u64 {
        self.allowed
            + self.denied
            + self.no_responders
            + self.timeouts
            + self.error_replies.values().sum::<u64>()
            + self.other
    }

    pub fn errors(&self) -> u64 {
        self.total() - self.allowed - self.denied
    }
}

/// The setup of a run, echoed in the report.
#[derive(Serialize, Debug, Clone)]
pub struct Setup {
    pub target: String,
    pub client: Option<String>,
    /// "closed" (C requests always in flight) or "open" (a fixed rate).
    pub mode: &'static str,
    pub rate: Option<f64>,
    pub concurrency: usize,
    pub connections: usize,
    pub threads: usize,
    pub keys: u64,
    pub dist: String,
    pub zipf_s: Option<f64>,
    /// Keys `0..hot_keys` get `hot_share` of the asks (`--hot-keys`).
    pub hot_keys: Option<u64>,
    pub hot_share: Option<f64>,
    pub policy: String,
    pub cost: u64,
    pub warmup_s: f64,
    pub timeout_ms: u64,
}

#[derive(Serialize, Debug, Default, Clone)]
pub struct Errors {
    pub total: u64,
    pub no_responders: u64,
    pub timeouts: u64,
    pub error_replies: u64,
    /// Error replies by code (400, 404, 413, 503).
    pub by_code: BTreeMap<String, u64>,
    pub other: u64,
    /// The first few "other" errors.
    pub samples: Vec<String>,
}

/// Percentiles of answered requests, in microseconds.
#[derive(Serialize, Debug, Default, Clone)]
pub struct Latency {
    pub samples: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// The report of one run: `--json` prints it as one object.
#[derive(Serialize, Debug, Clone)]
pub struct Report {
    #[serde(flatten)]
    pub setup: Setup,
    /// Length of the measured window (after warm-up), seconds.
    pub duration_s: f64,
    /// Requests that ended in the window (answered or not).
    pub requests: u64,
    /// Decisions (allowed + denied) per second over the window.
    pub throughput: f64,
    /// Requests that ended in the window per second, errors included.
    pub request_rate: f64,
    pub allowed: u64,
    pub denied: u64,
    pub errors: Errors,
    pub latency_us: Latency,
    /// How long the target took to be ready before the load (sluice and
    /// echo targets: until every partition answered).
    pub ready_ms: Option<u64>,
    /// What the batching client did (batches, asks per batch, retries).
    pub client_stats: Option<serde_json::Value>,
    /// Over- and under-admission of a fixed-window policy, where the
    /// target tells each decision's window.
    pub admission: Option<Admission>,
}

impl Report {
    pub fn new(setup: Setup, rec: &Recorder, window: Duration) -> Report {
        let secs = window.as_secs_f64().max(1e-9);
        let h = &rec.hist;
        let latency = if h.is_empty() {
            Latency::default()
        } else {
            Latency {
                samples: h.len(),
                mean: (h.mean() * 10.0).round() / 10.0,
                p50: h.value_at_quantile(0.50),
                p90: h.value_at_quantile(0.90),
                p99: h.value_at_quantile(0.99),
                p999: h.value_at_quantile(0.999),
                max: h.max(),
            }
        };
        let error_replies: u64 = rec.error_replies.values().sum();
        Report {
            setup,
            duration_s: (secs * 1000.0).round() / 1000.0,
            requests: rec.total(),
            throughput: ((rec.allowed + rec.denied) as f64 / secs).round(),
            request_rate: (rec.total() as f64 / secs).round(),
            allowed: rec.allowed,
            denied: rec.denied,
            errors: Errors {
                total: rec.errors(),
                no_responders: rec.no_responders,
                timeouts: rec.timeouts,
                error_replies,
                by_code: rec
                    .error_replies
                    .iter()
                    .map(|(c, n)| (c.to_string(), *n))
                    .collect(),
                other: rec.other,
                samples: rec.samples.clone(),
            },
            latency_us: latency,
            ready_ms: None,
            client_stats: None,
            admission: None,
        }
    }

    /// The human-readable form.
    pub fn text(&self) -> String {
        let s = &self.setup;
        let mut out = String::new();
        let target = match &s.client {
            Some(c) => format!("{} ({c} client)", s.target),
            None => s.target.clone(),
        };
        let load = match s.rate {
            Some(r) => format!(
                "open loop at {r:.0} req/s, at most {} in flight",
                s.concurrency
            ),
            None => format!("closed loop, {} in flight", s.concurrency),
        };
        let mut dist = match s.zipf_s {
            Some(z) => format!("{} (s={z})", s.dist),
            None => s.dist.clone(),
        };
        if let (Some(hot), Some(share)) = (s.hot_keys, s.hot_share) {
            let _ = write!(dist, ", {hot} hot keys with {:.0} % of asks", share * 100.0);
        }
        let _ = writeln!(
            out,
            "load on {target}; {load} over {} connection(s) on {} thread(s); {} keys {dist}; policy {} cost {}",
            s.connections, s.threads, s.keys, s.policy, s.cost
        );
        let _ = writeln!(
            out,
            "  throughput  {:>10.0} decisions/s   ({} requests in {:.2} s)",
            self.throughput, self.requests, self.duration_s
        );
        let l = &self.latency_us;
        let _ = writeln!(
            out,
            "  latency     p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (mean {:.0} µs)",
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.p999),
            us(l.max),
            l.mean
        );
        let decided = (self.allowed + self.denied).max(1) as f64;
        let _ = writeln!(
            out,
            "  decisions   allowed {} ({:.1} %)  denied {} ({:.1} %)",
            self.allowed,
            100.0 * self.allowed as f64 / decided,
            self.denied,
            100.0 * self.denied as f64 / decided
        );
        let e = &self.errors;
        if e.total == 0 {
            let _ = writeln!(out, "  errors      none");
        } else {
            let codes: Vec<String> = e.by_code.iter().map(|(c, n)| format!("{c}: {n}")).collect();
            let _ = writeln!(
                out,
                "  errors      {}: no responders {}, timeouts {}, error replies {}{}, other {}",
                e.total,
                e.no_responders,
                e.timeouts,
                e.error_replies,
                if codes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", codes.join(", "))
                },
                e.other
            );
            for sample in &e.samples {
                let _ = writeln!(out, "              e.g. {sample}");
            }
        }
        if let Some(ms) = self.ready_ms {
            let _ = writeln!(out, "  ready       every partition answered after {ms} ms");
        }
        if let Some(stats) = &self.client_stats {
            let _ = writeln!(out, "  client      {stats}");
        }
        if let Some(a) = &self.admission {
            let _ = writeln!(
                out,
                "  admission   limit {} per {} ms: over {} in {} (key, window), under {} in {} of {} limited; {} unplaced",
                a.max,
                a.per_ms,
                a.over_admitted,
                a.over_windows,
                a.under_admitted,
                a.under_windows,
                a.limited_windows,
                a.unplaced
            );
        }
        out
    }
}

/// Microseconds, printed in µs below 1 ms and in ms above.
fn us(v: u64) -> String {
    if v < 1000 {
        format!("{v} µs")
    } else {
        format!("{:.2} ms", v as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percentiles() {
        let mut a = Recorder::default();
        for i in 1..=1000u64 {
            a.record(Outcome::Allowed, Duration::from_micros(i));
        }
        let mut b = Recorder::default();
        b.record(Outcome::Denied, Duration::from_micros(5000));
        b.record(Outcome::NoResponders, Duration::from_micros(300));
        b.record(Outcome::Timeout, Duration::from_secs(2));
        b.record(Outcome::ErrorReply(503), Duration::from_micros(100));
        b.record(Outcome::Other, Duration::ZERO);
        a.merge(b);
        assert_eq!(a.total(), 1005);
        assert_eq!(a.errors(), 4);
        // Only answered requests have a latency: 1000 allowed, 1 denied, 1 error reply.
        assert_eq!(a.hist.len(), 1002);
        let setup = Setup {
            target: "sluice".into(),
            client: Some("plain".into()),
            mode: "closed",
            rate: None,
            concurrency: 4,
            connections: 1,
            threads: 1,
            keys: 10,
            dist: "uniform".into(),
            zipf_s: None,
            hot_keys: None,
            hot_share: None,
            policy: "default".into(),
            cost: 1,
            warmup_s: 0.0,
            timeout_ms: 2000,
        };
        let r = Report::new(setup, &a, Duration::from_secs(2));
        assert_eq!(r.throughput, 501.0); // 1001 decisions in 2 s
        assert_eq!(r.request_rate, 503.0);
        assert_eq!(r.errors.by_code["503"], 1);
        assert!(
            (495..=505).contains(&r.latency_us.p50),
            "{:?}",
            r.latency_us
        );
        assert!(r.latency_us.max >= 5000);
        let json = serde_json::to_value(&r).unwrap();
        for field in [
            "throughput",
            "allowed",
            "denied",
            "errors",
            "latency_us",
            "concurrency",
        ] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert!(r.text().contains("no responders 1"));
    }
}
