//! # sluice-gateway
//!
//! The HTTP face of sluice (SPEC §6), `sluice gateway`: an axum server
//! that asks the workers through [`sluice_client`] and answers in HTTP.
//! `docs/GATEWAY.md` has the endpoints, status codes and metrics.
//!
//! - [`run`] / [`serve`]: start with [`GatewayOptions`] and a shutdown
//!   future; returns when the shutdown future completes and in-flight
//!   requests are answered.
//!
//! Then in the order a request meets them:
//!
//! - `https.rs`: `--tls-cert` / `--tls-key`, HTTPS on the HTTP listener
//!   and TLS on the gRPC one.
//! - `api_token.rs`: `--api-token`, a bearer token for `/v1/*`, and
//!   `--api-read-token`, one that may only read; `tokens.rs`: named
//!   tokens of either role from `--api-tokens FILE`, reloaded on SIGHUP.
//! - `traces.rs`: `--otlp-endpoint`, a span per request and per ask,
//!   the ask's carried to the worker in its NATS headers.
//! - `allow.rs`: `GET`/`POST /v1/allow/{key}?policy=P&cost=N`, `POST /v1/hit/{key}`.
//! - `wait.rs`: `?wait=250ms` and `Sluice-Wait`, an ask that may wait for
//!   a later start (SPEC §18), and why proxy mode paces by its policy.
//! - `hold.rs`: `POST /v1/reserve|settle|extend/{key}` (SPEC §13).
//! - `grouped.rs`: the same verbs of a grouped key, `/{org}/{key}` and
//!   `/{org}/{team}/{key}` (SPEC §17); four key segments are a 400.
//! - `api.rs`: the `/v1` routes, the role each needs, and their OpenAPI
//!   description (`/v1/openapi.json`, `docs/openapi.json`).
//! - `usage.rs`: `GET /v1/usage/{key}` and `GET /v1/usage?top=N` (SPEC §9).
//! - `inspect.rs`: `GET /v1/inspect/{key}`, `POST /v1/reset/{key}` (SPEC §8).
//! - `policies.rs`: `/v1/policies[/{name}[/overrides[/{key}]]]` (SPEC §7).
//! - `alerts.rs`: `GET /v1/alerts` and its event stream (SPEC §14).
//! - `batch.rs`: `POST /v1/batch`, several asks answered in order.
//! - `status.rs`: `GET /v1/status`, the fleet.
//! - `proxy.rs`: `--upstream URL`, a rate-limiting reverse proxy for every
//!   other path, pacing requests when its policy has a `max_wait`.
//! - `envoy/`: `--grpc-listen ADDR`, Envoy's rate limit service over gRPC
//!   (SPEC §11), deciding through the same client as `/v1/allow`.
//! - `responses.rs`: the responses several routes share, as the
//!   description names them.
//! - `respond.rs`: decision and error responses, one set of headers
//!   ([`sluice_core::wire::decision_headers`]) for NATS and HTTP.
//! - `ui/`: the dashboard at `/ui` (SPEC §15; `--no-ui` turns it off):
//!   HTML pages and SVG charts rendered here, no script; its own tour is
//!   in `ui/mod.rs`.
//! - `reload.rs`: on SIGHUP, the token file and the TLS certificate read
//!   again, open connections untouched.
//! - `metrics.rs`: `/metrics`.
//! - `/healthz`: 200 while the NATS connection is up, 503 otherwise. It does
//!   not ask any worker: with no worker, the gateway still answers by its
//!   fallback, so it is healthy as long as it can reach NATS.
//! - `readiness.rs`: `/livez` and `/readyz` (connected, and a worker
//!   answers), for orchestrators' probes.
//!
//! ```no_run
//! use sluice_gateway::{run, GatewayOptions};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let config = sluice_core::config::Config::default();
//! let opts = GatewayOptions::new("nats://127.0.0.1:4222", config);
//! run(opts, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

mod alerts;
mod allow;
mod api;
mod api_token;
mod batch;
mod envoy;
mod grouped;
mod hold;
mod https;
mod inspect;
mod key_path;
mod metrics;
mod options;
mod policies;
mod proxy;
mod readiness;
mod reload;
mod respond;
mod responses;
mod status;
mod tokens;
mod traces;
mod ui;
mod usage;
mod wait;

