//! Conformance vectors: what a NATS client must compute exactly as sluice
//! does, as data any language can read (`docs/conformance/*.json`).
//!
//! A hand-written client has to percent-encode keys one way only (a wrong
//! spelling splits one user's limit in two), hash them to partitions as
//! nats-server does (batches bypass the server's mapping) and read bodies
//! and headers. Prose alone lets such a client drift; vectors let it prove
//! itself. Every vector here is *generated* from the code the workers and
//! the Rust client run ([`crate::key`], [`crate::partition`],
//! [`crate::wire`], [`crate::policy`] for `decisions.json`), and
//! `shared/tests/conformance.rs` fails when a committed file is no longer
//! what this module generates, so the files cannot drift from the code
//! either. (The replies a real worker gives, `asks.json`, need a worker
//! and are recorded by the `sluice` binary's tests,
//! `services/cli/tests/cli/conformance.rs`, with [`ExpectedReply::observe`].)
//! `docs/conformance/README.md` says how a client uses them.
//!
//! The checks ([`check_keys`], [`check_paths`], [`check_partitions`],
//! [`check_requests`])
//! take the client's own function and return one sentence per vector it
//! gets wrong, so a test can also show that a wrong encoder fails them.

pub mod asks;
mod body;
mod cases;
mod decisions;

pub use asks::{check_reply, AskCase, AsksFile, ExpectedReply, Range};
pub use body::{hex, unhex, Body};
pub use decisions::{decisions_file, DecisionCase, DecisionsFile, Step};

use crate::key::{try_encode_key, try_encode_path, KeyToken, MAX_TOKEN_LEN};
use crate::partition::{fnv1a32, hashed_part, partition_of};
use crate::wire::{decode_request, Encoding, ErrorReply};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where the files are, from the repository's root.
pub const DIR: &str = "docs/conformance";

/// The partition counts every token's partition is given for.
pub const PARTITION_COUNTS: [u32; 7] = [1, 2, 3, 16, 64, 100, 1024];

/// A refusal: the status, the error word and the reference sentence (a
/// client may word its own refusals differently; status and word must match).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub status: u16,
    pub error: String,
    pub message: String,
}

impl From<&ErrorReply> for Refusal {
    fn from(e: &ErrorReply) -> Refusal {
        Refusal {
            status: e.code.status(),
            error: e.code.word().to_string(),
            message: e.message.clone(),
        }
    }
}

/// `keys.json`: keys (any bytes) and their one token, or the client's refusal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysFile {
    pub about: String,
    pub max_token_len: usize,
    pub keys: Vec<KeyCase>,
    /// Tokens as a worker reads them in a subject: accepted, or refused.
    pub tokens: Vec<TokenCase>,
    /// Grouped keys (SPEC §17): key paths and their one subject token, or
    /// the client's refusal.
    #[serde(default)]
    pub paths: Vec<PathCase>,
}

