//! Live policies (SPEC §7) at the worker: it reads the `sluice-policies`
//! bucket before it claims partitions ([`load`]), then follows it
//! ([`watch`]) and puts every change in force for the next batches
//! ([`Decider::set_policies`]). Reading and applying the bucket is
//! [`sluice_client::policy_follow`], shared with clients and the gateway.
//!
//! A value that is not a valid policy is refused: the previous version
//! stays in force, the worker logs why, counts it, and `sluice status`
//! shows it until a valid value replaces it. Counters are kept across a
//! change ([`sluice_core::policy::Policy`] fits a key's state to the new
//! limits; another algorithm starts the key afresh).
//!
//! [`Decider::set_policies`]: crate::decide::Decider::set_policies

use crate::decide::Decider;
use crate::stats::PolicyStatus;
use anyhow::{anyhow, Result};
use async_nats::jetstream::{self, kv};
use sluice_client::policy_follow::{self, Event};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Reads the whole bucket once (at start, so the first answers already use
/// its policies).
pub async fn load(bucket: &kv::Store, decider: &Decider, status: &PolicyStatus) -> Result<()> {
    let mut policies = (*decider.policies()).clone();
    policy_follow::load(bucket, &mut policies, &mut |e| report(decider, status, e))
        .await
        .map_err(|e| anyhow!(e))
}

/// Follows the bucket until the task is aborted.
pub async fn watch(js: jetstream::Context, decider: Arc<Decider>, status: Arc<PolicyStatus>) {
    let policies = (*decider.policies()).clone();
    policy_follow::follow(js, policies, |e| report(&decider, &status, e)).await;
}

fn report(decider: &Decider, status: &PolicyStatus, event: Event<'_>) {
    let mut refused = status.refused.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        Event::InForce {
            keys,
            revision,
            policies,
        } => {
            decider.set_policies(policies.clone());
            for key in keys {
                refused.remove(key);
            }
            status.revision.fetch_max(revision, Ordering::Relaxed);
            tracing::info!(?keys, revision, "policies in force");
        }
        Event::Refused {
            key,
            revision,
            reason,
        } => {
            status.refusals.fetch_add(1, Ordering::Relaxed);
            status.revision.fetch_max(revision, Ordering::Relaxed);
            tracing::warn!(
                key,
                revision,
                "refused a value in the policy bucket; the previous version stays in force: {reason}"
            );
            refused.insert(key.to_string(), reason);
        }
    }
}
