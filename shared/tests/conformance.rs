//! The committed conformance vectors (`docs/conformance/`) are the ones
//! `sluice_core::conformance` generates from the code, and the checks they
//! come with catch a client that gets them wrong.
//!
//! After a deliberate change: `SLUICE_WRITE_CONFORMANCE=1 cargo test -p
//! sluice-core --test conformance` rewrites the files; commit them.

use serde::Serialize;
use sluice_core::conformance::{
    self, bad_request, check_keys, check_partitions, check_paths, check_requests, KeysFile,
    PartitionsFile, Refusal, RequestsFile,
};
use sluice_core::key::{try_encode_key, try_encode_path};
use sluice_core::partition::partition_of;
use sluice_core::wire::{encode_request_with_id, Encoding, ErrorReply, DEFAULT_COST};
use std::path::PathBuf;

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(conformance::DIR)
        .join(name)
}

/// Fails when `name` is not `generated` (rewriting it first when asked to).
fn committed_is_generated(name: &str, generated: &impl Serialize) {
    let text = serde_json::to_string_pretty(generated).unwrap() + "\n";
    let file = path(name);
    if std::env::var_os("SLUICE_WRITE_CONFORMANCE").is_some() {
        std::fs::write(&file, &text).expect("docs/conformance is writable");
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        committed == text,
        "{} is not what sluice_core::conformance generates; run \
         `SLUICE_WRITE_CONFORMANCE=1 cargo test -p sluice-core --test conformance` and commit it",
        file.display()
    );
}

fn read<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let text = std::fs::read_to_string(path(name)).expect("the vectors are committed");
    serde_json::from_str(&text).expect("the vectors parse")
}

#[test]
fn the_committed_keys_are_the_generated_ones() {
    committed_is_generated("keys.json", &conformance::keys_file());
}

#[test]
fn the_committed_partitions_are_the_generated_ones() {
    committed_is_generated("partitions.json", &conformance::partitions_file());
}

#[test]
fn the_committed_requests_are_the_generated_ones() {
    committed_is_generated("requests.json", &conformance::requests_file());
}

#[test]
fn the_committed_decisions_are_the_generated_ones() {
    committed_is_generated("decisions.json", &conformance::decisions_file());
}

fn core_encoder(key: &[u8]) -> Result<String, Refusal> {
    try_encode_key(key).map_err(|e| Refusal::from(&ErrorReply::from(e)))
}

fn path_encoder(tokens: &[Vec<u8>]) -> Result<String, Refusal> {
    let tokens: Vec<&[u8]> = tokens.iter().map(Vec::as_slice).collect();
    try_encode_path(&tokens).map_err(|e| Refusal::from(&ErrorReply::from(e)))
}

/// A key path joined first and encoded as one key: its '.' is encoded
/// too, so the worker reads one plain key; a path with too many tokens
/// is not refused either.
#[test]
fn a_path_encoded_as_one_key_fails_the_path_vectors() {
    let keys: KeysFile = read("keys.json");
    let joined = |tokens: &[Vec<u8>]| core_encoder(&tokens.join(&b'.'));
    let failures = check_paths(&keys, joined);
    assert!(
        failures
            .iter()
            .any(|f| f.starts_with("an organisation and a key")),
        "{failures:?}"
    );
    assert!(
        failures.iter().any(|f| f.starts_with("four tokens")),
        "{failures:?}"
    );
    // Hashing a grouped key's whole token, not its first token.
    let partitions: PartitionsFile = read("partitions.json");
    let whole = |token: &str, n: u32| sluice_core::partition::fnv1a32(token.as_bytes()) % n;
    let failures = check_partitions(&partitions, whole);
    assert!(
        failures.iter().any(|f| f.starts_with("\"acme.alice\"")),
        "{failures:?}"
    );
}

