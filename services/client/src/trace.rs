//! An ask's trace context: a caller that traces its work (the gateway with
//! `--otlp-endpoint`, or any service with an OpenTelemetry SDK of its own)
//! runs its asks inside [`with_headers`], handing the W3C `traceparent`
//! (and `tracestate`) it wants continued. Every request the client sends
//! in there carries them as NATS headers, so the owner's decision becomes
//! a span of the caller's trace (docs/OPERATIONS.md, "Traces").
//!
//! A traced ask goes alone, never in a batch: one batch message carries the
//! asks of many callers, and so of many traces. The one exception is an
//! ask that asks for a slice of a local budget, which only a batch can
//! carry: it goes untraced. The client knows nothing of
//! OpenTelemetry: the values are the caller's, carried as they are. Outside
//! [`with_headers`] an ask pays for one look at a task-local value.
//!
//! ```no_run
//! # async fn demo(client: sluice_client::Client) -> Result<(), sluice_client::Error> {
//! let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
//! let headers = vec![("traceparent", parent.to_string())];
//! let answer = sluice_client::trace::with_headers(headers, client.allow("alice")).await?;
//! # Ok(()) }
//! ```

use async_nats::HeaderMap;
use std::future::Future;

tokio::task_local! {
    /// `None` inside [`untraced`].
    static HEADERS: Option<HeaderMap>;
}

/// Runs `f` with `headers` (name, value) on every request it sends.
pub async fn with_headers<F: Future>(headers: Vec<(&'static str, String)>, f: F) -> F::Output {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(name, value.as_str());
    }
    HEADERS.scope(Some(map), f).await
}

/// Runs `f` outside any trace (a batch, which carries other callers' asks).
pub(crate) async fn untraced<F: Future>(f: F) -> F::Output {
    HEADERS.scope(None, f).await
}

/// The headers of the trace this task is in, if any.
pub(crate) fn current() -> Option<HeaderMap> {
    HEADERS.try_with(Option::clone).ok().flatten()
}

/// Whether this task is in a trace (its asks go alone).
pub(crate) fn is_traced() -> bool {
    HEADERS.try_with(Option::is_some).unwrap_or(false)
}
