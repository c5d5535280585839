//! Operator requests, one round trip each and no fallback: a key's state
//! (`rl.inspect`, SPEC §8), forgetting it (`rl.reset`), its usage
//! history (`rl.usage`, §9) and the top keys (`rl.top`).
//!
//! The one way these are sent, by [`crate::Client`] (and so the gateway's
//! `/v1/usage` and dashboard) and by the CLI over a plain NATS connection:
//! a reply with the service-error header becomes the [`Error`] it names,
//! and a request nobody answers says why that may be (no worker, or NATS
//! credentials without the `admin` role for inspect and reset).

use crate::error::Error;
use crate::key::{token_of, AsKey};
use async_nats::RequestErrorKind;
use serde::de::DeserializeOwned;
use sluice_core::subject::{Verb, TOP};
use sluice_core::wire::inspect::{decode_admin_reply, encode_scope, InspectReply, ResetReply};
use sluice_core::wire::usage::{encode_query, TopQuery, TopReply, UsageQuery, UsageReply};
use sluice_core::wire::{self, Encoding, Reply};
use std::time::Duration;

/// How long an operator request may take by default (a top query asks
/// every worker).
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// `rl.inspect.<key>`: the key's state under `policy` (every policy with
/// state when `None`).
pub async fn inspect(
    nats: &async_nats::Client,
    key: &(impl AsKey + ?Sized),
    policy: Option<&str>,
    timeout: Duration,
) -> Result<InspectReply, Error> {
    scoped(nats, Verb::Inspect, key, policy, timeout).await
}

/// `rl.reset.<key>`: forgets the key's counters under `policy` (every
/// policy when `None`).
pub async fn reset(
    nats: &async_nats::Client,
    key: &(impl AsKey + ?Sized),
    policy: Option<&str>,
    timeout: Duration,
) -> Result<ResetReply, Error> {
    scoped(nats, Verb::Reset, key, policy, timeout).await
}

/// `rl.<verb>.<key>` with a body that names at most a policy (inspect,
/// reset), its reply decoded as `T`.
pub async fn scoped<T: DeserializeOwned>(
    nats: &async_nats::Client,
    verb: Verb,
    key: &(impl AsKey + ?Sized),
    policy: Option<&str>,
    timeout: Duration,
) -> Result<T, Error> {
    let subject = verb.client_subject(&token_of(key)?);
    request(
        nats,
        &subject,
        encode_scope(policy, Encoding::Json),
        timeout,
    )
    .await
}

/// `rl.usage.<key>`: the key's usage history.
pub async fn usage(
    nats: &async_nats::Client,
    key: &(impl AsKey + ?Sized),
    query: &UsageQuery,
    timeout: Duration,
) -> Result<UsageReply, Error> {
    let subject = Verb::Usage.client_subject(&token_of(key)?);
    request(nats, &subject, encode_query(query, Encoding::Json), timeout).await
}

/// `rl.top`: the keys that used (or were denied) the most in a range.
pub async fn top(
    nats: &async_nats::Client,
    query: &TopQuery,
    timeout: Duration,
) -> Result<TopReply, Error> {
    request(nats, TOP, encode_query(query, Encoding::Json), timeout).await
}

/// Sends one request on `subject` and decodes its reply; an error reply is
/// the error, with its code and sentence.
pub async fn request<T: DeserializeOwned>(
    nats: &async_nats::Client,
    subject: &str,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<T, Error> {
    let request = async_nats::Request::new()
        .payload(body.into())
        .timeout(Some(timeout));
    let msg = nats
        .send_request(subject.to_string(), request)
        .await
        .map_err(|e| {
            Error::Unavailable(match e.kind() {
                RequestErrorKind::NoResponders => {
                    format!("no worker answered on {subject}; is a worker running?")
                }
                RequestErrorKind::TimedOut => format!(
                    "no answer on {subject} within {timeout:?}: a worker too busy, or NATS credentials that may not publish there (inspect and reset need the admin role of `sluice nats-config --auth`)"
                ),
                _ => format!("no answer on {subject}: {e}"),
            })
        })?;
    if msg
        .headers
        .as_ref()
        .is_some_and(|h| h.get(wire::SERVICE_ERROR_CODE).is_some())
    {
        return Err(match wire::decode_reply(&msg.payload) {
            Ok(Reply::Error(e)) => e.into(),
            _ => Error::Unavailable(format!(
                "an error reply on {subject} that cannot be read: {:?}",
                String::from_utf8_lossy(&msg.payload)
            )),
        });
    }
    decode_admin_reply(&msg.payload)
        .map_err(|e| Error::Unavailable(format!("a reply on {subject} that cannot be read: {e}")))
}
