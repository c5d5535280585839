//! Bodies of `rl.usage.<key>` and `rl.top` (SPEC §9).
//!
//! Operator and dashboard requests, not the hot path: serde in both
//! encodings, as [`super::inspect`] does; an unknown field or a bad value is
//! refused with a sentence, and the reply is in the request's encoding. The
//! checks that need the tiers and the clock (a step that is not a tier,
//! `from_ms > to_ms`, `n` over 1000) are [`crate::usage`]'s.

use super::encoding::Encoding;
use super::error::ErrorReply;
use super::fields::is_valid_policy_name;
use super::request::{encode_body, too_large, RequestError};
use crate::key::{is_printable, key_as_asked, KeyToken};
use crate::usage::{By, Part, TopFilter};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The body of `rl.usage.<key>`: all optional. Default: policy `default`,
/// the last hour, the finest tier that holds `from_ms`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<u64>,
    /// `1m`, `5m`, `1h`, `1d` (the configured tiers' steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// The body of `rl.top`. Default: the last hour, 10 keys, by `used`, every
/// policy, every key.
///
/// Unknown fields are refused (400), so a worker of a release before a
/// field refuses a query that names it rather than answer it as if it
/// had not: a worker from before `group` answers a group's top with
/// "unknown field `group`", never with every key of its partitions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<By>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Only the members of this group (SPEC §17): its token, one key
    /// token (`acme`); ranked are the keys whose first token it is and
    /// which have more (`acme.alice`, `acme.eng.alice`), not the group's
    /// own key `acme`. The whole group lives in one partition, so only
    /// that partition's owner ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

impl TopQuery {
    /// Which keys the query ranks.
    pub fn filter(&self) -> TopFilter<'_> {
        TopFilter {
            policy: self.policy.as_deref(),
            group: self.group.as_deref(),
        }
    }
}

const USAGE_FIELDS: &str = "a usage request is empty or a map with the optional fields \"policy\" (a policy name), \"from_ms\" and \"to_ms\" (milliseconds since the epoch) and \"step\" (\"1m\", \"5m\", \"1h\" or \"1d\")";
const TOP_FIELDS: &str = "a top request is empty or a map with the optional fields \"from_ms\" and \"to_ms\" (milliseconds since the epoch), \"n\" (1 to 1000), \"by\" (\"used\" or \"denied\"), \"policy\" (a policy name) and \"group\" (a group's key token, e.g. \"acme\")";

/// Decodes the body of `rl.usage.<key>`; empty is every default.
pub fn decode_usage_query(body: &[u8]) -> Result<(UsageQuery, Encoding), RequestError> {
    let (query, encoding): (UsageQuery, _) = decode(body, USAGE_FIELDS)?;
    check_policy(query.policy.as_deref(), encoding)?;
    Ok((query, encoding))
}

/// Decodes the body of `rl.top`; empty is every default.
pub fn decode_top_query(body: &[u8]) -> Result<(TopQuery, Encoding), RequestError> {
    let (query, encoding): (TopQuery, _) = decode(body, TOP_FIELDS)?;
    check_policy(query.policy.as_deref(), encoding)?;
    if let Some(group) = &query.group {
        check_group(group).map_err(|message| RequestError {
            encoding,
            reply: ErrorReply::bad_request(message),
        })?;
    }
    Ok((query, encoding))
}

/// Checks a top query's `group`: one key token, in its one spelling
/// (SPEC §1), not a grouped key; the sentence says why not.
pub fn check_group(group: &str) -> Result<(), String> {
    let token = KeyToken::parse(group)
        .map_err(|e| format!("the group {group:?} is not a key token: {e}"))?;
    if token.is_grouped() {
        return Err(format!(
            "the group {group:?} has {} tokens; a group is named by its first token alone (\"acme\" for acme.eng.alice, SPEC §17)",
            token.tokens()
        ));
    }
    Ok(())
}

fn decode<T: DeserializeOwned + Default>(
    body: &[u8],
    fields: &str,
) -> Result<(T, Encoding), RequestError> {
    let encoding = Encoding::of_body(body);
    let refuse = |reply: ErrorReply| RequestError { encoding, reply };
    if let Some(too_large) = too_large(body, "a few query fields") {
        return Err(refuse(too_large));
    }
    if body.is_empty() {
        return Ok((T::default(), encoding));
    }
    let parsed: Result<T, String> = match encoding {
        Encoding::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
        Encoding::MsgPack => rmp_serde::from_slice(body).map_err(|e| e.to_string()),
    };
    parsed
        .map(|q| (q, encoding))
        .map_err(|e| refuse(ErrorReply::bad_request(format!("{fields}: {e}"))))
}

fn check_policy(policy: Option<&str>, encoding: Encoding) -> Result<(), RequestError> {
    match policy {
        Some(p) if !is_valid_policy_name(p) => Err(RequestError {
            encoding,
            reply: ErrorReply::bad_request(format!(
                "{p:?} is not a policy name: 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'"
            )),
        }),
        _ => Ok(()),
    }
}

