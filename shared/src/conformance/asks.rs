//! `asks.json`: requests as a client sends them over NATS, and the replies
//! a real worker gives, bodies and headers, errors included.
//!
//! Unlike the other files these come from a worker (the `sluice` binary's
//! `tests/conformance.rs` runs [`cases`] against a fresh one with
//! [`CONFIG`] and records what it answers with [`ExpectedReply::observe`]),
//! because the worker, not a function, is the reference. Numbers that
//! depend on when the ask ran (`reset_ms`, `retry_after_ms`,
//! `RateLimit-Reset`, `Retry-After`) are recorded as a [`Range`]; every
//! policy of [`CONFIG`] counts per hour, so they sit within a minute of it.

use super::body::{hex, Body};
use crate::wire::SERVICE_ERROR_CODE;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The config the worker runs with. Every window is an hour long, so a
/// run never sees one end.
pub const CONFIG: &str = r#"partitions = 16

[policies.default]
algorithm = "sliding_log"
limits = [ { max = 3, per = "1h" } ]

[policies.login]
algorithm = "sliding_log"
limits = [ { max = 5, per = "1h" } ]

[policies.strict]
algorithm = "sliding_log"
block_for = "1h"
limits = [ { max = 1, per = "1h" } ]

[policies.org]
algorithm = "sliding_log"
limits = [ { max = 2, per = "1h" } ]

[policies.member]
algorithm = "sliding_log"
parent = "org"
limits = [ { max = 5, per = "1h" } ]
"#;

const WINDOW_MS: u64 = 3_600_000;
/// How long a run may take: the slack of a [`Range`].
const RUN_MS: u64 = 60_000;

/// Reply fields that depend on when the ask ran.
const TIMED_FIELDS: [&str; 3] = ["reset_ms", "retry_after_ms", "expires_ms"];
/// The one reply field that is a list (SPEC §17): its items' fields are
/// named by path, `levels.0.policy`, so that each may be timed or exact.
const LEVELS: &str = "levels";
/// Headers that do (whole seconds).
const TIMED_HEADERS: [&str; 2] = ["RateLimit-Reset", "Retry-After"];

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsksFile {
    pub about: String,
    /// The worker's config (`sluice.toml`); the cases need a fresh one.
    pub config: String,
    pub cases: Vec<AskCase>,
}

/// One request, sent in order after the ones before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskCase {
    pub name: String,
    pub subject: String,
    pub body: Body,
    pub reply: ExpectedReply,
}

/// What the worker answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedReply {
    /// 200 for a decision; else the error's status (`Nats-Service-Error-Code`).
    pub status: u16,
    /// `json` or `msgpack`: the encoding of the reply body.
    pub encoding: String,
    /// Body fields with their exact values.
    pub fields: BTreeMap<String, Value>,
    /// Body fields whose value depends on the time: within a range.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timed: BTreeMap<String, Range>,
    /// Headers with their exact values.
    pub headers: BTreeMap<String, String>,
    /// Headers whose value depends on the time: within a range.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timed_headers: BTreeMap<String, Range>,
}

/// An inclusive range of numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub at_least: u64,
    pub at_most: u64,
}

impl Range {
    fn contains(self, n: u64) -> bool {
        self.at_least <= n && n <= self.at_most
    }
}

