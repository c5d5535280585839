//! `--grpc-listen ADDR`: Envoy's rate limit service (SPEC §11),
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over gRPC
//! (tonic, with the generated types of the `envoy-types` crate), so that
//! Envoy, Istio and the other proxies that speak it use sluice unchanged.
//!
//! This is a thin shell: `mapping.rs` turns the request into asks and the
//! answers into the reply, and every ask goes through the gateway's one
//! [`sluice_client::Client`], as `/v1/allow` does: the same deny cache,
//! batching and fallback (`open` → OK, `local` → the local limiter,
//! `closed` → gRPC `UNAVAILABLE`, which Envoy turns into its
//! `failure_mode_deny` choice).
//!
//! Several descriptors (Envoy sends one per matching rate limit action):
//! envoyproxy/ratelimit increments every descriptor even when one is over
//! its limit (their #185, #440). Here, when more than one descriptor would
//! consume, all are first looked at with cost 0 (concurrently, so one
//! round trip when batched); if any does not fit, the reply is OVER_LIMIT
//! and nothing is consumed. Only when all fit are they asked for their
//! costs. What is guaranteed, and the one race left, is in
//! `docs/GATEWAY.md`.

mod mapping;

use crate::metrics::{Outcome as MetricOutcome, Route};
use crate::App;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use futures::future::join_all;
use mapping::{Outcome, Slot};
use sluice_client::{Answer, Error};
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpListener;
use tonic::{Code, Request, Response, Status};

/// The largest request accepted (Envoy's are a few hundred bytes).
const MAX_REQUEST_BYTES: usize = 256 * 1024;

/// Serves the rate limit service on `listener` (over TLS with `tls`, the
/// gateway's `--tls-cert/--tls-key`) until `stop` says so; then finishes
/// the calls in flight.
pub(crate) async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let service =
        RateLimitServiceServer::new(Service { app }).max_decoding_message_size(MAX_REQUEST_BYTES);
    let mut shutdown = stop.clone();
    let shutdown = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let server = tonic::transport::Server::builder().add_service(service);
    match tls {
        // The gateway's own handshakes (crate::https::incoming), so that a
        // reloaded certificate is presented here too.
        Some(config) => {
            let incoming = crate::https::incoming(listener, config, stop);
            server
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        None => {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            server
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    }
}

struct Service {
    app: Arc<App>,
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        if let Some(tokens) = &self.app.tokens {
            let authorization = request.metadata().get("authorization");
            let found = tokens
                .now()
                .find(authorization.map(|v| v.as_bytes()))
                .map(|n| n.role);
            if found != Some(crate::api_token::Role::Full) {
                return Err(Status::unauthenticated(
                    "this gateway needs an API token: send the metadata `authorization: Bearer <token>` \
                     (Envoy: grpc_service.initial_metadata) with the token it was started with \
                     (--api-token / SLUICE_API_TOKEN)",
                ));
            }
        }
        let started = Instant::now();
        let result = decide(&self.app, request.get_ref()).await;
        let outcome = match &result {
            Ok(r) if mapping::is_over_limit(r) => MetricOutcome::Denied,
            Ok(_) => MetricOutcome::Allowed,
            Err(s) => match s.code() {
                Code::Unavailable => MetricOutcome::Unavailable,
                Code::NotFound => MetricOutcome::UnknownPolicy,
                _ => MetricOutcome::BadRequest,
            },
        };
        self.app
            .metrics
            .observe(Route::Envoy, outcome, started.elapsed());
        if let Err(s) = &result {
            tracing::debug!(domain = request.get_ref().domain, "envoy: {s}");
        }
        result.map(Response::new)
    }
}

async fn decide(app: &App, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
    let slots = mapping::plan(app.envoy.as_ref(), request)?;
    // The policies in force, read once: the same ones decide whether to
    // look first and describe the limits in the reply.
    let policies = app.client.policies();
    let outcomes = if mapping::must_peek(&slots, &policies) {
        let peeks = ask_all(app, &slots, |_| Some(0)).await?;
        let fits = mapping::fits(&slots, &peeks);
        if fits.iter().all(|f| *f) {
            // Everything fits: consume (a cost-0 descriptor keeps its look).
            let asked = ask_all(app, &slots, |ask| (ask.cost > 0).then_some(ask.cost)).await?;
            asked
                .into_iter()
                .zip(peeks)
                .zip(&slots)
                .map(|((asked, peek), slot)| match slot {
                    Slot::Limited(a) if a.cost == 0 => peek.map(Outcome::of),
                    _ => asked.map(Outcome::of),
                })
                .collect()
        } else {
            // Someone does not fit: answer from the looks, consume nothing.
            peeks
                .into_iter()
                .zip(fits)
                .map(|(peek, fits)| {
                    peek.map(|answer| Outcome {
                        answer,
                        over: !fits,
                    })
                })
                .collect()
        }
    } else {
        ask_all(app, &slots, |ask| Some(ask.cost))
            .await?
            .into_iter()
            .map(|a| a.map(Outcome::of))
            .collect::<Vec<_>>()
    };
    Ok(mapping::response(&slots, &outcomes, &policies))
}

/// Asks for the limited slots at once, each for `cost_of` it (0 for a
/// look; `None` sends nothing for that slot); `None` in the result for the
/// unlimited slots and those not asked. The first refusal fails the call.
async fn ask_all(
    app: &App,
    slots: &[Slot],
    cost_of: impl Fn(&mapping::Ask) -> Option<u64>,
) -> Result<Vec<Option<Answer>>, Status> {
    let asks = slots.iter().map(|slot| {
        let cost = match slot {
            Slot::Limited(ask) => cost_of(ask),
            Slot::Unlimited => None,
        };
        async move {
            match (slot, cost) {
                (Slot::Limited(ask), Some(cost)) => {
                    app.client.ask(&ask.key, &ask.policy, cost).await.map(Some)
                }
                _ => Ok::<_, Error>(None),
            }
        }
    });
    join_all(asks)
        .await
        .into_iter()
        .collect::<Result<Vec<_>, Error>>()
        .map_err(|e| mapping::status_of(&e))
}
