//! The gateway's spans (`--otlp-endpoint`, docs/OPERATIONS.md, "Traces"):
//! one server span per HTTP request, continuing the caller's trace when
//! its request carries a W3C `traceparent`, and inside it a client span for
//! each ask sent to the workers, whose context goes to the worker in the
//! ask's NATS headers (`sluice_client::trace`), so the owner's decision is
//! a child of it.
//!
//! Without `--otlp-endpoint` the layer is not installed and [`ask`] runs
//! the ask as it is. Probes and scrapes (`/healthz`, `/livez`, `/readyz`,
//! `/metrics`) are not traced: a trace every few seconds per prober would
//! bury the requests. A span names the route's template
//! (`/v1/allow/{key}`), never the path, and a key only by its hash
//! ([`sluice_traces::key_hash`]).

use crate::App;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use sluice_client::{Answer, Error};
use sluice_traces::{
    propagate, Context, KeyValue, SpanKind, Status, TraceContextExt as _, Tracer as _,
    WithContext as _,
};
use std::future::Future;
use std::sync::Arc;

/// The paths no span is made for: probes and scrapes.
const UNTRACED: [&str; 4] = ["/healthz", "/livez", "/readyz", "/metrics"];

/// The middleware that makes each request's server span (installed only
/// with a tracer).
pub(crate) async fn request(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let Some(tracer) = &app.tracer else {
        return next.run(request).await;
    };
    if UNTRACED.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let parent =
        propagate::from_fields(|name| request.headers().get(name).and_then(|v| v.to_str().ok()))
            .unwrap_or_default();
    let method = request.method().as_str().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", MatchedPath::as_str)
        .to_string();
    let span = tracer
        .span_builder(format!("{method} {route}"))
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("http.request.method", method),
            KeyValue::new("http.route", route),
        ])
        .start_with_context(tracer, &parent);
    let cx = parent.with_span(span);
    let response = next.run(request).with_context(cx.clone()).await;
    let span = cx.span();
    let status = response.status();
    span.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(status.as_u16()),
    ));
    if status.is_server_error() {
        span.set_status(Status::error(status.to_string()));
    }
    span.end();
    response
}

/// Runs `asking` (an ask of `cost` units of `key` under `policy`) in an
/// `ask` client span of the request's trace, its context in the ask's
/// NATS headers; as it is when the request is not traced.
pub(crate) async fn ask(
    app: &App,
    token: &str,
    policy: &str,
    cost: u64,
    asking: impl Future<Output = Result<Answer, Error>>,
) -> Result<Answer, Error> {
    let Some(tracer) = &app.tracer else {
        return asking.await;
    };
    let parent = Context::current();
    if !parent.has_active_span() {
        return asking.await;
    }
    let span = tracer
        .span_builder("ask")
        .with_kind(SpanKind::Client)
        .with_attributes([
            KeyValue::new("messaging.system", "nats"),
            KeyValue::new("sluice.policy", policy.to_string()),
            KeyValue::new("sluice.cost", cost as i64),
            KeyValue::new("sluice.key_hash", sluice_traces::key_hash(token)),
        ])
        .start_with_context(tracer, &parent);
    let cx = parent.with_span(span);
    let headers = propagate::headers(&cx);
    let result = sluice_client::trace::with_headers(headers, asking).await;
    let span = cx.span();
    match &result {
        Ok(answer) => {
            let decision = match (answer.allowed, answer.shadow_denied) {
                (true, false) => "allowed",
                (true, true) => "shadow_denied",
                (false, _) => "denied",
            };
            span.set_attribute(KeyValue::new("sluice.decision", decision));
            span.set_attribute(KeyValue::new("sluice.remaining", answer.remaining as i64));
            span.set_attribute(KeyValue::new("sluice.source", answer.source.as_str()));
        }
        Err(e) => span.set_status(Status::error(e.to_string())),
    }
    span.end();
    result
}
