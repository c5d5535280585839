//! Bodies of `rl.inspect.<key>` and `rl.reset.<key>` (SPEC §8): the
//! request names at most a policy; the replies show a key's state per
//! policy, or say what was reset.
//!
//! These are operator requests, not the hot path, so they go through serde
//! (rmp-serde and serde_json) rather than the hand-tuned reader of
//! [`super::request`]; like every request, an unknown field or a bad value
//! is refused with a sentence, and the reply is in the request's encoding.

use super::encoding::Encoding;
use super::error::ErrorReply;
use super::fields::is_valid_policy_name;
use super::request::{encode_body, too_large, RequestError};
use crate::policy::LimitState;
use serde::{Deserialize, Serialize};

/// Which policies an inspect or reset is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// `None`: every policy with state for the key.
    pub policy: Option<String>,
    /// The encoding to reply in.
    pub encoding: Encoding,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeBody {
    #[serde(default)]
    policy: Option<String>,
}

const SCOPE_FIELDS: &str =
    "an inspect or reset request is empty or a map with only the optional field \"policy\" (a policy name)";

/// Decodes the body of an inspect or reset request: empty, or a JSON object
/// / MessagePack map with an optional `policy`.
pub fn decode_scope(body: &[u8]) -> Result<Scope, RequestError> {
    let encoding = Encoding::of_body(body);
    let refuse = |reply: ErrorReply| RequestError { encoding, reply };
    if let Some(too_large) = too_large(body, "a policy name") {
        return Err(refuse(too_large));
    }
    if body.is_empty() {
        return Ok(Scope {
            policy: None,
            encoding,
        });
    }
    let parsed: Result<ScopeBody, String> = match encoding {
        Encoding::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
        Encoding::MsgPack => rmp_serde::from_slice(body).map_err(|e| e.to_string()),
    };
    let parsed =
        parsed.map_err(|e| refuse(ErrorReply::bad_request(format!("{SCOPE_FIELDS}: {e}"))))?;
    if let Some(policy) = &parsed.policy {
        if !is_valid_policy_name(policy) {
            return Err(refuse(ErrorReply::bad_request(format!(
                "{policy:?} is not a policy name: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'"
            ))));
        }
    }
    Ok(Scope {
        policy: parsed.policy,
        encoding,
    })
}

/// Encodes an inspect or reset request body (client side).
pub fn encode_scope(policy: Option<&str>, encoding: Encoding) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        policy: &'a str,
    }
    match policy {
        None => Vec::new(),
        Some(policy) => encode_body(&Out { policy }, encoding),
    }
}

/// One limit in an inspect reply.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitReport {
    pub max: u64,
    pub per_ms: u64,
    pub used: u64,
    pub remaining: u64,
    /// Until the limit is whole again, rounded up.
    pub reset_ms: u64,
}

impl From<&LimitState> for LimitReport {
    fn from(l: &LimitState) -> LimitReport {
        LimitReport {
            max: l.max,
            per_ms: l.per.as_u64().div_ceil(1_000_000),
            used: l.used,
            remaining: l.remaining,
            reset_ms: l.reset.as_u64().div_ceil(1_000_000),
        }
    }
}

/// A key's state under one policy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyReport {
    pub policy: String,
    pub algorithm: String,
    /// The limits in force for the key: an override's when one is.
    pub limits: Vec<LimitReport>,
    /// The per-key override in force (SPEC §7), if any.
    #[serde(rename = "override", default, skip_serializing_if = "Option::is_none")]
    pub overridden: Option<OverrideReport>,
    /// The key's live holds under the policy (SPEC §13), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holds: Option<HoldsReport>,
    /// When the key's block under the policy ends (SPEC §18), in ms
    /// since the epoch, rounded up; absent when it is not blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_until: Option<u64>,
    /// Of a global policy (SPEC §12): what each region it holds across
    /// has of the key (`limits` is then the global state they make,
    /// `sluice_core::region::report`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<Vec<RegionReport>>,
}

