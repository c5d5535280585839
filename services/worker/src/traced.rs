//! Spans of traced asks (`--otlp-endpoint`, docs/OPERATIONS.md, "Traces"):
//! an ask whose NATS headers carry a W3C `traceparent` gets a `decide`
//! span, a child of the asker's span, from the moment its shard takes it
//! to the moment its reply is published; in journal mode a `journal wait`
//! span inside it covers the wait for the journal to store its records.
//!
//! The span rides on the reply ([`crate::reply::Reply`]) and ends when the
//! reply is published (or dropped), so no task waits on it. The decision
//! core knows nothing of it: its attributes are read off the
//! [`Answer`] after the decision. An ask without a `traceparent`, or any
//! ask of a worker without `--otlp-endpoint`, builds nothing: one look at
//! the message's headers.

use crate::decide::Answer;
use sluice_core::policies::Policies;
use sluice_core::subject::Inbound;
use sluice_traces::{
    propagate, KeyValue, SdkSpan, SdkTracer, Span as _, SpanKind, Status, TraceContextExt as _,
    Tracer as _,
};

/// The spans of one traced ask; they end when it is dropped.
#[derive(Debug)]
pub struct Traced {
    /// First, so that it ends before the decision it is part of.
    journal: Option<SdkSpan>,
    decide: SdkSpan,
    tracer: SdkTracer,
}

impl Traced {
    /// The `decide` span of `msg`, when traces are on and its headers
    /// carry a valid `traceparent`; `None` otherwise, at the cost of a
    /// look at its headers.
    pub fn start(
        tracer: Option<&SdkTracer>,
        msg: &async_nats::Message,
        worker: &str,
    ) -> Option<Traced> {
        let tracer = tracer?;
        let parent = propagate::from_nats(msg.headers.as_ref())?;
        let mut attributes = vec![KeyValue::new("sluice.worker", worker.to_string())];
        if let Some(Inbound::Ask(ask)) = Inbound::parse(msg.subject.as_str()) {
            attributes.push(KeyValue::new("sluice.verb", ask.verb.as_str()));
            attributes.push(KeyValue::new("sluice.partition", i64::from(ask.partition)));
            attributes.push(KeyValue::new(
                "sluice.key_hash",
                sluice_traces::key_hash(ask.key_token),
            ));
        }
        let decide = tracer
            .span_builder("decide")
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        Some(Traced {
            journal: None,
            decide,
            tracer: tracer.clone(),
        })
    }

    /// Says what the decision was: the policy, allowed or denied, what
    /// remains, the limit that denied, or the error.
    pub fn decided(&mut self, answer: &Answer<'_>, policies: &Policies) {
        let span = &mut self.decide;
        match answer {
            Answer::Decision {
                decision,
                policy,
                repeat,
                ..
            }
            | Answer::Held {
                decision,
                policy,
                repeat,
                ..
            } => {
                let word = match (decision.allowed, decision.shadow_denied) {
                    (true, false) => "allowed",
                    (true, true) => "shadow_denied",
                    (false, _) => "denied",
                };
                span.set_attribute(KeyValue::new("sluice.policy", policy.to_string()));
                span.set_attribute(KeyValue::new("sluice.decision", word));
                span.set_attribute(KeyValue::new("sluice.remaining", decision.remaining as i64));
                span.set_attribute(KeyValue::new("sluice.limit", decision.limit as i64));
                span.set_attribute(KeyValue::new("sluice.repeat", *repeat));
                if !decision.within_limits() {
                    let by = denied_by(policies, policy, decision.limit);
                    span.set_attribute(KeyValue::new("sluice.denied_by", by));
                }
            }
            Answer::Error { error, .. } => {
                span.set_attribute(KeyValue::new("sluice.error", error.code.word()));
                span.set_status(Status::error(error.message.clone()));
            }
            Answer::Forward(forward) => {
                let home = forward.home.to_string();
                span.set_attribute(KeyValue::new("sluice.decided_at", home));
            }
            _ => {}
        }
    }

    /// The reply waits for the journal from now on (journal mode).
    pub fn waiting_for_journal(&mut self) {
        let parent = sluice_traces::Context::new()
            .with_remote_span_context(self.decide.span_context().clone());
        let span = self.tracer.start_with_context("journal wait", &parent);
        self.journal = Some(span);
    }

    /// The journal did not store the records: the reply is a 503.
    pub fn unstored(&mut self) {
        self.decide.set_status(Status::error(
            "the journal did not store what this ask counted",
        ));
    }
}

/// The limit of `policy` that decided (its reported `max`), as the config
/// writes it: `100/60s`; the reported number alone when no limit has it.
fn denied_by(policies: &Policies, policy: &str, reported: u64) -> String {
    let limit = policies
        .get(policy)
        .and_then(|p| p.limits().iter().find(|l| l.reported() == reported));
    match limit {
        Some(limit) => {
            let per = limit.per().as_u64();
            if per % 1_000_000_000 == 0 {
                format!("{}/{}s", limit.max(), per / 1_000_000_000)
            } else {
                format!("{}/{}ms", limit.max(), per / 1_000_000)
            }
        }
        None => format!("limit {reported}"),
    }
}
