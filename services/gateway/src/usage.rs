//! `GET /v1/usage/{key}?from=&to=&step=&policy=` and
//! `GET /v1/usage?top=N&by=&from=&to=&policy=&group=` (SPEC §9): the usage
//! queries of `rl.usage.<key>` and `rl.top`, through the same client as
//! `/v1/allow`, answered as JSON (the NATS reply, as is).
//!
//! `from` and `to` are milliseconds since the epoch, like the NATS bodies'
//! `from_ms` / `to_ms`. `group` is a group's first token as asked (its
//! bytes, encoded here as a path segment's are), sent as its token. Unknown or repeated query parameters are refused,
//! as on `/v1/allow`.

use crate::allow::KeyParam;
use crate::key_path::key_path;
use crate::respond;
use crate::responses::QueryErrors;
use crate::App;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use sluice_client::{Error, KeyPath};
use sluice_core::usage::By;
use sluice_core::wire::usage::{TopQuery, TopReply, UsageQuery, UsageReply};
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) const PREFIX: &str = "/v1/usage/";

/// One key's usage history, step by step (SPEC §9, `rl.usage.<key>`).
#[utoipa::path(
    get,
    path = "/v1/usage/{key}", operation_id = "usage",
    tag = "usage",
    params(KeyParam, SeriesQuery),
    responses(
        (status = 200, description = "the key's used and denied units by step", body = UsageReply),
        QueryErrors,
    )
)]
pub(crate) async fn series(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let result = async {
        let key = key_path(uri.path(), PREFIX)?;
        let mut q = params(uri.query(), &["from", "to", "step", "policy"])?;
        let query = UsageQuery {
            policy: q.remove("policy"),
            from_ms: number(&mut q, "from")?,
            to_ms: number(&mut q, "to")?,
            step: q.remove("step"),
        };
        app.client.usage(&key, &query).await
    }
    .await;
    respond::json_or_error(result)
}

/// The keys that used (or were denied) the most in a range (SPEC §9,
/// `rl.top`); without `top`, a 400 that says which queries exist.
#[utoipa::path(
    get,
    path = "/v1/usage", operation_id = "top",
    tag = "usage",
    params(TopParams),
    responses(
        (status = 200, description = "the top keys, largest first", body = TopReply),
        QueryErrors,
    )
)]
pub(crate) async fn top(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let result = async {
        let mut q = params(uri.query(), &["top", "by", "from", "to", "policy", "group"])?;
        if !q.contains_key("top") {
            return Err(Error::BadRequest(
                "ask /v1/usage/{key} for one key's usage, or /v1/usage?top=N for the keys that used the most".into(),
            ));
        }
        let by = match q.remove("by").as_deref() {
            None | Some("used") => By::Used,
            Some("denied") => By::Denied,
            Some(other) => {
                return Err(Error::BadRequest(format!(
                    "the query parameter \"by\" is \"used\" or \"denied\", not {other:?}"
                )))
            }
        };
        let query = TopQuery {
            n: number(&mut q, "top")?,
            by: Some(by),
            from_ms: number(&mut q, "from")?,
            to_ms: number(&mut q, "to")?,
            policy: q.remove("policy"),
            group: q.remove("group").as_deref().map(group_token).transpose()?,
        };
        app.client.top(&query).await
    }
    .await;
    respond::json_or_error(result)
}

/// The token of a group named by its first token's bytes (SPEC §17):
/// one key token, or a 400 that says why not.
pub(crate) fn group_token(group: &str) -> Result<String, Error> {
    KeyPath::new([group])
        .map(|path| path.token().to_string())
        .map_err(|e| {
            Error::BadRequest(format!(
                "the group {group:?} is not one key: {}; a group is named by the first token of its keys alone (acme for acme/eng/alice)",
                e.message()
            ))
        })
}

/// The query of `/v1/usage/{key}`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `params`, which refuses anything else
pub(crate) struct SeriesQuery {
    /// From (ms since the epoch; default an hour before `to`).
    from: Option<u64>,
    /// To (ms since the epoch; default now).
    to: Option<u64>,
    /// `1m`, `5m`, `1h` or `1d` (default: the finest that draws the range).
    step: Option<String>,
    /// Only this policy (default every policy).
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
}

/// The query of `/v1/usage?top=N`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `params`, which refuses anything else
struct TopParams {
    /// How many keys, 1 to 1000 (required).
    #[param(minimum = 1, maximum = 1000)]
    top: Option<u64>,
    /// `used` (the default) or `denied`.
    by: Option<String>,
    /// From (ms since the epoch; default an hour before `to`).
    from: Option<u64>,
    /// To (ms since the epoch; default now).
    to: Option<u64>,
    /// Only this policy.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    policy: Option<String>,
    /// Only the members of this group (SPEC §17): the first token of its
    /// keys, as asked (`acme` ranks `acme/alice` and `acme/eng/alice`, not
    /// `acme` itself); asked of the group's partition alone.
    #[param(min_length = 1)]
    group: Option<String>,
}

/// The query parameters, each of `known` at most once.
pub(crate) fn params(
    query: Option<&str>,
    known: &[&str],
) -> Result<BTreeMap<String, String>, Error> {
    let mut out = BTreeMap::new();
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if !known.contains(&&*name) {
            return Err(Error::BadRequest(format!(
                "unknown query parameter {name:?}; this endpoint takes {}",
                known.join(", ")
            )));
        }
        if out.insert(name.to_string(), value.into_owned()).is_some() {
            return Err(Error::BadRequest(format!(
                "the query parameter {name:?} appears twice; give it once"
            )));
        }
    }
    Ok(out)
}

pub(crate) fn number(q: &mut BTreeMap<String, String>, name: &str) -> Result<Option<u64>, Error> {
    q.remove(name)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                Error::BadRequest(format!(
                    "the query parameter {name:?} must be an unsigned integer (milliseconds since the epoch for from and to), not {v:?}"
                ))
            })
        })
        .transpose()
}
