//! The batch format of the batching client: items, budgets and grants,
//! refusals item by item and as a whole, batch replies.

use super::{allowed, denied, hex, msgpack, round_trip, Ordered};
use serde_json::{json, Value as Json};
use sluice_core::key::KeyToken;
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;
use sluice_core::wire::{
    batch, decode_reply, DecisionReply, Encoding, ErrorCode, ErrorReply, Reply, MAX_COST,
};
use std::borrow::Cow;

fn item<'a>(key: &'a str, policy: &'a str, cost: u64) -> batch::Item<'a> {
    batch::Item {
        key: KeyToken::parse(key).unwrap(),
        policy: Cow::Borrowed(policy),
        cost,
        id: None,
        act: Default::default(),
    }
}

#[test]
fn budget_items_and_grants_round_trip_and_the_reply_bytes_are_rmp_serdes() {
    use sluice_core::budget::{Grant, Refund};
    let refund = Refund {
        units: 7,
        spent: 3,
        taken_at: Nanos(123_456_789),
    };
    let mut ask = item("alice", "hot", 1);
    ask.act = batch::Act::Ask(batch::Budget::Slice(40));
    let mut back = item("alice", "hot", 0);
    back.act = batch::Act::Ask(batch::Budget::Refund(refund));
    let items = vec![ask, back];
    round_trip(&items);

    let d = Decision {
        allowed: true,
        limit: 300,
        remaining: 120,
        reset: Nanos::from_millis(250),
        retry_after: Nanos::ZERO,
        shadow_denied: false,
        wait: Nanos::ZERO,
        blocked: false,
    };
    let mut reply = DecisionReply::new(&d, "hot");
    reply.grant = Some(Grant {
        units: 40,
        lease: Nanos(100_000_000),
        taken_at: Nanos(1_700_000_000_000_000_000),
    });
    let packed = batch::encode_results(&[Reply::Decision(reply.clone())]);
    let results = batch::decode_results(&packed, 1).unwrap();
    assert_eq!(results, vec![Reply::Decision(reply.clone())]);
    // The hand-written MessagePack is what rmp-serde writes for the same map.
    let expected = rmp_serde::to_vec_named(&Ordered(&[
        ("allowed", json!(true)),
        ("limit", json!(300)),
        ("remaining", json!(120)),
        ("reset_ms", json!(250)),
        ("retry_after_ms", json!(0)),
        ("policy", json!("hot")),
        ("slice", json!(40)),
        ("slice_lease_ns", json!(100_000_000)),
        ("slice_at", json!(1_700_000_000_000_000_000u64)),
    ]))
    .unwrap();
    assert_eq!(reply.encode(Encoding::MsgPack), expected);
    let json = reply.encode(Encoding::Json);
    assert_eq!(decode_reply(&json).unwrap(), Reply::Decision(reply));
    // Half a grant is no grant.
    let half = br#"{"allowed":true,"limit":1,"remaining":0,"reset_ms":1,"retry_after_ms":0,"policy":"p","slice":3}"#;
    assert!(decode_reply(half).is_err());
}

#[test]
fn a_batch_request_round_trips() {
    let items = vec![
        item("alice", "default", 1),
        item("bob%40x%2Eio", "login", 0),
    ];
    let body = batch::encode_items(&items);
    let decoded = batch::decode_items(&body).unwrap();
    assert_eq!(decoded, items.into_iter().map(Ok).collect::<Vec<_>>());
}

#[test]
fn a_batch_request_is_a_named_map() {
    let body = batch::encode_items(&[item("alice", "default", 1)]);
    let v: Json = rmp_serde::from_slice(&body).unwrap();
    assert_eq!(
        v,
        json!({"items": [{"key": "alice", "policy": "default", "cost": 1}]})
    );
}

/// The batch example in docs/PROTOCOL.md.
#[test]
fn the_batch_request_example_is_byte_exact() {
    let body = batch::encode_items(&[item("alice", "default", 1)]);
    assert_eq!(
        hex(&body),
        "81a56974656d739183a36b6579a5616c696365a6706f6c696379a764656661756c74a4636f737401"
    );
}

#[test]
fn batch_items_take_the_single_request_defaults() {
    let body = msgpack(&json!({"items": [{"key": "alice"}]}));
    assert_eq!(
        batch::decode_items(&body).unwrap(),
        vec![Ok(item("alice", "default", 1))]
    );
}

