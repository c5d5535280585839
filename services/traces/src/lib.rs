//! # sluice-traces
//!
//! OpenTelemetry traces of the gateway and the worker (`--otlp-endpoint`,
//! off by default), exported over OTLP/HTTP with protobuf bodies: the
//! gateway's request, its ask over NATS, the worker's decision and, in
//! journal mode, the wait for the journal (docs/OPERATIONS.md, "Traces").
//!
//! Why a crate of its own: the gateway and the worker both start an
//! exporter and carry the W3C `traceparent` in NATS headers, and neither
//! the decision core (`sluice-core`, no I/O) nor the client library
//! (`sluice-client`, which API servers embed) should bring the OpenTelemetry
//! SDK in. The client only carries a header value it is handed
//! (`sluice_client::trace`).
//!
//! - [`Traces`]: the exporter and its tracer, started from the endpoint
//!   and flushed at the end.
//! - [`propagate`]: `traceparent` out of NATS and HTTP headers, and into
//!   them.
//! - [`key_hash`]: what a span says of a key (never the key itself).
//!
//! Spans are the OpenTelemetry API's own (`opentelemetry::trace`), not
//! `tracing`'s: a process without `--otlp-endpoint` has no [`Traces`] and
//! builds none, and a worker builds one only for an ask that carries a
//! `traceparent`, so the plain path pays for one look at the message's
//! headers.

pub mod propagate;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use std::time::Duration;
use url::Url;

pub use opentelemetry::context::FutureExt as WithContext;
pub use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer};
pub use opentelemetry::{Context, KeyValue};
pub use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};

/// Where OTLP/HTTP puts traces under a collector's base URL (as the
/// `OTEL_EXPORTER_OTLP_ENDPOINT` convention has it).
pub const TRACES_PATH: &str = "/v1/traces";

/// The longest [`Traces::shutdown`] waits for the last spans to leave.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// A process's exporter and tracer. Spans are batched and sent from a
/// thread of the SDK's own (every `OTEL_BSP_SCHEDULE_DELAY`, 5 s by
/// default); a collector that does not answer costs dropped spans, never a
/// decision.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Traces {
    /// Exports the spans of `service` (`sluice-gateway`, `sluice-worker`)
    /// to the collector at `endpoint`: a base URL (`http://127.0.0.1:4318`,
    /// to which [`TRACES_PATH`] is added) or a full one ending in a path of
    /// its own.
    pub fn start(endpoint: &Url, service: &'static str) -> anyhow::Result<Traces> {
        let url = traces_url(endpoint)?;
        let exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(url.as_str())
            .build()
            .map_err(|e| anyhow::anyhow!("cannot export traces to {url} (--otlp-endpoint): {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        let tracer = provider.tracer("sluice");
        tracing::info!("exporting traces over OTLP/HTTP to {url}");
        Ok(Traces { provider, tracer })
    }

    pub fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Sends what is still batched, waiting at most a few seconds (a
    /// collector that is gone must not hold a shutdown up). Blocking: call
    /// it off the async threads or after the runtime.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_WAIT) {
            tracing::warn!("the last traces may not have been exported: {e}");
        }
    }
}

/// `endpoint` with [`TRACES_PATH`] when it names no path; an endpoint that
/// is not `http://` is refused (the exporter has no TLS: run a collector
/// beside the process).
fn traces_url(endpoint: &Url) -> anyhow::Result<Url> {
    if endpoint.scheme() != "http" {
        anyhow::bail!(
            "--otlp-endpoint {endpoint} is not http://: traces are sent over plain OTLP/HTTP; \
             point it at a collector on this host or network (http://127.0.0.1:4318)"
        );
    }
    let mut url = endpoint.clone();
    if url.path() == "/" || url.path().is_empty() {
        url.set_path(TRACES_PATH);
    }
    Ok(url)
}

/// What a span says of a key: FNV-1a 64 of its key token, in hex. The same
/// key gives the same hash in every process (the gateway's and the
/// worker's spans of one key match), but the key itself never leaves in a
/// trace. It is no secret: whoever can guess a key can hash it.
pub fn key_hash(token: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in token.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_gets_the_traces_path_and_a_full_one_is_kept() {
        let url = |s: &str| traces_url(&s.parse().unwrap()).unwrap().to_string();
        assert_eq!(
            url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            url("http://c:4318/otlp/v1/traces"),
            "http://c:4318/otlp/v1/traces"
        );
        let https = traces_url(&"https://c:4318".parse().unwrap()).unwrap_err();
        assert!(https.to_string().contains("not http://"), "{https}");
    }

    #[test]
    fn key_hash_is_fnv1a_64() {
        // The FNV-1a 64 test vectors.
        assert_eq!(key_hash(""), "cbf29ce484222325");
        assert_eq!(key_hash("a"), "af63dc4c8601ec8c");
        assert_ne!(key_hash("alice"), key_hash("alicf"));
    }
}
