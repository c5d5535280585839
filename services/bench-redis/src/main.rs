//! `sluice-bench-redis`: the Redis baselines of the benchmarks.
//!
//! Redis with a Lua limiter script (sorted-set sliding log, INCR fixed
//! window, token-bucket hash; `targets.rs`), loaded by the engine that runs
//! `sluice bench` (the `sluice-bench` crate): the same load flags, defaults,
//! threads and report, `--json` included, so the numbers compare.
//! bench/harness.py runs it for the Redis rows of docs/BENCHMARKS.md. It is
//! a binary of its own so that the product binary, `sluice`, carries no
//! Redis client.
//!
//! This file parses the command line, reads the policy the scripts enforce
//! from the sluice config, checks that Redis answers, and hands over to the
//! engine.

mod targets;

use anyhow::{Context as _, Result};
use clap::Parser;
use sluice_bench::LoadArgs;
use sluice_core::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use targets::{RedisKind, RedisLimit, RedisSpec};

/// The load generator allocates with mimalloc, as `sluice bench` does in
/// the `sluice` binary, so that both generators cost the machine alike.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Load Redis + Lua rate limiters the way `sluice bench` loads sluice:
/// throughput and latency percentiles, for comparison.
#[derive(Parser, Debug)]
#[command(name = "sluice-bench-redis", version)]
struct Cli {
    /// The Lua limiter to load.
    #[arg(long, value_enum)]
    target: RedisKind,
    /// Redis URL.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// sluice config file (TOML): the script enforces the first limit of
    /// --policy in it. Without one, the built-in default policy (15 per second).
    #[arg(long, env = "SLUICE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    load: LoadArgs,
}

fn main() -> ExitCode {
    match run(&Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the reason and its causes.
            eprintln!(
                "sluice-bench-redis: {}",
                format!("{e:#}").replace('\n', " ")
            );
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    let config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let mut plan = cli.load.plan()?;
    let policy = config.policy(&plan.args.policy).with_context(|| {
        format!(
            "no policy {:?} in the config; the Redis targets take their limit from it",
            plan.args.policy
        )
    })?;
    // INCR's script names each decision's window: over- and under-admission
    // are counted as for sluice.
    if cli.target == RedisKind::Incr {
        plan.count_admission(policy);
    }
    let spec = RedisSpec {
        kind: cli.target,
        url: cli.redis.clone(),
        timeout: plan.args.timeout,
        keys: Arc::new(plan.key_names()),
        limit: RedisLimit::of(policy),
        cost: plan.args.cost,
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(targets::check_redis(&cli.redis))?;
    plan.run(spec, cli.target.name(), None, None)
}
