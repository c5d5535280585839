//! Bodies of the holds' verbs (SPEC §13): `rl.reserve.<key>`
//! `{policy, cost, ttl_ms, wait_ms}`, `rl.settle.<key>` `{policy, hold, cost}`,
//! `rl.extend.<key>` `{policy, hold, ttl_ms}`, and their replies: a
//! decision (§1) plus, for a kept hold, `hold` (its name) and `expires_ms`
//! (until it ends by itself).
//!
//! Decoded by serde, not by the hand-written reader of `rl.allow`
//! ([`super::request`]): holds are asked once per unit of work, not per
//! request of a hot path, and each verb takes other fields. As strict all
//! the same: an unknown field, a field of another verb, a wrong type or a
//! value out of range is a 400 that names it, and changes nothing.
//!
//! A batch item can carry a hold verb too ([`super::batch`]): its fields
//! go through the same rules (`check`), so it is refused with the same
//! sentences, and its result is the same decision map, which carries the
//! hold ([`super::DecisionReply::hold`]), written by the same writer.

use super::encoding::Encoding;
use super::error::ErrorReply;
use super::fields::{check_id, is_valid_policy_name};
use super::levels::LevelReply;
pub use super::reply::HoldTicket;
use super::reply::{decode_reply, encode_reply_body, DecisionOut, MalformedReply, Reply};
use super::request::{encode_body, too_large, RequestError};
use crate::holds::{self, HoldId};
use crate::policy::{Decision, DEFAULT_POLICY};
use crate::subject::Verb;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The fields any hold body may carry; which ones a verb takes is checked
/// after ([`decode_hold_request`]).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Body {
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_ms: Option<u64>,
}

/// A decoded hold body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldRequest {
    /// A valid policy name (not yet checked against the config).
    pub policy: String,
    /// Reserve: the cost to hold (default 1). Settle: the real cost.
    pub cost: u64,
    /// Reserve and extend: the ttl asked for (else the policy's).
    pub ttl_ms: Option<u64>,
    /// Settle and extend: the hold.
    pub hold: Option<HoldId>,
    /// The caller's name for the verb (SPEC §16): sent again, it is done
    /// once and answered as the first time.
    pub id: Option<String>,
    /// Reserve: how long it may wait for its start (SPEC §18; 0: not at
    /// all), checked against the policy by the owner.
    pub wait_ms: u64,
    /// The encoding to reply in.
    pub encoding: Encoding,
}

/// Decodes the body of `verb` (one of [`Verb::HOLDS`]).
///
/// ```
/// use sluice_core::subject::Verb;
/// use sluice_core::wire::hold::decode_hold_request;
///
/// let r = decode_hold_request(Verb::Reserve, br#"{"policy":"llm","cost":4000}"#).unwrap();
/// assert_eq!((r.policy.as_str(), r.cost, r.ttl_ms), ("llm", 4000, None));
/// let e = decode_hold_request(Verb::Settle, br#"{"policy":"llm","cost":10}"#).unwrap_err();
/// assert!(e.reply.message.contains("\"hold\""), "{}", e.reply.message);
/// ```
pub fn decode_hold_request(verb: Verb, body: &[u8]) -> Result<HoldRequest, RequestError> {
    let encoding = Encoding::of_body(body);
    let refuse = |message: String| RequestError {
        encoding,
        reply: ErrorReply::bad_request(message),
    };
    if let Some(reply) = too_large(body, "a policy name, a cost, a ttl and a hold id") {
        return Err(RequestError { encoding, reply });
    }
    let fields: Body = if body.is_empty() {
        Body::default()
    } else {
        match encoding {
            Encoding::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
            Encoding::MsgPack => rmp_serde::from_slice(body).map_err(|e| e.to_string()),
        }
        .map_err(|e| {
            refuse(format!(
                "the body of {} is not a valid {} map ({e}); {}",
                verb.client_prefix(),
                encoding_name(encoding),
                takes(verb)
            ))
        })?
    };
    let fields = HoldFields {
        policy: fields.policy.map(Cow::Owned),
        cost: fields.cost,
        ttl_ms: fields.ttl_ms,
        hold: fields.hold.as_deref(),
        id: fields.id.map(Cow::Owned),
        wait_ms: fields.wait_ms,
    };
    let checked = check(verb, fields).map_err(refuse)?;
    Ok(HoldRequest {
        policy: checked.policy.into_owned(),
        cost: checked.cost,
        ttl_ms: checked.ttl_ms,
        hold: checked.hold,
        id: checked.id.map(Cow::into_owned),
        wait_ms: checked.wait_ms,
        encoding,
    })
}