/// One point of a series: a bucket's start and its counts.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub t_ms: u64,
    pub used: u64,
    pub denied: u64,
}

/// The reply to `rl.usage.<key>`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReply {
    /// The key token, as sent.
    pub key: String,
    pub policy: String,
    /// The step asked for (or chosen): that of the newest part.
    pub step_ms: u64,
    /// Oldest first, one per step of every part.
    pub points: Vec<Point>,
    /// Everything counted before this instant is in the points.
    pub complete_to_ms: u64,
    /// Which step answers which span: more than one when the range is
    /// older than the asked step's tier keeps (each older span comes from
    /// the finest tier that still holds it).
    pub parts: Vec<Part>,
}

impl UsageReply {
    /// What its points add up to.
    pub fn total(&self) -> crate::usage::Counts {
        let mut sum = crate::usage::Counts::default();
        for p in &self.points {
            sum.add(crate::usage::Counts {
                used: p.used,
                denied: p.denied,
            });
        }
        sum
    }
}

/// One key of a top reply.
///
/// `key` is the key as it was asked (`bob@x.io`), for people to read;
/// `key_token` is its token (`bob%40x%2Eio`, SPEC §1), for programs:
/// what `rl.usage.<key>` takes. A key whose bytes are not UTF-8 is shown
/// with U+FFFD in `key`; its token is exact.
///
/// A reply of a worker from before `key_token` carries the token in `key`:
/// such an entry decodes to the same value as a current one.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "TopEntryFields")]
pub struct TopEntry {
    pub key: String,
    pub key_token: String,
    pub policy: String,
    pub used: u64,
    pub denied: u64,
}

impl TopEntry {
    /// The entry of the key whose token is `key_token`.
    pub fn new(key_token: String, policy: String, used: u64, denied: u64) -> TopEntry {
        TopEntry {
            key: key_as_asked(&key_token),
            key_token,
            policy,
            used,
            denied,
        }
    }

    /// Whether [`TopEntry::key`] is the key exactly: its bytes are UTF-8
    /// and it holds no control character, so that printing it as text
    /// shows the key. Otherwise show [`TopEntry::key_token`].
    pub fn key_is_printable(&self) -> bool {
        is_printable(&self.key)
    }

    /// What to show people: the key as asked, or its token when the key is
    /// not printable text (bytes that are not UTF-8, control characters).
    pub fn shown_key(&self) -> &str {
        if self.key_is_printable() {
            &self.key
        } else {
            &self.key_token
        }
    }
}

/// A top entry as it is on the wire, `key_token` missing from older workers.
#[derive(Deserialize)]
struct TopEntryFields {
    key: String,
    #[serde(default)]
    key_token: Option<String>,
    policy: String,
    used: u64,
    denied: u64,
}

impl From<TopEntryFields> for TopEntry {
    fn from(f: TopEntryFields) -> TopEntry {
        match f.key_token {
            Some(key_token) => TopEntry {
                key: f.key,
                key_token,
                policy: f.policy,
                used: f.used,
                denied: f.denied,
            },
            // An older worker: `key` is the token.
            None => TopEntry::new(f.key, f.policy, f.used, f.denied),
        }
    }
}

/// The reply to `rl.top`: the keys with the largest totals in
/// `[from_ms, to_ms)` (the range asked for, aligned to the finest step that
/// holds its start), largest first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopReply {
    pub by: By,
    pub from_ms: u64,
    pub to_ms: u64,
    pub keys: Vec<TopEntry>,
    pub complete_to_ms: u64,
}

impl UsageReply {
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        encode_body(self, encoding)
    }
}

impl TopReply {
    pub fn encode(&self, encoding: Encoding) -> Vec<u8> {
        encode_body(self, encoding)
    }
}

