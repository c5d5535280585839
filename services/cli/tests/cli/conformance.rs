//! `docs/conformance/asks.json` is what a real worker answers: the asks of
//! `sluice_core::conformance::asks` sent in order to a fresh worker with
//! the file's config, over the Rust client's connection, and each reply
//! read by the decoder the Rust client uses. The file is compared with
//! what the worker said, so it cannot drift from the worker.
//!
//! After a deliberate change: `SLUICE_WRITE_CONFORMANCE=1 cargo test -p
//! sluice-cli --test conformance` rewrites it; commit it.

use crate::common;

use common::SLUICE;
use sluice_client::{Client, ClientOptions};
use sluice_core::config::Config;
use sluice_core::conformance::{self, check_reply, AskCase, AsksFile, Body, ExpectedReply};
use sluice_core::wire::{decode_reply, Reply};
use sluice_tests::{serial, Stack};
use std::path::PathBuf;
use std::time::Duration;

fn file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(conformance::DIR)
        .join("asks.json")
}

/// The decoded reply agrees with the vector's fields, as the Rust client
/// reads it.
fn decoded_agrees(want: &ExpectedReply, body: &[u8]) -> Result<(), String> {
    let field = |name: &str| want.fields.get(name).cloned();
    match decode_reply(body).map_err(|e| e.to_string())? {
        Reply::Decision(d) => {
            let got = (
                Some(d.allowed.into()),
                Some(d.limit.into()),
                Some(d.remaining.into()),
                Some(d.policy.clone().into()),
                d.blocked,
            );
            let expected = (
                field("allowed"),
                field("limit"),
                field("remaining"),
                field("policy"),
                field("blocked") == Some(true.into()),
            );
            (want.status == 200 && got == expected)
                .then_some(())
                .ok_or(format!("decoded {d:?}"))
        }
        Reply::Error(e) => {
            let got = (
                e.code.status(),
                Some(e.code.word().into()),
                Some(e.message.clone().into()),
            );
            (got == (want.status, field("error"), field("message")))
                .then_some(())
                .ok_or(format!("decoded {e:?}"))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_committed_asks_are_what_a_worker_answers_and_the_rust_client_reads() {
    let _serial = serial().await;
    let stack = Stack::start(SLUICE, conformance::asks::CONFIG, 1).await;
    let config = Config::from_toml(conformance::asks::CONFIG, "asks.toml").unwrap();
    let client = Client::connect_with(
        &stack.nats.url(),
        ClientOptions::from_config(&config).timeout(Duration::from_secs(5)),
    )
    .await
    .expect("the client connects");

    let mut cases = Vec::new();
    let mut wrong = Vec::new();
    for (name, subject, body) in conformance::asks::cases() {
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            client.nats().request(subject.clone(), body.clone().into()),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: no reply within 5 s"))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let headers: Vec<(String, String)> = reply
            .headers
            .iter()
            .flat_map(|h| h.iter())
            .flat_map(|(n, vs)| vs.iter().map(move |v| (n.to_string(), v.to_string())))
            .collect();
        let observed = ExpectedReply::observe(&reply.payload, &headers)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            check_reply(&observed, &reply.payload, &headers),
            Vec::<String>::new()
        );
        if let Err(e) = decoded_agrees(&observed, &reply.payload) {
            wrong.push(format!("{name}: {e}"));
        }
        cases.push(AskCase {
            name: name.to_string(),
            subject,
            body: Body::of(&body),
            reply: observed,
        });
    }
    assert_eq!(
        wrong,
        Vec::<String>::new(),
        "the Rust client's decoder disagrees"
    );

    let generated = AsksFile {
        about: "Requests sent in order to a fresh `sluice worker` running `config`, and the \
                replies it gives: `status` (200 for a decision, else the error's, also in the \
                Nats-Service-Error-Code header), the body's `encoding` and `fields`, and \
                `headers`. `timed` fields and `timed_headers` depend on when the ask ran and \
                fall within their range."
            .into(),
        config: conformance::asks::CONFIG.into(),
        cases,
    };
    let text = serde_json::to_string_pretty(&generated).unwrap() + "\n";
    if std::env::var_os("SLUICE_WRITE_CONFORMANCE").is_some() {
        std::fs::write(file(), &text).expect("docs/conformance is writable");
    }
    let committed = std::fs::read_to_string(file()).unwrap_or_default();
    assert!(
        committed == text,
        "docs/conformance/asks.json is not what a worker answers; run \
         `SLUICE_WRITE_CONFORMANCE=1 cargo test -p sluice-cli --test cli -- conformance::` and commit it"
    );
}