pub use api::{openapi, openapi_json};
pub use api_token::ApiToken;
pub use https::{TlsFiles, HANDSHAKE_TIMEOUT};
pub use options::{GatewayOptions, DEFAULT_KEY_HEADER, DEFAULT_LISTEN};
pub use respond::SOURCE_HEADER;
pub use tokens::Tokens;
/// The type of [`GatewayOptions::upstream`].
pub use url::Url;

use anyhow::{bail, Context};
use axum::extract::State;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use sluice_client::{Client, ClientOptions};
use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// What every handler shares.
struct App {
    client: Client,
    metrics: metrics::Metrics,
    upstream: Option<proxy::Upstream>,
    key_header: HeaderName,
    proxy_policy: String,
    /// `[envoy]`, for the Envoy rate limit service.
    envoy: Option<sluice_core::config::EnvoyConfig>,
    /// The API tokens (`--api-token`, `--api-read-token`, `--api-tokens`):
    /// what `/v1/*`, the Envoy service and the dashboard require; `None`:
    /// open.
    tokens: Option<Arc<Tokens>>,
    /// The dashboard's state; `None` with `--no-ui`.
    ui: Option<UiState>,
    /// The config's partitions (`/v1/status`, the dashboard's status page).
    partitions: u32,
    /// The config's region: a policy written over HTTP is checked in it.
    region: Option<sluice_core::region::RegionName>,
    /// `/v1/openapi.json`, encoded once.
    openapi: String,
    /// With `--otlp-endpoint`: the tracer of the requests and their asks
    /// (`traces.rs`).
    tracer: Option<sluice_traces::SdkTracer>,
    /// Turns true when the gateway stops: endless responses (the alerts'
    /// event stream) end then, so that the shutdown does not wait for them.
    stop: tokio::sync::watch::Receiver<bool>,
}

/// What the dashboard keeps beside the client.
struct UiState {
    secrets: ui::Secrets,
    access: Arc<ui::AdminAccess>,
    /// The config's usage tiers (the steps the usage page offers).
    usage: sluice_core::usage::UsageConfig,
}

impl App {
    /// The dashboard's state; its routes exist only when it is on.
    fn ui(&self) -> &UiState {
        self.ui
            .as_ref()
            .expect("the dashboard's routes exist only with the dashboard on")
    }
}

/// Binds `opts.listen` (and `opts.grpc_listen`) and serves until
/// `shutdown` completes.
pub async fn run(opts: GatewayOptions, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    serve(listener, opts, shutdown).await
}

