//! The Rust client against the conformance vectors of `docs/conformance/`
//! (keys, partitions, request bodies), through the functions it sends
//! with; the replies of `asks.json` are read against a real worker in the
//! `sluice` binary's `tests/conformance.rs`. A wrong encoder failing the
//! same checks is shown in `shared/tests/conformance.rs`.

use crate::client::prepare;
use crate::inner::request_body;
use sluice_core::conformance::{
    check_keys, check_partitions, check_requests, KeysFile, PartitionsFile, Refusal, RequestsFile,
    DIR,
};
use sluice_core::partition::partition_of;

fn read<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(DIR)
        .join(name);
    let text = std::fs::read_to_string(&path).expect("the vectors are committed");
    serde_json::from_str(&text).expect("the vectors parse")
}

#[test]
fn keys_are_encoded_or_refused_as_the_vectors_say() {
    let keys: KeysFile = read("keys.json");
    let encode = |key: &[u8]| {
        prepare(key, "default", 1).map_err(|e| Refusal {
            status: e.status(),
            error: e.code().word().to_string(),
            message: e.message().to_string(),
        })
    };
    assert_eq!(check_keys(&keys, encode), Vec::<String>::new());
}

#[test]
fn keys_go_to_the_partitions_the_vectors_say() {
    // The function the client groups asks into batches with.
    let partitions: PartitionsFile = read("partitions.json");
    assert_eq!(
        check_partitions(&partitions, partition_of),
        Vec::<String>::new()
    );
}

#[test]
fn request_bodies_read_as_the_vectors_say() {
    let requests: RequestsFile = read("requests.json");
    let encode =
        |policy: &str, cost: u64, id: Option<&str>| request_body(policy, cost, id).to_vec();
    assert_eq!(check_requests(&requests, encode), Vec::<String>::new());
}
