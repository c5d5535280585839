//! `sluice bench`: a load generator against a running system.
//!
//! The engine (threads, closed and open loops, keys, histograms, the
//! report) is the `sluice-bench` crate, with the load flags every target
//! takes; this command adds the targets: sluice through the plain subject
//! or the batching client, a bare echo responder on the same subjects
//! (`--serve-echo` runs it; `--target echo` measures it). The Redis
//! baselines are `sluice-bench-redis` (services/bench-redis), a binary of
//! their own on the same engine, so that this one carries no Redis client.
//! See docs/BENCHMARKS.md and bench/README.md.

#[path = "bench/batching.rs"]
mod batching;
#[path = "bench/echo.rs"]
mod echo;
#[path = "bench/ready.rs"]
mod ready;
#[path = "bench/spec.rs"]
mod spec;
#[path = "bench/targets.rs"]
mod targets;

use crate::common::Common;
use anyhow::Result;
use sluice_bench::{parse_duration, LoadArgs};
use spec::{BatchingSpec, ClientKind, LoadVerb, NatsSpec};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use targets::{TargetKind, TargetParser};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// What to load: sluice workers, or the echo responder (the ceiling).
    /// The Redis + Lua baselines are `sluice-bench-redis`, with the same
    /// load flags and report.
    #[arg(long, value_parser = TargetParser, default_value = "sluice")]
    pub target: TargetKind,
    /// How to ask sluice (or the echo responder): one request per ask on
    /// the plain subject, or sluice-client with batching.
    #[arg(long, value_enum, default_value = "plain")]
    pub client: ClientKind,
    /// What each request is: an allow; a reserve and the settle of its
    /// hold with the same cost (one request is the pair); or a reserve
    /// alone, its hold left live until the policy's `hold_ttl`. Holds need
    /// --target sluice and a policy that can hold (SPEC §13).
    #[arg(long, value_enum, default_value = "allow")]
    pub verb: LoadVerb,
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
    /// With --client batching: ask for no slices of local budgets (on by
    /// default, as in the client: the hot keys of a policy with
    /// `local_budget = true` are then decided from slices), so a budgeted
    /// policy can be measured both ways.
    #[arg(long)]
    pub no_budgets: bool,
    /// Every allow carries an id of its own (SPEC §16), as a client's asks
    /// that it may retry do: the plain client writes one into each body,
    /// the batching client names its asks (`ClientOptions::ask_ids`). Off
    /// by default, so the plain path is measured as before.
    #[arg(long)]
    pub ids: bool,
    /// Grouped keys (SPEC §17): the keys are split into N organisations in
    /// order, key `i` asked as `g<i / (K/N)>.<prefix><i>` (so the first
    /// --hot-keys are one organisation's when there are few enough), under
    /// a --policy with a parent. Plain client only.
    #[arg(long, value_name = "N")]
    pub groups: Option<u64>,
    /// Run the echo responder (the ceiling's server side) until SIGTERM or
    /// SIGINT instead of generating load.
    #[arg(long)]
    pub serve_echo: bool,
}

pub fn run(common: &Common, args: &BenchArgs) -> Result<()> {
    if args.serve_echo {
        return echo::serve(&common.nats, &common.nats_auth());
    }
    if args.verb != LoadVerb::Allow && args.target != TargetKind::Sluice {
        anyhow::bail!(
            "--verb hold and --verb reserve need --target sluice: the echo responder answers allows only"
        );
    }
    let config = common.load_config()?;
    let mut plan = args.load.plan()?;
    // Over- and under-admission, where the policy is a fixed window that
    // this config knows (the echo responder decides nothing).
    let accounted = match config.policy(&plan.args.policy) {
        Some(policy) if args.target == TargetKind::Sluice && args.verb == LoadVerb::Allow => {
            plan.count_admission(policy)
        }
        _ => false,
    };
    let load = &plan.args;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let keys = match args.groups {
        None => plan.key_names().into_iter().map(|k| vec![k]).collect(),
        Some(groups) => {
            if groups == 0 || groups > load.keys || args.client != ClientKind::Plain {
                anyhow::bail!("--groups takes 1 to --keys organisations, with --client plain");
            }
            let per = load.keys.div_ceil(groups);
            let names = plan.key_names().into_iter().enumerate();
            names
                .map(|(i, k)| vec![format!("g{}", i as u64 / per), k])
                .collect()
        }
    };
    let mut spec = NatsSpec::new(
        args.client,
        args.verb,
        common.nats.clone(),
        load.timeout,
        keys,
        &load.policy,
        load.cost,
    )?;
    spec.auth = common.nats_auth();
    spec.windows = accounted;
    if args.ids {
        if args.verb != LoadVerb::Allow {
            anyhow::bail!("--ids names allows only (--verb allow)");
        }
        spec.ids = Some(Arc::new(AtomicU64::new(0)));
    }
    if args.client == ClientKind::Batching {
        spec.batching = Some(BatchingSpec {
            partitions: config.partitions,
            deny_cache: args.deny_cache,
            budgets: !args.no_budgets,
            ask_ids: args.ids,
        });
    }
    let ready_ms = if !args.wait_ready.is_zero() || load.requests == Some(0) {
        let wait = if args.wait_ready.is_zero() {
            Duration::from_secs(30)
        } else {
            args.wait_ready
        };
        // A policy with a parent takes a token per level (SPEC §17).
        let levels = config.policy(&load.policy).map_or(1, |policy| {
            sluice_core::group::levels(|n| config.policy(n), policy).unwrap_or(1)
        });
        let took = rt.block_on(ready::wait_ready(
            &common.nats,
            &spec.auth,
            (config.partitions, levels),
            &load.policy,
            args.verb != LoadVerb::Allow,
            wait,
        ))?;
        Some(took.as_millis() as u64)
    } else {
        None
    };
    drop(rt);
    plan.run(spec, args.target.name(), Some(args.client.name()), ready_ms)
}