/// Serves HTTP (HTTPS with `opts.tls`) on an already bound listener
/// (`opts.listen` is ignored), and gRPC on `opts.grpc_listen` when set
/// (bound here), until `shutdown` completes; then stops accepting,
/// finishes the requests in flight and flushes the NATS connection.
pub async fn serve(
    listener: TcpListener,
    opts: GatewayOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    // First, so that bad files end the start before anything connects.
    let tls = opts.tls.as_ref().map(TlsFiles::load).transpose()?;
    let key_header = HeaderName::from_bytes(opts.key_header.as_bytes()).with_context(|| {
        format!(
            "the key header {:?} is not a valid header name",
            opts.key_header
        )
    })?;
    let upstream = opts
        .upstream
        .as_ref()
        .map(proxy::Upstream::new)
        .transpose()?;
    if upstream.is_some() && opts.config.policy(&opts.proxy_policy).is_none() {
        bail!(
            "the proxy policy {:?} is not in the config; add [policies.{}] or choose a configured policy",
            opts.proxy_policy,
            opts.proxy_policy
        );
    }
    let tokens = Tokens::load(
        opts.api_token.clone(),
        opts.read_token.clone(),
        opts.token_file.as_deref(),
    )?
    .map(Arc::new);
    let grpc_listener = match opts.grpc_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for gRPC (--grpc-listen)"))?,
        ),
        None => None,
    };
    warn_of_unknown_envoy_policies(&opts.config);
    let client = connect(&opts).await?;
    let ui = if opts.ui {
        Some(UiState {
            secrets: ui::Secrets::new(tls.is_some())?,
            access: Arc::default(),
            usage: opts.config.usage.clone(),
        })
    } else {
        None
    };
    let probe = ui
        .as_ref()
        .map(|ui| tokio::spawn(ui.access.clone().follow(client.nats().clone())));
    // axum and tonic want a `Send` shutdown future; ours need not be, so it
    // stays in this task and is relayed through a channel.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let app = Arc::new(App {
        client: client.clone(),
        metrics: metrics::Metrics::default(),
        upstream,
        key_header,
        proxy_policy: opts.proxy_policy.clone(),
        envoy: opts.config.envoy.clone(),
        tokens: tokens.clone(),
        ui,
        partitions: opts.config.partitions,
        region: opts.config.region.clone(),
        openapi: api::openapi_json(),
        tracer: opts.tracer.clone(),
        stop: stop_rx.clone(),
    });
    log_listening(&opts, listener.local_addr()?, tls.is_some());
    let grpc = match grpc_listener {
        Some(listener) => Some(spawn_grpc(&app, listener, tls.as_ref(), stop_rx.clone())?),
        None => None,
    };
    let reloading = opts.reload.clone().map(|notify| {
        let certs = tls.as_ref().map(|t| t.certs.clone());
        tokio::spawn(reload::on_notice(notify, tokens.clone(), certs))
    });
    let router = router(app, tokens);
    let server = http_server(listener, tls, router, stop_rx);
    tokio::pin!(server, shutdown);
    let mut stopping = false;
    let served = loop {
        tokio::select! {
            served = &mut server => break served,
            () = &mut shutdown, if !stopping => {
                tracing::info!("gateway stopping: finishing the requests in flight");
                stopping = true;
                let _ = stop_tx.send(true);
            }
        }
    };
    // Whatever ended the HTTP server ends the gRPC one too.
    let _ = stop_tx.send(true);
    if let Some(probe) = probe {
        probe.abort();
    }
    if let Some(reloading) = reloading {
        reloading.abort();
    }
    if let Some(grpc) = grpc {
        grpc.await
            .context("the gRPC server panicked")?
            .context("the gRPC server failed")?;
    }
    served.context("the HTTP server failed")?;
    // What the gateway holds of local budgets goes back to the owners (each
    // refund waits at most the client's timeout).
    client.close().await;
    // Hits are publishes: give them a moment to leave (not forever, NATS may be gone).
    let _ = tokio::time::timeout(Duration::from_secs(1), client.nats().flush()).await;
    tracing::info!("gateway stopped");
    Ok(())
}

/// The gateway's NATS client: the config's fallback and batching, with
/// the gateway's timeout and credentials.
async fn connect(opts: &GatewayOptions) -> anyhow::Result<Client> {
    let mut client_opts = ClientOptions::from_config(&opts.config).timeout(opts.timeout);
    client_opts.batching = opts.batching;
    client_opts.name = "sluice-gateway".into();
    client_opts.auth = opts.nats_auth.clone();
    // The local fallback and the deny cache follow the live policies (SPEC §7).
    client_opts.follow_policies = true;
    Client::connect_with(&opts.nats_url, client_opts)
        .await
        .context("the gateway cannot start")
}

/// Says where the gateway answers, and what it does with what it is not
/// asked directly (the dashboard, the upstream).
fn log_listening(opts: &GatewayOptions, addr: SocketAddr, tls: bool) {
    let scheme = if tls { "https" } else { "http" };
    tracing::info!(
        "gateway listening on {scheme}://{addr}, NATS {}, fallback {}, dashboard {}, {}",
        opts.nats_url,
        opts.config.fallback,
        if opts.ui {
            format!("{scheme}://{addr}{}", ui::PREFIX)
        } else {
            "off".into()
        },
        match &opts.upstream {
            Some(u) => format!(
                "proxying other paths to {u} (key header {})",
                opts.key_header
            ),
            None => "no upstream".to_string(),
        }
    );
}

