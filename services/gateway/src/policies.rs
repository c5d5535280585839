//! `/v1/policies[/{name}[/overrides[/{key}]]]` (SPEC §7): the policies in
//! force and their per-key overrides, read as the gateway follows them,
//! and written into the `sluice-policies` bucket.
//!
//! - Reads come from the gateway's own follow of the bucket over the
//!   config file (what its `local` fallback and dashboard use, and what
//!   every worker applies): no round trip. A write is in force on the
//!   workers and here within a second, so a read right after a write may
//!   still show the value before it.
//! - Writes go through [`sluice_client::policy_store`], as `sluice policy
//!   set|rm|override|unoverride` do: each value is checked as a config
//!   file's is, with the same sentences, before anything is written, and
//!   needs NATS credentials that may write the bucket.

use crate::allow::{read_body_up_to, KeyParam};
use crate::key_path::key_path;
use crate::key_path::percent_decode;
use crate::respond::{self, ErrorBody, ErrorWord};
use crate::responses::WriteErrors;
use crate::usage::params;
use crate::App;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde::Serialize;
use sluice_client::policy_store;
use sluice_client::Error;
use sluice_client::KeyPath;
use sluice_core::config::PolicyTable;
use sluice_core::policies::{parse_override, OverrideTable};
use sluice_worker::service::{in_force, PolicyInForce};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The most a policy or override body may take.
const MAX_TABLE: usize = 64 * 1024;

/// The policies in force.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct PolicyList {
    pub(crate) policies: Vec<PolicyInForce>,
}

/// A policy or override written: its bucket entry's revision and value.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Written<T> {
    pub(crate) policy: String,
    /// The key of an override, as its token (PROTOCOL.md §1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    pub(crate) revision: u64,
    pub(crate) value: T,
}

/// A policy or override removed from the bucket.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Removed {
    pub(crate) policy: String,
    /// The key of an override, as its token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    pub(crate) removed: bool,
}

/// A policy's per-key overrides, by key token.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct OverrideList {
    pub(crate) policy: String,
    pub(crate) overrides: BTreeMap<String, OverrideTable>,
}

/// The policies in force: the config file's, overlaid by the bucket's.
#[utoipa::path(get, path = "/v1/policies", operation_id = "list_policies", tag = "policies", responses(
    (status = 200, description = "the policies in force, by name", body = PolicyList),
    (status = 400, description = "a query parameter (this takes none)", body = ErrorBody),
))]
pub(crate) async fn list(State(app): State<Arc<App>>, uri: Uri) -> Response {
    respond::json_or_error(params(uri.query(), &[]).map(|_| PolicyList {
        policies: in_force(&app.client.policies()),
    }))
}

/// One policy in force, and where it comes from.
#[utoipa::path(get, path = "/v1/policies/{name}", operation_id = "get_policy", tag = "policies", params(NameParam), responses(
    (status = 200, description = "the policy, as the bucket holds it", body = PolicyInForce),
    (status = 400, description = "a query parameter (this takes none)", body = ErrorBody),
    (status = 404, description = "unknown_policy", body = ErrorBody),
))]
pub(crate) async fn get(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let result = params(uri.query(), &[]).and_then(|_| {
        let (name, _) = names(&uri);
        in_force(&app.client.policies())
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| unknown(&name))
    });
    respond::json_or_error(result)
}

