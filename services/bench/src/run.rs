//! One run, as every load generator binary does it: the load flags they
//! share ([`LoadArgs`], flattened into each one's command line), checked
//! into a [`Plan`]; then the load against a [`Connect`], and the report on
//! stdout. Which target, and how to tell it is ready, is the binary's part.

use crate::admission::FixedLimit;
use crate::keys::{Dist, Keys, Rng};
use crate::load::{self, LoadOptions};
use crate::report::{Recorder, Report, Setup};
use crate::target::Connect;
use anyhow::{bail, Result};
use sluice_core::policy::{Policy, DEFAULT_POLICY};
use std::time::Duration;

/// The load: how much, for how long, on which keys. The same flags and
/// defaults for every target, so their numbers compare.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// Requests in flight (closed loop), or the most in flight (with --rate).
    #[arg(short = 'c', long, default_value_t = 64)]
    pub concurrency: usize,
    /// Connections the requests are spread over.
    #[arg(short = 'm', long, default_value_t = 2)]
    pub connections: usize,
    /// Load threads, each a current-thread runtime driving its share of the
    /// connections (at most one per connection). Default: one per connection, at most 2.
    #[arg(long)]
    pub threads: Option<usize>,
    /// How long to measure, after the warm-up.
    #[arg(short = 'd', long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Load before measuring (not counted).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Send this many requests and stop (no warm-up; overrides --duration).
    /// 0 sends none: it only checks that the target is ready (and says how
    /// long that took where the target can tell).
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Open loop: start this many requests per second on a fixed schedule,
    /// whatever the answers do (latency counts from when each was due).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Number of distinct keys.
    #[arg(short = 'k', long, default_value_t = 10_000)]
    pub keys: u64,
    /// How keys are drawn.
    #[arg(long, value_enum, default_value = "uniform")]
    pub dist: Dist,
    /// Zipf exponent (with --dist zipf).
    #[arg(long, default_value_t = 1.0)]
    pub zipf_s: f64,
    /// Hot keys: the first N of the --keys get --hot-share of all asks
    /// between them (uniform among them); the other keys get the rest,
    /// uniform. With --dist uniform. E.g. `-k 10000 --hot-keys 10
    /// --hot-share 0.5`: half of all asks on 10 keys, the other half over
    /// the other 9,990.
    #[arg(long, value_name = "N")]
    pub hot_keys: Option<u64>,
    /// The share of all asks that go to the --hot-keys, within 0..=1.
    #[arg(long, default_value_t = 0.5, value_name = "SHARE")]
    pub hot_share: f64,
    /// Keys are `<prefix><i>`. Default: a fresh prefix per run, so runs do
    /// not share counters.
    #[arg(long)]
    pub key_prefix: Option<String>,
    /// The policy to ask for, by name (configured in --config).
    #[arg(long, default_value = DEFAULT_POLICY)]
    pub policy: String,
    /// The cost of each ask.
    #[arg(long, default_value_t = 1)]
    pub cost: u64,
    /// Give up on a request after this long.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Print one JSON object at the end instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// Durations on the command line read like the config's (`500ms`, `2s`, `1m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    sluice_core::config::parse_duration(s).map_err(|e| e.to_string())
}

/// Load flags that passed their checks, with what follows from them.
#[derive(Debug, Clone)]
pub struct Plan {
    pub args: LoadArgs,
    /// `--connections`, at most one per request in flight.
    pub connections: usize,
    pub threads: usize,
    /// The keys' prefix: `--key-prefix`, or a fresh one.
    pub prefix: String,
    /// Over- and under-admission are counted against this limit (see
    /// [`Plan::count_admission`]).
    pub admission: Option<FixedLimit>,
}

impl LoadArgs {
    /// Checks the flags before anything connects.
    pub fn plan(&self) -> Result<Plan> {
        if self.concurrency == 0 || self.connections == 0 || self.keys == 0 {
            bail!("--concurrency, --connections and --keys must be at least 1");
        }
        if self.rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
            bail!("--rate must be a positive number of requests per second");
        }
        if let Some(hot) = self.hot_keys {
            if hot == 0 || hot >= self.keys {
                bail!("--hot-keys must be at least 1 and fewer than --keys");
            }
            if self.dist != Dist::Uniform {
                bail!("--hot-keys goes with --dist uniform (the other keys are uniform)");
            }
            if !(0.0..=1.0).contains(&self.hot_share) {
                bail!("--hot-share must be within 0 and 1");
            }
        }
        let connections = self.connections.min(self.concurrency);
        let threads = self
            .threads
            .unwrap_or_else(|| connections.min(2))
            .clamp(1, connections);
        Ok(Plan {
            args: self.clone(),
            connections,
            threads,
            prefix: self.key_prefix.clone().unwrap_or_else(fresh_prefix),
            admission: None,
        })
    }
}

