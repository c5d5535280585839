//! What one load connection is opened from ([`NatsSpec`]): which client
//! asks ([`ClientKind`], [`BatchingSpec`]), what each request is
//! ([`LoadVerb`]), where, and the prepared subjects and body. Below the targets that connect from it (`targets.rs`,
//! `batching.rs`), which share it.

use anyhow::Result;
use async_nats::Subject;
use bytes::Bytes;
use sluice_core::key::try_encode_path;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::Verb;
use sluice_core::wire::hold::{encode_hold_request, HoldAsk};
use sluice_core::wire::{self, Encoding};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// How sluice is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientKind {
    /// One NATS request per ask on `rl.allow.<key>` (any NATS client can do this).
    Plain,
    /// `sluice-client` with batching: concurrent asks for one worker share a request.
    Batching,
}

impl ClientKind {
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Plain => "plain",
            ClientKind::Batching => "batching",
        }
    }
}

/// What each request of the load is (`--verb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadVerb {
    /// `rl.allow.<key>`: one decision.
    Allow,
    /// `rl.reserve.<key>` and, when allowed, `rl.settle.<key>` of that hold
    /// with the same cost: one request is the pair (SPEC §13).
    Hold,
    /// `rl.reserve.<key>` alone: every allowed one stays live until its
    /// ttl (the policy's `hold_ttl`), e.g. to measure memory per live hold.
    Reserve,
}

#[derive(Clone, Debug)]
pub struct BatchingSpec {
    pub partitions: u32,
    pub deny_cache: bool,
    /// Local budgets ([`ClientOptions::budgets`]); `--no-budgets` turns them off.
    pub budgets: bool,
    /// Name every ask (`--ids`, [`ClientOptions::ask_ids`]).
    pub ask_ids: bool,
}

/// Everything needed to open one connection's `NatsTarget` (`targets.rs`); cheap to
/// clone and sent to every load thread.
#[derive(Clone)]
pub struct NatsSpec {
    pub client: ClientKind,
    pub verb: LoadVerb,
    pub url: String,
    /// NATS credentials and TLS (`sluice bench` runs as the `client` role).
    pub auth: sluice_client::NatsAuth,
    pub timeout: Duration,
    /// The request subjects `rl.allow.<token>` (`rl.reserve.<token>` for
    /// holds), by key number (plain client).
    pub subjects: Arc<Vec<Subject>>,
    /// `rl.settle.<token>` by key number (plain client, `--verb hold`).
    pub settle_subjects: Arc<Vec<Subject>>,
    /// The raw keys, by key number (batching client; a grouped key's path
    /// goes by the plain client only).
    pub keys: Arc<Vec<String>>,
    pub body: Bytes,
    pub policy: String,
    pub cost: u64,
    pub batching: Option<BatchingSpec>,
    /// Tell each decision's fixed window (its `reset`), for the admission
    /// accounting; the plain client then decodes every reply's body.
    pub windows: bool,
    /// `--ids`: the plain client writes a new id into each ask's body,
    /// numbered from this counter (shared by every connection).
    pub ids: Option<Arc<AtomicU64>>,
}

impl NatsSpec {
    /// Prepares subjects (or keys, for the batching client) and the body.
    /// Each key is a path of one token, or of two or three for a grouped
    /// key (SPEC §17).
    pub fn new(
        client: ClientKind,
        verb: LoadVerb,
        url: String,
        timeout: Duration,
        keys: Vec<Vec<String>>,
        policy: &str,
        cost: u64,
    ) -> Result<NatsSpec> {
        let subjects_of = |subject_verb: Verb| -> Result<Vec<Subject>> {
            if client == ClientKind::Batching {
                return Ok(Vec::new());
            }
            keys.iter()
                .map(|path| {
                    let tokens: Vec<&[u8]> = path.iter().map(|t| t.as_bytes()).collect();
                    let token = try_encode_path(&tokens)
                        .map_err(|e| anyhow::anyhow!("key {path:?}: {e}"))?;
                    Ok(Subject::from(subject_verb.client_subject(&token)))
                })
                .collect()
        };
        let (subjects, settle_subjects, body) = match verb {
            LoadVerb::Allow => {
                let body = wire::encode_request(
                    (policy != DEFAULT_POLICY).then_some(policy),
                    (cost != wire::DEFAULT_COST).then_some(cost),
                    Encoding::MsgPack,
                );
                (subjects_of(Verb::Allow)?, Vec::new(), body)
            }
            LoadVerb::Hold | LoadVerb::Reserve => {
                let ask = HoldAsk {
                    policy: Some(policy),
                    cost: Some(cost),
                    ttl_ms: None,
                    hold: None,
                    id: None,
                    wait_ms: None,
                };
                let settles = if verb == LoadVerb::Hold {
                    subjects_of(Verb::Settle)?
                } else {
                    Vec::new()
                };
                let body = encode_hold_request(&ask, Encoding::MsgPack);
                (subjects_of(Verb::Reserve)?, settles, body)
            }
        };
        Ok(NatsSpec {
            client,
            verb,
            url,
            auth: sluice_client::NatsAuth::default(),
            timeout,
            subjects: Arc::new(subjects),
            settle_subjects: Arc::new(settle_subjects),
            keys: Arc::new(keys.into_iter().filter_map(|mut path| path.pop()).collect()),
            body: body.into(),
            policy: policy.to_string(),
            cost,
            batching: None,
            windows: false,
            ids: None,
        })
    }
}
