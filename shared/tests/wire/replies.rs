//! Decision and error replies and their headers, and the hand-written
//! MessagePack writer checked against rmp-serde.

use super::{allowed, denied, hex};
use proptest::prelude::*;
use serde_json::{json, Value as Json};
use sluice_core::key::KeyToken;
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;
use sluice_core::wire::{
    self, batch, decision_headers, decode_reply, decode_request, encode_decision, encode_grouped,
    encode_repeat, error_headers, DecisionReply, Encoding, ErrorCode, ErrorReply, LevelReply,
    Reply,
};
use std::collections::BTreeMap;

/// The example in docs/PROTOCOL.md: `nats req rl.allow.alice ''` answered
/// under the built-in default policy.
#[test]
fn the_msgpack_decision_reply_is_byte_exact() {
    let body = encode_decision(&allowed(), "default", Encoding::MsgPack);
    assert_eq!(
        hex(&body),
        concat!(
            "86",
            "a7616c6c6f776564",
            "c3",
            "a56c696d6974",
            "0f",
            "a972656d61696e696e67",
            "0e",
            "a872657365745f6d73",
            "43",
            "ae72657472795f61667465725f6d73",
            "00",
            "a6706f6c696379",
            "a764656661756c74",
        )
    );
}

#[test]
fn msgpack_decision_fields_are_named_strings() {
    let body = encode_decision(&denied(), "login", Encoding::MsgPack);
    let map: BTreeMap<String, Json> = rmp_serde::from_slice(&body).unwrap();
    assert_eq!(
        map,
        BTreeMap::from([
            ("allowed".into(), json!(false)),
            ("limit".into(), json!(10)),
            ("remaining".into(), json!(0)),
            ("reset_ms".into(), json!(60_000)),
            ("retry_after_ms".into(), json!(300)),
            ("policy".into(), json!("login")),
        ])
    );
}

#[test]
fn the_json_decision_reply_is_an_object_with_the_contract_fields() {
    let body = encode_decision(&allowed(), "default", Encoding::Json);
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        r#"{"allowed":true,"limit":15,"remaining":14,"reset_ms":67,"retry_after_ms":0,"policy":"default"}"#
    );
}

#[test]
fn durations_are_rounded_up_to_milliseconds() {
    let d = Decision {
        reset: Nanos(1),
        retry_after: Nanos(1_000_001),
        shadow_denied: false,
        ..denied()
    };
    let r = DecisionReply::new(&d, "p");
    assert_eq!((r.reset_ms, r.retry_after_ms), (1, 2));
    let r = DecisionReply::new(
        &Decision {
            reset: Nanos(2_000_000),
            ..d
        },
        "p",
    );
    assert_eq!(r.reset_ms, 2);
}

#[test]
fn decision_replies_decode_back_in_both_encodings() {
    for d in [allowed(), denied()] {
        for encoding in [Encoding::MsgPack, Encoding::Json] {
            let body = encode_decision(&d, "login", encoding);
            let expected = DecisionReply::new(&d, "login");
            assert_eq!(
                decode_reply(&body).unwrap(),
                Reply::Decision(expected.clone())
            );
            assert_eq!(expected.encode(encoding), body);
        }
    }
}

