//! Raw NATS asks, as any client would send them: [`request`] one subject,
//! [`ask`] a decision for a key, [`error_of`] an error reply; replies are
//! decoded by sluice-core's own decoder ([`decode_reply`]), so the tests
//! read what a client reads.

use std::fmt;
use std::time::Duration;

use async_nats::client::RequestErrorKind;
use sluice_core::partition::partition_of;
use sluice_core::subject::Verb;
use sluice_core::wire::{
    decode_reply, DecisionReply, ErrorReply, MalformedReply, Reply, SERVICE_ERROR,
    SERVICE_ERROR_CODE,
};

/// How long [`request`] waits for a reply: far less than the deadlines
/// tests give [`eventually`](crate::eventually), so a request lost while a
/// partition changes owner is retried.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// A request body that asks at cost 0: a peek, which counts nothing.
pub const PEEK: &[u8] = br#"{"cost":0}"#;

/// Why an ask got no decision.
#[derive(Debug)]
pub enum AskError {
    /// No worker subscribes to the subject (its partition has no owner).
    NoResponders,
    /// No reply within [`REQUEST_TIMEOUT`].
    TimedOut,
    /// Any other request failure (the connection, ...).
    Request(String),
    /// The worker answered with an error reply.
    Reply(ErrorReply),
    /// The reply body is neither a decision nor an error reply.
    Malformed(MalformedReply),
}

impl fmt::Display for AskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskError::NoResponders => f.write_str("no responders"),
            AskError::TimedOut => f.write_str("timed out"),
            AskError::Request(e) => write!(f, "request failed: {e}"),
            AskError::Reply(e) => write!(f, "error reply {} {}: {e}", e.code.status(), e.code),
            AskError::Malformed(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for AskError {}

/// Sends one request with `body` to `subject` and waits up to
/// [`REQUEST_TIMEOUT`] for the reply, whatever it says.
pub async fn request(
    client: &async_nats::Client,
    subject: &str,
    body: &[u8],
) -> Result<async_nats::Message, AskError> {
    request_within(client, subject, body, REQUEST_TIMEOUT).await
}

/// [`request`], waiting up to `timeout`.
pub async fn request_within(
    client: &async_nats::Client,
    subject: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<async_nats::Message, AskError> {
    let req = async_nats::Request::new()
        .payload(body.to_vec().into())
        .timeout(Some(timeout));
    client
        .send_request(subject.to_string(), req)
        .await
        .map_err(|e| match e.kind() {
            RequestErrorKind::NoResponders => AskError::NoResponders,
            RequestErrorKind::TimedOut => AskError::TimedOut,
            _ => AskError::Request(e.to_string()),
        })
}

/// Asks `rl.allow.<key>` with `body` (empty: the default policy at cost 1);
/// `Err` when there was no decision.
pub async fn ask(
    client: &async_nats::Client,
    key: &str,
    body: &[u8],
) -> Result<DecisionReply, AskError> {
    ask_within(client, key, body, REQUEST_TIMEOUT).await
}

/// [`ask`], waiting up to `timeout` for the reply.
pub async fn ask_within(
    client: &async_nats::Client,
    key: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<DecisionReply, AskError> {
    let msg = request_within(client, &Verb::Allow.client_subject(key), body, timeout).await?;
    match decode_reply(&msg.payload).map_err(AskError::Malformed)? {
        Reply::Decision(d) => Ok(d),
        Reply::Error(e) => Err(AskError::Reply(e)),
    }
}

/// The error reply in `msg`, `None` if it is none (no
/// `Nats-Service-Error-Code` header).
///
/// # Panics
///
/// If the headers disagree with the body: the code header must be the
/// body's code, and the `Nats-Service-Error` header its message (as
/// [`sluice_core::wire::error_headers`] spells it).
pub fn error_of(msg: &async_nats::Message) -> Option<ErrorReply> {
    let headers = msg.headers.as_ref()?;
    let code = headers.get(SERVICE_ERROR_CODE)?.as_str();
    let reply = match decode_reply(&msg.payload) {
        Ok(Reply::Error(e)) => e,
        other => panic!("a {SERVICE_ERROR_CODE} {code} header on {other:?}"),
    };
    assert_eq!(code, reply.code.status().to_string(), "{reply:?}");
    // The header is the message as `error_headers` writes it: a header
    // carries ASCII only, so `§` goes as `\u{a7}`.
    let [_, (_, sentence)] = sluice_core::wire::error_headers(&reply);
    assert_eq!(
        headers.get(SERVICE_ERROR).map(|v| v.as_str()),
        Some(sentence.as_str())
    );
    Some(reply)
}

/// A key (`probe-<i>`) that the server maps to partition `p` of `partitions`.
pub fn key_in_partition(p: u32, partitions: u32) -> String {
    (0..)
        .map(|i| format!("probe-{i}"))
        .find(|k| partition_of(k, partitions) == p)
        .expect("every partition has a probe key")
}

/// One key of each of the `partitions` partitions, in partition order.
pub fn a_key_per_partition(partitions: u32) -> Vec<String> {
    (0..partitions)
        .map(|p| key_in_partition(p, partitions))
        .collect()
}

/// The usage of `key` under `policy` over the last hour (SPEC §9),
/// summed over its points.
pub async fn usage_of(
    client: &async_nats::Client,
    key: &str,
    policy: &str,
) -> anyhow::Result<sluice_core::usage::Counts> {
    let body = format!(r#"{{"policy":"{policy}"}}"#);
    let msg = request(client, &Verb::Usage.client_subject(key), body.as_bytes())
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    if let Some(e) = error_of(&msg) {
        anyhow::bail!("{} {}", e.code.status(), e.message);
    }
    let reply: sluice_core::wire::usage::UsageReply =
        sluice_core::wire::inspect::decode_admin_reply(&msg.payload)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(reply.total())
}
