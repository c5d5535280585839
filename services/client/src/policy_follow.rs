//! Following the `sluice-policies` bucket (SPEC §7): the one reader of
//! live policies, used by workers (to decide) and by clients and the
//! gateway (for the `local` fallback and the deny cache).
//!
//! Each entry is applied to a [`Policies`] ([`Policies::apply`]): a valid
//! value is put in force, an invalid one is refused and the previous version
//! stays. The caller hears of both through [`Event`]s. A watch that fails
//! (the bucket gone, JetStream without a leader) is made again, reading the
//! bucket afresh: re-applying a value changes nothing.
//!
//! A reader that starts after an invalid value was written has no previous
//! version of its own: every other reader still uses the key's last valid
//! value, so this one would disagree with them (a worker answered 404 to
//! every ask under the policy). So the first time a key's value
//! is refused before any value of it was put in force here, the key's
//! history in the bucket is read back ([`previous`]) for the newest valid
//! value (or the removal) before the refused one, which is put in force;
//! the refusal is still reported, after it. The bucket keeps
//! [`POLICY_HISTORY`] values per key for that.
//!
//! [`POLICY_HISTORY`]: sluice_core::storage::POLICY_HISTORY

use async_nats::jetstream::{self, kv};
use futures::{FutureExt, StreamExt};
use sluice_core::policies::Policies;
use sluice_core::storage::POLICY_BUCKET;
use std::collections::HashSet;
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
    let mut settled = HashSet::new();
    for key in names {
        let entry = bucket
            .entry(&key)
            .await
            .map_err(|e| format!("cannot read {POLICY_BUCKET}: {e}"))?;
        if let Some(entry) = entry {
            applied
                .apply(bucket, policies, &mut settled, &entry, report)
                .await?;
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
    // The keys with a value of the bucket in force here (kept across
    // watches: a refusal after one of them keeps it, not an older value).
    let mut settled = HashSet::new();
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
                                Ok(entry) => {
                                    let result = applied
                                        .apply(
                                            &bucket,
                                            &mut policies,
                                            &mut settled,
                                            &entry,
                                            &mut report,
                                        )
                                        .await;
                                    failed = result.err();
                                }
                                Err(e) => failed = Some(e.to_string()),
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
    /// it refuses a value); a refusal is reported at once, after the
    /// previous version of a key not `settled` yet is put in force
    /// ([`previous`]). Fails only if the key's history cannot be read.
    async fn apply(
        &mut self,
        bucket: &kv::Store,
        policies: &mut Policies,
        settled: &mut HashSet<String>,
        entry: &kv::Entry,
        report: &mut impl FnMut(Event<'_>),
    ) -> Result<(), String> {
        match policies.apply(&entry.key, value_of(entry)) {
            Ok(_) => self.applied(settled, entry),
            Err(reason) => {
                if !settled.contains(&entry.key) {
                    if let Some(previous) = previous(bucket, policies, entry).await? {
                        self.applied(settled, &previous);
                        // Reported now, so the refusal below stays shown.
                        std::mem::take(self).report(policies, report);
                    }
                }
                report(Event::Refused {
                    key: &entry.key,
                    revision: entry.revision,
                    reason,
                });
            }
        }
        Ok(())
    }

    fn applied(&mut self, settled: &mut HashSet<String>, entry: &kv::Entry) {
        settled.insert(entry.key.clone());
        self.keys.push(entry.key.clone());
        self.revision = self.revision.max(entry.revision);
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

/// The value an entry gives its key: `None` for a removal.
fn value_of(entry: &kv::Entry) -> Option<&[u8]> {
    (entry.operation == kv::Operation::Put).then_some(&entry.value[..])
}

/// Puts in force the newest entry of `refused`'s key before it that
/// [`Policies::apply`] takes (a valid value, or a removal) and returns it;
/// `None` if the bucket's history of the key holds none.
async fn previous(
    bucket: &kv::Store,
    policies: &mut Policies,
    refused: &kv::Entry,
) -> Result<Option<kv::Entry>, String> {
    let cannot = |e: &dyn std::fmt::Display| {
        format!(
            "cannot read the history of {:?} in {POLICY_BUCKET}: {e}",
            refused.key
        )
    };
    let mut history = bucket.history(&refused.key).await.map_err(|e| cannot(&e))?;
    let mut older = Vec::new();
    // Bounded: the stream keeps at most the bucket's history per key.
    while let Some(entry) = history.next().await {
        let entry = entry.map_err(|e| cannot(&e))?;
        if entry.revision < refused.revision {
            older.push(entry);
        }
    }
    for entry in older.into_iter().rev() {
        if policies.apply(&entry.key, value_of(&entry)).is_ok() {
            tracing::info!(
                key = entry.key,
                revision = entry.revision,
                refused = refused.revision,
                "the latest value is refused; the newest valid one before it is in force"
            );
            return Ok(Some(entry));
        }
    }
    Ok(None)
}
