//! `sluice bench`: a load generator against a running system.
//!
//! The engine (threads, closed and open loops, keys, histograms, the
//! report) is the `sluice-bench` crate, with the load flags every target
//! takes; this command adds the targets: sluice through the plain subject
//! or the batching client, a bare echo responder on the same subjects
//! (`--serve-echo` runs it; `--target echo` measures it), and Redis with Lua
//! limiter scripts. See docs/BENCHMARKS.md and bench/README.md.

#[path = "bench/batching.rs"]
mod batching;
#[path = "bench/echo.rs"]
mod echo;
#[path = "bench/ready.rs"]
mod ready;
#[path = "bench/redis_targets.rs"]
mod redis_targets;
#[path = "bench/targets.rs"]
mod targets;

use crate::cli::Common;
use anyhow::{Context as _, Result};
use redis_targets::{RedisKind, RedisLimit, RedisSpec};
use sluice_bench::{parse_duration, LoadArgs};
use std::sync::Arc;
use std::time::Duration;
use targets::{ClientKind, NatsSpec, TargetKind};

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
    #[command(flatten)]
    pub load: LoadArgs,
    /// Before the load, wait up to this long until every partition answers
    /// (0 to skip).
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
    /// Run the echo responder (the ceiling's server side) until SIGTERM or
    /// SIGINT instead of generating load.
    #[arg(long)]
    pub serve_echo: bool,
}

pub fn run(common: &Common, args: &BenchArgs) -> Result<()> {
    if args.serve_echo {
        return echo::serve(&common.nats);
    }
    let config = common.load_config()?;
    let plan = args.load.plan()?;
    let load = &plan.args;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if args.target.is_redis() {
        let policy = config.policy(&load.policy).with_context(|| {
            format!(
                "no policy {:?} in the config; the Redis targets take their limit from it",
                load.policy
            )
        })?;
        let kind = match args.target {
            TargetKind::RedisZset => RedisKind::Zset,
            TargetKind::RedisIncr => RedisKind::Incr,
            _ => RedisKind::Bucket,
        };
        let spec = RedisSpec {
            kind,
            url: args.redis.clone(),
            timeout: load.timeout,
            keys: Arc::new(plan.key_names()),
            limit: RedisLimit::of(policy),
            cost: load.cost,
        };
        rt.block_on(redis_targets::check_redis(&args.redis))?;
        drop(rt);
        return plan.run(spec, kind.name(), None, None);
    }
    let mut spec = NatsSpec::new(
        args.client,
        common.nats.clone(),
        load.timeout,
        plan.key_names(),
        &load.policy,
        load.cost,
    )?;
    if args.client == ClientKind::Batching {
        spec.batching = Some(batching::BatchingSpec {
            partitions: config.partitions,
            deny_cache: args.deny_cache,
        });
    }
    let ready_ms = if !args.wait_ready.is_zero() || load.requests == Some(0) {
        let wait = if args.wait_ready.is_zero() {
            Duration::from_secs(30)
        } else {
            args.wait_ready
        };
        let took = rt.block_on(ready::wait_ready(
            &common.nats,
            config.partitions,
            &load.policy,
            wait,
        ))?;
        Some(took.as_millis() as u64)
    } else {
        None
    };
    drop(rt);
    plan.run(spec, args.target.name(), Some(args.client.name()), ready_ms)
}