#[test]
fn a_wait_is_sent_only_when_there_is_one_and_read_back() {
    let waited = Decision {
        wait: Nanos(100_000_001),
        ..allowed()
    };
    let json = encode_decision(&waited, "paced", Encoding::Json);
    let text = String::from_utf8(json.clone()).unwrap();
    assert!(
        text.ends_with(r#""policy":"paced","wait_ms":101}"#),
        "{text}"
    );
    for encoding in [Encoding::Json, Encoding::MsgPack] {
        let Reply::Decision(back) =
            decode_reply(&encode_decision(&waited, "paced", encoding)).unwrap()
        else {
            panic!("a decision");
        };
        assert_eq!(
            (back.wait_ms, back.decision().wait),
            (101, Nanos::from_millis(101))
        );
    }
    // No wait, no field; a reply without one (an older worker's) reads as 0.
    let plain = String::from_utf8(encode_decision(&allowed(), "paced", Encoding::Json)).unwrap();
    assert!(!plain.contains("wait_ms"), "{plain}");
    let Reply::Decision(old) = decode_reply(plain.as_bytes()).unwrap() else {
        panic!("a decision");
    };
    assert_eq!(old.wait_ms, 0);
}

#[test]
fn reply_decoding_ignores_unknown_fields() {
    let body = br#"{"allowed":true,"limit":1,"remaining":0,"reset_ms":5,"retry_after_ms":0,"policy":"p","new_field":[1]}"#;
    assert!(matches!(decode_reply(body), Ok(Reply::Decision(_))));
}

#[test]
fn a_reply_missing_a_decision_field_is_malformed() {
    let err = decode_reply(br#"{"allowed":true}"#).unwrap_err();
    assert!(err.to_string().contains("\"limit\""), "{err}");
    assert!(decode_reply(b"").is_err());
    assert!(decode_reply(b"\x93\x01\x02\x03").is_err());
}

// --- error replies ---------------------------------------------------------

#[test]
fn error_codes_have_their_numbers_and_words() {
    let table = [
        (ErrorCode::BadRequest, 400, "bad_request"),
        (ErrorCode::UnknownPolicy, 404, "unknown_policy"),
        (ErrorCode::TooLarge, 413, "too_large"),
        (ErrorCode::Unavailable, 503, "unavailable"),
        (ErrorCode::UnknownHold, 404, "unknown_hold"),
        (ErrorCode::IdReused, 409, "id_reused"),
    ];
    assert_eq!(table.len(), ErrorCode::ALL.len());
    for (code, status, word) in table {
        assert_eq!((code.status(), code.word()), (status, word));
        assert_eq!(ErrorCode::from_word(word), Some(code));
    }
}

#[test]
fn error_replies_are_code_word_and_sentence_in_the_requests_encoding() {
    let e = ErrorReply::unknown_policy("logn");
    let json_body = wire::encode_error(&e, Encoding::Json);
    let v: Json = serde_json::from_slice(&json_body).unwrap();
    assert_eq!(v["error"], "unknown_policy");
    assert!(v["message"].as_str().unwrap().contains("\"logn\""));
    let mp_body = wire::encode_error(&e, Encoding::MsgPack);
    let map: BTreeMap<String, String> = rmp_serde::from_slice(&mp_body).unwrap();
    assert_eq!(map["error"], "unknown_policy");
    assert_eq!(map["message"], e.message);
    for body in [json_body, mp_body] {
        assert_eq!(decode_reply(&body).unwrap(), Reply::Error(e.clone()));
    }
}

#[test]
fn a_refused_request_encodes_its_error_like_the_request() {
    let err = decode_request(br#"{"cost":-1}"#).unwrap_err();
    let body = err.reply.encode(err.encoding);
    assert_eq!(body[0], b'{');
    assert_eq!(decode_reply(&body).unwrap(), Reply::Error(err.reply));
}

#[test]
fn error_headers_carry_the_code_and_a_header_safe_sentence() {
    let e = ErrorReply::bad_request("the key contains 'é'\r\nX-Injected: 1");
    let [(n1, v1), (n2, v2)] = error_headers(&e);
    assert_eq!((n1, v1.as_str()), ("Nats-Service-Error-Code", "400"));
    assert_eq!(n2, "Nats-Service-Error");
    assert_eq!(v2, r"the key contains '\u{e9}'\r\nX-Injected: 1");
}

#[test]
fn a_key_error_is_a_bad_request() {
    let e = ErrorReply::from(KeyToken::parse("bob@x").unwrap_err());
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("%40"));
}

#[test]
fn cost_above_capacity_is_a_bad_request_naming_the_capacity() {
    let e = ErrorReply::cost_above_capacity(50, "burst", 20);
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("at most 20"), "{}", e.message);
}

// --- headers ---------------------------------------------------------------

fn headers(d: &Decision) -> Vec<(&'static str, String)> {
    decision_headers(d).collect()
}

fn pairs(list: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    list.iter().map(|(n, v)| (*n, v.to_string())).collect()
}

#[test]
fn an_allowed_decision_has_three_headers() {
    assert_eq!(
        headers(&allowed()),
        pairs(&[
            ("RateLimit-Limit", "15"),
            ("RateLimit-Remaining", "14"),
            ("RateLimit-Reset", "1")
        ])
    );
}

#[test]
fn a_denial_adds_retry_after_rounded_up() {
    // retry after 0.3 s -> 1
    assert_eq!(
        headers(&denied()),
        pairs(&[
            ("RateLimit-Limit", "10"),
            ("RateLimit-Remaining", "0"),
            ("RateLimit-Reset", "60"),
            ("Retry-After", "1"),
        ])
    );
}

#[test]
fn header_seconds_round_up_but_whole_seconds_stay() {
    let at = |reset: Nanos, retry: Nanos| {
        let d = Decision {
            reset,
            retry_after: retry,
            shadow_denied: false,
            ..denied()
        };
        let h = headers(&d);
        (h[2].1.clone(), h[3].1.clone())
    };
    assert_eq!(
        at(Nanos::from_millis(300), Nanos::from_millis(300)),
        ("1".into(), "1".into())
    );
    assert_eq!(
        at(Nanos::from_secs(2), Nanos::from_secs(2)),
        ("2".into(), "2".into())
    );
    assert_eq!(at(Nanos(2_000_000_001), Nanos(1)), ("3".into(), "1".into()));
    assert_eq!(at(Nanos::ZERO, Nanos::ZERO), ("0".into(), "0".into()));
}

#[test]
fn reply_headers_equal_decision_headers() {
    for ns in [
        0,
        1,
        999_999,
        1_000_000,
        999_999_999,
        1_000_000_000,
        1_000_000_001,
        2_500_000_000,
    ] {
        for d in [allowed(), denied()] {
            let d = Decision {
                reset: Nanos(ns),
                retry_after: Nanos(ns),
                shadow_denied: false,
                ..d
            };
            let from_reply: Vec<_> = DecisionReply::new(&d, "p").headers().collect();
            assert_eq!(from_reply, headers(&d), "at {ns} ns");
        }
    }
}

// --- the hand-written MessagePack writer against rmp-serde ------------------

/// Replies as the worker wrote them through rmp-serde before the writer:
/// maps with named fields.
fn rmp_named<T: serde::Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).unwrap()
}