/// One region's state of a global policy's key.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionReport {
    pub region: String,
    /// It answered (a region cut off from the one asked does not).
    pub reached: bool,
    /// Its own limits of the key: its part or share books, or the home's
    /// count; empty when not reached.
    pub limits: Vec<LimitReport>,
}

/// A key's live holds under one policy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldsReport {
    /// How many are live.
    pub live: u32,
    /// The cost they hold together.
    pub held: u64,
    /// Of them, those that take a concurrency slot, and the policy's
    /// `concurrency` (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<(u32, u32)>,
}

/// An override in force for the key.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideReport {
    /// `max = 0`: every ask is denied.
    pub blocked: bool,
}

/// The reply to `rl.inspect.<key>`: the policies with state for the key
/// (the one asked for, if any), each limit as it stands now.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InspectReply {
    /// The key token, as sent.
    pub key: String,
    pub policies: Vec<PolicyReport>,
}

/// The reply to `rl.reset.<key>`: the policies whose counters for the key
/// were forgotten (none when it had none).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetReply {
    /// The key token, as sent.
    pub key: String,
    pub reset: Vec<String>,
    /// For a key of a global policy (SPEC §12): the other regions the
    /// reset was sent to, each of which forgets its own state of the key
    /// (a region cut off from this one does not get it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
}

impl InspectReply {
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        encode_body(self, encoding)
    }
}

impl ResetReply {
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        encode_body(self, encoding)
    }
}

/// Decodes an inspect or reset reply (client side), whichever encoding.
pub fn decode_admin_reply<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, String> {
    match Encoding::of_body(body) {
        Encoding::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
        Encoding::MsgPack => rmp_serde::from_slice(body).map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ErrorCode, MAX_BODY};

    #[test]
    fn a_scope_is_empty_or_names_a_policy() {
        assert_eq!(decode_scope(b"").unwrap().policy, None);
        let s = decode_scope(br#"{"policy":"login"}"#).unwrap();
        assert_eq!(
            (s.policy.as_deref(), s.encoding),
            (Some("login"), Encoding::Json)
        );
        let packed = encode_scope(Some("login"), Encoding::MsgPack);
        assert_eq!(
            decode_scope(&packed).unwrap().policy.as_deref(),
            Some("login")
        );
        for bad in [
            &br#"{"cost":1}"#[..],
            br#"{"policy":"bad name"}"#,
            br#"{"policy":5}"#,
            b"\xc1",
        ] {
            let e = decode_scope(bad).unwrap_err();
            assert_eq!(e.reply.code, ErrorCode::BadRequest, "{bad:?}");
        }
        assert_eq!(
            decode_scope(&vec![b' '; MAX_BODY + 1])
                .unwrap_err()
                .reply
                .code,
            ErrorCode::TooLarge
        );
    }

    #[test]
    fn replies_round_trip_in_both_encodings() {
        let reply = InspectReply {
            key: "alice".into(),
            policies: vec![PolicyReport {
                regions: None,
                holds: None,
                blocked_until: Some(1_700_000_010_000),
                policy: "login".into(),
                algorithm: "sliding_log".into(),
                limits: vec![LimitReport {
                    max: 10,
                    per_ms: 60_000,
                    used: 3,
                    remaining: 7,
                    reset_ms: 59_000,
                }],
                overridden: None,
            }],
        };
        for encoding in [Encoding::Json, Encoding::MsgPack] {
            let back: InspectReply = decode_admin_reply(&reply.encode(encoding)).unwrap();
            assert_eq!(back, reply);
        }
        let json = String::from_utf8(reply.encode(Encoding::Json)).unwrap();
        assert!(json.contains(r#""per_ms":60000"#), "{json}");
        assert!(json.contains(r#""blocked_until":1700000010000"#), "{json}");
        // Not blocked: no field, and a reply without one reads so.
        let mut plain = reply.clone();
        plain.policies[0].blocked_until = None;
        let json = plain.encode(Encoding::Json);
        assert!(!String::from_utf8_lossy(&json).contains("blocked"));
        assert_eq!(decode_admin_reply::<InspectReply>(&json).unwrap(), plain);
    }
}