/// The requests, in order: (name, subject, body).
pub fn cases() -> Vec<(&'static str, String, Vec<u8>)> {
    let allow = |token: &str| format!("rl.allow.{token}");
    let json = |s: &str| s.as_bytes().to_vec();
    vec![
        (
            "an empty body: policy default, cost 1",
            allow("conf-a"),
            vec![],
        ),
        (
            "JSON in, JSON out",
            allow("conf-b"),
            json(r#"{"policy":"login","cost":2}"#),
        ),
        (
            "MessagePack in, MessagePack out",
            allow("conf-c"),
            b"\x82\xa6policy\xa5login\xa4cost\x03".to_vec(),
        ),
        (
            "a peek counts nothing",
            allow("conf-c"),
            json(r#"{"policy":"login","cost":0}"#),
        ),
        ("an encoded key", allow("bob%40x%2Eio"), vec![]),
        (
            "the whole limit at once",
            allow("conf-d"),
            json(r#"{"cost":3}"#),
        ),
        ("denied, with Retry-After", allow("conf-d"), vec![]),
        (
            "a peek of a used-up key",
            allow("conf-d"),
            json(r#"{"cost":0}"#),
        ),
        (
            "an ask named by an id",
            allow("conf-e"),
            json(r#"{"id":"order-7"}"#),
        ),
        (
            "the same id again: a repeat",
            allow("conf-e"),
            json(r#"{"id":"order-7"}"#),
        ),
        (
            "the same id, another cost",
            allow("conf-e"),
            json(r#"{"id":"order-7","cost":2}"#),
        ),
        (
            "a hit with a reply: a peek after it",
            "rl.hit.conf-f".into(),
            json(r#"{"cost":2}"#),
        ),
        (
            "a hit past the limit still counts",
            "rl.hit.conf-f".into(),
            json(r#"{"cost":2}"#),
        ),
        (
            "an unknown policy",
            allow("conf-g"),
            json(r#"{"policy":"nope"}"#),
        ),
        (
            "a cost the policy never allows",
            allow("conf-g"),
            json(r#"{"cost":4}"#),
        ),
        ("an unknown field", allow("conf-g"), json(r#"{"cots":5}"#)),
        (
            "under block_for, the one unit of the hour",
            allow("conf-h"),
            json(r#"{"policy":"strict"}"#),
        ),
        (
            "a denial under block_for blocks the key: blocked, Retry-After the block's",
            allow("conf-h"),
            json(r#"{"policy":"strict"}"#),
        ),
        (
            "while blocked, a peek is denied too",
            allow("conf-h"),
            json(r#"{"policy":"strict","cost":0}"#),
        ),
        (
            "an error in MessagePack",
            allow("conf-g"),
            b"hello".to_vec(),
        ),
        (
            "a body over 4096 bytes",
            allow("conf-g"),
            super::cases::too_large(),
        ),
        ("an unencoded byte in the token", allow("bob@x"), vec![]),
        (
            "lower-case hex: another spelling",
            allow("bob%40x%2eio"),
            vec![],
        ),
        (
            "a needless escape: another spelling",
            allow("%61lice"),
            vec![],
        ),
        ("a token over 256 bytes", allow(&"a".repeat(257)), vec![]),
    ]
    .into_iter()
    .chain(grouped_cases())
    .collect()
}

/// The requests of grouped keys (SPEC §17), after the others.
fn grouped_cases() -> Vec<(&'static str, String, Vec<u8>)> {
    let allow = |token: &str| format!("rl.allow.{token}");
    let json = |s: &str| s.as_bytes().to_vec();
    vec![
        (
            "a grouped key: decided at every level, each listed",
            allow("conf-org.alice"),
            json(r#"{"policy":"member"}"#),
        ),
        (
            "another member takes the organisation's last unit",
            allow("conf-org.bob"),
            json(r#"{"policy":"member"}"#),
        ),
        (
            "denied by the organisation's level: denied_by, nothing taken",
            allow("conf-org.carol"),
            json(r#"{"policy":"member"}"#),
        ),
        (
            "a grouped key under a policy of more levels than it has tokens",
            allow("conf-org"),
            json(r#"{"policy":"member"}"#),
        ),
    ]
}

impl ExpectedReply {
    /// A reply as it came, with the numbers that depend on time as ranges.
    pub fn observe(body: &[u8], headers: &[(String, String)]) -> Result<ExpectedReply, String> {
        let (encoding, map) = decode(body)?;
        let mut fields = BTreeMap::new();
        let mut timed = BTreeMap::new();
        let mut named = Vec::new();
        for (name, value) in map {
            match value {
                Value::Array(levels) if name == LEVELS => {
                    for (i, level) in levels.into_iter().enumerate() {
                        let Value::Object(level) = level else {
                            return Err(format!("{LEVELS}.{i} is not a map"));
                        };
                        named.extend(
                            level
                                .into_iter()
                                .map(|(k, v)| (format!("{LEVELS}.{i}.{k}"), v)),
                        );
                    }
                }
                value => named.push((name, value)),
            }
        }
        for (name, value) in named {
            let last = name.rsplit('.').next().unwrap_or(&name);
            match value.as_u64() {
                Some(n) if n > 0 && TIMED_FIELDS.contains(&last) => {
                    timed.insert(name, within(n, WINDOW_MS, RUN_MS)?);
                }
                _ => {
                    fields.insert(name, value);
                }
            }
        }
        let mut exact = BTreeMap::new();
        let mut timed_headers = BTreeMap::new();
        for (name, value) in headers {
            match value.parse::<u64>() {
                Ok(n) if n > 0 && TIMED_HEADERS.contains(&name.as_str()) => {
                    timed_headers.insert(name.clone(), within(n, WINDOW_MS / 1000, RUN_MS / 1000)?);
                }
                _ => {
                    exact.insert(name.clone(), value.clone());
                }
            }
        }
        Ok(ExpectedReply {
            status: status(headers)?,
            encoding: encoding.into(),
            fields,
            timed,
            headers: exact,
            timed_headers,
        })
    }
}

/// The range a timed number falls in, or why it does not fit one.
fn within(n: u64, window: u64, slack: u64) -> Result<Range, String> {
    let range = Range {
        at_least: window - slack,
        at_most: window,
    };
    if range.contains(n) {
        Ok(range)
    } else {
        Err(format!(
            "{n} is not within {slack} of the window {window}: did the run take that long?"
        ))
    }
}

fn status(headers: &[(String, String)]) -> Result<u16, String> {
    match headers.iter().find(|(name, _)| name == SERVICE_ERROR_CODE) {
        None => Ok(200),
        Some((_, code)) => code
            .parse()
            .map_err(|_| format!("{SERVICE_ERROR_CODE} is not a status: {code:?}")),
    }
}

fn decode(body: &[u8]) -> Result<(&'static str, serde_json::Map<String, Value>), String> {
    let (encoding, value) = if body.first() == Some(&b'{') {
        (
            "json",
            serde_json::from_slice::<Value>(body).map_err(|e| e.to_string()),
        )
    } else {
        (
            "msgpack",
            rmp_serde::from_slice::<Value>(body).map_err(|e| e.to_string()),
        )
    };
    match value {
        Ok(Value::Object(map)) => Ok((encoding, map)),
        Ok(other) => Err(format!("the reply is not a map: {other}")),
        Err(e) => Err(format!("the reply {} is not {encoding}: {e}", hex(body))),
    }
}

/// The field `name` of a reply: a top-level field, or a path into a list
/// (`levels.0.policy`).
fn field<'a>(map: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a Value> {
    let mut parts = name.split('.');
    let mut at = map.get(parts.next()?)?;
    for part in parts {
        at = match part.parse::<usize>() {
            Ok(i) => at.get(i)?,
            Err(_) => at.get(part)?,
        };
    }
    Some(at)
}

/// What is wrong with a reply against its vector, one sentence each
/// (nothing: it conforms). Fields and headers the vector does not name are
/// not looked at: replies grow by adding fields.
pub fn check_reply(want: &ExpectedReply, body: &[u8], headers: &[(String, String)]) -> Vec<String> {
    let mut wrong = Vec::new();
    let (encoding, map) = match decode(body) {
        Ok(decoded) => decoded,
        Err(e) => return vec![e],
    };
    if encoding != want.encoding {
        wrong.push(format!("the reply is {encoding}, not {}", want.encoding));
    }
    match status(headers) {
        Ok(got) if got == want.status => {}
        got => wrong.push(format!("status {got:?}, not {}", want.status)),
    }
    for (name, value) in &want.fields {
        let got = field(&map, name);
        if got != Some(value) {
            wrong.push(format!("{name} is {got:?}, not {value}"));
        }
    }
    for (name, range) in &want.timed {
        match field(&map, name).and_then(Value::as_u64) {
            Some(n) if range.contains(n) => {}
            got => wrong.push(format!("{name} is {got:?}, not within {range:?}")),
        }
    }
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    for (name, value) in &want.headers {
        if header(name) != Some(value) {
            wrong.push(format!(
                "header {name} is {:?}, not {value:?}",
                header(name)
            ));
        }
    }
    for (name, range) in &want.timed_headers {
        match header(name).and_then(|v| v.parse::<u64>().ok()) {
            Some(n) if range.contains(n) => {}
            _ => wrong.push(format!(
                "header {name} is {:?}, not within {range:?}",
                header(name)
            )),
        }
    }
    wrong
}
