//! The `/v1` API in one place: its routes, who may call each, and its
//! OpenAPI 3.1 description (`GET /v1/openapi.json`, kept as
//! `docs/openapi.json`).
//!
//! Every route is added by [`routes`] with `utoipa_axum`'s `routes!`, from
//! a handler that carries its own `#[utoipa::path]`: the path served and
//! the path described are one string, and the replies are described by
//! the types the handlers encode (`sluice_core`'s wire types, the
//! worker's status), so the description cannot drift from the routes.
//! Tests keep it so: `/v1` routes added any other way fail
//! `every_v1_route_is_added_with_its_description`, and a description that
//! differs from `docs/openapi.json` fails
//! `the_committed_description_is_the_generated_one` (run it with
//! `SLUICE_WRITE_OPENAPI=1` to rewrite the file); schemathesis checks the
//! live gateway against it (`scripts/test-api.sh`).
//!
//! The responses shared by several routes are types of `responses.rs`;
//! 401 and 403 are added to every operation by [`routes`], by the role the
//! route needs ([`Role`]).

use crate::api_token::Role;
use crate::respond::ErrorBody;
use crate::responses::HeldReply;
use crate::tokens::{self, Gate, Tokens};
use crate::App;
use axum::extract::State;
use axum::response::Response;
use axum::Router;
use sluice_core::wire::DecisionReply;
use std::sync::Arc;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi as _};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The description's frame: what the routes do not say themselves.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "sluice gateway",
        description = "The HTTP API of sluice, a distributed rate limiter on NATS (docs/GATEWAY.md). \
            With `--api-token` every route needs `Authorization: Bearer <token>`; with \
            `--api-read-token` too, a second token may call the routes that only read.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "asking", description = "Decisions: asks, hits and batches (SPEC §6)"),
        (name = "holds", description = "Reserve now, settle later (SPEC §13, docs/HOLDS.md)"),
        (name = "usage", description = "Usage history and top keys (SPEC §9, docs/USAGE.md)"),
        (name = "keys", description = "A key's state, and forgetting it (SPEC §8)"),
        (name = "policies", description = "Live policies and per-key overrides (SPEC §7)"),
        (name = "alerts", description = "Threshold alerts (SPEC §14)"),
        (name = "status", description = "The fleet of workers"),
        (name = "description", description = "This description"),
    ),
    // Those the shared responses below name: `routes!` collects only the
    // schemas of bodies written in a route's own attribute.
    components(schemas(ErrorBody, DecisionReply, HeldReply)),
    modifiers(&Bearer),
)]
struct Frame;

/// The bearer token of `--api-token` / `--api-read-token`, optional (a
/// gateway without one is open).
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, api: &mut OpenApi) {
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        api.components
            .get_or_insert_with(Default::default)
            .add_security_scheme("api_token", SecurityScheme::Http(scheme));
        api.security = Some(vec![
            Default::default(),
            utoipa::openapi::security::SecurityRequirement::new("api_token", Vec::<String>::new()),
        ]);
    }
}

/// The `/v1` routes, each behind the token its role needs (none without
/// `--api-token`), and their description.
pub(crate) fn routes(tokens: Option<Arc<Tokens>>) -> (Router<Arc<App>>, OpenApi) {
    let reads = OpenApiRouter::new()
        .routes(routes!(crate::usage::series))
        .routes(routes!(crate::usage::top))
        .routes(routes!(crate::inspect::inspect))
        .routes(routes!(crate::grouped::inspect_org))
        .routes(routes!(crate::grouped::inspect_team))
        .routes(routes!(crate::grouped::usage_org))
        .routes(routes!(crate::grouped::usage_team))
        .routes(routes!(crate::grouped::get_override_org))
        .routes(routes!(crate::grouped::get_override_team))
        .routes(routes!(crate::policies::list))
        .routes(routes!(crate::policies::get))
        .routes(routes!(crate::policies::overrides))
        .routes(routes!(crate::policies::get_override))
        .routes(routes!(crate::alerts::list))
        .routes(routes!(crate::alerts::stream))
        .routes(routes!(crate::status::status));
    let writes = OpenApiRouter::new()
        .routes(routes!(crate::allow::allow_get, crate::allow::allow_post))
        .routes(routes!(crate::allow::hit))
        .routes(routes!(crate::batch::batch))
        .routes(routes!(crate::hold::reserve))
        .routes(routes!(crate::hold::settle))
        .routes(routes!(crate::hold::extend))
        .routes(routes!(crate::inspect::reset))
        .merge(grouped_writes())
        .routes(routes!(crate::policies::put, crate::policies::delete))
        .routes(routes!(
            crate::policies::put_override,
            crate::policies::delete_override
        ));
    let (reads, mut read_api) = reads.split_for_parts();
    let (writes, mut write_api) = writes.split_for_parts();
    add_refusals(&mut read_api, false);
    add_refusals(&mut write_api, true);
    add_decision_headers(&mut write_api);
    let (reads, writes) = match tokens {
        Some(tokens) => {
            let gate = |role| Gate {
                tokens: tokens.clone(),
                role,
            };
            let layer = |role| axum::middleware::from_fn_with_state(gate(role), tokens::require);
            (
                reads.route_layer(layer(Role::Read)),
                writes.route_layer(layer(Role::Full)),
            )
        }
        None => (reads, writes),
    };
    let (open, open_api) = OpenApiRouter::new()
        .routes(routes!(openapi_json_route))
        .split_for_parts();
    let mut api = Frame::openapi();
    api.merge(read_api);
    api.merge(write_api);
    api.merge(open_api);
    (reads.merge(writes).merge(open), api)
}

