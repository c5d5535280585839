//! Partition leases and worker heartbeats in the `sluice-leases` bucket.
//!
//! A lease is a KV key whose revision is the fencing token: acquire with
//! `create` (only if absent), renew with `update(revision)`, release with
//! `delete_expect_revision`. The server drops an unrenewed key after the
//! bucket's `max_age` (the lease TTL), counted from when it stored the last
//! renewal. The holder counts from when it *sent* that renewal, which is
//! earlier, and stops answering [`safety_margin`] before that: by the time
//! anyone else can create the key, the old holder has been silent for a while.
//!
//! Every request waits a bounded time: a renewal sent to a stream leader
//! that stepped down (its node stopped) gets no answer, and waiting the
//! library's 5 s for it let the lease lapse with two more chances unused
//! (a live worker lost partitions this way when the meta leader's node
//! stopped). A write whose answer was lost may still have been stored; the
//! holder's value names its run ([`Holder`]), so finding its own value under
//! a newer revision, it carries on from there instead of counting the lease
//! as taken.

use crate::store;
use anyhow::{anyhow, Result};
use async_nats::jetstream::kv;
use bytes::Bytes;
use sluice_core::format;
use std::time::{Duration, Instant};

/// A held lease.
#[derive(Clone, Debug)]
pub struct Lease {
    pub key: String,
    pub revision: u64,
    /// Until when the holder may act on it (local monotonic clock).
    pub valid_until: Instant,
}

/// How much earlier than the server's expiry a holder stops acting.
pub fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_millis(250))
}

/// How often leases and heartbeats are renewed: three chances per TTL.
pub fn renew_interval(ttl: Duration) -> Duration {
    ttl / 3
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Someone else holds it (or it changed under us): not transient.
    #[error("held by someone else")]
    Taken,
    /// The server did not answer in time, or another transient failure.
    #[error("lease operation failed: {0}")]
    Transient(String),
}

impl Lease {
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }
}

/// Who holds leases and heartbeats: a worker id and this run's instance,
/// and the exact value written under its keys.
#[derive(Clone, Debug)]
pub struct Holder {
    pub worker: String,
    value: Bytes,
}

impl Holder {
    /// `worker`'s holder for this run: a fresh instance each time.
    pub fn new(worker: &str) -> Holder {
        Holder {
            worker: worker.to_string(),
            value: Bytes::from(format::holder_value(
                worker,
                &format!("{:016x}", run_nonce()),
            )),
        }
    }

    /// The value written under a held key (lease or heartbeat).
    pub fn value(&self) -> Bytes {
        self.value.clone()
    }

    /// Whether `entry` is a live key this run wrote.
    fn wrote(&self, entry: &kv::Entry) -> bool {
        entry.operation == kv::Operation::Put && entry.value == self.value
    }
}

/// A number no other run draws: names this run's holder instance (and a
/// worker without a configured id).
pub fn run_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// How long one renewal may wait for its answer: half a renew interval, so
/// that one lost answer leaves time for another try before the lease's
/// deadline (at TTL - [`safety_margin`] from the last renewal sent).
pub fn renew_attempt_timeout(ttl: Duration) -> Duration {
    renew_interval(ttl) / 2
}

/// How long after a failed renewal the next is sent.
pub fn renew_retry_pause(ttl: Duration) -> Duration {
    renew_interval(ttl) / 4
}

/// Tries to take `key` for `holder`, within
/// [`store::TAKEOVER_REQUEST_TIMEOUT`] per request. A key already holding
/// this run's value (an earlier claim whose answer was lost) is renewed and
/// taken.
pub async fn acquire(
    store: &kv::Store,
    key: &str,
    holder: &Holder,
    ttl: Duration,
) -> Result<Lease, LeaseError> {
    let sent = Instant::now();
    let created =
        store::takeover_request("claim the lease", store::create(store, key, holder.value())).await;
    match created {
        Ok(Some(revision)) => Ok(Lease {
            key: key.to_string(),
            revision,
            valid_until: sent + ttl - safety_margin(ttl),
        }),
        Ok(None) => match ours_under(store, key, holder, store::TAKEOVER_REQUEST_TIMEOUT).await? {
            Some(revision) => {
                let mut lease = Lease {
                    key: key.to_string(),
                    revision,
                    valid_until: sent,
                };
                renew(store, &mut lease, holder, ttl).await?;
                Ok(lease)
            }
            None => Err(LeaseError::Taken),
        },
        Err(e) => Err(LeaseError::Transient(format!("{e:#}"))),
    }
}

/// The revision of `key` if it holds `holder`'s value (a write of this run
/// whose answer was lost), `None` if someone else's value is there.
async fn ours_under(
    store: &kv::Store,
    key: &str,
    holder: &Holder,
    within: Duration,
) -> Result<Option<u64>, LeaseError> {
    match tokio::time::timeout(within, store::entry(store, key)).await {
        Ok(Ok(Some(entry))) if holder.wrote(&entry) => Ok(Some(entry.revision)),
        Ok(Ok(_)) => Ok(None),
        Ok(Err(e)) => Err(LeaseError::Transient(format!("{e:#}"))),
        Err(_) => Err(LeaseError::Transient(format!(
            "cannot read the lease: no answer within {within:?}"
        ))),
    }
}

/// Extends `lease`; on success its revision and validity move forward.
/// Waits at most [`renew_attempt_timeout`] for each answer.
pub async fn renew(
    store: &kv::Store,
    lease: &mut Lease,
    holder: &Holder,
    ttl: Duration,
) -> Result<(), LeaseError> {
    // The second round only after finding this run's own value under a
    // newer revision: a renewal whose answer was lost had been stored.
    for _ in 0..2 {
        let sent = Instant::now();
        let update = store.update(&lease.key, holder.value(), lease.revision);
        match tokio::time::timeout(renew_attempt_timeout(ttl), update).await {
            Ok(Ok(revision)) => {
                lease.revision = revision;
                lease.valid_until = sent + ttl - safety_margin(ttl);
                return Ok(());
            }
            Ok(Err(e)) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                match ours_under(store, &lease.key, holder, renew_attempt_timeout(ttl)).await? {
                    Some(revision) if revision > lease.revision => lease.revision = revision,
                    _ => return Err(LeaseError::Taken),
                }
            }
            Ok(Err(e)) => return Err(LeaseError::Transient(e.to_string())),
            Err(_) => {
                return Err(LeaseError::Transient(format!(
                    "no answer within {:?}",
                    renew_attempt_timeout(ttl)
                )))
            }
        }
    }
    Err(LeaseError::Transient(
        "the lease moved under this run twice".into(),
    ))
}

/// Gives `lease` up, so the next owner need not wait for it to expire.
pub async fn release(store: &kv::Store, lease: &Lease) -> Result<()> {
    store
        .delete_expect_revision(&lease.key, Some(lease.revision))
        .await
        .map_err(|e| anyhow!("cannot release lease {}: {e}", lease.key))
}