impl Plan {
    /// Counts over- and under-admission against `policy` if it is a fixed
    /// window with one limit (the report's `admission`); the target must
    /// tell each decision's window. Returns whether it will.
    pub fn count_admission(&mut self, policy: &Policy) -> bool {
        self.admission = FixedLimit::of(policy);
        self.admission.is_some()
    }

    fn keys(&self) -> Keys {
        let a = &self.args;
        match a.hot_keys {
            Some(hot) => Keys::hot(a.keys, hot, a.hot_share),
            None => Keys::new(a.keys, a.dist, a.zipf_s),
        }
    }

    /// The key names `<prefix><i>`, by key number.
    pub fn key_names(&self) -> Vec<String> {
        (0..self.args.keys)
            .map(|i| format!("{}{i}", self.prefix))
            .collect()
    }

    /// Loads `connect`'s target (unless `--requests 0`) and prints the
    /// report, named `target` (and `client`, where there is a choice of
    /// client). `ready_ms`: how long the target took to be ready, if the
    /// caller waited for it. Fails after printing if no request got a
    /// decision.
    pub fn run<C: Connect>(
        &self,
        connect: C,
        target: &str,
        client: Option<&str>,
        ready_ms: Option<u64>,
    ) -> Result<()> {
        let a = &self.args;
        let setup = Setup {
            target: target.to_string(),
            client: client.map(str::to_string),
            mode: if a.rate.is_some() { "open" } else { "closed" },
            rate: a.rate,
            concurrency: a.concurrency,
            connections: self.connections,
            threads: self.threads,
            keys: a.keys,
            dist: format!("{:?}", a.dist).to_lowercase(),
            zipf_s: (a.dist == Dist::Zipf).then_some(a.zipf_s),
            hot_keys: a.hot_keys,
            hot_share: a.hot_keys.map(|_| a.hot_share),
            policy: a.policy.clone(),
            cost: a.cost,
            warmup_s: if a.requests.is_some() {
                0.0
            } else {
                a.warmup.as_secs_f64()
            },
            timeout_ms: a.timeout.as_millis() as u64,
        };
        let mut report = if a.requests == Some(0) {
            Report::new(setup, &Recorder::default(), Duration::ZERO)
        } else {
            let keys = self.keys();
            let opts = LoadOptions {
                concurrency: a.concurrency,
                connections: self.connections,
                threads: self.threads,
                duration: a.duration,
                warmup: a.warmup,
                requests: a.requests,
                rate: a.rate,
                progress: !a.quiet,
                admission: self.admission,
            };
            let measured = load::run(connect, keys, &opts)?;
            let mut r = Report::new(setup, &measured.recorder, measured.window);
            r.client_stats = measured.client_stats;
            r.admission = self
                .admission
                .map(|limit| measured.recorder.answers.admission(&limit, a.cost));
            r
        };
        report.ready_ms = ready_ms;
        if a.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print!("{}", report.text());
        }
        if a.requests != Some(0) && report.allowed + report.denied == 0 {
            bail!(
                "no request got a decision ({} errors{})",
                report.errors.total,
                report
                    .errors
                    .samples
                    .first()
                    .map(|s| format!(", e.g. {s}"))
                    .unwrap_or_default()
            );
        }
        Ok(())
    }
}

/// `b<6 hex digits>-`: different for every run.
fn fresh_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mut rng = Rng::new(nanos ^ ((std::process::id() as u64) << 40));
    format!("b{:06x}-", rng.next_u64() & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))?;
        cli.load.plan()
    }

    #[test]
    fn hot_keys_are_some_of_the_keys_over_uniform_ones() {
        let p = plan(&["-k", "10000", "--hot-keys", "10", "--hot-share", "0.5"]).unwrap();
        assert_eq!((p.args.hot_keys, p.args.hot_share), (Some(10), 0.5));
        for bad in [
            &["-k", "10", "--hot-keys", "10"][..],
            &["--hot-keys", "0"],
            &["--hot-keys", "5", "--hot-share", "1.5"],
            &["--hot-keys", "5", "--dist", "zipf"],
        ] {
            assert!(plan(bad).is_err(), "{bad:?} is refused");
        }
    }
}
