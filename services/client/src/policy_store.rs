//! Writing live policies and per-key overrides (SPEC §7) into the
//! `sluice-policies` bucket: the one way `sluice policy set|rm|apply|
//! override|unoverride` and the gateway's `PUT` / `DELETE /v1/policies/...`
//! change them, so that both check a value with the same rules and the
//! same sentences before anything is written.
//!
//! Every policy is checked as a config file's is ([`policies::parse`],
//! against the writer's region), every override against the policy it
//! overrides ([`policies::resolve`]); workers and gateways following the
//! bucket put a change in force within a second. Writing needs NATS
//! credentials that may write the bucket (the `admin` role of `sluice
//! nats-config --auth`).

use crate::error::Error;
use crate::key::{token_of, AsKey};
use async_nats::jetstream::{self, kv};
use sluice_core::config::PolicyTable;
use sluice_core::policies::{self, OverrideTable};
use sluice_core::policy::Policy;
use sluice_core::region::RegionName;
use sluice_core::storage::{override_key, policy_key, POLICY_BUCKET};
use sluice_core::wire::is_valid_policy_name;

/// The policy bucket; a worker creates it when it starts.
pub async fn bucket(nats: &async_nats::Client) -> Result<kv::Store, Error> {
    jetstream::new(nats.clone())
        .get_key_value(POLICY_BUCKET)
        .await
        .map_err(|e| {
            Error::Unavailable(format!(
                "no {POLICY_BUCKET} bucket ({e}): start a worker first, it creates the buckets"
            ))
        })
}

/// Checks `table` as a config file's policy `name` (in `region`), then
/// writes it; the bucket's revision of the write.
pub async fn put_policy(
    bucket: &kv::Store,
    name: &str,
    table: &PolicyTable,
    region: Option<&RegionName>,
) -> Result<u64, Error> {
    let value = serde_json::to_string(table).expect("a policy table is plain JSON");
    policies::parse(name, value.as_bytes(), region).map_err(Error::BadRequest)?;
    bucket
        .put(policy_key(name), value.into())
        .await
        .map_err(|e| write_error(&format!("policy {name:?}"), e))
}

/// Removes policy `name` from the bucket (the config file's, if any, is in
/// force again); false when the bucket had no such policy.
pub async fn remove_policy(bucket: &kv::Store, name: &str) -> Result<bool, Error> {
    policies::removable(name).map_err(Error::BadRequest)?;
    check_name(name)?;
    remove(bucket, &policy_key(name), &format!("policy {name:?}")).await
}

/// Checks `table` against `base` (the policy in force it overrides), then
/// writes it as `key`'s override; the bucket's revision of the write.
pub async fn put_override(
    bucket: &kv::Store,
    base: &Policy,
    key: &(impl AsKey + ?Sized),
    table: &OverrideTable,
) -> Result<u64, Error> {
    let policy = base.name();
    let value = serde_json::to_string(table).expect("an override table is plain JSON");
    policies::parse_override(policy, value.as_bytes()).map_err(Error::BadRequest)?;
    policies::resolve(base, table).map_err(Error::BadRequest)?;
    let entry = override_key(policy, &token_of(key)?);
    bucket
        .put(&entry, value.into())
        .await
        .map_err(|e| write_error(&entry, e))
}

/// Removes `key`'s override under `policy`; false when there was none.
pub async fn remove_override(
    bucket: &kv::Store,
    policy: &str,
    key: &(impl AsKey + ?Sized),
) -> Result<bool, Error> {
    check_name(policy)?;
    let entry = override_key(policy, &token_of(key)?);
    remove(bucket, &entry, &entry).await
}

/// The override table stored for `key` under `policy`, if any.
pub fn override_entry(policy: &str, key: &(impl AsKey + ?Sized)) -> Result<String, Error> {
    check_name(policy)?;
    Ok(override_key(policy, &token_of(key)?))
}

async fn remove(bucket: &kv::Store, entry: &str, what: &str) -> Result<bool, Error> {
    let there = bucket
        .get(entry)
        .await
        .map_err(|e| Error::Unavailable(format!("cannot read {what} in {POLICY_BUCKET}: {e}")))?
        .is_some();
    if there {
        bucket
            .delete(entry)
            .await
            .map_err(|e| write_error(what, e))?;
    }
    Ok(there)
}

fn check_name(name: &str) -> Result<(), Error> {
    if is_valid_policy_name(name) {
        Ok(())
    } else {
        Err(Error::BadRequest(format!(
            "{name:?} is not a valid policy name: use 1 to 64 letters, digits, '_' or '-'"
        )))
    }
}

fn write_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Unavailable(format!(
        "cannot write {what} to {POLICY_BUCKET} ({e}); writing policies needs NATS credentials that may (the admin role of `sluice nats-config --auth`)"
    ))
}
