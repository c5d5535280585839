//! Live policies (CONTRACT §7): the worker reads the `sluice-policies`
//! bucket before it claims partitions, then watches it and puts every
//! change in force for the next batches ([`Decider::set_policies`]).
//!
//! A value that is not a valid policy is refused here: the previous version
//! stays in force, the worker logs why, counts it, and `sluice status`
//! shows it until a valid value replaces it. Counters are kept across a
//! change ([`sluice_core::policy::Policy`] fits a key's state to the new
//! limits; another algorithm starts the key afresh).
//!
//! [`Decider::set_policies`]: crate::decide::Decider::set_policies

use crate::shared::Shared;
use anyhow::{Context as _, Result};
use async_nats::jetstream::kv;
use futures::StreamExt;
use sluice_core::policies::Applied;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Reads every key of the bucket once and applies it (at start, so the
/// first answers already use the bucket's policies).
pub async fn load(shared: &Shared) -> Result<()> {
    let bucket = &shared.stores.policies;
    let mut keys = bucket
        .keys()
        .await
        .context("cannot list the policy bucket")?;
    let mut names = Vec::new();
    while let Some(key) = keys.next().await {
        names.push(key.context("cannot list the policy bucket")?);
    }
    for key in names {
        if let Some(entry) = bucket
            .entry(&key)
            .await
            .context("cannot read the policy bucket")?
        {
            apply(shared, &entry);
        }
    }
    Ok(())
}

/// Watches the bucket until the task is aborted; a watch that fails is
/// made again (with its history: re-applying a value changes nothing).
pub async fn watch(shared: Arc<Shared>) {
    loop {
        match shared.stores.policies.watch_with_history(">").await {
            Ok(mut changes) => {
                while let Some(change) = changes.next().await {
                    match change {
                        Ok(entry) => apply(&shared, &entry),
                        Err(e) => {
                            tracing::warn!("policy watch failed: {e}; re-creating it");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::debug!("cannot watch the policy bucket yet: {e}"),
        }
        // Not a synchronisation: the pace of retries while JetStream is away.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn apply(shared: &Shared, entry: &kv::Entry) {
    let status = &shared.policy_status;
    let value = (entry.operation == kv::Operation::Put).then_some(&entry.value[..]);
    let mut policies = (*shared.decider.policies()).clone();
    let mut refused = status.refused.lock().unwrap_or_else(|e| e.into_inner());
    match policies.apply(&entry.key, value) {
        Ok(Applied::Policy(name)) => {
            shared.decider.set_policies(policies);
            refused.remove(&entry.key);
            tracing::info!(
                policy = name,
                revision = entry.revision,
                removed = value.is_none(),
                "policy in force"
            );
        }
        Ok(Applied::Override) => {}
        Err(reason) => {
            status.refusals.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                key = entry.key,
                revision = entry.revision,
                "refused a value in the policy bucket; the previous version stays in force: {reason}"
            );
            refused.insert(entry.key.clone(), reason);
        }
    }
    status.revision.fetch_max(entry.revision, Ordering::Relaxed);
}
