//! Partition leases and worker heartbeats in the `sluice-leases` bucket.
//!
//! A lease is a KV key whose revision is the fencing token: acquire with
//! `create` (only if absent), renew with `update(revision)`, release with
//! `delete_expect_revision`. The server drops an unrenewed key after the
//! bucket's `max_age` (the lease TTL), counted from when it stored the last
//! renewal. The holder counts from when it *sent* that renewal, which is
//! earlier, and stops answering [`safety_margin`] before that: by the time
//! anyone else can create the key, the old holder has been silent for a while.

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

/// Tries to take `key`, writing `holder` as its value, within
/// [`store::TAKEOVER_REQUEST_TIMEOUT`] per request.
pub async fn acquire(
    store: &kv::Store,
    key: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Lease, LeaseError> {
    let sent = Instant::now();
    let value = Bytes::from(format::holder_value(holder));
    match store::takeover_request("claim the lease", store::create(store, key, value)).await {
        Ok(Some(revision)) => Ok(Lease {
            key: key.to_string(),
            revision,
            valid_until: sent + ttl - safety_margin(ttl),
        }),
        Ok(None) => Err(LeaseError::Taken),
        Err(e) => Err(LeaseError::Transient(format!("{e:#}"))),
    }
}

/// Extends `lease`; on success its revision and validity move forward.
pub async fn renew(
    store: &kv::Store,
    lease: &mut Lease,
    holder: &str,
    ttl: Duration,
) -> Result<(), LeaseError> {
    let sent = Instant::now();
    match store
        .update(
            &lease.key,
            Bytes::from(format::holder_value(holder)),
            lease.revision,
        )
        .await
    {
        Ok(revision) => {
            lease.revision = revision;
            lease.valid_until = sent + ttl - safety_margin(ttl);
            Ok(())
        }
        Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Err(LeaseError::Taken),
        Err(e) => Err(LeaseError::Transient(e.to_string())),
    }
}

/// Gives `lease` up, so the next owner need not wait for it to expire.
pub async fn release(store: &kv::Store, lease: &Lease) -> Result<()> {
    store
        .delete_expect_revision(&lease.key, Some(lease.revision))
        .await
        .map_err(|e| anyhow!("cannot release lease {}: {e}", lease.key))
}