/// Encodes a query body (client side): empty when every field is a default.
pub fn encode_query<T: Serialize + Default + PartialEq>(query: &T, encoding: Encoding) -> Vec<u8> {
    if *query == T::default() {
        return Vec::new();
    }
    encode_body(query, encoding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ErrorCode;

    #[test]
    fn queries_decode_in_both_encodings_and_bad_ones_say_why() {
        let (q, e) = decode_usage_query(b"").unwrap();
        assert_eq!((q, e), (UsageQuery::default(), Encoding::MsgPack));
        let (q, e) = decode_usage_query(br#"{"policy":"login","from_ms":5,"step":"1h"}"#).unwrap();
        assert_eq!(e, Encoding::Json);
        assert_eq!(
            (q.policy.as_deref(), q.from_ms, q.step.as_deref()),
            (Some("login"), Some(5), Some("1h"))
        );
        let packed = encode_query(&q, Encoding::MsgPack);
        assert_eq!(decode_usage_query(&packed).unwrap().0, q);
        let (t, _) = decode_top_query(br#"{"n":3,"by":"denied"}"#).unwrap();
        assert_eq!((t.n, t.by), (Some(3), Some(By::Denied)));
        for bad in [
            &br#"{"cost":1}"#[..],
            br#"{"from_ms":-1}"#,
            br#"{"policy":"no such"}"#,
            br#"{"step":5}"#,
            b"\xc1",
        ] {
            let e = decode_usage_query(bad).unwrap_err();
            assert_eq!(e.reply.code, ErrorCode::BadRequest, "{bad:?}");
        }
        let e = decode_top_query(br#"{"by":"cost"}"#).unwrap_err();
        assert!(e.reply.message.contains("by"), "{}", e.reply.message);
    }

    #[test]
    fn a_groups_top_names_one_key_token_and_old_fields_still_decode() {
        let (t, _) = decode_top_query(br#"{"n":3,"group":"bob%40x"}"#).unwrap();
        assert_eq!(t.group.as_deref(), Some("bob%40x"));
        assert_eq!(t.filter().group, Some("bob%40x"));
        let packed = encode_query(&t, Encoding::MsgPack);
        assert_eq!(decode_top_query(&packed).unwrap().0, t);
        for (bad, says) in [
            (&br#"{"group":"acme.eng"}"#[..], "first token alone"),
            (br#"{"group":"bob@x"}"#, "percent-encode"),
            (br#"{"group":""}"#, "empty"),
            (br#"{"group":"*"}"#, "wildcard"),
        ] {
            let e = decode_top_query(bad).unwrap_err();
            assert_eq!(e.reply.code, ErrorCode::BadRequest);
            assert!(e.reply.message.contains(says), "{}", e.reply.message);
        }
        // Without a group, a query is encoded as before: an older worker
        // reads it.
        let plain = TopQuery {
            n: Some(3),
            ..Default::default()
        };
        assert_eq!(encode_query(&plain, Encoding::Json), br#"{"n":3}"#);
    }

    /// What a worker of the release before `group` did with a group's
    /// top: its `TopQuery` refused unknown fields, so it answered 400,
    /// not every key of its partitions (docs/PROTOCOL.md).
    #[test]
    fn a_worker_without_group_refuses_a_groups_top_in_both_encodings() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Before {
            from_ms: Option<u64>,
            to_ms: Option<u64>,
            n: Option<u64>,
            by: Option<By>,
            policy: Option<String>,
        }
        let query = TopQuery {
            n: Some(5),
            group: Some("acme".into()),
            ..Default::default()
        };
        let json = encode_query(&query, Encoding::Json);
        let e = serde_json::from_slice::<Before>(&json).unwrap_err();
        assert!(e.to_string().contains("unknown field `group`"), "{e}");
        let packed = encode_query(&query, Encoding::MsgPack);
        let e = rmp_serde::from_slice::<Before>(&packed).unwrap_err();
        assert!(e.to_string().contains("unknown field `group`"), "{e}");
    }

    #[test]
    fn a_top_entry_shows_the_key_as_asked_and_keeps_its_token() {
        let entry = TopEntry::new("bob%40x%2Eio".into(), "default".into(), 5, 1);
        assert_eq!(
            (entry.key.as_str(), entry.key_token.as_str()),
            ("bob@x.io", "bob%40x%2Eio")
        );
        assert!(entry.key_is_printable());
        let reply = TopReply {
            by: By::Used,
            from_ms: 0,
            to_ms: 60_000,
            keys: vec![entry],
            complete_to_ms: 60_000,
        };
        let json = reply.encode(Encoding::Json);
        let text = std::str::from_utf8(&json).unwrap();
        assert!(
            text.contains(r#""key":"bob@x.io","key_token":"bob%40x%2Eio""#),
            "{text}"
        );
        for encoding in [Encoding::Json, Encoding::MsgPack] {
            let back: TopReply = match encoding {
                Encoding::Json => serde_json::from_slice(&reply.encode(encoding)).unwrap(),
                Encoding::MsgPack => rmp_serde::from_slice(&reply.encode(encoding)).unwrap(),
            };
            assert_eq!(back, reply);
        }
    }

    #[test]
    fn an_older_workers_top_entry_with_the_token_as_key_still_decodes() {
        let old = br#"{"key":"bob%40x%2Eio","policy":"default","used":5,"denied":1}"#;
        let entry: TopEntry = serde_json::from_slice(old).unwrap();
        assert_eq!(
            entry,
            TopEntry::new("bob%40x%2Eio".into(), "default".into(), 5, 1)
        );
        assert_eq!(entry.key, "bob@x.io");
    }

    #[test]
    fn a_key_that_is_not_utf8_is_shown_lossy_and_not_as_printable() {
        let entry = TopEntry::new("a%FFb".into(), "default".into(), 1, 0);
        assert_eq!(entry.key, "a\u{FFFD}b");
        assert!(!entry.key_is_printable());
        let newline = TopEntry::new("a%0Ab".into(), "default".into(), 1, 0);
        assert_eq!(newline.key, "a\nb");
        assert!(!newline.key_is_printable());
    }
}