/// A hold verb's fields as sent, in a body of their own or in a batch
/// item ([`super::batch`]), before [`check`].
#[derive(Default)]
pub(crate) struct HoldFields<'a> {
    pub(crate) policy: Option<Cow<'a, str>>,
    pub(crate) cost: Option<u64>,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) hold: Option<&'a str>,
    pub(crate) id: Option<Cow<'a, str>>,
    /// Never in a batch, which refuses `wait_ms` first.
    pub(crate) wait_ms: Option<u64>,
}

/// A hold verb's fields once checked, defaults applied.
pub(crate) struct Checked<'a> {
    pub(crate) policy: Cow<'a, str>,
    pub(crate) cost: u64,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) hold: Option<HoldId>,
    pub(crate) id: Option<Cow<'a, str>>,
    pub(crate) wait_ms: u64,
}

/// The one set of rules for a hold verb's fields, alone or batched: the
/// fields `verb` takes and needs, a hold id, a valid policy name, a cost
/// and a ttl in range. The error is the sentence of the first mistake.
pub(crate) fn check<'a>(verb: Verb, fields: HoldFields<'a>) -> Result<Checked<'a>, String> {
    let given = |name: &str, present: bool| {
        if present {
            Err(format!(
                "{} takes no {name:?} field; {}",
                verb.client_prefix(),
                takes(verb)
            ))
        } else {
            Ok(())
        }
    };
    let needed = |name: &str| {
        format!(
            "{} needs the field {name:?}; {}",
            verb.client_prefix(),
            takes(verb)
        )
    };
    match verb {
        Verb::Reserve => given("hold", fields.hold.is_some())?,
        Verb::Settle => {
            given("ttl_ms", fields.ttl_ms.is_some())?;
            given("wait_ms", fields.wait_ms.is_some())?;
            if fields.cost.is_none() {
                return Err(needed("cost"));
            }
        }
        Verb::Extend => {
            given("cost", fields.cost.is_some())?;
            given("wait_ms", fields.wait_ms.is_some())?;
        }
        other => return Err(format!("{} is not a hold verb", other.client_prefix())),
    }
    let hold = match (verb, fields.hold) {
        (Verb::Reserve, _) => None,
        (_, None) => return Err(needed("hold")),
        (_, Some(text)) => Some(holds::id(text).map_err(|e| e.to_string())?),
    };
    let policy = fields.policy.unwrap_or(Cow::Borrowed(DEFAULT_POLICY));
    if !is_valid_policy_name(&policy) {
        return Err(format!(
            "the policy name {policy:?} is not valid; policy names are 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'"
        ));
    }
    let cost = holds::cost(fields.cost.unwrap_or(1)).map_err(|e| e.to_string())?;
    if let Some(ms) = fields.ttl_ms {
        holds::ttl(Some(ms), Nanos::ZERO).map_err(|e| e.to_string())?;
    }
    if let Some(id) = &fields.id {
        check_id(id)?;
    }
    Ok(Checked {
        policy,
        cost,
        ttl_ms: fields.ttl_ms,
        hold,
        id: fields.id,
        wait_ms: fields.wait_ms.unwrap_or(0),
    })
}

fn encoding_name(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::Json => "JSON",
        Encoding::MsgPack => "MessagePack",
    }
}