#[test]
fn the_cores_own_functions_pass_every_vector() {
    let keys: KeysFile = read("keys.json");
    assert_eq!(check_keys(&keys, core_encoder), Vec::<String>::new());
    assert_eq!(check_paths(&keys, path_encoder), Vec::<String>::new());
    let partitions: PartitionsFile = read("partitions.json");
    assert_eq!(
        check_partitions(&partitions, partition_of),
        Vec::<String>::new()
    );
    let requests: RequestsFile = read("requests.json");
    let encode = |policy: &str, cost: u64, id: Option<&str>| {
        let policy = (policy != "default").then_some(policy);
        let cost = (cost != DEFAULT_COST).then_some(cost);
        encode_request_with_id(policy, cost, id, Encoding::MsgPack)
    };
    assert_eq!(check_requests(&requests, encode), Vec::<String>::new());
}

/// The mistakes a hand-written client makes fail the vectors, each named.
#[test]
fn a_wrong_key_encoding_fails_the_vectors() {
    let keys: KeysFile = read("keys.json");
    let lower_hex = |key: &[u8]| -> Result<String, Refusal> {
        core_encoder(key).map(|t| {
            // %2E → %2e: the server hashes the other spelling elsewhere.
            let mut out = String::new();
            let mut hex_digits_left = 0;
            for c in t.chars() {
                if hex_digits_left > 0 {
                    out.push(c.to_ascii_lowercase());
                    hex_digits_left -= 1;
                } else {
                    hex_digits_left = if c == '%' { 2 } else { 0 };
                    out.push(c);
                }
            }
            out
        })
    };
    let failures = check_keys(&keys, lower_hex);
    assert!(
        failures.iter().any(|f| f.starts_with("an email")),
        "{failures:?}"
    );
    assert!(
        !failures.iter().any(|f| f.starts_with("plain")),
        "{failures:?}"
    );

    // Escaping the '%' sign only, as a URL-style "safe" set might not.
    let keeps_percent = |key: &[u8]| -> Result<String, Refusal> {
        let token: String = key
            .iter()
            .map(|&b| match b {
                b'%' => "%".to_string(),
                b if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' => (b as char).to_string(),
                b => format!("%{b:02X}"),
            })
            .collect();
        Ok(token)
    };
    let failures = check_keys(&keys, keeps_percent);
    assert!(
        failures.iter().any(|f| f.starts_with("a percent sign")),
        "{failures:?}"
    );
    assert!(
        failures.iter().any(|f| f.starts_with("the empty key")),
        "{failures:?}"
    );

    // The bound checked on the key's bytes instead of its encoded token.
    let bound_on_bytes = |key: &[u8]| -> Result<String, Refusal> {
        if key.is_empty() || key.len() > 256 {
            return Err(bad_request("bad key"));
        }
        Ok(sluice_core::key::encode_key(key))
    };
    let failures = check_keys(&keys, bound_on_bytes);
    assert!(
        failures.iter().any(|f| f.starts_with("86 escapes")),
        "{failures:?}"
    );
}

#[test]
fn a_wrong_hash_fails_the_partition_vectors() {
    let partitions: PartitionsFile = read("partitions.json");
    // FNV-1 (multiply, then XOR) instead of FNV-1a.
    let fnv1 = |token: &str, n: u32| {
        let h = token.bytes().fold(0x811c_9dc5u32, |h, b| {
            h.wrapping_mul(0x0100_0193) ^ u32::from(b)
        });
        h % n
    };
    assert!(!check_partitions(&partitions, fnv1).is_empty());
    // Hashing the key instead of its token.
    let decoded = |token: &str, n: u32| {
        let key = sluice_core::key::decode_key(token).unwrap_or_default();
        sluice_core::partition::fnv1a32(&key) % n
    };
    let failures = check_partitions(&partitions, decoded);
    assert!(
        failures.iter().any(|f| f.starts_with("\"bob%40x%2Eio\"")),
        "{failures:?}"
    );
}

#[test]
fn a_body_that_drops_a_field_fails_the_request_vectors() {
    let requests: RequestsFile = read("requests.json");
    let no_cost = |policy: &str, _cost: u64, id: Option<&str>| {
        encode_request_with_id(Some(policy), None, id, Encoding::MsgPack)
    };
    let failures = check_requests(&requests, no_cost);
    assert!(
        failures.iter().any(|f| f.starts_with("a peek")),
        "{failures:?}"
    );
}
