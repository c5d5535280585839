//! Grouped keys over HTTP (SPEC §17, docs/GROUPS.md): every verb that
//! names a key with `/{key}` also takes `/{org}/{key}` and
//! `/{org}/{team}/{key}`, outermost first.
//!
//! - Each path segment is one token's bytes, percent-decoded here as a
//!   plain key's segment is ([`crate::key_path::percent_decode`]); the client
//!   encodes the tokens for NATS ([`sluice_client::KeyPath`]). A `/` inside
//!   a token is sent as `%2F`, so `/v1/allow/a%2Fb` stays the one key
//!   `a/b`.
//! - The handlers are the plain key's: each reads its key from the raw
//!   path ([`key_path`]). The functions here only give each grouped path
//!   its own entry in the description (a path of the description is one
//!   route, and its parameters are its segments).
//! - Four segments or more are a 400 that says what a key path is
//!   ([`too_deep`]), not the proxy's 404.

use crate::allow::{AskBody, AskQuery, IdempotencyKey, KeyParam};
use crate::hold::{ExtendBody, ReserveBody, SettleBody};
use crate::inspect::PolicyQuery;
use crate::key_path::too_many;
use crate::policies::{NameParam, Removed, Written};
use crate::respond::ErrorBody;
use crate::responses::{
    AskErrors, Counted, Decided, Done, HeldReplies, HoldErrors, QueryErrors, WriteErrors,
};
use crate::usage::SeriesQuery;
use crate::wait::WaitHeader;
use crate::App;
use axum::extract::{Request, State};
use axum::http::Uri;
use axum::response::Response;
use axum::routing::any;
use axum::Router;
use sluice_core::policies::OverrideTable;
use sluice_core::wire::inspect::{InspectReply, ResetReply};
use sluice_core::wire::usage::UsageReply;
use std::sync::Arc;

/// The 400 of a path with four key segments or more.
async fn too_deep(uri: Uri) -> Response {
    let path = uri.path();
    // The key's segments follow `/v1/<verb>/` or `/overrides/`.
    let key = match path.split_once("/overrides/") {
        Some((_, key)) => key,
        None => path.splitn(4, '/').nth(3).unwrap_or_default(),
    };
    crate::respond::error(&too_many(key.split('/').count()))
}

/// The verbs whose paths name a key.
const VERBS: [&str; 8] = [
    "allow", "hit", "inspect", "reset", "usage", "reserve", "settle", "extend",
];

/// `/v1/<verb>/{org}/{team}/{key}/...` for every verb: the 400 of
/// [`too_deep`], not described (no such path exists).
pub(crate) fn too_deep_routes(mut router: Router<Arc<App>>) -> Router<Arc<App>> {
    let prefixes = VERBS.iter().map(|verb| format!("/v1/{verb}"));
    for prefix in prefixes.chain(["/v1/policies/{name}/overrides".to_string()]) {
        let path = format!("{prefix}/{{org}}/{{team}}/{{key}}/{{*more}}");
        router = router.route(&path, any(too_deep));
    }
    router
}

/// `{org}`, `{team}`: the outer tokens of a grouped key, as `{key}` is
/// spelled.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read from the raw path (`key_path`), described here
pub(crate) struct OrgParam {
    /// The organisation: the group's first token, any bytes,
    /// percent-encoded (a `/` as `%2F`); every key of a group lives in its
    /// partition (SPEC §17).
    org: String,
}

#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read from the raw path (`key_path`), described here
pub(crate) struct TeamParam {
    /// The team: the middle token of a key of three, as `{org}` is spelled.
    team: String,
}

/// A verb's two grouped paths, `<prefix>/{org}/{key}` and
/// `<prefix>/{org}/{team}/{key}`: each the plain key's handler, described
/// at its own path with the plain path's parameters and responses.
macro_rules! grouped {
    ($(#[$doc:meta])* $org:ident, $team:ident($arg:ty) => $target:path,
     $method:ident $prefix:literal $op:literal $tag:literal, params($($params:tt)*), $($rest:tt)*) => {
        $(#[$doc])*
        #[utoipa::path($method, path = concat!($prefix, "/{org}/{key}"), operation_id = concat!($op, "_org"),
            tag = $tag, params(OrgParam, KeyParam, $($params)*), $($rest)*)]
        pub(crate) async fn $org(state: State<Arc<App>>, arg: $arg) -> Response {
            $target(state, arg).await
        }

        $(#[$doc])*
        #[utoipa::path($method, path = concat!($prefix, "/{org}/{team}/{key}"), operation_id = concat!($op, "_team"),
            tag = $tag, params(OrgParam, TeamParam, KeyParam, $($params)*), $($rest)*)]
        pub(crate) async fn $team(state: State<Arc<App>>, arg: $arg) -> Response {
            $target(state, arg).await
        }
    };
}

