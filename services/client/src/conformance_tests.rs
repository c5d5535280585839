//! The Rust client against the conformance vectors of `docs/conformance/`
//! (keys, partitions, request bodies, and the decisions of its `local`
//! fallback's limiter), through the functions it sends and decides with;
//! the replies of `asks.json` are read against a real worker in the
//! `sluice` binary's `tests/conformance.rs`. A wrong encoder failing the
//! same checks is shown in `shared/tests/conformance.rs`.

use crate::client::prepare;
use crate::inner::request_body;
use crate::local::LocalLimiter;
use sluice_core::ask::Op;
use sluice_core::config::PolicyTable;
use sluice_core::conformance::{
    check_keys, check_partitions, check_paths, check_requests, DecisionsFile, KeysFile,
    PartitionsFile, Refusal, RequestsFile, DIR,
};
use sluice_core::partition::partition_of;
use sluice_core::time::{ManualClock, Nanos};
use std::collections::BTreeMap;
use std::sync::Arc;

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
fn key_paths_are_encoded_or_refused_as_the_vectors_say() {
    let keys: KeysFile = read("keys.json");
    let encode = |tokens: &[Vec<u8>]| {
        crate::KeyPath::new(tokens)
            .map(|path| path.token().to_string())
            .map_err(|e| Refusal {
                status: e.status(),
                error: e.code().word().to_string(),
                message: e.message().to_string(),
            })
    };
    assert_eq!(check_paths(&keys, encode), Vec::<String>::new());
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

#[test]
fn the_local_limiter_decides_every_step_as_the_vectors_say() {
    let file: DecisionsFile = read("decisions.json");
    for case in &file.cases {
        let table = serde_json::to_vec(&case.policy).unwrap();
        let policy = PolicyTable::from_json(&table)
            .and_then(|t| t.to_policy("p"))
            .unwrap();
        let clock = ManualClock::new(Nanos(case.steps[0].at));
        let local = LocalLimiter::new(
            BTreeMap::from([("p".into(), policy)]),
            Arc::new(clock.clone()),
        );
        for (i, step) in case.steps.iter().enumerate() {
            clock.set(Nanos(step.at));
            let op = match step.op.as_str() {
                "record" => Op::Record(step.cost),
                _ => Op::Allow(step.cost).waiting(step.within_ns / 1_000_000),
            };
            let a = local.decide("key", "p", op).unwrap();
            let got = (
                a.allowed,
                a.limit,
                a.remaining,
                Nanos::from(a.reset).0,
                Nanos::from(a.retry_after).0,
                a.shadow_denied,
                Nanos::from(a.wait).0,
            );
            let want = (
                step.allowed,
                step.limit,
                step.remaining,
                step.reset_ns,
                step.retry_after_ns,
                step.shadow_denied,
                step.wait_ns,
            );
            assert_eq!(got, want, "{}, step {i}", case.name);
        }
    }
}