/// Serves Envoy's rate limit service over gRPC on `listener`, on a task of
/// its own, until `stop` turns true.
fn spawn_grpc(
    app: &Arc<App>,
    listener: TcpListener,
    tls: Option<&https::Tls>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>> {
    tracing::info!(
        "envoy rate limit service listening on {} (gRPC{}), {}",
        listener.local_addr()?,
        if tls.is_some() { " over TLS" } else { "" },
        match &app.envoy {
            Some(e) => format!("{} [envoy] rules", e.rules().len()),
            None => "no [envoy] table: every descriptor under policy default".into(),
        }
    );
    Ok(tokio::spawn(envoy::serve(
        app.clone(),
        listener,
        tls.map(|t| t.grpc.clone()),
        stop,
    )))
}

/// The HTTP server (HTTPS with `tls`) on `listener`, as a future that ends
/// once `stop` turns true and the requests in flight are answered.
fn http_server(
    listener: TcpListener,
    tls: Option<https::Tls>,
    router: Router,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>> {
    match tls {
        Some(tls) => Box::pin(https::serve(listener, tls.http, router, stop)),
        None => {
            let mut http_stop = stop;
            Box::pin(
                axum::serve(
                    listener,
                    router.into_make_service_with_connect_info::<SocketAddr>(),
                )
                .with_graceful_shutdown(async move {
                    let _ = http_stop.wait_for(|stop| *stop).await;
                })
                .into_future(),
            )
        }
    }
}

/// The policies `[envoy]` rules name must exist when asked for; one that
/// the file does not define may still come from the policy bucket, so it
/// is a warning, not an error.
fn warn_of_unknown_envoy_policies(config: &sluice_core::config::Config) {
    let Some(envoy) = &config.envoy else { return };
    for rule in envoy.rules() {
        if let sluice_core::config::EnvoyTarget::Limit { policy, .. } = &rule.target {
            if config.policy(policy).is_none() {
                tracing::warn!(
                    "[envoy] rule for domain {:?} names policy {policy:?}, which the config file does not define; until the policy bucket has it, its descriptors get gRPC NOT_FOUND",
                    rule.domain
                );
            }
        }
    }
}

fn router(app: Arc<App>, tokens: Option<Arc<Tokens>>) -> Router {
    let (v1, _) = api::routes(tokens);
    // A path that names no key is a 400 that says so, not a 404.
    let mut router = no_key_routes(v1);
    if app.ui.is_some() {
        router = router.merge(ui::router(app.clone()));
    }
    let router = router
        .merge(readiness::routes())
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(proxy::proxy);
    // Only with a tracer: without one, no request pays for the layer.
    let router = if app.tracer.is_some() {
        router.layer(axum::middleware::from_fn_with_state(
            app.clone(),
            traces::request,
        ))
    } else {
        router
    };
    router.with_state(app)
}

/// `/v1/allow/`, `/v1/hit/`, ... with no key, or with a key of four
/// segments or more: 400 (the paths with a key are `api::routes`).
fn no_key_routes(v1: Router<Arc<App>>) -> Router<Arc<App>> {
    grouped::too_deep_routes(v1)
        .route("/v1/allow/", any(allow::empty_key))
        .route("/v1/hit/", any(allow::empty_key))
        .route("/v1/inspect/", any(allow::empty_key))
        .route("/v1/reset/", any(allow::empty_key))
        .route("/v1/reserve/", any(hold::empty_key))
        .route("/v1/settle/", any(hold::empty_key))
        .route("/v1/extend/", any(hold::empty_key))
        .route("/v1/policies/", any(policies::no_name))
        .route("/v1/policies/{name}/overrides/", any(allow::empty_key))
}

/// 200 while the NATS connection is up; 503 while it is down (asks are then
/// answered by the fallback, without waiting).
async fn healthz(State(app): State<Arc<App>>) -> Response {
    let (status, body) = if app.client.is_connected() {
        (StatusCode::OK, r#"{"status":"ok","nats":"connected"}"#)
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"status":"unavailable","nats":"disconnected"}"#,
        )
    };
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    match app
        .metrics
        .render(&app.client.stats(), app.client.is_connected())
    {
        Ok(text) => {
            let mut r = text.into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(sluice_core::metrics::CONTENT_TYPE),
            );
            r
        }
        Err(e) => {
            tracing::error!("cannot render /metrics: {e}");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