#[test]
fn a_bad_item_gets_its_own_error_and_the_rest_are_decoded() {
    let body = msgpack(&json!({"items": [
        {"key": "alice"},
        {"key": "bob@x"},
        {"key": "carol", "policy": "a.b"},
        {"key": "dave", "cost": MAX_COST + 1},
        {"key": "%41"},
        {"key": "erin", "wait_ms": 100},
        {"key": "fred", "wait_ms": 0},
    ]}));
    let decoded = batch::decode_items(&body).unwrap();
    assert_eq!(decoded.len(), 7);
    assert_eq!(decoded[6], Ok(item("fred", "default", 1)));
    assert_eq!(decoded[0], Ok(item("alice", "default", 1)));
    for (i, needle) in [
        (1, "%40"),
        (2, "not valid"),
        (3, "absurd"),
        (4, "one spelling"),
        (5, "\"wait_ms\" is not taken in a batch"),
    ] {
        let e = decoded[i].as_ref().unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains(needle), "item {i}: {}", e.message);
    }
}

#[test]
fn a_malformed_batch_is_refused_as_a_whole() {
    let cases: [(Vec<u8>, &str); 9] = [
        (vec![], "ends in the middle"),
        (b"{\"items\":[]}".to_vec(), "MessagePack only"),
        (msgpack(&json!([1])), "not a map"),
        (msgpack(&json!({})), "no \"items\""),
        (
            msgpack(&json!({"items": [], "x": 1})),
            "unknown field \"x\"",
        ),
        (
            msgpack(&json!({"items": [{"policy": "p"}]})),
            "batch item 0: the item has no \"key\"",
        ),
        (
            msgpack(&json!({"items": [{"key": 5}]})),
            "\"key\" must be a string",
        ),
        (
            msgpack(&json!({"items": [{"key": "a", "cost": "1"}]})),
            "\"cost\" must be an unsigned integer",
        ),
        (
            msgpack(&json!({"items": [{"key": "a", "nope": 1}]})),
            "unknown field \"nope\"",
        ),
    ];
    for (body, needle) in cases {
        let e = batch::decode_items(&body).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{needle}");
        assert!(
            e.message.contains(needle),
            "{:?} lacks {needle:?}",
            e.message
        );
    }
    let mut trailing = msgpack(&json!({"items": []}));
    trailing.push(0);
    assert!(batch::decode_items(&trailing)
        .unwrap_err()
        .message
        .contains("after the end"));
}

#[test]
fn a_batch_over_the_item_limit_is_too_large() {
    let keys: Vec<String> = (0..=batch::MAX_ITEMS).map(|i| format!("k{i}")).collect();
    let items: Vec<_> = keys.iter().map(|k| item(k, "default", 1)).collect();
    let body = batch::encode_items(&items);
    assert_eq!(
        batch::decode_items(&body).unwrap_err().code,
        ErrorCode::TooLarge
    );
    let body = batch::encode_items(&items[..batch::MAX_ITEMS]);
    assert_eq!(batch::decode_items(&body).unwrap().len(), batch::MAX_ITEMS);
}

#[test]
fn the_largest_possible_batch_fits_the_body_limit() {
    let key = "%FF".repeat(85);
    let policy = "p".repeat(64);
    let items: Vec<_> = (0..batch::MAX_ITEMS)
        .map(|_| item(&key, &policy, MAX_COST))
        .collect();
    let body = batch::encode_items(&items);
    assert!(body.len() <= batch::MAX_BODY, "{} bytes", body.len());
    assert!(batch::decode_items(&body).is_ok());
}

#[test]
fn a_batch_reply_round_trips_with_decisions_and_errors() {
    let results = vec![
        Reply::Decision(DecisionReply::new(&allowed(), "default")),
        Reply::Error(ErrorReply::unknown_policy("nope")),
        Reply::Decision(DecisionReply::new(&denied(), "login")),
    ];
    let body = batch::encode_results(&results);
    let v: Json = rmp_serde::from_slice(&body).unwrap();
    assert_eq!(v["results"][1]["error"], "unknown_policy");
    assert_eq!(v["results"][2]["retry_after_ms"], 300);
    assert_eq!(batch::decode_results(&body, 3).unwrap(), results);
    assert!(matches!(
        batch::decode_results(&body, 2),
        Err(batch::ReplyError::Malformed(_))
    ));
}

#[test]
fn a_refused_batch_reply_is_the_plain_error_reply() {
    let e = ErrorReply::new(ErrorCode::TooLarge, "too many");
    let body = e.encode(Encoding::MsgPack);
    assert_eq!(
        batch::decode_results(&body, 3),
        Err(batch::ReplyError::Rejected(e))
    );
    assert!(matches!(
        batch::decode_results(&[0x80], 1),
        Err(batch::ReplyError::Malformed(_))
    ));
}