/// What each verb's body holds, for the sentences above.
fn takes(verb: Verb) -> &'static str {
    match verb {
        Verb::Reserve => "a reserve takes the optional fields \"policy\", \"cost\" (default 1), \"ttl_ms\" (default the policy's hold_ttl), \"wait_ms\" (how long it may wait for its start) and \"id\"",
        Verb::Settle => "a settle takes \"hold\" (the reserve's reply names it), \"cost\" (the real cost, 0 for work that failed) and the optional \"policy\" and \"id\"",
        _ => "an extend takes \"hold\", the optional \"ttl_ms\" (from now; default the policy's hold_ttl) and the optional \"policy\" and \"id\"",
    }
}

/// What a client sends with a hold verb; `None` fields are left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldAsk<'a> {
    pub policy: Option<&'a str>,
    pub cost: Option<u64>,
    pub ttl_ms: Option<u64>,
    pub hold: Option<&'a str>,
    /// The verb's id (SPEC §16).
    pub id: Option<&'a str>,
    /// A reserve's wait for its start (SPEC §18).
    pub wait_ms: Option<u64>,
}

/// Encodes a hold body (client side); nothing is checked here.
pub fn encode_hold_request(ask: &HoldAsk<'_>, encoding: Encoding) -> Vec<u8> {
    let body = Body {
        policy: ask.policy.map(str::to_string),
        cost: ask.cost,
        ttl_ms: ask.ttl_ms,
        hold: ask.hold.map(str::to_string),
        id: ask.id.map(str::to_string),
        wait_ms: ask.wait_ms,
    };
    encode_body(&body, encoding)
}

/// Encodes the reply to a hold verb (worker side): `decision` under
/// `policy`, and the hold it kept or extended, ending in `expires`.
pub fn encode_held(
    decision: &Decision,
    policy: &str,
    held: (Option<(HoldId, Nanos)>, bool),
    encoding: Encoding,
) -> Vec<u8> {
    encode_held_levels(decision, policy, held, (&[], None), encoding)
}

/// [`encode_held`] of a grouped key's hold verb (SPEC §17): with every
/// level's decision, and the level that denied.
pub fn encode_held_levels(
    decision: &Decision,
    policy: &str,
    (held, repeat): (Option<(HoldId, Nanos)>, bool),
    (levels, denied_by): (&[LevelReply], Option<&str>),
    encoding: Encoding,
) -> Vec<u8> {
    let ticket = held.map(|(id, expires)| HoldTicket::new(id, expires));
    let out = DecisionOut::new(decision, policy)
        .with_hold(ticket.as_ref())
        .repeated(repeat)
        .grouped(levels, denied_by);
    encode_reply_body(&out, encoding)
}