fn any_decision() -> impl Strategy<Value = Decision> {
    // Integers near every encoding boundary, and anywhere.
    let uint = prop_oneof![
        0u64..300,
        60_000u64..70_000,
        (u64::from(u32::MAX) - 5)..(u64::from(u32::MAX) + 5),
        any::<u64>(),
    ];
    (
        any::<bool>(),
        uint.clone(),
        uint.clone(),
        uint.clone(),
        uint,
        // A wait, mostly none (SPEC §18).
        prop_oneof![3 => Just(0u64), 1 => 1u64..u64::MAX / 2],
        // A block, mostly none.
        prop_oneof![3 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(allowed, limit, remaining, reset, retry_after, wait, blocked)| Decision {
                allowed,
                limit,
                remaining,
                reset: Nanos(reset),
                retry_after: Nanos(retry_after),
                shadow_denied: false,
                wait: Nanos(wait),
                blocked,
            },
        )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    #[test]
    fn decision_replies_are_byte_for_byte_what_rmp_serde_writes(
        d in any_decision(),
        // Any string, and lengths around the fixstr/str8/str16 boundaries.
        policy in proptest::prop_oneof![
            "\\PC{0,40}".boxed(),
            (250usize..300).prop_map(|n| "p".repeat(n)).boxed(),
            (65_530usize..65_540).prop_map(|n| "p".repeat(n)).boxed(),
        ],
    ) {
        let reply = DecisionReply::new(&d, policy.as_str());
        proptest::prop_assert_eq!(encode_decision(&d, &policy, Encoding::MsgPack), rmp_named(&reply));
        proptest::prop_assert_eq!(reply.encode(Encoding::MsgPack), rmp_named(&reply));
        proptest::prop_assert_eq!(encode_decision(&d, &policy, Encoding::Json), serde_json::to_vec(&reply).unwrap());
        // The answer to a repeat (SPEC §16) has one field more.
        let repeat = DecisionReply { repeat: true, ..reply };
        proptest::prop_assert_eq!(encode_repeat(&d, &policy, Encoding::MsgPack), rmp_named(&repeat));
        proptest::prop_assert_eq!(encode_repeat(&d, &policy, Encoding::Json), serde_json::to_vec(&repeat).unwrap());
        let back = decode_reply(&encode_repeat(&d, &policy, Encoding::MsgPack)).unwrap();
        proptest::prop_assert_eq!(back, Reply::Decision(repeat));
    }

    #[test]
    fn grouped_replies_are_byte_for_byte_what_rmp_serde_writes_and_read_back(
        d in any_decision(),
        levels in proptest::collection::vec((any_decision(), "[a-z]{1,12}"), 0..4),
        denied_by in proptest::option::of("[a-z]{1,12}"),
        repeat in any::<bool>(),
    ) {
        let levels: Vec<LevelReply> = levels.iter().map(|(d, p)| LevelReply::new(p.as_str(), d)).collect();
        let reply = DecisionReply {
            repeat,
            levels: levels.clone(),
            denied_by: denied_by.clone(),
            ..DecisionReply::new(&d, "user")
        };
        let grouped = (&levels[..], denied_by.as_deref());
        for encoding in [Encoding::MsgPack, Encoding::Json] {
            let body = encode_grouped(&d, "user", grouped, repeat, encoding);
            let expected = match encoding {
                Encoding::MsgPack => rmp_named(&reply),
                Encoding::Json => serde_json::to_vec(&reply).unwrap(),
            };
            proptest::prop_assert_eq!(&body, &expected);
            proptest::prop_assert_eq!(reply.encode(encoding), expected);
            proptest::prop_assert_eq!(decode_reply(&body).unwrap(), Reply::Decision(reply.clone()));
        }
    }

    #[test]
    fn error_and_batch_replies_are_byte_for_byte_what_rmp_serde_writes(
        decisions in proptest::collection::vec(any_decision(), 0..40),
        message in "\\PC{0,300}",
    ) {
        let error = ErrorReply::bad_request(message);
        let serde_error = serde_json::json!({"error": error.code.word(), "message": error.message});
        proptest::prop_assert_eq!(error.encode(Encoding::MsgPack), rmp_named(&serde_error));
        let results: Vec<Reply> = decisions
            .iter()
            .enumerate()
            .map(|(i, d)| match i % 3 {
                2 => Reply::Error(error.clone()),
                _ => Reply::Decision(DecisionReply::new(d, "default")),
            })
            .collect();
        #[derive(serde::Serialize)]
        struct Batch<'a> {
            results: &'a [Reply],
        }
        proptest::prop_assert_eq!(batch::encode_results(&results), rmp_named(&Batch { results: &results }));
    }
}