/// Sets a policy in the bucket (in force everywhere within a second).
#[utoipa::path(put, path = "/v1/policies/{name}", operation_id = "put_policy", tag = "policies", params(NameParam),
    request_body(content = PolicyTable, description = "one `[policies.X]` table as JSON (docs/CONFIG.md)"),
    responses(
        (status = 200, description = "written", body = Written<PolicyTable>),
        WriteErrors,
    )
)]
pub(crate) async fn put(State(app): State<Arc<App>>, request: Request) -> Response {
    let (uri, headers, body) = split(request);
    let result = async {
        params(uri.query(), &[])?;
        let (name, _) = names(&uri);
        let body = read_body_up_to(&headers, body, MAX_TABLE).await?;
        let table = PolicyTable::from_json(&body).map_err(|e| {
            Error::BadRequest(match e.field.is_empty() {
                true => format!("policy {name:?}: {}", e.reason),
                false => format!("policy {name:?}: {}: {}", e.field, e.reason),
            })
        })?;
        let bucket = policy_store::bucket(app.client.nats()).await?;
        let revision =
            policy_store::put_policy(&bucket, &name, &table, app.region.as_ref()).await?;
        Ok(Written {
            policy: name,
            key: None,
            revision,
            value: table,
        })
    }
    .await;
    respond::json_or_error(result)
}

/// Removes a policy from the bucket (the config file's, if any, is in
/// force again; `default` cannot be removed).
#[utoipa::path(delete, path = "/v1/policies/{name}", operation_id = "delete_policy", tag = "policies", params(NameParam), responses(
    (status = 200, description = "removed", body = Removed),
    (status = 404, description = "`not_found`: the bucket holds no such policy", body = ErrorBody),
    WriteErrors,
))]
pub(crate) async fn delete(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let (name, _) = names(&uri);
    let result = async {
        params(uri.query(), &[])?;
        let bucket = policy_store::bucket(app.client.nats()).await?;
        policy_store::remove_policy(&bucket, &name).await
    }
    .await;
    removed(result, name, None)
}

/// The per-key overrides of a policy in force, by key token.
#[utoipa::path(get, path = "/v1/policies/{name}/overrides", operation_id = "list_overrides", tag = "policies", params(NameParam), responses(
    (status = 200, description = "the overrides, by key token", body = OverrideList),
    (status = 400, description = "a query parameter (this takes none)", body = ErrorBody),
    (status = 404, description = "unknown_policy", body = ErrorBody),
))]
pub(crate) async fn overrides(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let result = params(uri.query(), &[]).and_then(|_| {
        let (name, _) = names(&uri);
        let policies = app.client.policies();
        policies.get(&name).ok_or_else(|| unknown(&name))?;
        let overrides = policies
            .override_tables(&name)
            .map(|(token, table)| (token.clone(), table.clone()))
            .collect();
        Ok(OverrideList {
            policy: name,
            overrides,
        })
    });
    respond::json_or_error(result)
}

/// One key's override under a policy.
#[utoipa::path(get, path = "/v1/policies/{name}/overrides/{key}", operation_id = "get_override", tag = "policies", params(NameParam, KeyParam), responses(
    (status = 200, description = "the override's limits", body = OverrideTable),
    (status = 400, description = "a bad key, or a query parameter (this takes none)", body = ErrorBody),
    (status = 404, description = "`unknown_policy`, or `not_found`: the key has no override", body = ErrorBody),
))]
pub(crate) async fn get_override(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let result = async {
        params(uri.query(), &[])?;
        let (name, key) = names(&uri);
        let key = key?;
        let token = key.token();
        let policies = app.client.policies();
        policies.get(&name).ok_or_else(|| unknown(&name))?;
        let table = policies
            .override_tables(&name)
            .find(|(t, _)| t.as_str() == token)
            .map(|(_, table)| table.clone());
        Ok(table)
    }
    .await;
    match result {
        Ok(Some(table)) => respond::json(&table),
        Ok(None) => no_override(),
        Err(e) => respond::error(&e),
    }
}

