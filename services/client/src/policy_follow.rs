//! Following the `sluice-policies` bucket (CONTRACT §7): the one reader of
//! live policies, used by workers (to decide) and by clients and the
//! gateway (for the `local` fallback and the deny cache).
//!
//! Each entry is applied to a [`Policies`] ([`Policies::apply`]): a valid
//! value is put in force, an invalid one is refused and the previous version
//! stays. The caller hears of both through [`Event`]s. A watch that fails
//! (the bucket gone, JetStream without a leader) is made again, reading the
//! bucket afresh: re-applying a value changes nothing.

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use sluice_core::policies::{Applied, Policies};
use sluice_core::storage::POLICY_BUCKET;
use std::time::Duration;

/// What an entry of the bucket did.
pub enum Event<'a> {
    /// `policies` are in force now (a policy was set or removed).
    InForce {
        key: &'a str,
        revision: u64,
        policies: &'a Policies,
    },
    /// The value of `key` is not valid; the previous version stays.
    Refused {
        key: &'a str,
        revision: u64,
        reason: String,
    },
}

/// Reads every key of `bucket` once into `policies`.
pub async fn load(
    bucket: &kv::Store,
    policies: &mut Policies,
    report: &mut impl FnMut(Event<'_>),
) -> Result<(), String> {
    let mut keys = bucket
        .keys()
        .await
        .map_err(|e| format!("cannot list {POLICY_BUCKET}: {e}"))?;
    let mut names = Vec::new();
    while let Some(key) = keys.next().await {
        names.push(key.map_err(|e| format!("cannot list {POLICY_BUCKET}: {e}"))?);
    }
    for key in names {
        let entry = bucket
            .entry(&key)
            .await
            .map_err(|e| format!("cannot read {POLICY_BUCKET}: {e}"))?;
        if let Some(entry) = entry {
            apply(policies, &entry, report);
        }
    }
    Ok(())
}

/// Watches the bucket for ever (abort the task to stop), starting from
/// `policies`; waits for the bucket if it does not exist yet.
pub async fn follow(
    js: jetstream::Context,
    mut policies: Policies,
    mut report: impl FnMut(Event<'_>),
) {
    loop {
        match js.get_key_value(POLICY_BUCKET).await {
            Ok(bucket) => match bucket.watch_with_history(">").await {
                Ok(mut changes) => {
                    while let Some(change) = changes.next().await {
                        match change {
                            Ok(entry) => apply(&mut policies, &entry, &mut report),
                            Err(e) => {
                                tracing::warn!("policy watch failed: {e}; re-creating it");
                                break;
                            }
                        }
                    }
                }
                Err(e) => tracing::debug!("cannot watch {POLICY_BUCKET} yet: {e}"),
            },
            Err(e) => tracing::debug!("no {POLICY_BUCKET} bucket yet: {e}"),
        }
        // Not a synchronisation: the pace of retries while JetStream is away.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn apply(policies: &mut Policies, entry: &kv::Entry, report: &mut impl FnMut(Event<'_>)) {
    let value = (entry.operation == kv::Operation::Put).then_some(&entry.value[..]);
    let mut next = policies.clone();
    match next.apply(&entry.key, value) {
        Ok(Applied::Policy(_) | Applied::Override) => {
            *policies = next;
            report(Event::InForce {
                key: &entry.key,
                revision: entry.revision,
                policies,
            });
        }
        Err(reason) => report(Event::Refused {
            key: &entry.key,
            revision: entry.revision,
            reason,
        }),
    }
}
