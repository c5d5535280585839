//! What `sluice bench` loads: sluice (or the echo responder) through the
//! plain subject, or sluice through the batching client. One [`NatsTarget`]
//! per connection; the tasks of a connection share it. Each request is an
//! allow, or with `--verb hold` a reserve and its settle, with `--verb
//! reserve` a reserve alone ([`LoadVerb`]).

use super::batching::BatchingTarget;
use super::spec::{ClientKind, LoadVerb, NatsSpec};
use anyhow::{Context as _, Result};
use async_nats::client::RequestErrorKind;
use async_nats::Subject;
use bytes::Bytes;
use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::error::{ContextKind, ContextValue};
use clap::ValueEnum;
use sluice_bench::admission::Window;
use sluice_bench::{Connect, Outcome, Reply, Target};
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::wire::hold::{decode_held, encode_hold_request, HoldAsk};
use sluice_core::wire::{self, Encoding, RETRY_AFTER, SERVICE_ERROR_CODE};
use std::ffi::OsStr;
use std::time::Duration;

/// Where the requests go. (The Redis baselines are `sluice-bench-redis`,
/// a binary of its own: the product binary carries no Redis client.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    /// sluice workers (`rl.allow.<key>`).
    Sluice,
    /// A bare responder on the workers' subjects that decides nothing
    /// (`sluice bench --serve-echo`): the ceiling of NATS request-reply here.
    Echo,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Sluice => "sluice",
            TargetKind::Echo => "echo",
        }
    }
}

/// Parses `--target` as clap would, and where someone asks for a Redis
/// target (which `sluice bench` had until the split), says where it went.
#[derive(Clone)]
pub struct TargetParser;

impl TypedValueParser for TargetParser {
    type Value = TargetKind;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<TargetKind, clap::Error> {
        EnumValueParser::<TargetKind>::new()
            .parse_ref(cmd, arg, value)
            .map_err(|mut e| {
                let value = value.to_string_lossy();
                if value.starts_with("redis") {
                    let tip = format!(
                        "the Redis targets are a binary of their own: `sluice-bench-redis --target {value}` (bench/README.md)"
                    );
                    e.insert(
                        ContextKind::Suggested,
                        ContextValue::StyledStrs(vec![tip.into()]),
                    );
                }
                e
            })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            TargetKind::value_variants()
                .iter()
                .filter_map(ValueEnum::to_possible_value),
        ))
    }
}

impl Connect for NatsSpec {
    type Target = NatsTarget;

    async fn connect(&self, index: usize) -> Result<NatsTarget> {
        match self.client {
            ClientKind::Plain => {
                let client = self
                    .auth
                    .connect_named(&self.url, &format!("sluice-bench-{index}"))
                    .await?;
                Ok(NatsTarget::Plain(PlainTarget {
                    client,
                    spec: self.clone(),
                }))
            }
            ClientKind::Batching => {
                let spec = self
                    .batching
                    .as_ref()
                    .context("the batching client is not set up")?;
                Ok(NatsTarget::Batching(
                    super::batching::connect(spec, self, index).await?,
                ))
            }
        }
    }
}

/// One connection of `sluice bench`.
pub enum NatsTarget {
    Plain(PlainTarget),
    Batching(BatchingTarget),
}

impl Target for NatsTarget {
    async fn ask(&self, key: usize) -> Reply {
        match self {
            NatsTarget::Plain(t) => t.ask(key).await,
            NatsTarget::Batching(t) => t.ask(key).await,
        }
    }

    fn stats(&self) -> Option<serde_json::Value> {
        match self {
            NatsTarget::Batching(t) => Some(t.stats()),
            NatsTarget::Plain(_) => None,
        }
    }
}

pub struct PlainTarget {
    client: async_nats::Client,
    spec: NatsSpec,
}

impl PlainTarget {
    async fn ask(&self, key: usize) -> Reply {
        let spec = &self.spec;
        let body = match &spec.ids {
            None => spec.body.clone(),
            Some(next) => {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let id = format!("bench-{n:x}");
                let policy = (spec.policy != DEFAULT_POLICY).then_some(spec.policy.as_str());
                let cost = (spec.cost != wire::DEFAULT_COST).then_some(spec.cost);
                wire::encode_request_with_id(policy, cost, Some(&id), Encoding::MsgPack).into()
            }
        };
        let msg = match self.request(spec.subjects[key].clone(), body).await {
            Ok(msg) => msg,
            Err(failed) => return failed,
        };
        let outcome = classify_reply(&msg);
        if spec.verb == LoadVerb::Hold && outcome == Outcome::Allowed {
            return self.settle(key, &msg.payload).await;
        }
        let decided = matches!(outcome, Outcome::Allowed | Outcome::Denied);
        let window = if spec.windows && decided {
            reply_window(&msg.payload)
        } else {
            None
        };
        Reply::from(outcome).in_window(window)
    }

    /// Settles the hold an allowed reserve's reply names, with the same
    /// cost: the pair is allowed unless the settle is refused.
    async fn settle(&self, key: usize, reserved: &[u8]) -> Reply {
        let spec = &self.spec;
        let hold = match decode_held(reserved) {
            Ok((_, Some(ticket))) => ticket.hold,
            _ => return Reply::other("an allowed reserve named no hold"),
        };
        let ask = HoldAsk {
            policy: Some(&spec.policy),
            cost: Some(spec.cost),
            ttl_ms: None,
            hold: Some(&hold),
            id: None,
            wait_ms: None,
        };
        let body = Bytes::from(encode_hold_request(&ask, Encoding::MsgPack));
        match self.request(spec.settle_subjects[key].clone(), body).await {
            // Its decision is a peek's after it; the pair was allowed.
            Ok(msg) => match classify_reply(&msg) {
                Outcome::Allowed | Outcome::Denied => Outcome::Allowed.into(),
                refused => refused.into(),
            },
            Err(failed) => failed,
        }
    }

    /// One NATS request; no answer is the reply that says why.
    async fn request(&self, subject: Subject, body: Bytes) -> Result<async_nats::Message, Reply> {
        let request = async_nats::Request::new()
            .payload(body)
            .timeout(Some(self.spec.timeout));
        self.client
            .send_request(subject, request)
            .await
            .map_err(|e| match e.kind() {
                RequestErrorKind::NoResponders => Outcome::NoResponders.into(),
                RequestErrorKind::TimedOut => Outcome::Timeout.into(),
                _ => Reply::other(e.to_string()),
            })
    }
}

/// Reads a reply the way any NATS client can (SPEC §1): an error has
/// `Nats-Service-Error-Code`, a denial has `Retry-After`, anything else is
/// an allowed decision. The body is not decoded.
pub fn classify_reply(msg: &async_nats::Message) -> Outcome {
    let Some(headers) = &msg.headers else {
        return Outcome::Other;
    };
    if let Some(code) = headers.get(SERVICE_ERROR_CODE) {
        return Outcome::ErrorReply(code.as_str().parse().unwrap_or(0));
    }
    if headers.get(RETRY_AFTER).is_some() {
        Outcome::Denied
    } else {
        Outcome::Allowed
    }
}

/// The window a decision's body names through its `reset` (None if the
/// body is not a decision).
fn reply_window(body: &[u8]) -> Option<Window> {
    match wire::decode_reply(body) {
        Ok(wire::Reply::Decision(d)) => Some(Window::Reset(Duration::from_millis(d.reset_ms))),
        _ => None,
    }
}
