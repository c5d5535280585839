//! `sluice bench`: a load generator against a running system.
//!
//! C requests in flight over M connections (closed loop), or a fixed rate
//! (`--rate`, open loop), for a duration or a request count; keys uniform,
//! Zipf or in sequence over K keys. Targets: sluice through the plain
//! subject or the batching client, a bare echo responder on the same
//! subjects (`--serve-echo` runs it; `--target echo` measures it), and Redis
//! with Lua limiter scripts, all driven by the same generator so their
//! numbers compare. See docs/BENCHMARKS.md and bench/README.md.

#[path = "bench/batching.rs"]
mod batching;
#[path = "bench/echo.rs"]
mod echo;
#[path = "bench/keys.rs"]
mod keys;
#[path = "bench/load.rs"]
mod load;
#[path = "bench/ready.rs"]
mod ready;
#[path = "bench/report.rs"]
mod report;
#[path = "bench/targets.rs"]
mod targets;

use crate::cli::Common;
use anyhow::{bail, Context as _, Result};
use keys::{Dist, Keys};
use report::{Report, Setup};
use std::time::Duration;
use targets::{ClientKind, RedisLimit, TargetKind, TargetSpec};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// What to load: sluice workers, the echo responder (the ceiling), or
    /// Redis with a Lua limiter (sorted-set sliding log, INCR fixed window,
    /// token bucket hash).
    #[arg(long, value_enum, default_value = "sluice")]
    pub target: TargetKind,
    /// How to ask sluice (or the echo responder): one request per ask on
    /// the plain subject, or sluice-client with batching.
    #[arg(long, value_enum, default_value = "plain")]
    pub client: ClientKind,
    /// Requests in flight (closed loop), or the most in flight (with --rate).
    #[arg(short = 'c', long, default_value_t = 64)]
    pub concurrency: usize,
    /// Connections (NATS or Redis) the requests are spread over.
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
    /// 0 only waits until every partition answers and reports how long that took.
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
    /// Keys are `<prefix><i>`. Default: a fresh prefix per run, so runs do
    /// not share counters.
    #[arg(long)]
    pub key_prefix: Option<String>,
    /// The policy to ask for (it must be configured in the workers' config;
    /// Redis targets take their limit from its first limit in --config).
    #[arg(long, default_value = "default")]
    pub policy: String,
    /// The cost of each ask.
    #[arg(long, default_value_t = 1)]
    pub cost: u64,
    /// Give up on a request after this long.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Before the load, wait up to this long until every partition answers
    /// (sluice and echo targets; 0 to skip).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub wait_ready: Duration,
    /// With --client batching: keep the client's deny cache on (denials
    /// are then answered locally without asking a worker). Off by default,
    /// so every ask reaches a worker.
    #[arg(long)]
    pub deny_cache: bool,
    /// Redis URL for the redis-* targets.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis: String,
    /// Print one JSON object at the end instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Run the echo responder (the ceiling's server side) until SIGTERM or
    /// SIGINT instead of generating load.
    #[arg(long)]
    pub serve_echo: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    sluice_core::config::parse_duration(s).map_err(|e| e.to_string())
}

pub fn run(common: &Common, args: &BenchArgs) -> Result<()> {
    if args.serve_echo {
        return echo::serve(&common.nats);
    }
    let config = common.load_config()?;
    if args.concurrency == 0 || args.connections == 0 || args.keys == 0 {
        bail!("--concurrency, --connections and --keys must be at least 1");
    }
    if args.rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        bail!("--rate must be a positive number of requests per second");
    }
    let connections = args.connections.min(args.concurrency);
    let threads = args
        .threads
        .unwrap_or_else(|| connections.min(2))
        .clamp(1, connections);
    let redis_limit = if args.target.is_redis() {
        let policy = config.policy(&args.policy).with_context(|| {
            format!(
                "no policy {:?} in the config; the Redis targets take their limit from it",
                args.policy
            )
        })?;
        Some(RedisLimit::of(policy))
    } else {
        None
    };
    let prefix = args.key_prefix.clone().unwrap_or_else(fresh_prefix);
    let url = if args.target.is_redis() {
        args.redis.clone()
    } else {
        common.nats.clone()
    };
    let mut spec = TargetSpec::new(
        args.target,
        args.client,
        url,
        args.timeout,
        &prefix,
        args.keys,
        &args.policy,
        args.cost,
        redis_limit,
    )?;
    if args.client == ClientKind::Batching && !args.target.is_redis() {
        spec.batching = Some(batching::BatchingSpec {
            partitions: config.partitions,
            deny_cache: args.deny_cache,
        });
    }
    let setup = Setup {
        target: args.target.name().to_string(),
        client: (!args.target.is_redis()).then(|| args.client.name().to_string()),
        mode: if args.rate.is_some() {
            "open"
        } else {
            "closed"
        },
        rate: args.rate,
        concurrency: args.concurrency,
        connections,
        threads,
        keys: args.keys,
        dist: format!("{:?}", args.dist).to_lowercase(),
        zipf_s: (args.dist == Dist::Zipf).then_some(args.zipf_s),
        policy: args.policy.clone(),
        cost: args.cost,
        warmup_s: if args.requests.is_some() {
            0.0
        } else {
            args.warmup.as_secs_f64()
        },
        timeout_ms: args.timeout.as_millis() as u64,
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ready_ms = if args.target.is_redis() {
        rt.block_on(targets::check_redis(&args.redis))?;
        None
    } else if !args.wait_ready.is_zero() || args.requests == Some(0) {
        let wait = if args.wait_ready.is_zero() {
            Duration::from_secs(30)
        } else {
            args.wait_ready
        };
        let took = rt.block_on(ready::wait_ready(
            &common.nats,
            config.partitions,
            &args.policy,
            wait,
        ))?;
        Some(took.as_millis() as u64)
    } else {
        None
    };
    drop(rt);

    let report = if args.requests == Some(0) {
        let mut r = Report::new(setup, &report::Recorder::default(), Duration::ZERO);
        r.ready_ms = ready_ms;
        r
    } else {
        let keys = Keys::new(args.keys, args.dist, args.zipf_s);
        let opts = load::LoadOptions {
            concurrency: args.concurrency,
            connections,
            threads,
            duration: args.duration,
            warmup: args.warmup,
            requests: args.requests,
            rate: args.rate,
            progress: !args.quiet,
        };
        let measured = load::run(spec, keys, &opts)?;
        let mut r = Report::new(setup, &measured.recorder, measured.window);
        r.ready_ms = ready_ms;
        r.client_stats = measured.client_stats;
        r
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.text());
    }
    if args.requests != Some(0) && report.allowed + report.denied == 0 {
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

/// `b<6 hex digits>-`: different for every run.
fn fresh_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mut rng = keys::Rng::new(nanos ^ ((std::process::id() as u64) << 40));
    format!("b{:06x}-", rng.next_u64() & 0xff_ffff)
}
