//! The Envoy rate limit service's rules, apart from any network: a
//! `RateLimitRequest` becomes one [`Slot`] per descriptor (key, policy,
//! cost), and the answers become a `RateLimitResponse`. `mod.rs` only asks
//! the workers in between, so everything a user can read in
//! `docs/GATEWAY.md` about the mapping is tested here without NATS.
//!
//! - Key and policy: the `[envoy]` rule that matches the descriptor
//!   ([`EnvoyConfig::rule_for`]); without an `[envoy]` table, policy
//!   `default` and the key `<domain>|<key1>=<value1>|...` (SPEC §11),
//!   which the client percent-encodes (SPEC §1). With a table, a
//!   descriptor that no rule matches is not limited: OK, as
//!   envoyproxy/ratelimit answers a descriptor without a limit.
//! - Cost: the descriptor's own `hits_addend` when set (0 looks without
//!   consuming), else the request's, where 0 (unset in proto3) means 1:
//!   what envoyproxy/ratelimit does (`utils.GetHitsAddends`).
//! - Several descriptors: [`must_peek`] says when the service looks at all
//!   of them first (cost 0) and [`fits`] whether each cost fits what is
//!   left; only when all fit is anything consumed.
//! - Reply: [`response`] gives each descriptor its code, `current_limit`
//!   (the deciding limit as requests per the closest Envoy unit, see
//!   [`per_unit`]), `limit_remaining` and `duration_until_reset`, and adds
//!   the `x-ratelimit-*` headers of the descriptor closest to its limit.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use sluice_client::{Answer, Error};
use sluice_core::config::{EnvoyConfig, EnvoyTarget};
use sluice_core::key::{try_encode_key, try_encode_path};
use sluice_core::policies::{Override, Policies};
use sluice_core::policy::{Policy, DEFAULT_POLICY};
use sluice_core::time::Nanos;
use sluice_core::wire::MAX_COST;
use std::collections::HashMap;
use std::time::Duration;
use tonic::Status;

/// The most descriptors one request may carry. Envoy sends a handful; a
/// request with more is refused rather than fanned out to the workers.
pub(crate) const MAX_DESCRIPTORS: usize = 64;

/// What one descriptor asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Not limited (an `unlimited` rule, or no rule in an `[envoy]` table).
    Unlimited,
    Limited(Ask),
}

/// One descriptor's ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ask {
    /// The key as bytes, for the client (which encodes it).
    pub key: Vec<u8>,
    /// The same key encoded (SPEC §1), for per-key override lookups.
    pub token: String,
    pub policy: String,
    pub cost: u64,
}

/// What one limited descriptor got: the decision it is described by, and
/// whether it is over its limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub answer: Answer,
    pub over: bool,
}

impl Outcome {
    /// A consuming ask's outcome: over when denied.
    pub(crate) fn of(answer: Answer) -> Outcome {
        Outcome {
            over: !answer.allowed,
            answer,
        }
    }
}

/// A request that cannot be answered as sent: gRPC `INVALID_ARGUMENT`.
fn invalid(message: String) -> Status {
    Status::invalid_argument(message)
}

/// The slots of a request, one per descriptor, or `INVALID_ARGUMENT` with
/// the reason.
pub(crate) fn plan(
    envoy: Option<&EnvoyConfig>,
    req: &RateLimitRequest,
) -> Result<Vec<Slot>, Status> {
    if req.domain.is_empty() {
        return Err(invalid(
            "the domain is empty; set `domain` in Envoy's rate limit filter".into(),
        ));
    }
    if req.descriptors.is_empty() {
        return Err(invalid(
            "the request has no descriptors; a rate limit request needs at least one".into(),
        ));
    }
    if req.descriptors.len() > MAX_DESCRIPTORS {
        return Err(invalid(format!(
            "the request has {} descriptors; at most {MAX_DESCRIPTORS} are accepted",
            req.descriptors.len()
        )));
    }
    req.descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            slot(envoy, &req.domain, req.hits_addend, d)
                .map_err(|m| invalid(format!("descriptors[{i}]: {m}")))
        })
        .collect()
}

