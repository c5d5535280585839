//! Request bodies, decision and error replies, headers and batches, byte by
//! byte where the format is promised (docs/PROTOCOL.md).

use proptest::prelude::*;
use serde_json::{json, Value as Json};
use sluice_core::key::KeyToken;
use sluice_core::policy::Decision;
use sluice_core::time::Nanos;
use sluice_core::wire::{
    self, batch, decision_headers, decode_reply, decode_request, encode_decision, encode_request,
    error_headers, DecisionReply, Encoding, ErrorCode, ErrorReply, Reply, MAX_BODY, MAX_COST,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::BTreeMap;

/// Counts this thread's allocations, to check the per-request paths.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations<T>(f: impl FnOnce() -> T) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    std::hint::black_box(f());
    ALLOCATIONS.with(Cell::get) - before
}

fn msgpack(value: &Json) -> Vec<u8> {
    rmp_serde::to_vec_named(value).unwrap()
}

fn refused(body: &[u8]) -> (ErrorCode, String, Encoding) {
    let e = decode_request(body).expect_err("should be refused");
    (e.reply.code, e.reply.message, e.encoding)
}

fn bad_request(body: &[u8], needle: &str) {
    let (code, message, _) = refused(body);
    assert_eq!(code, ErrorCode::BadRequest, "{message}");
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
}

// --- requests --------------------------------------------------------------

#[test]
fn an_empty_body_is_the_default_policy_at_cost_one_in_msgpack() {
    let r = decode_request(b"").unwrap();
    assert_eq!(r.policy, "default");
    assert!(matches!(r.policy, Cow::Borrowed(_)));
    assert_eq!(r.cost, 1);
    assert_eq!(r.encoding, Encoding::MsgPack);
}

#[test]
fn the_per_request_paths_allocate_nothing() {
    let body = msgpack(&json!({"policy": "login", "cost": 3}));
    let token = "bob%40x%2Eio";
    assert!(
        allocations(|| sluice_core::key::encode_key(b"x")) > 0,
        "the counter counts"
    );
    assert_eq!(allocations(|| decode_request(b"").unwrap().cost), 0);
    assert_eq!(allocations(|| decode_request(&body).unwrap().cost), 0);
    assert_eq!(
        allocations(|| KeyToken::parse(token).unwrap().partition(64)),
        0
    );
}

#[test]
fn a_msgpack_map_with_both_fields_is_read() {
    let body = msgpack(&json!({"policy": "login", "cost": 3}));
    let r = decode_request(&body).unwrap();
    assert_eq!(
        (&*r.policy, r.cost, r.encoding),
        ("login", 3, Encoding::MsgPack)
    );
    assert!(
        matches!(r.policy, Cow::Borrowed(_)),
        "borrowed from the body"
    );
}

#[test]
fn a_msgpack_map_without_fields_is_the_default() {
    let r = decode_request(&[0x80]).unwrap();
    assert_eq!((&*r.policy, r.cost), ("default", 1));
    let body = msgpack(&json!({"cost": 0}));
    let r = decode_request(&body).unwrap();
    assert_eq!((&*r.policy, r.cost), ("default", 0));
    let body = msgpack(&json!({"policy": "burst"}));
    let r = decode_request(&body).unwrap();
    assert_eq!((&*r.policy, r.cost), ("burst", 1));
}

#[test]
fn msgpack_costs_in_any_integer_encoding_are_read() {
    // cost as uint16, as int8 and as int64 holding a positive number
    for cost_bytes in [
        &[0xcd, 0x01, 0x00][..],
        &[0xd0, 0x05],
        &[0xd3, 0, 0, 0, 0, 0, 0, 0, 9],
    ] {
        let mut body = vec![0x81, 0xa4, b'c', b'o', b's', b't'];
        body.extend_from_slice(cost_bytes);
        let r = decode_request(&body).unwrap();
        assert!([256, 5, 9].contains(&r.cost));
    }
}