grouped!(
    /// An ask of a grouped key (`/v1/allow/{key}`): every level of the
    /// policy's chain decided at once (SPEC §17).
    allow_org, allow_team(Request) => crate::allow::allow_get, get "/v1/allow" "allow" "asking",
    params(AskQuery, IdempotencyKey, WaitHeader), responses(Decided, AskErrors)
);
grouped!(
    /// `POST /v1/allow/{key}` of a grouped key.
    allow_post_org, allow_post_team(Request) => crate::allow::allow_post, post "/v1/allow" "allow_post" "asking",
    params(AskQuery, IdempotencyKey, WaitHeader),
    request_body(content = Option<AskBody>, description = "as for /v1/allow/{key}"), responses(Decided, AskErrors)
);
grouped!(
    /// A hit (`/v1/hit/{key}`) of a grouped key, counted at every level.
    hit_org, hit_team(Request) => crate::allow::hit, post "/v1/hit" "hit" "asking",
    params(AskQuery, IdempotencyKey),
    request_body(content = Option<AskBody>, description = "as for /v1/hit/{key}"), responses(Counted, AskErrors)
);
grouped!(
    /// A grouped key's own state (`/v1/inspect/{key}`); an organisation's
    /// level is the plain key `/v1/inspect/{org}`.
    inspect_org, inspect_team(Uri) => crate::inspect::inspect, get "/v1/inspect" "inspect" "keys",
    params(PolicyQuery), responses((status = 200, description = "the key's state, per policy", body = InspectReply), QueryErrors)
);
grouped!(
    /// Forgets a grouped key's own counters (`/v1/reset/{key}`), not its
    /// organisation's (the plain key `/v1/reset/{org}`).
    reset_org, reset_team(Uri) => crate::inspect::reset, post "/v1/reset" "reset" "keys",
    params(PolicyQuery), responses((status = 200, description = "the policies whose counters of the key were forgotten", body = ResetReply), QueryErrors)
);
grouped!(
    /// A grouped key's usage (`/v1/usage/{key}`), recorded under its own
    /// key; an organisation's is its own key's, `/v1/usage/{org}`.
    usage_org, usage_team(Uri) => crate::usage::series, get "/v1/usage" "usage" "usage",
    params(SeriesQuery), responses((status = 200, description = "the key's used and denied units by step", body = UsageReply), QueryErrors)
);
grouped!(
    /// A reserve (`/v1/reserve/{key}`) of a grouped key; under a policy
    /// with a parent it is refused for now (SPEC §17).
    reserve_org, reserve_team(Request) => crate::hold::reserve, post "/v1/reserve" "reserve" "holds",
    params(IdempotencyKey), request_body(content = ReserveBody, description = "JSON, at most 4 KiB"), responses(HeldReplies, HoldErrors)
);
grouped!(
    /// A settle (`/v1/settle/{key}`) of a grouped key's hold.
    settle_org, settle_team(Request) => crate::hold::settle, post "/v1/settle" "settle" "holds",
    params(IdempotencyKey), request_body(content = SettleBody, description = "JSON, at most 4 KiB"), responses(Done, HoldErrors)
);
grouped!(
    /// An extend (`/v1/extend/{key}`) of a grouped key's hold.
    extend_org, extend_team(Request) => crate::hold::extend, post "/v1/extend" "extend" "holds",
    params(IdempotencyKey), request_body(content = ExtendBody, description = "JSON, at most 4 KiB"), responses(Done, HoldErrors)
);

grouped!(
    /// One grouped key's override under a policy (`.../overrides/{key}`).
    get_override_org, get_override_team(Uri) => crate::policies::get_override,
    get "/v1/policies/{name}/overrides" "get_override" "policies",
    params(NameParam), responses(
        (status = 200, description = "the override's limits", body = OverrideTable),
        (status = 400, description = "a bad key, or a query parameter (this takes none)", body = ErrorBody),
        (status = 404, description = "`unknown_policy`, or `not_found`: the key has no override", body = ErrorBody))
);
grouped!(
    /// Replaces one grouped key's limits under a policy in force: the
    /// level of that key alone (`bigcorp/ceo` under `free_user`).
    put_override_org, put_override_team(Request) => crate::policies::put_override,
    put "/v1/policies/{name}/overrides" "put_override" "policies",
    params(NameParam), request_body(content = OverrideTable, description = "the key's limits"),
    responses((status = 200, description = "written", body = Written<OverrideTable>),
        (status = 404, description = "`unknown_policy`: no such policy is in force", body = ErrorBody), WriteErrors)
);
grouped!(
    /// Removes a grouped key's override.
    delete_override_org, delete_override_team(Uri) => crate::policies::delete_override,
    delete "/v1/policies/{name}/overrides" "delete_override" "policies",
    params(NameParam), responses((status = 200, description = "removed", body = Removed),
        (status = 404, description = "`not_found`: the key has no override", body = ErrorBody), WriteErrors)
);

#[cfg(test)]
mod tests {
    use crate::key_path::key_path;

    #[test]
    fn a_path_of_one_to_three_segments_is_a_key() {
        let token = |path| key_path(path, "/v1/allow/").map(|k| k.token().to_string());
        assert_eq!(token("/v1/allow/acme").unwrap(), "acme");
        assert_eq!(token("/v1/allow/acme/alice").unwrap(), "acme.alice");
        assert_eq!(token("/v1/allow/acme/eng/alice").unwrap(), "acme.eng.alice");
        assert_eq!(token("/v1/allow/a%2Fb").unwrap(), "a%2Fb", "one key");
        assert_eq!(
            token("/v1/allow/acme/bob%40x.io").unwrap(),
            "acme.bob%40x%2Eio"
        );
        for bad in [
            "/v1/allow/a/b/c/d",
            "/v1/allow/acme//alice",
            "/v1/allow/acme/",
        ] {
            assert_eq!(token(bad).unwrap_err().status(), 400, "{bad}");
        }
    }
}
