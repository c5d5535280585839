//! Hold verbs in batches (SPEC §13): items that reserve, settle or extend
//! round trip; each is checked by the rules of the verb's own body, with
//! the same sentences; a result names its hold exactly as the verb's own
//! reply does.

use super::{allowed, msgpack, round_trip, Ordered};
use serde_json::{json, Value as Json};
use sluice_core::holds::HoldId;
use sluice_core::key::KeyToken;
use sluice_core::subject::Verb;
use sluice_core::time::Nanos;
use sluice_core::wire::batch::{self, Act, Budget, HoldAct};
use sluice_core::wire::hold::{decode_held, decode_hold_request, encode_held, HoldTicket};
use sluice_core::wire::{DecisionReply, Encoding, ErrorCode, Reply, MAX_COST};
use std::borrow::Cow;

const ID: &str = "0123456789abcdef0123456789abcdef";

fn hold_item<'a>(key: &'a str, cost: u64, act: HoldAct) -> batch::Item<'a> {
    batch::Item {
        key: KeyToken::parse(key).unwrap(),
        policy: Cow::Borrowed("llm"),
        cost,
        id: None,
        act: Act::Hold(act),
    }
}

fn hold_items() -> Vec<batch::Item<'static>> {
    let id = HoldId::parse(ID);
    vec![
        hold_item(
            "alice",
            4000,
            HoldAct {
                verb: Verb::Reserve,
                ttl_ms: Some(30_000),
                hold: None,
            },
        ),
        hold_item(
            "alice",
            1500,
            HoldAct {
                verb: Verb::Settle,
                ttl_ms: None,
                hold: id,
            },
        ),
        // An extend's cost is not sent: decoded, it is the default.
        hold_item(
            "bob",
            1,
            HoldAct {
                verb: Verb::Extend,
                ttl_ms: Some(5000),
                hold: id,
            },
        ),
    ]
}

#[test]
fn hold_items_round_trip_with_only_their_verbs_fields() {
    let items = hold_items();
    let body = round_trip(&items);
    let v: Json = rmp_serde::from_slice(&body).unwrap();
    assert_eq!(
        v["items"],
        json!([
            {"key": "alice", "policy": "llm", "cost": 4000, "verb": "reserve", "ttl_ms": 30000},
            {"key": "alice", "policy": "llm", "cost": 1500, "verb": "settle", "hold": ID},
            {"key": "bob", "policy": "llm", "verb": "extend", "hold": ID, "ttl_ms": 5000},
        ])
    );
}

/// Every mistake a verb's own body can make in its fields gets the same
/// 400 and sentence in a batch item's slot; the other items are decided.
#[test]
fn a_hold_item_is_refused_in_its_slot_with_the_verbs_own_sentence() {
    let cases: &[(Verb, Json)] = &[
        (Verb::Reserve, json!({"hold": ID})),
        (Verb::Reserve, json!({"cost": MAX_COST + 1})),
        (Verb::Reserve, json!({"ttl_ms": 0})),
        (Verb::Reserve, json!({"ttl_ms": 3_600_001})),
        (Verb::Reserve, json!({"policy": "no way"})),
        (Verb::Settle, json!({"cost": 3})),
        (Verb::Settle, json!({"hold": ID})),
        (Verb::Settle, json!({"hold": "guess", "cost": 1})),
        (Verb::Settle, json!({"hold": ID, "cost": 1, "ttl_ms": 5})),
        (Verb::Extend, json!({"hold": ID, "cost": 1})),
        (Verb::Extend, json!({"ttl_ms": 5})),
    ];
    for (verb, fields) in cases {
        let single = decode_hold_request(*verb, &serde_json::to_vec(fields).unwrap())
            .expect_err("refused alone");
        let mut item = fields.clone();
        item["key"] = json!("alice");
        item["verb"] = json!(verb.as_str());
        let body = msgpack(&json!({"items": [{"key": "bob"}, item]}));
        let decoded = batch::decode_items(&body).unwrap();
        assert!(decoded[0].is_ok(), "the neighbour is decoded");
        let e = decoded[1].as_ref().expect_err("refused in its slot");
        assert_eq!(e.code, ErrorCode::BadRequest, "{fields}");
        assert_eq!(e.message, single.reply.message, "{fields}");
    }
}