/// The grouped keys' paths of the verbs that write (SPEC §17,
/// `grouped.rs`): `/{org}/{key}` and `/{org}/{team}/{key}`.
fn grouped_writes() -> OpenApiRouter<Arc<App>> {
    use crate::grouped as g;
    OpenApiRouter::new()
        .routes(routes!(g::allow_org, g::allow_post_org))
        .routes(routes!(g::allow_team, g::allow_post_team))
        .routes(routes!(g::hit_org))
        .routes(routes!(g::hit_team))
        .routes(routes!(g::reset_org))
        .routes(routes!(g::reset_team))
        .routes(routes!(g::reserve_org))
        .routes(routes!(g::reserve_team))
        .routes(routes!(g::settle_org))
        .routes(routes!(g::settle_team))
        .routes(routes!(g::extend_org))
        .routes(routes!(g::extend_team))
        .routes(routes!(g::put_override_org, g::delete_override_org))
        .routes(routes!(g::put_override_team, g::delete_override_team))
}

/// The description of the `/v1` API, as `/v1/openapi.json` serves it.
pub fn openapi() -> OpenApi {
    routes(None).1
}

/// [`openapi`] as pretty JSON, as `docs/openapi.json` holds it.
pub fn openapi_json() -> String {
    let mut json = openapi()
        .to_pretty_json()
        .expect("the description encodes as JSON");
    json.push('\n');
    json
}

/// This description: every route, parameter, body, reply and error.
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "openapi", tag = "description",
    security(()),
    responses((status = 200, description = "the OpenAPI 3.1 description", content_type = "application/json", body = Object)),
)]
pub(crate) async fn openapi_json_route(State(app): State<Arc<App>>) -> Response {
    crate::respond::json_text(&app.openapi)
}

/// The headers `respond::put_decision_headers` puts on every decision
/// (an ask's, a hit's, a hold's), on each response whose body is one;
/// those only some carry (`Retry-After`, `Sluice-Shadow`) are in the
/// responses' own attributes (`responses.rs`).
fn add_decision_headers(api: &mut OpenApi) {
    let headers = [
        ("RateLimit-Limit", "the deciding limit's max", true),
        ("RateLimit-Remaining", "what remains of it", true),
        (
            "RateLimit-Reset",
            "seconds until it is whole again, rounded up",
            true,
        ),
        (
            "Sluice-Source",
            "who decided: worker, deny_cache, budget, fallback_open, fallback_local",
            false,
        ),
    ];
    for operation in operations(api) {
        for response in operation.responses.responses.values_mut() {
            let RefOr::T(response) = response else {
                continue;
            };
            let decision = response
                .content
                .get("application/json")
                .and_then(|c| match c {
                    RefOr::T(c) => c.schema.as_ref(),
                    RefOr::Ref(_) => None,
                })
                .is_some_and(|schema| match schema {
                    RefOr::Ref(r) => {
                        r.ref_location.ends_with("/DecisionReply")
                            || r.ref_location.ends_with("/HeldReply")
                    }
                    RefOr::T(_) => false,
                });
            if !decision {
                continue;
            }
            for (name, description, number) in headers {
                let schema = match number {
                    true => <u64 as utoipa::PartialSchema>::schema(),
                    false => <String as utoipa::PartialSchema>::schema(),
                };
                let header = HeaderBuilder::new()
                    .schema(Some(schema))
                    .description(Some(description))
                    .build();
                response
                    .headers
                    .entry(name.to_string())
                    .or_insert(RefOr::T(header));
            }
        }
    }
}

/// Every operation of `api`.
fn operations(api: &mut OpenApi) -> impl Iterator<Item = &mut Operation> {
    api.paths.paths.values_mut().flat_map(|item| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
    })
}

/// 401 on every operation (a token missing or wrong), and 403 on those
/// that need the full token (the read token given).
fn add_refusals(api: &mut OpenApi, full: bool) {
    for operation in operations(api) {
        refuse(
            operation,
            "401",
            "unauthorized: no token, or a wrong one (with --api-token)",
        );
        if full {
            refuse(
                operation,
                "403",
                "forbidden: the read token (--api-read-token), which may only read",
            );
        }
    }
}

fn refuse(operation: &mut Operation, status: &str, description: &str) {
    let response = ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            utoipa::openapi::ContentBuilder::new()
                .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "ErrorBody",
                ))))
                .build(),
        )
        .build();
    operation
        .responses
        .responses
        .insert(status.to_string(), RefOr::T(response));
}

#[cfg(test)]
mod tests;