#[test]
fn a_block_is_sent_only_when_there_is_one_and_read_back() {
    let blocked = Decision {
        allowed: false,
        retry_after: Nanos(4_000_000_001),
        blocked: true,
        ..allowed()
    };
    let json = encode_decision(&blocked, "login", Encoding::Json);
    let text = String::from_utf8(json).unwrap();
    assert!(
        text.ends_with(r#""retry_after_ms":4001,"policy":"login","blocked":true}"#),
        "{text}"
    );
    for encoding in [Encoding::Json, Encoding::MsgPack] {
        let Reply::Decision(back) =
            decode_reply(&encode_decision(&blocked, "login", encoding)).unwrap()
        else {
            panic!("a decision");
        };
        assert!(back.blocked && back.decision().blocked, "{back:?}");
        assert_eq!(
            back.encode(encoding),
            encode_decision(&blocked, "login", encoding)
        );
    }
    // Not blocked, no field; a reply without one (an older worker's) reads
    // as not blocked.
    let plain = String::from_utf8(encode_decision(&allowed(), "login", Encoding::Json)).unwrap();
    assert!(!plain.contains("blocked"), "{plain}");
    let Reply::Decision(old) = decode_reply(plain.as_bytes()).unwrap() else {
        panic!("a decision");
    };
    assert!(!old.blocked);
}