/// Decodes the reply to a hold verb (client side): the reply of §1, and
/// the hold when one was kept or extended (taken out of the decision).
pub fn decode_held(body: &[u8]) -> Result<(Reply, Option<HoldTicket>), MalformedReply> {
    Ok(match decode_reply(body)? {
        Reply::Decision(mut d) => {
            let ticket = d.hold.take();
            (Reply::Decision(d), ticket)
        }
        error => (error, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn each_verb_takes_its_own_fields_in_either_encoding() {
        let ask = HoldAsk {
            policy: Some("llm"),
            cost: Some(4000),
            ttl_ms: Some(30_000),
            hold: None,
            id: None,
            wait_ms: None,
        };
        for encoding in [Encoding::Json, Encoding::MsgPack] {
            let body = encode_hold_request(&ask, encoding);
            let r = decode_hold_request(Verb::Reserve, &body).unwrap();
            assert_eq!(
                (r.policy.as_str(), r.cost, r.ttl_ms, r.hold, r.encoding),
                ("llm", 4000, Some(30_000), None, encoding)
            );
        }
        let r = decode_hold_request(Verb::Reserve, b"").unwrap();
        assert_eq!((r.policy.as_str(), r.cost), ("default", 1));
        let settle = format!(r#"{{"hold":"{ID}","cost":0}}"#);
        let r = decode_hold_request(Verb::Settle, settle.as_bytes()).unwrap();
        assert_eq!((r.cost, r.hold.unwrap().to_string()), (0, ID.to_string()));
        let extend = format!(r#"{{"hold":"{ID}","ttl_ms":5000,"policy":"llm"}}"#);
        let r = decode_hold_request(Verb::Extend, extend.as_bytes()).unwrap();
        assert_eq!(r.ttl_ms, Some(5000));
    }

    #[test]
    fn what_a_verb_does_not_take_or_cannot_hold_is_refused_with_the_reason() {
        let cases: &[(Verb, String, &str)] = &[
            (Verb::Reserve, r#"{"cots":5}"#.into(), "unknown field"),
            (
                Verb::Reserve,
                format!(r#"{{"hold":"{ID}"}}"#),
                "takes no \"hold\"",
            ),
            (
                Verb::Reserve,
                r#"{"cost":1000000001}"#.into(),
                "out of range",
            ),
            (Verb::Reserve, r#"{"ttl_ms":3600001}"#.into(), "1 h"),
            (Verb::Reserve, r#"{"ttl_ms":0}"#.into(), "ttl_ms 0"),
            (
                Verb::Reserve,
                r#"{"cost":-1}"#.into(),
                "not a valid JSON map",
            ),
            (Verb::Reserve, r#"{"policy":"no way"}"#.into(), "not valid"),
            (
                Verb::Settle,
                r#"{"cost":3}"#.into(),
                "needs the field \"hold\"",
            ),
            (
                Verb::Settle,
                format!(r#"{{"hold":"{ID}"}}"#),
                "needs the field \"cost\"",
            ),
            (
                Verb::Settle,
                r#"{"hold":"guess","cost":1}"#.into(),
                "32 hex digits",
            ),
            (
                Verb::Settle,
                format!(r#"{{"hold":"{ID}","cost":1,"ttl_ms":5}}"#),
                "no \"ttl_ms\"",
            ),
            (
                Verb::Extend,
                format!(r#"{{"hold":"{ID}","cost":1}}"#),
                "no \"cost\"",
            ),
            (Verb::Extend, "0".into(), "not a valid MessagePack map"),
            (Verb::Allow, "{}".into(), "not a hold verb"),
        ];
        for (verb, body, says) in cases {
            let e = decode_hold_request(*verb, body.as_bytes()).unwrap_err();
            assert_eq!(e.reply.code.status(), 400, "{body}");
            assert!(
                e.reply.message.contains(says),
                "{body}: {}",
                e.reply.message
            );
        }
        let big = format!(r#"{{"policy":"{}"}}"#, "a".repeat(5000));
        let e = decode_hold_request(Verb::Reserve, big.as_bytes()).unwrap_err();
        assert_eq!(e.reply.code.status(), 413);
    }

    #[test]
    fn a_held_reply_is_a_decision_with_its_hold_in_either_encoding() {
        let decision = Decision {
            allowed: true,
            limit: 100_000,
            remaining: 96_000,
            reset: Nanos(1_500_000),
            retry_after: Nanos::ZERO,
            shadow_denied: false,
            wait: Nanos::ZERO,
            blocked: false,
        };
        let id = HoldId::parse(ID).unwrap();
        for encoding in [Encoding::Json, Encoding::MsgPack] {
            let body = encode_held(
                &decision,
                "llm",
                (Some((id, Nanos(29_999_999_999))), false),
                encoding,
            );
            let (reply, ticket) = decode_held(&body).unwrap();
            let Reply::Decision(d) = reply else {
                panic!("a decision")
            };
            assert_eq!(
                (d.remaining, d.reset_ms, d.policy.as_str()),
                (96_000, 2, "llm")
            );
            assert_eq!(
                ticket,
                Some(HoldTicket {
                    hold: ID.into(),
                    expires_ms: 29_999
                })
            );
            let denied = encode_held(&decision, "llm", (None, false), encoding);
            assert_eq!(decode_held(&denied).unwrap().1, None);
        }
    }
}