#[test]
fn nil_fields_count_as_not_given() {
    let body = msgpack(&json!({"policy": null, "cost": null}));
    let r = decode_request(&body).unwrap();
    assert_eq!((&*r.policy, r.cost), ("default", 1));
    let r = decode_request(br#"{"policy":null}"#).unwrap();
    assert_eq!((&*r.policy, r.cost), ("default", 1));
}

#[test]
fn a_json_object_is_read_and_answered_in_json() {
    let r = decode_request(br#"{"policy":"login","cost":2}"#).unwrap();
    assert_eq!(
        (&*r.policy, r.cost, r.encoding),
        ("login", 2, Encoding::Json)
    );
    let r = decode_request(b"{}").unwrap();
    assert_eq!((&*r.policy, r.cost), ("default", 1));
    let r = decode_request(b"{ \"cost\" : 0 }\n").unwrap();
    assert_eq!(r.cost, 0);
    // an escaped name is fine, just not borrowed
    let r = decode_request(br#"{"policy":"log\u0069n"}"#).unwrap();
    assert_eq!(r.policy, "login");
}

#[test]
fn a_body_of_4097_bytes_is_too_large_and_4096_is_read() {
    let mut padded = br#"{"policy":"a"}"#.to_vec();
    padded.resize(MAX_BODY, b' ');
    assert!(decode_request(&padded).is_ok());
    padded.push(b' ');
    let (code, message, encoding) = refused(&padded);
    assert_eq!(code, ErrorCode::TooLarge);
    assert_eq!(code.status(), 413);
    assert!(message.contains("4097 bytes"), "{message}");
    assert_eq!(
        encoding,
        Encoding::Json,
        "a JSON request hears back in JSON"
    );
    let (code, _, encoding) = refused(&[0u8; MAX_BODY + 1]);
    assert_eq!((code, encoding), (ErrorCode::TooLarge, Encoding::MsgPack));
}

#[test]
fn wrong_types_are_refused_with_the_expected_type() {
    bad_request(
        &msgpack(&json!({"cost": "5"})),
        "\"cost\" must be an unsigned integer",
    );
    bad_request(br#"{"cost":"5"}"#, "not a string");
    bad_request(br#"{"cost":true}"#, "not a boolean");
    bad_request(br#"{"policy":5}"#, "\"policy\" must be a string");
    bad_request(&msgpack(&json!({"policy": ["a"]})), "not an array");
    bad_request(br#"{"policy":{"name":"a"}}"#, "not an object");
}

#[test]
fn an_unknown_field_is_refused_naming_the_known_ones() {
    bad_request(br#"{"cots":5}"#, "unknown field \"cots\"");
    bad_request(
        &msgpack(&json!({"cots": 5})),
        "\"policy\" (a string) and \"cost\"",
    );
    bad_request(&[0x81, 0x01, 0x01], "map keys must be strings");
}

#[test]
fn a_field_given_twice_is_refused() {
    bad_request(br#"{"cost":1,"cost":2}"#, "appears twice");
    bad_request(
        &[
            0x82, 0xa4, b'c', b'o', b's', b't', 1, 0xa4, b'c', b'o', b's', b't', 2,
        ],
        "appears twice",
    );
}

#[test]
fn a_negative_cost_is_refused() {
    bad_request(br#"{"cost":-1}"#, "must not be negative (got -1)");
    bad_request(&msgpack(&json!({"cost": -7})), "must not be negative");
}

#[test]
fn a_fractional_cost_is_refused() {
    bad_request(br#"{"cost":1.5}"#, "not the floating-point number 1.5");
    bad_request(br#"{"cost":2.0}"#, "floating-point");
    bad_request(br#"{"cost":1e3}"#, "floating-point");
    bad_request(&msgpack(&json!({"cost": 0.5})), "floating-point");
}

#[test]
fn a_cost_above_max_cost_is_absurd() {
    let ok = format!(r#"{{"cost":{MAX_COST}}}"#);
    assert_eq!(decode_request(ok.as_bytes()).unwrap().cost, MAX_COST);
    bad_request(
        format!(r#"{{"cost":{}}}"#, MAX_COST + 1).as_bytes(),
        "absurd",
    );
    bad_request(&msgpack(&json!({"cost": u64::MAX})), "absurd");
}

#[test]
fn invalid_policy_names_are_refused() {
    bad_request(br#"{"policy":""}"#, "policy name \"\" is not valid");
    bad_request(br#"{"policy":"a.b"}"#, "1 to 64 characters");
    bad_request(br#"{"policy":"login\n"}"#, r#""login\n""#);
    let long = format!(r#"{{"policy":"{}"}}"#, "p".repeat(65));
    bad_request(long.as_bytes(), "not valid");
    let ok = format!(r#"{{"policy":"{}"}}"#, "p".repeat(64));
    assert!(decode_request(ok.as_bytes()).is_ok());
    assert!(wire::is_valid_policy_name("login_v2-eu"));
}

#[test]
fn a_json_array_is_refused() {
    // '[' is not '{', so it is read as MessagePack: the integer 91.
    let (code, message, encoding) = refused(b"[1,2]");
    assert_eq!((code, encoding), (ErrorCode::BadRequest, Encoding::MsgPack));
    assert!(message.contains("starts with '['"), "{message}");
    assert!(message.contains("first byte is '{'"), "{message}");
}

#[test]
fn a_msgpack_array_is_refused() {
    bad_request(
        &msgpack(&json!(["login", 1])),
        "the request body is an array, not a map",
    );
}

#[test]
fn garbage_is_refused() {
    bad_request(
        b"hello",
        "starts with 'h', which begins neither a JSON object",
    );
    bad_request(b" {}", "starts with ' '");
    bad_request(
        &[0x05],
        "the request body is an unsigned integer, not a map",
    );
    bad_request(&[0xc1], "not MessagePack");
    bad_request(&[0x81, 0xa4, b'c', b'o'], "ends in the middle");
    bad_request(b"{policy: 'x'}", "not a valid JSON object");
    bad_request(b"{\"cost\":1", "not a valid JSON object");
}

#[test]
fn trailing_bytes_are_refused() {
    let mut body = msgpack(&json!({"cost": 1}));
    body.push(0x00);
    bad_request(&body, "1 bytes after the end of its MessagePack map");
    bad_request(br#"{"cost":1}x"#, "after the end of its JSON object");
    bad_request(br#"{"cost":1}{}"#, "after the end of its JSON object");
}

#[test]
fn json_errors_do_not_carry_serde_positions_for_refused_fields() {
    let (_, message, _) = refused(br#"{"cost":-1}"#);
    assert!(!message.contains("line 1"), "{message}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The request example in docs/PROTOCOL.md.
#[test]
fn the_msgpack_request_example_is_byte_exact() {
    let body = encode_request(Some("login"), Some(3), Encoding::MsgPack);
    assert_eq!(hex(&body), "82a6706f6c696379a56c6f67696ea4636f737403");
}

#[test]
fn requests_encode_and_decode_back() {
    assert!(encode_request(None, None, Encoding::MsgPack).is_empty());
    assert_eq!(encode_request(None, None, Encoding::Json), b"{}");
    for encoding in [Encoding::MsgPack, Encoding::Json] {
        let body = encode_request(Some("login"), Some(0), encoding);
        let r = decode_request(&body).unwrap();
        assert_eq!((&*r.policy, r.cost, r.encoding), ("login", 0, encoding));
        let body = encode_request(None, Some(5), encoding);
        assert_eq!(decode_request(&body).unwrap().cost, 5);
    }
    assert_eq!(
        encode_request(Some("login"), Some(2), Encoding::Json),
        br#"{"policy":"login","cost":2}"#
    );
}

// --- decision replies ------------------------------------------------------

fn allowed() -> Decision {
    Decision {
        allowed: true,
        limit: 15,
        remaining: 14,
        reset: Nanos(66_700_001),
        retry_after: Nanos::ZERO,
    }
}

fn denied() -> Decision {
    Decision {
        allowed: false,
        limit: 10,
        remaining: 0,
        reset: Nanos::from_secs(60),
        retry_after: Nanos(300_000_000),
    }
}

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
    ];
    for (code, status, word) in table {
        assert_eq!((code.status(), code.word()), (status, word));
        assert_eq!(ErrorCode::from_word(word), Some(code));
        assert_eq!(ErrorCode::from_status(status), Some(code));
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
                ..d
            };
            let from_reply: Vec<_> = DecisionReply::new(&d, "p").headers().collect();
            assert_eq!(from_reply, headers(&d), "at {ns} ns");
        }
    }
}

// --- batches ---------------------------------------------------------------

fn item<'a>(key: &'a str, policy: &'a str, cost: u64) -> batch::Item<'a> {
    batch::Item {
        key: KeyToken::parse(key).unwrap(),
        policy: Cow::Borrowed(policy),
        cost,
        budget: Default::default(),
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
    ask.budget = batch::Budget::Slice(40);
    let mut back = item("alice", "hot", 0);
    back.budget = batch::Budget::Refund(refund);
    let items = vec![ask, back];
    let body = batch::encode_items(&items);
    let decoded: Vec<_> = batch::decode_items(&body)
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(decoded, items);

    let d = Decision {
        allowed: true,
        limit: 300,
        remaining: 120,
        reset: Nanos::from_millis(250),
        retry_after: Nanos::ZERO,
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
    #[derive(serde::Serialize)]
    struct Out<'a> {
        allowed: bool,
        limit: u64,
        remaining: u64,
        reset_ms: u64,
        retry_after_ms: u64,
        policy: &'a str,
        slice: u64,
        slice_lease_ns: u64,
        slice_at: u64,
    }
    let expected = rmp_serde::to_vec_named(&Out {
        allowed: true,
        limit: 300,
        remaining: 120,
        reset_ms: 250,
        retry_after_ms: 0,
        policy: "hot",
        slice: 40,
        slice_lease_ns: 100_000_000,
        slice_at: 1_700_000_000_000_000_000,
    })
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
    ]}));
    let decoded = batch::decode_items(&body).unwrap();
    assert_eq!(decoded.len(), 5);
    assert_eq!(decoded[0], Ok(item("alice", "default", 1)));
    for (i, needle) in [
        (1, "%40"),
        (2, "not valid"),
        (3, "absurd"),
        (4, "one spelling"),
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
    )
        .prop_map(|(allowed, limit, remaining, reset, retry_after)| Decision {
            allowed,
            limit,
            remaining,
            reset: Nanos(reset),
            retry_after: Nanos(retry_after),
        })
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
