//! What one load connection is opened from ([`NatsSpec`]): which client
//! asks ([`ClientKind`], [`BatchingSpec`]), where, and the prepared subjects
//! and body. Below the targets that connect from it (`targets.rs`,
//! `batching.rs`), which share it.

use anyhow::Result;
use async_nats::Subject;
use bytes::Bytes;
use sluice_core::key::try_encode_key;
use sluice_core::policy::DEFAULT_POLICY;
use sluice_core::subject::Verb;
use sluice_core::wire::{self, Encoding};
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

#[derive(Clone, Debug)]
pub struct BatchingSpec {
    pub partitions: u32,
    pub deny_cache: bool,
    /// Local budgets ([`ClientOptions::budgets`]); `--no-budgets` turns them off.
    pub budgets: bool,
}

/// Everything needed to open one connection's `NatsTarget` (`targets.rs`); cheap to
/// clone and sent to every load thread.
#[derive(Clone)]
pub struct NatsSpec {
    pub client: ClientKind,
    pub url: String,
    /// NATS credentials and TLS (`sluice bench` runs as the `client` role).
    pub auth: sluice_client::NatsAuth,
    pub timeout: Duration,
    /// The request subjects `rl.allow.<token>`, by key number (plain client).
    pub subjects: Arc<Vec<Subject>>,
    /// The raw keys, by key number (batching client).
    pub keys: Arc<Vec<String>>,
    pub body: Bytes,
    pub policy: String,
    pub cost: u64,
    pub batching: Option<BatchingSpec>,
    /// Tell each decision's fixed window (its `reset`), for the admission
    /// accounting; the plain client then decodes every reply's body.
    pub windows: bool,
}

impl NatsSpec {
    /// Prepares subjects (or keys, for the batching client) and the body.
    pub fn new(
        client: ClientKind,
        url: String,
        timeout: Duration,
        keys: Vec<String>,
        policy: &str,
        cost: u64,
    ) -> Result<NatsSpec> {
        let subjects = match client {
            ClientKind::Batching => Vec::new(),
            ClientKind::Plain => keys
                .iter()
                .map(|k| {
                    let token = try_encode_key(k.as_bytes())
                        .map_err(|e| anyhow::anyhow!("key {k:?}: {e}"))?;
                    Ok(Subject::from(Verb::Allow.client_subject(&token)))
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let body = wire::encode_request(
            (policy != DEFAULT_POLICY).then_some(policy),
            (cost != wire::DEFAULT_COST).then_some(cost),
            Encoding::MsgPack,
        );
        Ok(NatsSpec {
            client,
            url,
            auth: sluice_client::NatsAuth::default(),
            timeout,
            subjects: Arc::new(subjects),
            keys: Arc::new(keys),
            body: body.into(),
            policy: policy.to_string(),
            cost,
            batching: None,
            windows: false,
        })
    }
}
