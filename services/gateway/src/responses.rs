//! The responses several `/v1` routes share, as types that describe them
//! in the OpenAPI description (`api.rs`): a decision's 200 and 429, a
//! hold's, and the sets of errors of each kind of route. Each says which
//! function of the gateway writes it. The headers every decision carries
//! (`RateLimit-*`, `Sluice-Source`) are added by `api.rs` to each response
//! whose body is one; only those some carry are here.

use crate::respond::ErrorBody;
use sluice_core::wire::DecisionReply;

/// A decision: 200 allowed, 429 denied.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes `respond::decision`
pub(crate) enum Decided {
    #[response(status = 200, description = "allowed", headers(
        ("Sluice-Shadow" = String, description = "`denied` when a shadow policy would have denied (SPEC §14)"),
        ("Sluice-Repeat" = String, description = "`true` on the answer to an ask that repeated the Idempotency-Key of one already admitted: the first answer, nothing counted (SPEC §16)"),
        ("Sluice-Wait-Ms" = u64, description = "on an ask allowed for a later start (`?wait=`, SPEC §18): ms from now, rounded up, when the caller starts; its units are taken. As the body's `wait_ms`"),
    ))]
    Allowed(DecisionReply),
    #[response(status = 429, description = "denied: nothing consumed", headers(
        ("Retry-After" = u64, description = "seconds until the ask may pass, rounded up"),
    ))]
    Denied(DecisionReply),
}

/// A hit's answer: always 200.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes `respond::counted`
pub(crate) enum Counted {
    #[response(status = 200, description = "counted; the decision a peek gives after it", headers(
        ("Retry-After" = u64, description = "when one more unit would be denied: seconds until it would pass"),
        ("Sluice-Repeat" = String, description = "`true` on the answer to a hit that repeated the Idempotency-Key of one already counted: the first answer, nothing counted (SPEC §16)"),
    ))]
    Counted(DecisionReply),
}

/// A decision with the hold it kept or moved (`hold`, `expires_ms`).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // describes `Held::encode`
pub(crate) struct HeldReply {
    #[serde(flatten)]
    decision: DecisionReply,
    /// The hold's name, for settle and extend.
    hold: Option<String>,
    /// Milliseconds until it ends by itself.
    expires_ms: Option<u64>,
}

/// A reserve: 200 held, 429 denied.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes `hold::reply`
pub(crate) enum HeldReplies {
    #[response(status = 200, description = "held", headers(
        ("Sluice-Repeat" = String, description = "`true` on the answer to a reserve that repeated the Idempotency-Key of one already held: the first answer and the same hold (SPEC §16)"),
    ))]
    Held(HeldReply),
    #[response(status = 429, description = "denied: nothing held", headers(
        ("Retry-After" = u64, description = "seconds until the reserve may pass, rounded up"),
    ))]
    Denied(HeldReply),
}

/// A settle or an extend that was done.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes `hold::reply`
pub(crate) enum Done {
    #[response(status = 200, description = "done; the decision a peek gives after it (and the hold an extend moved)", headers(
        ("Retry-After" = u64, description = "when one more unit would be denied: seconds until it would pass"),
        ("Sluice-Repeat" = String, description = "`true` on the answer to a verb that repeated the Idempotency-Key of one already done: the first answer, nothing done again (SPEC §16)"),
    ))]
    Done(HeldReply),
}

/// The errors of an ask.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes `respond::error`
pub(crate) enum AskErrors {
    #[response(
        status = 400,
        description = "`bad_request`: a bad key, policy, cost, query or body, or a cost the policy can never allow"
    )]
    BadRequest(ErrorBody<'static>),
    #[response(status = 404, description = "`unknown_policy`")]
    UnknownPolicy(ErrorBody<'static>),
    #[response(
        status = 409,
        description = "`id_reused`: the Idempotency-Key was first used by another ask of the key (SPEC §16)"
    )]
    IdReused(ErrorBody<'static>),
    #[response(status = 413, description = "`too_large`: a body over 4 KiB")]
    TooLarge(ErrorBody<'static>),
    #[response(
        status = 503,
        description = "`unavailable`: no worker answered and the fallback is closed"
    )]
    Unavailable(ErrorBody<'static>),
}

/// The errors of a hold's verb.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes `respond::error`
pub(crate) enum HoldErrors {
    #[response(
        status = 400,
        description = "`bad_request`: a bad key, a field the verb does not take, a cost or ttl out of range, a query"
    )]
    BadRequest(ErrorBody<'static>),
    #[response(
        status = 404,
        description = "`unknown_policy`, or `unknown_hold`: a hold unknown, settled, ended, or of another key or policy"
    )]
    NotFound(ErrorBody<'static>),
    #[response(
        status = 409,
        description = "`id_reused`: the Idempotency-Key was first used by another verb of the key (SPEC §16)"
    )]
    IdReused(ErrorBody<'static>),
    #[response(status = 413, description = "`too_large`: a body over 4 KiB")]
    TooLarge(ErrorBody<'static>),
    #[response(
        status = 503,
        description = "`unavailable`: no worker answered (holds have no fallback)"
    )]
    Unavailable(ErrorBody<'static>),
}

/// The errors of a query to the workers (usage, inspect, reset).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes `respond::error`
pub(crate) enum QueryErrors {
    #[response(
        status = 400,
        description = "`bad_request`: a bad key, parameter or range, or an unknown parameter"
    )]
    BadRequest(ErrorBody<'static>),
    #[response(status = 404, description = "`unknown_policy`")]
    UnknownPolicy(ErrorBody<'static>),
    #[response(
        status = 503,
        description = "`unavailable`: no worker answered, or usage is off"
    )]
    Unavailable(ErrorBody<'static>),
}

/// The errors of a write to the policy bucket.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes `respond::error`
pub(crate) enum WriteErrors {
    #[response(
        status = 400,
        description = "`bad_request`: a value the config file would refuse (the sentence says which field and why), a bad name or key, or a query"
    )]
    BadRequest(ErrorBody<'static>),
    #[response(status = 413, description = "`too_large`: a body over 64 KiB")]
    TooLarge(ErrorBody<'static>),
    #[response(
        status = 503,
        description = "`unavailable`: no policy bucket, or NATS credentials that may not write it"
    )]
    Unavailable(ErrorBody<'static>),
}