fn slot(
    envoy: Option<&EnvoyConfig>,
    domain: &str,
    request_hits: u32,
    d: &RateLimitDescriptor,
) -> Result<Slot, String> {
    if d.entries.is_empty() {
        return Err("has no entries; a descriptor needs at least one (key, value) entry".into());
    }
    if let Some(i) = d.entries.iter().position(|e| e.key.is_empty()) {
        return Err(format!("entries[{i}] has an empty key"));
    }
    if d.is_negative_hits {
        return Err(
            "is_negative_hits is not supported: sluice does not give back units once counted"
                .into(),
        );
    }
    let cost = match &d.hits_addend {
        Some(h) => h.value,
        None => u64::from(request_hits.max(1)),
    };
    if cost > MAX_COST {
        return Err(format!(
            "hits_addend {cost} is absurd; no request may cost more than {MAX_COST}"
        ));
    }
    let entries: Vec<(&str, &str)> = d
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    let values = || -> Vec<&str> { entries.iter().map(|(_, v)| *v).collect() };
    let (key, policy, levels) = match envoy {
        None => (
            default_key(domain, &entries),
            DEFAULT_POLICY.to_string(),
            false,
        ),
        Some(envoy) => match envoy.rule_for(domain, &entries).map(|r| &r.target) {
            None | Some(EnvoyTarget::Unlimited) => return Ok(Slot::Unlimited),
            Some(EnvoyTarget::Limit {
                policy,
                key,
                levels,
            }) => {
                let key = match key {
                    Some(template) => template.render(&values()),
                    None if *levels => values().join("/").into_bytes(),
                    None => default_key(domain, &entries),
                };
                (key, policy.clone(), *levels)
            }
        },
    };
    let token = if levels {
        // One token per level, outermost first (SPEC §17).
        let values = values();
        let tokens: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
        try_encode_path(&tokens).map_err(|e| {
            format!("its entries' values {values:?} cannot be a grouped key's tokens: {e}")
        })?
    } else {
        try_encode_key(&key).map_err(|e| {
            format!(
                "its key {:?} cannot be used: {e}; give a shorter `key` in its [envoy] rule (docs/GATEWAY.md)",
                String::from_utf8_lossy(&key)
            )
        })?
    };
    Ok(Slot::Limited(Ask {
        key,
        token,
        policy,
        cost,
    }))
}

/// `<domain>|<key1>=<value1>|<key2>=<value2>` (SPEC §11).
pub(crate) fn default_key(domain: &str, entries: &[(&str, &str)]) -> Vec<u8> {
    let mut key = domain.as_bytes().to_vec();
    for (k, v) in entries {
        key.push(b'|');
        key.extend_from_slice(k.as_bytes());
        key.push(b'=');
        key.extend_from_slice(v.as_bytes());
    }
    key
}

/// The policy a key is limited by: its per-key override, else the policy.
/// `None` for an unknown policy or a blocked key (no limit to describe).
fn policy_of<'p>(policies: &'p Policies, ask: &Ask) -> Option<&'p Policy> {
    match policies.override_of(&ask.policy, &ask.token) {
        Some(Override::Limits(p)) => Some(p),
        Some(Override::Blocked) => None,
        None => policies.get(&ask.policy),
    }
}

/// Whether the service must look at every descriptor (cost 0) before it
/// consumes anything: when more than one descriptor would consume, so that
/// one over its limit costs the others nothing; or when a cost can never
/// fit its policy (it is then OVER_LIMIT, found by the look, rather than an
/// error).
pub(crate) fn must_peek(slots: &[Slot], policies: &Policies) -> bool {
    let mut consuming = 0;
    for slot in slots {
        let Slot::Limited(ask) = slot else { continue };
        if ask.cost > 0 {
            consuming += 1;
        }
        if policy_of(policies, ask).is_some_and(|p| ask.cost > p.capacity()) {
            return true;
        }
    }
    consuming > 1
}

