//! [`GatewayOptions`]: what `sluice gateway` is started with.

use crate::api_token::ApiToken;
use crate::https::TlsFiles;
use sluice_client::NatsAuth;
use sluice_core::config::Config;
use sluice_core::policy::DEFAULT_POLICY;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use url::Url;

/// The default listen address (SPEC §5).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// The default header that names the key in proxy mode.
pub const DEFAULT_KEY_HEADER: &str = "X-User-Id";

/// How to run a gateway. [`GatewayOptions::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// Where to listen for HTTP. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Where to serve Envoy's rate limit service over gRPC (SPEC §11),
    /// if anywhere. Default none. The config's `[envoy]` table maps its
    /// descriptors to keys and policies.
    pub grpc_listen: Option<SocketAddr>,
    /// The NATS server(s), e.g. `nats://127.0.0.1:4222`.
    pub nats_url: String,
    /// NATS credentials and TLS (SPEC §10); the `client` role of
    /// `sluice nats-config --auth` is all a gateway needs.
    pub nats_auth: NatsAuth,
    /// The sluice config: `partitions`, `fallback`, and the policies the
    /// `local` fallback decides with. Use the workers' config file.
    pub config: Config,
    /// Proxy mode: every path other than the gateway's own is rate-limited
    /// and forwarded to this `http://` URL (its path, if any, is a prefix).
    pub upstream: Option<Url>,
    /// Proxy mode: the request header that names the key; without it (or
    /// when it is empty) the key is the client's IP address. Default `X-User-Id`.
    pub key_header: String,
    /// Proxy mode: the policy every forwarded request is counted under
    /// (cost 1). When it has `concurrency` (SPEC §13), each request
    /// holds one of its slots until its response ends. Default `default`.
    pub proxy_policy: String,
    /// The most one decision may take before the fallback decides. Default 100 ms.
    pub timeout: Duration,
    /// Batch concurrent asks for one worker (see sluice-client). Default true.
    pub batching: bool,
    /// When set, `/v1/*` answers only requests with `Authorization: Bearer
    /// <token>` (SPEC §10); `/healthz`, `/metrics` and proxy mode stay
    /// open. Default none.
    pub api_token: Option<ApiToken>,
    /// With `api_token`: a second token that may only read (usage, top
    /// keys, inspect, policies, alerts, status), 403 elsewhere. Default
    /// none.
    pub read_token: Option<ApiToken>,
    /// Named tokens, each full or read only, from a TOML file
    /// (`--api-tokens`, `tokens.rs`); read again on [`GatewayOptions::reload`].
    /// Default none.
    pub token_file: Option<PathBuf>,
    /// When set, the HTTP listener serves HTTPS (all of it: `/v1/*`,
    /// `/healthz`, `/metrics`, proxy mode) and the gRPC listener TLS, with
    /// this certificate and key (SPEC §10). Default none: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Serve the dashboard at `/ui` (SPEC §15). Default true; `sluice
    /// gateway --no-ui` turns it off. With `api_token`, its pages need the
    /// token too (a login page asks for it once).
    pub ui: bool,
    /// Trace every request (but probes and scrapes) and its asks with this
    /// tracer (`--otlp-endpoint`, `sluice_traces`). Default none.
    pub tracer: Option<sluice_traces::SdkTracer>,
    /// Each notification reads the token file and the TLS certificate and
    /// key again (`sluice gateway` notifies it on SIGHUP); what cannot be
    /// read or is not valid is logged and the old one kept. Default none.
    pub reload: Option<Arc<Notify>>,
}

impl GatewayOptions {
    pub fn new(nats_url: impl Into<String>, config: Config) -> GatewayOptions {
        GatewayOptions {
            listen: DEFAULT_LISTEN.parse().expect("a valid address"),
            grpc_listen: None,
            nats_url: nats_url.into(),
            nats_auth: NatsAuth::default(),
            config,
            upstream: None,
            key_header: DEFAULT_KEY_HEADER.to_string(),
            proxy_policy: DEFAULT_POLICY.to_string(),
            timeout: Duration::from_millis(100),
            batching: true,
            api_token: None,
            read_token: None,
            tls: None,
            ui: true,
            tracer: None,
            token_file: None,
            reload: None,
        }
    }
}
