//! The command line: common flags and the subcommands.

use crate::common::Common;
use anyhow::Result;
use clap::{Parser, Subcommand};

/// sluice: a distributed rate limiter and counting service on NATS.
#[derive(Parser, Debug)]
#[command(name = "sluice", version = crate::version::text(), about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one limiter worker.
    Worker(crate::worker_cmd::WorkerArgs),
    /// Run the HTTP gateway (GET/POST /v1/allow/{key}, POST /v1/reserve|settle|extend/{key}, /healthz, /metrics; --upstream for proxy mode).
    Gateway(crate::gateway_cmd::GatewayArgs),
    /// Run everything on this machine for trying it out: nats-server, workers and a gateway.
    Dev(crate::dev_cmd::DevArgs),
    /// Ask once for a key and print the decision.
    Check(crate::check_cmd::CheckArgs),
    /// Hold a cost for a key until it is settled (prints the hold's name and end).
    Reserve(crate::hold_cmd::ReserveArgs),
    /// End a hold, charging its real cost.
    Settle(crate::hold_cmd::SettleArgs),
    /// Keep a live hold for longer.
    Extend(crate::hold_cmd::ExtendArgs),
    /// Live policies in the sluice-policies bucket: list, get, set, rm, apply.
    Policy(crate::policy_cmd::PolicyArgs),
    /// Show a key's state under each policy (or one), consuming nothing.
    Inspect(crate::key_cmd::KeyArgs),
    /// Forget a key's counters under every policy (or one).
    Reset(crate::key_cmd::KeyArgs),
    /// A key's usage history as a table and a chart, or the top keys (--top N).
    Usage(crate::usage_cmd::UsageArgs),
    /// Threshold alerts kept in SLUICE_ALERTS, oldest first (--follow for new ones).
    Alerts(crate::alerts_cmd::AlertsArgs),
    /// Print the nats-server config (JetStream and the partition mapping) for the configured partitions.
    NatsConfig(crate::nats_config_cmd::NatsConfigArgs),
    /// Show partitions, their owners, snapshot ages and worker health.
    Status(crate::status_cmd::StatusArgs),
    /// Load generator: throughput and latency percentiles against a running system.
    Bench(crate::bench_cmd::BenchArgs),
}

impl Command {
    /// Whether the command prints a report and ends (not a server, not a
    /// load generator): piped into `head`, it should end quietly when the
    /// reader goes away.
    fn is_a_report(&self) -> bool {
        !matches!(
            self,
            Command::Worker(_) | Command::Gateway(_) | Command::Dev(_) | Command::Bench(_)
        )
    }
}

impl Cli {
    pub fn run(self) -> Result<()> {
        if self.command.is_a_report() {
            crate::signals::die_on_broken_pipe();
        }
        match &self.command {
            Command::Worker(args) => crate::worker_cmd::run(&self.common, args),
            Command::Gateway(args) => crate::gateway_cmd::run(&self.common, args),
            Command::Dev(args) => crate::dev_cmd::run(&self.common, args),
            Command::Check(args) => crate::check_cmd::run(&self.common, args),
            Command::Reserve(args) => crate::hold_cmd::reserve(&self.common, args),
            Command::Settle(args) => crate::hold_cmd::settle(&self.common, args),
            Command::Extend(args) => crate::hold_cmd::extend(&self.common, args),
            Command::Policy(args) => crate::policy_cmd::run(&self.common, args),
            Command::Inspect(args) => crate::key_cmd::inspect(&self.common, args),
            Command::Reset(args) => crate::key_cmd::reset(&self.common, args),
            Command::Usage(args) => crate::usage_cmd::run(&self.common, args),
            Command::Alerts(args) => crate::alerts_cmd::run(&self.common, args),
            Command::NatsConfig(args) => crate::nats_config_cmd::run(&self.common, args),
            Command::Status(args) => crate::status_cmd::run(&self.common, args),
            Command::Bench(args) => crate::bench_cmd::run(&self.common, args),
        }
    }
}
