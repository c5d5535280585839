//! Traces over OTLP (docs/OPERATIONS.md, "Traces"): a real `sluice
//! gateway` and `sluice worker` (journal mode) with `--otlp-endpoint`, and
//! a real OTLP/HTTP receiver in the test process that decodes what they
//! export with the OpenTelemetry protocol's own messages
//! (`opentelemetry-proto`). Both processes are stopped with SIGTERM before
//! the spans are read: a stop sends what is still batched, so the test
//! waits for the processes, not for the exporters' timer.

use crate::common;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use common::gateway::gateway_process;
use common::SLUICE;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;
use sluice_tests::{ask, eventually, serial, ChildGuard, Stack, TestConfig};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One span as the receiver got it.
#[derive(Clone, Debug)]
struct Got {
    service: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: BTreeMap<String, String>,
}

type Spans = Arc<Mutex<Vec<Got>>>;

/// `POST /v1/traces`: decodes an OTLP/HTTP protobuf body into [`Got`]s.
async fn export(State(spans): State<Spans>, body: Bytes) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut got = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
            got.push(Got {
                service: service.clone(),
                name: span.name,
                trace: hex(&span.trace_id),
                id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
                attributes: span
                    .attributes
                    .iter()
                    .map(|a| {
                        (
                            a.key.clone(),
                            text(a.value.as_ref().and_then(|v| v.value.as_ref())),
                        )
                    })
                    .collect(),
            });
        }
    }
    StatusCode::OK
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The receiver on a free loopback port; its base URL and what it got.
async fn receiver() -> (String, Spans) {
    let spans = Spans::default();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(export))
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, spans)
}

/// A traceparent of the test's own: the trace it names and its span.
fn parent(n: u8) -> (String, String, String) {
    let trace = format!("{n:02x}").repeat(16);
    let span = format!("{:02x}", n + 1).repeat(8);
    (format!("00-{trace}-{span}-01"), trace, span)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_the_gateway_is_one_trace_down_to_the_workers_decision() {
    let _serial = serial().await;
    let (otlp, spans) = receiver().await;
    let mut stack = Stack::start(SLUICE, &TestConfig::new().journal().toml(), 0).await;
    stack
        .start_workers_with(1, &["--otlp-endpoint", &otlp])
        .await;
    let (mut gateway, listen) = gateway_process(&stack);
    gateway.args(["--otlp-endpoint", &otlp]);
    let mut gateway = ChildGuard::spawn("gateway", gateway).expect("sluice gateway starts");
    let http = reqwest::Client::new();
    let base = format!("http://{listen}");
    eventually(Duration::from_secs(10), Duration::from_millis(50), || {
        let ready = http.get(format!("{base}/readyz")).send();
        async move { ready.await?.error_for_status() }
    })
    .await
    .expect("the gateway gets ready");

    // Allowed: all 5 of `default` at once; then denied.
    let allowed = parent(0x11);
    let denied = parent(0x22);
    for ((traceparent, _, _), cost, status) in [(&allowed, 5, 200), (&denied, 1, 429)] {
        let response = http
            .get(format!("{base}/v1/allow/alice?cost={cost}"))
            .header("traceparent", traceparent)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status);
    }
    // Untraced: an ask straight over NATS, without a traceparent.
    let nats = stack.clients(1).await.remove(0);
    ask(&nats, "bob", br#"{"cost":0}"#).await.unwrap();

    gateway.terminate().expect("the gateway stops");
    stack.stop_workers();
    let all = eventually(Duration::from_secs(10), Duration::from_millis(50), || {
        let got = spans.lock().unwrap().clone();
        let decided = got.iter().filter(|s| s.name == "decide").count();
        async move {
            match decided >= 2 {
                true => Ok(got),
                false => Err(anyhow::anyhow!("{decided} decide spans so far: {got:#?}")),
            }
        }
    })
    .await
    .unwrap();

    for (case, (_, trace, caller)) in [("allowed", &allowed), ("denied", &denied)] {
        let of_trace: Vec<&Got> = all.iter().filter(|s| &s.trace == trace).collect();
        let one = |name: &str| -> &Got {
            let named: Vec<_> = of_trace.iter().filter(|s| s.name == name).collect();
            assert_eq!(named.len(), 1, "{case}: one {name} span in {of_trace:#?}");
            named[0]
        };
        let request = one("GET /v1/allow/{key}");
        let asked = one("ask");
        let decide = one("decide");
        assert_eq!(
            &request.parent, caller,
            "{case}: the caller's trace goes on"
        );
        assert_eq!(asked.parent, request.id, "{case}: the ask is the request's");
        assert_eq!(
            decide.parent, asked.id,
            "{case}: the decision is the ask's child"
        );
        assert_eq!(request.service, "sluice-gateway");
        assert_eq!(asked.service, "sluice-gateway");
        assert_eq!(decide.service, "sluice-worker");
        let a = &decide.attributes;
        assert_eq!(a["sluice.policy"], "default", "{case}");
        assert_eq!(a["sluice.decision"], case);
        assert_eq!(a["sluice.remaining"], "0", "{case}");
        assert_eq!(a["sluice.key_hash"], sluice_traces::key_hash("alice"));
        assert_eq!(asked.attributes["sluice.source"], "worker", "{case}");
        assert_eq!(
            asked.attributes["sluice.key_hash"],
            sluice_traces::key_hash("alice")
        );
        assert_eq!(
            request.attributes["http.response.status_code"],
            if case == "allowed" { "200" } else { "429" }
        );
        for span in &of_trace {
            assert!(
                span.attributes.values().all(|v| !v.contains("alice")),
                "{case}: the key itself is in {span:#?}"
            );
        }
        match case {
            // What an allowed ask counted waited for the journal.
            "allowed" => assert_eq!(one("journal wait").parent, decide.id),
            _ => assert_eq!(a["sluice.denied_by"], "5/10s"),
        }
    }
    assert!(
        all.iter()
            .all(|s| s.attributes.get("sluice.key_hash") != Some(&sluice_traces::key_hash("bob"))),
        "an ask without a traceparent made a span: {all:#?}"
    );
}