/// Replaces one key's limits under a policy in force (`max` 0 blocks it).
#[utoipa::path(put, path = "/v1/policies/{name}/overrides/{key}", operation_id = "put_override", tag = "policies", params(NameParam, KeyParam),
    request_body(content = OverrideTable, description = "the key's limits: `{\"limits\":[{\"max\":10,\"per\":\"1m\"}]}`"),
    responses(
        (status = 200, description = "written", body = Written<OverrideTable>),
        (status = 404, description = "`unknown_policy`: no such policy is in force", body = ErrorBody),
        WriteErrors,
    )
)]
pub(crate) async fn put_override(State(app): State<Arc<App>>, request: Request) -> Response {
    let (uri, headers, body) = split(request);
    let result = async {
        params(uri.query(), &[])?;
        let (name, key) = names(&uri);
        let key = key?;
        let body = read_body_up_to(&headers, body, MAX_TABLE).await?;
        let table = parse_override(&name, &body).map_err(Error::BadRequest)?;
        let policies = app.client.policies();
        let base = policies.get(&name).ok_or_else(|| unknown(&name))?;
        let bucket = policy_store::bucket(app.client.nats()).await?;
        let revision = policy_store::put_override(&bucket, base, &key, &table).await?;
        Ok(Written {
            policy: name,
            key: Some(key.token().to_string()),
            revision,
            value: table,
        })
    }
    .await;
    respond::json_or_error(result)
}

/// Removes a key's override: the policy's limits apply to it again.
#[utoipa::path(delete, path = "/v1/policies/{name}/overrides/{key}", operation_id = "delete_override", tag = "policies", params(NameParam, KeyParam), responses(
    (status = 200, description = "removed", body = Removed),
    (status = 404, description = "`not_found`: the key has no override", body = ErrorBody),
    WriteErrors,
))]
pub(crate) async fn delete_override(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let (name, key) = names(&uri);
    let token = key.as_ref().ok().map(|k| k.token().to_string());
    let result = async {
        params(uri.query(), &[])?;
        let key = key?;
        let bucket = policy_store::bucket(app.client.nats()).await?;
        policy_store::remove_override(&bucket, &name, &key).await
    }
    .await;
    removed(result, name, token)
}

/// `{name}` in a path.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read from the raw path (`names`), described here
pub(crate) struct NameParam {
    /// The policy: 1 to 64 letters, digits, `_` or `-`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    name: String,
}

/// The policy name and the key (an error when the path has none) of
/// `/v1/policies/{name}[/overrides/{key}]`, percent-decoded; the key may
/// be a grouped key's segments, `{org}/{key}` or `{org}/{team}/{key}`
/// (SPEC §17, [`crate::grouped`]).
fn names(uri: &Uri) -> (String, Result<KeyPath, Error>) {
    let rest = uri.path().strip_prefix("/v1/policies/").unwrap_or_default();
    let (name, key) = match rest.split_once("/overrides") {
        Some((name, key)) => (name, key.strip_prefix('/').unwrap_or_default()),
        None => (rest, ""),
    };
    (
        String::from_utf8_lossy(&percent_decode(name.as_bytes())).into_owned(),
        key_path(key, ""),
    )
}

/// `/v1/policies/` with no name.
pub(crate) async fn no_name() -> Response {
    respond::error(&Error::BadRequest(
        "the path names no policy: /v1/policies/{name}, or /v1/policies for them all".into(),
    ))
}

fn split(request: Request) -> (Uri, HeaderMap, Body) {
    let (parts, body) = request.into_parts();
    (parts.uri, parts.headers, body)
}

fn unknown(name: &str) -> Error {
    Error::UnknownPolicy(format!(
        "no policy named {name:?} is in force; GET /v1/policies lists those that are"
    ))
}

fn no_override() -> Response {
    respond::json_error(
        StatusCode::NOT_FOUND,
        ErrorWord::NotFound,
        "the key has no override under this policy; PUT one to set it",
    )
}

fn removed(result: Result<bool, Error>, policy: String, key: Option<String>) -> Response {
    match result {
        Ok(true) => respond::json(&Removed {
            policy,
            key,
            removed: true,
        }),
        Ok(false) if key.is_some() => no_override(),
        Ok(false) => respond::json_error(
            StatusCode::NOT_FOUND,
            ErrorWord::NotFound,
            &format!(
                "the policy bucket holds no policy {policy:?} (a config file's policy is changed in the file, or overlaid with PUT)"
            ),
        ),
        Err(e) => respond::error(&e),
    }
}
