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
use futures::{FutureExt, StreamExt};
use sluice_core::policies::Policies;
use sluice_core::storage::POLICY_BUCKET;
use std::time::Duration;

/// What entries of the bucket did.
pub enum Event<'a> {
    /// `policies` are in force now: the entries `keys` (up to `revision`)
    /// set or removed a policy or an override. Entries that arrive together
    /// (a load, a watch's history) make one event, so a reader copies the
    /// policies once for them, not once per entry.
    InForce {
        keys: &'a [String],
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
    let mut applied = Applying::default();
    for key in names {
        let entry = bucket
            .entry(&key)
            .await
            .map_err(|e| format!("cannot read {POLICY_BUCKET}: {e}"))?;
        if let Some(entry) = entry {
            applied.apply(policies, &entry, report);
        }
    }
    applied.report(policies, report);
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
                    let mut failed = None;
                    while let Some(change) = changes.next().await {
                        let mut applied = Applying::default();
                        let mut change = Some(change);
                        // This entry and every one already delivered with it.
                        while let Some(next) = change.take() {
                            match next {
                                Ok(entry) => applied.apply(&mut policies, &entry, &mut report),
                                Err(e) => failed = Some(e),
                            }
                            if failed.is_none() {
                                change = changes.next().now_or_never().flatten();
                            }
                        }
                        applied.report(&policies, &mut report);
                        if let Some(e) = failed.take() {
                            tracing::warn!("policy watch failed: {e}; re-creating it");
                            break;
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

/// The entries applied since the last [`Event::InForce`].
#[derive(Default)]
struct Applying {
    keys: Vec<String>,
    revision: u64,
}

impl Applying {
    /// Applies one entry in place ([`Policies::apply`] changes nothing when
    /// it refuses a value); a refusal is reported at once.
    fn apply(
        &mut self,
        policies: &mut Policies,
        entry: &kv::Entry,
        report: &mut impl FnMut(Event<'_>),
    ) {
        let value = (entry.operation == kv::Operation::Put).then_some(&entry.value[..]);
        match policies.apply(&entry.key, value) {
            Ok(_) => {
                self.keys.push(entry.key.clone());
                self.revision = self.revision.max(entry.revision);
            }
            Err(reason) => report(Event::Refused {
                key: &entry.key,
                revision: entry.revision,
                reason,
            }),
        }
    }

    fn report(self, policies: &Policies, report: &mut impl FnMut(Event<'_>)) {
        if !self.keys.is_empty() {
            report(Event::InForce {
                keys: &self.keys,
                revision: self.revision,
                policies,
            });
        }
    }
}
