//! The W3C trace context (`traceparent`, `tracestate`) between processes:
//! read from an HTTP request or a NATS message, written into an ask's NATS
//! headers. Any client that puts a `traceparent` on its ask (the Python
//! client, a service with its own OpenTelemetry SDK) has the worker's
//! decision continue its trace, as the gateway's asks do.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The header that carries the parent span (W3C Trace Context).
pub const TRACEPARENT: &str = "traceparent";
/// The vendors' part of the trace context, carried along when present.
pub const TRACESTATE: &str = "tracestate";

/// The trace a NATS message's headers continue: `None` without headers,
/// without `traceparent`, or with one that is not valid (then the message
/// is answered as any other).
pub fn from_nats(headers: Option<&async_nats::HeaderMap>) -> Option<Context> {
    let headers = headers?;
    headers.get(TRACEPARENT)?;
    from_fields(|name| headers.get(name).map(|v| v.as_str()))
}

/// The trace that headers read with `get` continue (an HTTP request's);
/// `None` without a valid `traceparent`.
pub fn from_fields<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Option<Context> {
    let fields = Fields {
        traceparent: get(TRACEPARENT)?,
        tracestate: get(TRACESTATE),
    };
    let cx = TraceContextPropagator::new().extract(&fields);
    cx.span().span_context().is_valid().then_some(cx)
}

/// The headers that carry `cx`'s span to another process: `traceparent`,
/// and `tracestate` when it has one. Empty when `cx` has no valid span.
pub fn headers(cx: &Context) -> Vec<(&'static str, String)> {
    let mut out = Out(Vec::with_capacity(2));
    TraceContextPropagator::new().inject_context(cx, &mut out);
    out.0
}

struct Fields<'a> {
    traceparent: &'a str,
    tracestate: Option<&'a str>,
}

impl Extractor for Fields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => Some(self.traceparent),
            TRACESTATE => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

struct Out(Vec<(&'static str, String)>);

impl Injector for Out {
    fn set(&mut self, key: &str, value: String) {
        let name = match key {
            TRACEPARENT => TRACEPARENT,
            TRACESTATE if !value.is_empty() => TRACESTATE,
            _ => return,
        };
        self.0.push((name, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_in_nats_headers_is_continued_and_written_back_alike() {
        let mut nats = async_nats::HeaderMap::new();
        nats.insert(TRACEPARENT, PARENT);
        let cx = from_nats(Some(&nats)).expect("a valid traceparent");
        let span = cx.span().span_context().clone();
        assert_eq!(
            span.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(span.is_remote());
        assert_eq!(headers(&cx), vec![(TRACEPARENT, PARENT.to_string())]);
    }

    #[test]
    fn no_headers_no_traceparent_or_a_bad_one_continue_nothing() {
        assert!(from_nats(None).is_none());
        let mut nats = async_nats::HeaderMap::new();
        nats.insert("Nats-Msg-Id", "x");
        assert!(from_nats(Some(&nats)).is_none());
        for bad in [
            "",
            "00-zz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            nats.insert(TRACEPARENT, bad);
            assert!(from_nats(Some(&nats)).is_none(), "{bad:?}");
        }
        assert!(headers(&Context::new()).is_empty());
    }
}