/// Per slot, from a look (cost 0) at every limited one: whether its cost
/// fits what is left. Descriptors with the same key and policy share what
/// is left, so their costs add up. A descriptor of cost 0 fits when one
/// more unit would. `peeks[i]` is the look for `slots[i]` (`None` for an
/// unlimited slot, which always fits).
pub(crate) fn fits(slots: &[Slot], peeks: &[Option<Answer>]) -> Vec<bool> {
    let mut need: HashMap<(&str, &str), u64> = HashMap::new();
    for slot in slots {
        if let Slot::Limited(ask) = slot {
            *need.entry((&ask.token, &ask.policy)).or_default() += ask.cost;
        }
    }
    slots
        .iter()
        .zip(peeks)
        .map(|(slot, peek)| match (slot, peek) {
            (Slot::Limited(ask), Some(peek)) => {
                let need = need[&(ask.token.as_str(), ask.policy.as_str())];
                peek.allowed && (ask.cost == 0 || peek.remaining >= need)
            }
            _ => true,
        })
        .collect()
}

/// The reply: per descriptor a status, overall OVER_LIMIT when any is, and
/// the `x-ratelimit-*` headers. `outcomes[i]` is `slots[i]`'s (`None` for
/// an unlimited slot).
pub(crate) fn response(
    slots: &[Slot],
    outcomes: &[Option<Outcome>],
    policies: &Policies,
) -> RateLimitResponse {
    let mut statuses = Vec::with_capacity(slots.len());
    // The descriptor the headers describe: envoyproxy/ratelimit's choice,
    // one over its limit, else the one with the least remaining.
    let mut closest: Option<(bool, u64, &Outcome)> = None;
    for (slot, outcome) in slots.iter().zip(outcomes) {
        let (Slot::Limited(ask), Some(outcome)) = (slot, outcome) else {
            statuses.push(DescriptorStatus {
                code: Code::Ok.into(),
                limit_remaining: u32::MAX,
                ..Default::default()
            });
            continue;
        };
        let a = &outcome.answer;
        statuses.push(DescriptorStatus {
            code: if outcome.over {
                Code::OverLimit
            } else {
                Code::Ok
            }
            .into(),
            current_limit: current_limit(policy_of(policies, ask), a.limit),
            limit_remaining: u32::try_from(a.remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(proto_duration(until_reset(outcome))),
            ..Default::default()
        });
        let rank = (outcome.over, u64::MAX - a.remaining);
        if closest.is_none_or(|(over, left, _)| rank > (over, left)) {
            closest = Some((rank.0, rank.1, outcome));
        }
    }
    let over = statuses
        .iter()
        .any(|s| s.code == i32::from(Code::OverLimit));
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok }.into(),
        statuses,
        response_headers_to_add: closest.map(|(_, _, o)| headers(o)).unwrap_or_default(),
        ..Default::default()
    }
}

/// Whether the reply says OVER_LIMIT.
pub(crate) fn is_over_limit(r: &RateLimitResponse) -> bool {
    r.overall_code == i32::from(Code::OverLimit)
}

/// A descriptor's `duration_until_reset`: until the limit is fully
/// available again; over the limit, until the same request can pass (the
/// two are the same for a fixed window, envoyproxy/ratelimit's only
/// algorithm, and the second is what a client waiting to retry needs).
fn until_reset(o: &Outcome) -> Duration {
    if o.over && !o.answer.retry_after.is_zero() {
        o.answer.retry_after
    } else {
        o.answer.reset
    }
}

