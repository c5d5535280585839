//! The command line: common flags and the subcommands.

use anyhow::Result;
use clap::{Parser, Subcommand};
use sluice_client::NatsAuth;
use sluice_core::config::Config;
use std::path::PathBuf;

/// sluice: a distributed rate limiter and counting service on NATS.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// NATS server URL; several, comma-separated, for a cluster.
    #[arg(
        long,
        global = true,
        env = "SLUICE_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats: String,
    /// Config file (TOML). Without one, the built-in default policy (15 per second) applies.
    #[arg(long, global = true, env = "SLUICE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub auth: NatsAuthArgs,
}

/// NATS credentials and TLS (CONTRACT §10), for every command. At most one
/// of creds, nkey, user/password and token; TLS with any of them.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "NATS credentials and TLS")]
pub struct NatsAuthArgs {
    /// A NATS .creds file (user JWT and nkey seed).
    #[arg(long, global = true, env = "SLUICE_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// A file holding a NATS user nkey seed (SU...).
    #[arg(long, global = true, env = "SLUICE_NATS_NKEY", value_name = "FILE")]
    pub nats_nkey: Option<PathBuf>,
    /// NATS user name (with --nats-password), e.g. a role of `sluice nats-config --auth`.
    #[arg(long, global = true, env = "SLUICE_NATS_USER")]
    pub nats_user: Option<String>,
    /// NATS password of --nats-user (prefer the env var: arguments are visible in ps).
    #[arg(
        long,
        global = true,
        env = "SLUICE_NATS_PASSWORD",
        hide_env_values = true
    )]
    pub nats_password: Option<String>,
    /// NATS token.
    #[arg(long, global = true, env = "SLUICE_NATS_TOKEN", hide_env_values = true)]
    pub nats_token: Option<String>,
    /// PEM file of the CA that signed the NATS server's certificate (requires TLS).
    #[arg(long, global = true, env = "SLUICE_NATS_TLS_CA", value_name = "FILE")]
    pub nats_tls_ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --nats-tls-key).
    #[arg(long, global = true, env = "SLUICE_NATS_TLS_CERT", value_name = "FILE")]
    pub nats_tls_cert: Option<PathBuf>,
    /// PEM private key of --nats-tls-cert.
    #[arg(long, global = true, env = "SLUICE_NATS_TLS_KEY", value_name = "FILE")]
    pub nats_tls_key: Option<PathBuf>,
}

impl Common {
    /// The NATS credentials and TLS settings given.
    pub fn nats_auth(&self) -> NatsAuth {
        let a = &self.auth;
        NatsAuth {
            creds: a.nats_creds.clone(),
            nkey: a.nats_nkey.clone(),
            user: a.nats_user.clone(),
            password: a.nats_password.clone(),
            token: a.nats_token.clone(),
            tls_ca: a.nats_tls_ca.clone(),
            tls_cert: a.nats_tls_cert.clone(),
            tls_key: a.nats_tls_key.clone(),
        }
    }

    /// A NATS connection to `--nats` with the credentials given, named
    /// `name`; a failure says what failed, in one line.
    pub async fn connect(&self, name: &str) -> Result<async_nats::Client> {
        Ok(self.nats_auth().connect_named(&self.nats, name).await?)
    }

    pub fn load_config(&self) -> Result<Config> {
        match &self.config {
            Some(path) => Ok(Config::load(path)?),
            None => Ok(Config::default()),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one limiter worker.
    Worker(crate::worker_cmd::WorkerArgs),
    /// Run the HTTP gateway (GET/POST /v1/allow/{key}, /healthz, /metrics; --upstream for proxy mode).
    Gateway(crate::gateway_cmd::GatewayArgs),
    /// Run everything on this machine for trying it out: nats-server, workers and a gateway.
    Dev(crate::dev_cmd::DevArgs),
    /// Ask once for a key and print the decision.
    Check(crate::check_cmd::CheckArgs),
    /// Live policies in the sluice-policies bucket: list, get, set, rm, apply.
    Policy(crate::policy_cmd::PolicyArgs),
    /// Show a key's state under each policy (or one), consuming nothing.
    Inspect(crate::key_cmd::KeyArgs),
    /// Forget a key's counters under every policy (or one).
    Reset(crate::key_cmd::KeyArgs),
    /// A key's usage history as a table and a chart, or the top keys (--top N).
    Usage(crate::usage_cmd::UsageArgs),
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
            Command::Policy(args) => crate::policy_cmd::run(&self.common, args),
            Command::Inspect(args) => crate::key_cmd::inspect(&self.common, args),
            Command::Reset(args) => crate::key_cmd::reset(&self.common, args),
            Command::Usage(args) => crate::usage_cmd::run(&self.common, args),
            Command::NatsConfig(args) => crate::nats_config_cmd::run(&self.common, args),
            Command::Status(args) => crate::status_cmd::run(&self.common, args),
            Command::Bench(args) => crate::bench_cmd::run(&self.common, args),
        }
    }
}
