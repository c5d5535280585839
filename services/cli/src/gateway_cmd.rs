//! `sluice gateway`: the HTTP API server (SPEC §6), and with
//! `--grpc-listen` Envoy's rate limit service (SPEC §11).

use crate::common::Common;
use anyhow::Result;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_gateway::GatewayOptions;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct GatewayArgs {
    /// Where to listen for HTTP.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Also serve Envoy's rate limit service (gRPC) here, e.g. 127.0.0.1:8081;
    /// the config's [envoy] table maps descriptors to keys and policies.
    #[arg(long, value_name = "ADDR")]
    pub grpc_listen: Option<SocketAddr>,
    /// Rate-limit and forward every other request to this upstream (reverse proxy mode).
    #[arg(long, value_name = "URL")]
    pub upstream: Option<sluice_gateway::Url>,
    /// In proxy mode, the header that names the key (the client IP when absent).
    #[arg(long, default_value = sluice_gateway::DEFAULT_KEY_HEADER)]
    pub key_header: String,
    /// In proxy mode, the policy every forwarded request counts under; one with `concurrency` holds a slot per request until its response ends.
    #[arg(long, default_value = DEFAULT_POLICY)]
    pub proxy_policy: String,
    /// Require `Authorization: Bearer TOKEN` on /v1/* (401 otherwise) and on the dashboard (a login page asks for it); /healthz and /metrics stay open.
    #[arg(long, env = "SLUICE_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,
    /// A second token that may only read /v1/* (usage, inspect, policies, alerts, status; 403 elsewhere); needs --api-token.
    #[arg(long, env = "SLUICE_API_READ_TOKEN", hide_env_values = true)]
    pub api_read_token: Option<String>,
    /// Named API tokens from a TOML file, one [[token]] table each (name, role "full" or "read", token); beside --api-token and --api-read-token, read again on SIGHUP.
    #[arg(long, env = "SLUICE_API_TOKENS", value_name = "FILE")]
    pub api_tokens: Option<PathBuf>,
    /// Serve HTTPS (and TLS on --grpc-listen) with this PEM certificate chain; needs --tls-key.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Do not serve the dashboard at /ui (on by default; with --api-token it asks for the token).
    #[arg(long)]
    pub no_ui: bool,
    /// The most one ask takes before the client's fallback decides; raise it
    /// above the link's round trip where asks go to another region's home
    /// (a global sliding policy, docs/REGIONS.md).
    #[arg(long, default_value = "100ms", value_parser = crate::common::parse_duration)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub traces: crate::common::TraceArgs,
}

pub fn run(common: &Common, args: &GatewayArgs) -> Result<()> {
    let config = common.load_config()?;
    let mut opts = GatewayOptions::new(common.nats.clone(), config);
    opts.nats_auth = common.nats_auth();
    opts.listen = args.listen;
    opts.grpc_listen = args.grpc_listen;
    opts.upstream = args.upstream.clone();
    opts.key_header = args.key_header.clone();
    opts.ui = !args.no_ui;
    if args.timeout.is_zero() {
        anyhow::bail!("--timeout must be more than 0 (say \"100ms\")");
    }
    opts.timeout = args.timeout;
    opts.proxy_policy = args.proxy_policy.clone();
    if args.api_token.as_deref() == Some("") {
        anyhow::bail!("--api-token (SLUICE_API_TOKEN) is empty; give a token or leave it unset");
    }
    opts.api_token = args.api_token.clone().map(sluice_gateway::ApiToken::new);
    if args.api_read_token.as_deref() == Some("") {
        anyhow::bail!(
            "--api-read-token (SLUICE_API_READ_TOKEN) is empty; give a token or leave it unset"
        );
    }
    opts.read_token = args
        .api_read_token
        .clone()
        .map(sluice_gateway::ApiToken::new);
    opts.token_file = args.api_tokens.clone();
    opts.tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(sluice_gateway::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        (None, None) => None,
        (Some(_), None) => {
            anyhow::bail!("--tls-cert needs --tls-key (the certificate's private key)")
        }
        (None, Some(_)) => {
            anyhow::bail!("--tls-key needs --tls-cert (the certificate it belongs to)")
        }
    };
    let reload = std::sync::Arc::new(tokio::sync::Notify::new());
    opts.reload = Some(reload.clone());
    let traces = args.traces.start("sluice-gateway")?;
    opts.tracer = traces.as_ref().map(|t| t.tracer().clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let ran = rt.block_on(async {
        let hangups = crate::signals::on_hangup(move || reload.notify_one());
        let ran = sluice_gateway::run(opts, crate::signals::terminate()).await;
        hangups.abort();
        ran
    });
    if let Some(traces) = traces {
        traces.shutdown();
    }
    ran
}