/// `x-ratelimit-limit` (the deciding limit's max, as sluice's
/// `RateLimit-Limit`), `x-ratelimit-remaining` and `x-ratelimit-reset`
/// (whole seconds, rounded up): the values envoyproxy/ratelimit puts in its
/// limit headers, under the names SPEC §11 gives them.
fn headers(o: &Outcome) -> Vec<HeaderValue> {
    let header = |key: &str, value: u64| HeaderValue {
        key: key.to_string(),
        value: value.to_string(),
        ..Default::default()
    };
    let reset = until_reset(o);
    let reset_s = reset.as_secs() + u64::from(reset.subsec_nanos() > 0);
    vec![
        header("x-ratelimit-limit", o.answer.limit),
        header("x-ratelimit-remaining", o.answer.remaining),
        header("x-ratelimit-reset", reset_s),
    ]
}

fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The limit of `policy` that decided (the one whose reported limit is
/// `limit`), as Envoy's `RateLimit`; `None` when no limit of the policy
/// reports it (a fallback that knows no such policy, a blocked key).
fn current_limit(policy: Option<&Policy>, limit: u64) -> Option<RateLimit> {
    let policy = policy?;
    let l = policy.limits().iter().find(|l| l.reported() == limit)?;
    let (requests_per_unit, unit) = per_unit(l.max(), l.per());
    Some(RateLimit {
        name: policy.name().to_string(),
        requests_per_unit,
        unit: unit.into(),
    })
}

/// Envoy's units of time that sluice reports in (Envoy also has week,
/// month and year, which older proxies do not know).
const UNITS: [(Unit, u64); 4] = [
    (Unit::Second, 1),
    (Unit::Minute, 60),
    (Unit::Hour, 3_600),
    (Unit::Day, 86_400),
];

/// `max` per `per` as requests per the closest Envoy unit: the unit nearest
/// to `per` by ratio (90 s → minute, 40 min → hour, 500 ms → second), and
/// the rate scaled to it, rounded to the nearest integer, at least 1 (a
/// `per` of exactly one unit is exact: 10 per 1m → 10 per MINUTE).
pub(crate) fn per_unit(max: u64, per: Nanos) -> (u32, Unit) {
    let per = u128::from(per.as_u64().max(1));
    let ratio = |unit_ns: u128| {
        // How far apart per and the unit are, as a factor ≥ 1 (scaled by 1000).
        let (big, small) = if unit_ns > per {
            (unit_ns, per)
        } else {
            (per, unit_ns)
        };
        big * 1000 / small
    };
    let (unit, unit_ns) = UNITS
        .iter()
        .map(|&(u, s)| (u, u128::from(s) * 1_000_000_000))
        .min_by_key(|&(_, ns)| ratio(ns))
        .expect("UNITS is not empty");
    let rate = (u128::from(max) * unit_ns + per / 2) / per;
    (u32::try_from(rate.max(1)).unwrap_or(u32::MAX), unit)
}

/// A refused ask as a gRPC status; the worker's sentence kept.
pub(crate) fn status_of(e: &Error) -> Status {
    match e {
        Error::BadRequest(m) | Error::TooLarge(m) => Status::invalid_argument(m.clone()),
        Error::UnknownPolicy(m) => Status::not_found(format!(
            "{m}; add the policy to [policies] (or the policy bucket), or change the [envoy] rule that names it"
        )),
        Error::Unavailable(m) => Status::unavailable(m.clone()),
        // Envoy asks nothing of holds; a settle never comes this way.
        Error::UnknownHold(m) => Status::not_found(m.clone()),
        // Envoy's asks carry no id.
        Error::IdReused(m) => Status::already_exists(m.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::google::protobuf::UInt64Value;
    use sluice_client::Source;
    use sluice_core::config::Config;
    use tonic::Code as GrpcCode;

    fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: hits,
        }
    }

    fn ask(slot: &Slot) -> &Ask {
        match slot {
            Slot::Limited(a) => a,
            Slot::Unlimited => panic!("unlimited"),
        }
    }

    fn answer(allowed: bool, limit: u64, remaining: u64) -> Answer {
        Answer {
            allowed,
            limit,
            remaining,
            reset: Duration::from_millis(1500),
            retry_after: if allowed {
                Duration::ZERO
            } else {
                Duration::from_millis(200)
            },
            policy: "default".into(),
            shadow_denied: false,
            repeat: false,
            wait: Duration::ZERO,
            levels: Vec::new(),
            denied_by: None,
            blocked: false,
            source: Source::Worker,
        }
    }

    fn policies(toml: &str) -> Policies {
        Policies::from_config(&Config::from_toml(toml, "t.toml").unwrap())
    }

    /// The rules as one inline array, for a change of style.
    const RULES: &str = r#"
[policies.per_ip]
algorithm = "fixed_window"
limits = [ { max = 100, per = "1m" } ]

[envoy]
rules = [
  { domain = "edge", entries = [ { key = "remote_address" } ], policy = "per_ip" },
  { domain = "edge", entries = [ { key = "remote_address", value = "10.0.0.1" } ], unlimited = true },
  { domain = "edge", entries = [ { key = "user" } ], policy = "per_ip", key = "u-{user}" },
]
"#;

    #[test]
    fn without_envoy_each_descriptor_is_default_keyed_by_domain_and_entries() {
        let req = request(
            "edge",
            vec![descriptor(&[
                ("remote_address", "1.2.3.4"),
                ("path", "/a b"),
            ])],
            0,
        );
        let slots = plan(None, &req).unwrap();
        let a = ask(&slots[0]);
        assert_eq!(a.key, b"edge|remote_address=1.2.3.4|path=/a b");
        assert_eq!(
            a.token,
            "edge%7Cremote_address%3D1%2E2%2E3%2E4%7Cpath%3D%2Fa%20b"
        );
        assert_eq!(a.policy, "default");
        assert_eq!(
            a.cost, 1,
            "hits_addend 0 (unset) counts 1, as envoyproxy/ratelimit does"
        );
    }

    #[test]
    fn hits_addend_is_the_cost_and_a_descriptor_s_own_wins() {
        let mut own = descriptor(&[("k", "v")]);
        own.hits_addend = Some(UInt64Value { value: 0 });
        let req = request("d", vec![descriptor(&[("k", "v")]), own], 5);
        let slots = plan(None, &req).unwrap();
        assert_eq!(ask(&slots[0]).cost, 5);
        assert_eq!(
            ask(&slots[1]).cost,
            0,
            "a descriptor's hits_addend 0 looks without consuming"
        );
    }

    #[test]
    fn rules_choose_policy_and_key_and_unmatched_descriptors_are_unlimited() {
        let config = Config::from_toml(RULES, "t.toml").unwrap();
        let envoy = config.envoy.as_ref();
        let req = request(
            "edge",
            vec![
                descriptor(&[("remote_address", "1.2.3.4")]),
                descriptor(&[("remote_address", "10.0.0.1")]),
                descriptor(&[("user", "bob@x.io")]),
                descriptor(&[("other", "x")]),
            ],
            0,
        );
        let slots = plan(envoy, &req).unwrap();
        assert_eq!(ask(&slots[0]).policy, "per_ip");
        assert_eq!(ask(&slots[0]).key, b"edge|remote_address=1.2.3.4");
        assert_eq!(slots[1], Slot::Unlimited);
        assert_eq!(ask(&slots[2]).key, b"u-bob@x.io");
        assert_eq!(slots[3], Slot::Unlimited);
        let unknown_domain = request("nope", vec![descriptor(&[("remote_address", "1")])], 0);
        assert_eq!(plan(envoy, &unknown_domain).unwrap(), vec![Slot::Unlimited]);
    }

    #[test]
    fn a_rule_with_levels_asks_its_entries_as_a_grouped_key() {
        let toml = r#"
[envoy]
rules = [ { domain = "api", entries = [ { key = "org" }, { key = "user" } ], policy = "user", levels = true } ]
"#;
        let config = Config::from_toml(toml, "t.toml").unwrap();
        let req = request(
            "api",
            vec![descriptor(&[("org", "acme"), ("user", "bob@x.io")])],
            0,
        );
        let slots = plan(config.envoy.as_ref(), &req).unwrap();
        let a = ask(&slots[0]);
        assert_eq!(
            (a.token.as_str(), a.policy.as_str()),
            ("acme.bob%40x%2Eio", "user")
        );
        assert_eq!(a.key, b"acme/bob@x.io");
        let empty = request("api", vec![descriptor(&[("org", ""), ("user", "bob")])], 0);
        let e = plan(config.envoy.as_ref(), &empty).unwrap_err();
        assert!(
            e.message().contains("grouped key's tokens"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn bad_requests_are_invalid_argument_with_the_reason() {
        let mut negative = descriptor(&[("k", "v")]);
        negative.is_negative_hits = true;
        let mut huge = descriptor(&[("k", "v")]);
        huge.hits_addend = Some(UInt64Value { value: u64::MAX });
        let long = "x".repeat(300);
        for (req, words) in [
            (
                request("", vec![descriptor(&[("k", "v")])], 0),
                "domain is empty",
            ),
            (request("d", vec![], 0), "no descriptors"),
            (
                request("d", vec![descriptor(&[])], 0),
                "descriptors[0]: has no entries",
            ),
            (request("d", vec![descriptor(&[("", "v")])], 0), "empty key"),
            (request("d", vec![negative], 0), "is_negative_hits"),
            (request("d", vec![huge], 0), "is absurd"),
            (
                request("d", vec![descriptor(&[("k", &long)])], 0),
                "shorter `key`",
            ),
            (
                request("d", vec![descriptor(&[("k", "v")]); MAX_DESCRIPTORS + 1], 0),
                "at most 64",
            ),
        ] {
            let e = plan(None, &req).unwrap_err();
            assert_eq!(e.code(), GrpcCode::InvalidArgument, "{words}");
            assert!(e.message().contains(words), "{words}: {}", e.message());
        }
    }

    #[test]
    fn several_consuming_descriptors_or_an_impossible_cost_are_looked_at_first() {
        let p = policies("");
        let req = |costs: &[u64]| {
            let ds = costs
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut d = descriptor(&[("k", &i.to_string())]);
                    d.hits_addend = Some(UInt64Value { value: *c });
                    d
                })
                .collect();
            plan(None, &request("d", ds, 0)).unwrap()
        };
        assert!(!must_peek(&req(&[1]), &p));
        assert!(!must_peek(&req(&[3, 0, 0]), &p));
        assert!(must_peek(&req(&[1, 1]), &p));
        assert!(must_peek(&req(&[16]), &p), "default allows 15 at most");
    }

    #[test]
    fn costs_fit_what_is_left_and_a_shared_key_adds_its_costs() {
        let slot = |k: &str, cost| {
            Slot::Limited(Ask {
                key: k.into(),
                token: k.into(),
                policy: "default".into(),
                cost,
            })
        };
        let slots = [
            slot("a", 2),
            slot("b", 3),
            slot("a", 2),
            Slot::Unlimited,
            slot("c", 0),
        ];
        let peeks = [
            Some(answer(true, 10, 3)),
            Some(answer(true, 10, 3)),
            Some(answer(true, 10, 3)),
            None,
            Some(answer(false, 10, 0)),
        ];
        assert_eq!(fits(&slots, &peeks), [false, true, false, true, false]);
    }

    #[test]
    fn statuses_describe_each_descriptor_and_headers_the_closest() {
        let p = policies(RULES);
        let slots = plan(
            Config::from_toml(RULES, "t.toml").unwrap().envoy.as_ref(),
            &request(
                "edge",
                vec![
                    descriptor(&[("remote_address", "1.2.3.4")]),
                    descriptor(&[("remote_address", "10.0.0.1")]),
                    descriptor(&[("user", "bob")]),
                ],
                0,
            ),
        )
        .unwrap();
        let outcomes = [
            Some(Outcome::of(answer(true, 100, 7))),
            None,
            Some(Outcome {
                answer: answer(true, 100, 50),
                over: true,
            }),
        ];
        let r = response(&slots, &outcomes, &p);
        assert_eq!(r.overall_code, i32::from(Code::OverLimit));
        let s = &r.statuses;
        assert_eq!(s[0].code, i32::from(Code::Ok));
        assert_eq!(
            s[0].current_limit,
            Some(RateLimit {
                name: "per_ip".into(),
                requests_per_unit: 100,
                unit: Unit::Minute.into()
            })
        );
        assert_eq!(s[0].limit_remaining, 7);
        assert_eq!(
            s[0].duration_until_reset,
            Some(ProtoDuration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(
            (s[1].code, s[1].limit_remaining),
            (i32::from(Code::Ok), u32::MAX)
        );
        assert_eq!(s[1].current_limit, None);
        assert_eq!(s[2].code, i32::from(Code::OverLimit));
        assert_eq!(
            s[2].duration_until_reset.unwrap().nanos,
            500_000_000,
            "a cost that a look found too big: until the limit is fully available"
        );
        let header = |key: &str, value: &str| HeaderValue {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        };
        assert_eq!(
            r.response_headers_to_add,
            [
                header("x-ratelimit-limit", "100"),
                header("x-ratelimit-remaining", "50"),
                header("x-ratelimit-reset", "2")
            ],
            "the over-limit descriptor, though another has less left"
        );
        let ok = response(&slots[..1], &outcomes[..1], &p);
        assert_eq!(ok.overall_code, i32::from(Code::Ok));
        assert_eq!(ok.response_headers_to_add[2].value, "2", "1.5 s rounds up");
        let denied = response(&slots[..1], &[Some(Outcome::of(answer(false, 100, 0)))], &p);
        assert_eq!(
            denied.statuses[0].duration_until_reset.unwrap().nanos,
            200_000_000,
            "denied: until the same request can pass"
        );
        assert_eq!(denied.response_headers_to_add[2].value, "1");
        let none = response(&slots[1..2], &outcomes[1..2], &p);
        assert!(
            none.response_headers_to_add.is_empty(),
            "nothing limited, nothing to say"
        );
    }

    #[test]
    fn limits_are_reported_per_the_closest_unit() {
        let s = |secs: u64| Nanos::from(Duration::from_secs(secs));
        assert_eq!(per_unit(15, s(1)), (15, Unit::Second));
        assert_eq!(per_unit(10, s(60)), (10, Unit::Minute));
        assert_eq!(per_unit(100, s(90)), (67, Unit::Minute));
        assert_eq!(per_unit(50, s(40 * 60)), (75, Unit::Hour));
        assert_eq!(
            per_unit(5, Nanos::from(Duration::from_millis(500))),
            (10, Unit::Second)
        );
        assert_eq!(per_unit(1000, s(7 * 86_400)), (143, Unit::Day));
        assert_eq!(per_unit(1, s(150)), (1, Unit::Minute), "at least 1");
        assert_eq!(per_unit(u64::MAX, s(1)), (u32::MAX, Unit::Second));
    }

    #[test]
    fn refusals_map_to_grpc_codes() {
        for (e, code) in [
            (Error::BadRequest("x".into()), GrpcCode::InvalidArgument),
            (Error::TooLarge("x".into()), GrpcCode::InvalidArgument),
            (Error::UnknownPolicy("x".into()), GrpcCode::NotFound),
            (Error::Unavailable("x".into()), GrpcCode::Unavailable),
        ] {
            assert_eq!(status_of(&e).code(), code, "{e:?}");
        }
    }
}