/// A key path (an organisation, maybe a team, and a key: each any bytes)
/// and what a client sends for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathCase {
    pub name: String,
    /// Each token's bytes, in hex, outermost first: the input.
    pub tokens_hex: Vec<String>,
    /// Its subject token (each token encoded, joined by `.`).
    #[serde(default)]
    pub token: Option<String>,
    /// Else what a client must refuse it with before sending.
    #[serde(default)]
    pub refusal: Option<Refusal>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCase {
    pub name: String,
    /// The key's bytes, in hex: the input.
    pub key_hex: String,
    /// The same bytes as text, when they are UTF-8 (for people).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Its token, when a client must send it.
    #[serde(default)]
    pub token: Option<String>,
    /// Else what a client must refuse it with before sending.
    #[serde(default)]
    pub refusal: Option<Refusal>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCase {
    pub name: String,
    pub token: String,
    /// The key the token stands for, in hex, when a worker accepts it.
    #[serde(default)]
    pub key_hex: Option<String>,
    /// Else the 400 a worker answers it with.
    #[serde(default)]
    pub refusal: Option<Refusal>,
}

/// `partitions.json`: each token's FNV-1a 32 and its partition for
/// several partition counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionsFile {
    pub about: String,
    pub cases: Vec<PartitionCase>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionCase {
    pub token: String,
    pub fnv1a32: u32,
    /// Partition count → partition.
    pub partition: BTreeMap<u32, u32>,
}

/// `requests.json`: ask bodies and what a worker reads in them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestsFile {
    pub about: String,
    pub cases: Vec<RequestCase>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCase {
    pub name: String,
    pub body: Body,
    /// `json` or `msgpack`: how the reply, an error reply too, is encoded.
    pub reply_encoding: String,
    /// The fields a worker reads, when it accepts the body.
    #[serde(default)]
    pub accepted: Option<Accepted>,
    /// Else the error it answers (with no counter changed).
    #[serde(default)]
    pub refusal: Option<Refusal>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    pub policy: String,
    pub cost: u64,
    pub id: Option<String>,
}

/// The three generated files, as this code makes them.
pub fn keys_file() -> KeysFile {
    KeysFile {
        about: "Keys and their one NATS subject token (docs/PROTOCOL.md §1): bytes in \
                [A-Za-z0-9_-] as they are, every other byte %XX in upper-case hex, 1 to 256 \
                bytes once encoded. `keys`: what a client sends for each key, or refuses \
                before sending. `tokens`: what a worker accepts in a subject. `paths`: \
                grouped keys (SPEC §17), 1 to 3 tokens outermost first, each encoded as a \
                key and joined by '.', or the client's refusal."
            .into(),
        max_token_len: MAX_TOKEN_LEN,
        keys: cases::keys()
            .into_iter()
            .map(|(name, key)| key_case(name, &key))
            .collect(),
        tokens: cases::tokens()
            .into_iter()
            .map(|(name, token)| token_case(name, &token))
            .collect(),
        paths: cases::paths()
            .into_iter()
            .map(|(name, tokens)| path_case(name, &tokens))
            .collect(),
    }
}

fn path_case(name: &str, tokens: &[&[u8]]) -> PathCase {
    let encoded = try_encode_path(tokens);
    PathCase {
        name: name.to_string(),
        tokens_hex: tokens.iter().map(|t| hex(t)).collect(),
        refusal: encoded
            .as_ref()
            .err()
            .map(|e| Refusal::from(&ErrorReply::from(e.clone()))),
        token: encoded.ok(),
    }
}

fn key_case(name: &str, key: &[u8]) -> KeyCase {
    let encoded = try_encode_key(key);
    KeyCase {
        name: name.to_string(),
        key_hex: hex(key),
        key: std::str::from_utf8(key).ok().map(str::to_string),
        refusal: encoded
            .as_ref()
            .err()
            .map(|e| Refusal::from(&ErrorReply::from(e.clone()))),
        token: encoded.ok(),
    }
}

fn token_case(name: &str, token: &str) -> TokenCase {
    let parsed = KeyToken::parse(token);
    TokenCase {
        name: name.to_string(),
        token: token.to_string(),
        key_hex: parsed.as_ref().ok().map(|t| hex(&t.decode())),
        refusal: parsed.err().map(|e| Refusal::from(&ErrorReply::from(e))),
    }
}

pub fn partitions_file() -> PartitionsFile {
    let keys = keys_file();
    let mut tokens: Vec<String> = keys.keys.into_iter().filter_map(|k| k.token).collect();
    tokens.extend(cases::partition_tokens().iter().map(|t| t.to_string()));
    tokens.extend(keys.paths.into_iter().filter_map(|p| p.token));
    tokens.dedup();
    PartitionsFile {
        about: "The partition nats-server's {{partition(N,1)}} maps a key token to: FNV-1a 32 \
                of the token's bytes (the encoded token, not the key) mod N \
                (docs/PROTOCOL.md §6), for each N in `partition`. A grouped key's token \
                (SPEC §17, `acme.alice`) goes by its first token alone: `fnv1a32` is that \
                first token's."
            .into(),
        cases: tokens
            .into_iter()
            .map(|token| PartitionCase {
                fnv1a32: fnv1a32(hashed_part(&token)),
                partition: PARTITION_COUNTS
                    .iter()
                    .map(|&n| (n, partition_of(&token, n)))
                    .collect(),
                token,
            })
            .collect(),
    }
}

pub fn requests_file() -> RequestsFile {
    RequestsFile {
        about: "Bodies of rl.allow.<key> and rl.hit.<key> (docs/PROTOCOL.md §2) and what a \
                worker reads in them: the policy, cost and id it accepts, or the error it \
                answers, in `reply_encoding`. A client's own body for an accepted case's \
                fields must read the same."
            .into(),
        cases: cases::requests()
            .into_iter()
            .map(|(name, body)| request_case(name, &body))
            .collect(),
    }
}

fn request_case(name: &str, body: &[u8]) -> RequestCase {
    let word = |e: Encoding| match e {
        Encoding::Json => "json",
        Encoding::MsgPack => "msgpack",
    };
    let (reply_encoding, accepted, refusal) = match decode_request(body) {
        Ok(r) => (
            word(r.encoding),
            Some(Accepted {
                policy: r.policy.into_owned(),
                cost: r.cost,
                id: r.id.map(|id| id.into_owned()),
            }),
            None,
        ),
        Err(e) => (word(e.encoding), None, Some(Refusal::from(&e.reply))),
    };
    RequestCase {
        name: name.to_string(),
        body: Body::of(body),
        reply_encoding: reply_encoding.to_string(),
        accepted,
        refusal,
    }
}

/// The vectors `encode` (a client's key encoder: a token, or its refusal)
/// gets wrong, one sentence each. A refusal must have the status and the
/// error word of the vector; its sentence may be the client's own.
pub fn check_keys(
    file: &KeysFile,
    encode: impl Fn(&[u8]) -> Result<String, Refusal>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in &file.keys {
        let Some(key) = unhex(&case.key_hex) else {
            wrong.push(format!("{}: bad hex {:?}", case.name, case.key_hex));
            continue;
        };
        let got = encode(&key);
        if !as_vector_says(&got, &case.token, &case.refusal) {
            let want = match (&case.token, &case.refusal) {
                (Some(t), _) => format!("token {t:?}"),
                (None, Some(r)) => format!("refusal {} {}", r.status, r.error),
                (None, None) => "a token or a refusal".into(),
            };
            wrong.push(format!("{}: want {want}, got {got:?}", case.name));
        }
    }
    wrong
}

/// Whether a client's encoding `got` is the vector's token, or a refusal
/// of the vector's status and word.
fn as_vector_says(
    got: &Result<String, Refusal>,
    token: &Option<String>,
    refusal: &Option<Refusal>,
) -> bool {
    match (got, token, refusal) {
        (Ok(got), Some(want), _) => got == want,
        (Err(r), None, Some(want)) => r.status == want.status && r.error == want.error,
        _ => false,
    }
}

/// The path vectors a client's encoder (`encode(tokens)`) gets wrong: a
/// token where the vector says refuse, or a refusal of another status or
/// word.
pub fn check_paths(
    file: &KeysFile,
    encode: impl Fn(&[Vec<u8>]) -> Result<String, Refusal>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in &file.paths {
        let Some(tokens) = case
            .tokens_hex
            .iter()
            .map(|t| unhex(t))
            .collect::<Option<Vec<_>>>()
        else {
            wrong.push(format!("{}: bad hex {:?}", case.name, case.tokens_hex));
            continue;
        };
        let got = encode(&tokens);
        if !as_vector_says(&got, &case.token, &case.refusal) {
            wrong.push(format!(
                "{}: want {:?} / {:?}, got {got:?}",
                case.name, case.token, case.refusal
            ));
        }
    }
    wrong
}

/// The vectors `partition_of` (token, count → partition) gets wrong.
pub fn check_partitions(
    file: &PartitionsFile,
    partition: impl Fn(&str, u32) -> u32,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in &file.cases {
        for (&n, &want) in &case.partition {
            let got = partition(&case.token, n);
            if got != want {
                wrong.push(format!(
                    "{:?} with {n} partitions: want {want}, got {got}",
                    case.token
                ));
            }
        }
    }
    wrong
}

/// The accepted vectors for which a client's body (`encode(policy, cost,
/// id)`) is not read by a worker as the same fields.
pub fn check_requests(
    file: &RequestsFile,
    encode: impl Fn(&str, u64, Option<&str>) -> Vec<u8>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in &file.cases {
        let Some(want) = &case.accepted else {
            continue;
        };
        let body = encode(&want.policy, want.cost, want.id.as_deref());
        match decode_request(&body) {
            Ok(r)
                if r.policy == want.policy
                    && r.cost == want.cost
                    && r.id.as_deref() == want.id.as_deref() => {}
            got => wrong.push(format!(
                "{}: the body {} reads as {got:?}",
                case.name,
                hex(&body)
            )),
        }
    }
    wrong
}

/// The error word of a refusal a client makes before sending (always 400).
pub fn bad_request(message: impl Into<String>) -> Refusal {
    Refusal::from(&ErrorReply::bad_request(message))
}