#[test]
fn what_only_a_batch_can_get_wrong_about_holds_is_refused_in_its_slot() {
    let cases = [
        (
            json!({"key": "a", "verb": "allow"}),
            "unknown verb \"allow\"",
        ),
        (json!({"key": "a", "verb": "hit"}), "unknown verb"),
        (
            json!({"key": "a", "hold": ID}),
            "come with a hold's \"verb\"",
        ),
        (
            json!({"key": "a", "ttl_ms": 5}),
            "come with a hold's \"verb\"",
        ),
        (
            json!({"key": "a", "verb": "reserve", "slice": 5}),
            "takes no local budget fields",
        ),
        (
            json!({"key": "a", "verb": "settle", "hold": ID, "cost": 0, "refund": 1, "spent": 0, "slice_at": 1}),
            "takes no local budget fields",
        ),
    ];
    for (item, needle) in cases {
        let body = msgpack(&json!({ "items": [item] }));
        let decoded = batch::decode_items(&body).unwrap();
        let e = decoded[0].as_ref().expect_err("refused in its slot");
        assert_eq!(e.code, ErrorCode::BadRequest, "{item}");
        assert!(e.message.contains(needle), "{item}: {}", e.message);
    }
    // Wrong types are a client bug: the batch is refused whole.
    for (item, needle) in [
        (json!({"key": "a", "verb": 1}), "\"verb\" must be a string"),
        (
            json!({"key": "a", "verb": "extend", "hold": ID, "ttl_ms": "5"}),
            "\"ttl_ms\" must be an unsigned integer",
        ),
    ] {
        let body = msgpack(&json!({ "items": [item] }));
        let e = batch::decode_items(&body).unwrap_err();
        assert!(e.message.contains(needle), "{item}: {}", e.message);
    }
    // {"items": [{"key": "a", "verb": "reserve", "verb": "settle"}]}
    let mut twice = vec![0x81, 0xa5];
    twice.extend(b"items");
    twice.extend([0x91, 0x83]);
    for (name, value) in [("key", "a"), ("verb", "reserve"), ("verb", "settle")] {
        twice.push(0xa0 | name.len() as u8);
        twice.extend(name.as_bytes());
        twice.push(0xa0 | value.len() as u8);
        twice.extend(value.as_bytes());
    }
    let e = batch::decode_items(&twice).unwrap_err();
    assert!(e.message.contains("appears twice"), "{}", e.message);
}

/// A batch result of a kept hold carries `hold` and `expires_ms` after the
/// decision's fields: the very bytes of the verb's own reply, through the
/// hand-written writer (checked against rmp-serde) in either encoding.
#[test]
fn a_held_result_is_the_verbs_own_reply() {
    let id = HoldId::parse(ID).unwrap();
    let single = encode_held(
        &allowed(),
        "llm",
        (Some((id, Nanos(29_999_999_999))), false),
        Encoding::MsgPack,
    );
    let mut reply = DecisionReply::new(&allowed(), "llm");
    reply.hold = Some(HoldTicket::new(id, Nanos(29_999_999_999)));
    assert_eq!(reply.encode(Encoding::MsgPack), single);
    let packed = batch::encode_results(&[Reply::Decision(reply.clone())]);
    let results = batch::decode_results(&packed, 1).unwrap();
    assert_eq!(results, vec![Reply::Decision(reply.clone())]);
    let (decision, ticket) = decode_held(&single).unwrap();
    let mut without = reply.clone();
    let taken = without.hold.take();
    assert_eq!((decision, ticket), (Reply::Decision(without), taken));

    let expected = Ordered(&[
        ("allowed", json!(true)),
        ("limit", json!(15)),
        ("remaining", json!(14)),
        ("reset_ms", json!(67)),
        ("retry_after_ms", json!(0)),
        ("policy", json!("llm")),
        ("hold", json!(ID)),
        ("expires_ms", json!(29_999)),
    ]);
    assert_eq!(single, rmp_serde::to_vec_named(&expected).unwrap());
    let json = encode_held(
        &allowed(),
        "llm",
        (Some((id, Nanos(29_999_999_999))), false),
        Encoding::Json,
    );
    assert_eq!(json, serde_json::to_vec(&expected).unwrap());
    // Half a hold is no hold.
    let half = br#"{"allowed":true,"limit":1,"remaining":0,"reset_ms":1,"retry_after_ms":0,"policy":"p","hold":"x"}"#;
    assert!(decode_held(half).is_err());
}

#[test]
fn the_largest_possible_batch_of_holds_fits_the_body_limit() {
    let key = "%FF".repeat(85);
    let policy = "p".repeat(64);
    let items: Vec<_> = (0..batch::MAX_ITEMS)
        .map(|_| batch::Item {
            key: KeyToken::parse(&key).unwrap(),
            policy: Cow::Borrowed(&policy),
            cost: MAX_COST,
            id: None,
            act: Act::Hold(HoldAct {
                verb: Verb::Settle,
                ttl_ms: None,
                hold: HoldId::parse(ID),
            }),
        })
        .collect();
    let body = batch::encode_items(&items);
    assert!(body.len() <= batch::MAX_BODY, "{} bytes", body.len());
    assert!(batch::decode_items(&body)
        .unwrap()
        .iter()
        .all(Result::is_ok));
    // And an ask item is still what it was.
    let ask = batch::Item {
        id: None,
        act: Act::Ask(Budget::None),
        ..items[0].clone()
    };
    let v: Json = rmp_serde::from_slice(&batch::encode_items(&[ask])).unwrap();
    assert!(v["items"][0].get("verb").is_none(), "{v}");
}
