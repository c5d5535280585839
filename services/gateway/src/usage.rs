//! `GET /v1/usage/{key}?from=&to=&step=&policy=` and
//! `GET /v1/usage?top=N&by=&from=&to=&policy=` (SPEC §9): the usage
//! queries of `rl.usage.<key>` and `rl.top`, through the same client as
//! `/v1/allow`, answered as JSON (the NATS reply, as is).
//!
//! `from` and `to` are milliseconds since the epoch, like the NATS bodies'
//! `from_ms` / `to_ms`. Unknown or repeated query parameters are refused,
//! as on `/v1/allow`.

use crate::allow::percent_decode;
use crate::respond;
use crate::App;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use sluice_client::Error;
use sluice_core::usage::By;
use sluice_core::wire::usage::{TopQuery, UsageQuery};
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) const PREFIX: &str = "/v1/usage/";

/// `GET /v1/usage/{key}`.
pub(crate) async fn series(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let key = percent_decode(
        uri.path()
            .strip_prefix(PREFIX)
            .unwrap_or_default()
            .as_bytes(),
    );
    let result = async {
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
    json(result)
}

/// `GET /v1/usage?top=N` (without `top`: which queries exist).
pub(crate) async fn top(State(app): State<Arc<App>>, uri: Uri) -> Response {
    let result = async {
        let mut q = params(uri.query(), &["top", "by", "from", "to", "policy"])?;
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
        };
        app.client.top(&query).await
    }
    .await;
    json(result)
}

/// The query parameters, each of `known` at most once.
fn params(query: Option<&str>, known: &[&str]) -> Result<BTreeMap<String, String>, Error> {
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

fn number(q: &mut BTreeMap<String, String>, name: &str) -> Result<Option<u64>, Error> {
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

fn json<T: serde::Serialize>(result: Result<T, Error>) -> Response {
    match result {
        Ok(reply) => {
            let body = serde_json::to_vec(&reply).expect("a usage reply encodes");
            let mut response = (StatusCode::OK, body).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(e) => respond::error(&e),
    }
}
