//! Request bodies: what is read, what is refused and with which sentence,
//! and that the per-request paths allocate nothing.

use super::{hex, msgpack};
use serde_json::json;
use sluice_core::key::KeyToken;
use sluice_core::wire::{
    self, decode_request, encode_request, Encoding, ErrorCode, MAX_BODY, MAX_COST,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::cell::Cell;

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

fn refused(body: &[u8]) -> (ErrorCode, String, Encoding) {
    let e = decode_request(body).expect_err("should be refused");
    (e.reply.code, e.reply.message, e.encoding)
}

fn bad_request(body: &[u8], needle: &str) {
    let (code, message, _) = refused(body);
    assert_eq!(code, ErrorCode::BadRequest, "{message}");
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
}

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
        "\"policy\" (a string), \"cost\" (an unsigned integer), \"id\" (a string) and \"wait_ms\"",
    );
    bad_request(&[0x81, 0x01, 0x01], "map keys must be strings");
}

/// SPEC §16: `id` is 1 to 128 bytes of printable ASCII; anything else is
/// refused, and a valid one comes through.
#[test]
fn an_id_is_read_and_a_bad_one_refused() {
    let r = decode_request(br#"{"id":"req 7","cost":2}"#).unwrap();
    assert_eq!((r.id.as_deref(), r.cost), (Some("req 7"), 2));
    let body = msgpack(&json!({"id": "u-1"}));
    let r = decode_request(&body).unwrap();
    assert_eq!(r.id.as_deref(), Some("u-1"));
    bad_request(br#"{"id":""}"#, "1 to 128 bytes");
    bad_request(
        format!(r#"{{"id":"{}"}}"#, "x".repeat(129)).as_bytes(),
        "1 to 128 bytes",
    );
    bad_request(br#"{"id":"caf\u00e9"}"#, "printable ASCII");
    bad_request(br#"{"id":7}"#, "\"id\" must be a string");
    bad_request(br#"{"id":"a","id":"b"}"#, "appears twice");
}

/// SPEC §18: `wait_ms`, how long the ask may wait for its start; absent
/// or nil, 0.
#[test]
fn a_wait_is_read_and_a_bad_one_refused() {
    let r = decode_request(br#"{"policy":"paced","wait_ms":250}"#).unwrap();
    assert_eq!((&*r.policy, r.cost, r.wait_ms), ("paced", 1, 250));
    let body = msgpack(&json!({"wait_ms": 70_000}));
    assert_eq!(decode_request(&body).unwrap().wait_ms, 70_000);
    for body in [&b""[..], br#"{"cost":2}"#, br#"{"wait_ms":null}"#] {
        assert_eq!(decode_request(body).unwrap().wait_ms, 0);
    }
    bad_request(
        br#"{"wait_ms":-1}"#,
        "\"wait_ms\" must be an unsigned integer of milliseconds",
    );
    bad_request(br#"{"wait_ms":"1s"}"#, "not a string");
    bad_request(br#"{"wait_ms":1.5}"#, "not a floating-point number");
    bad_request(br#"{"wait_ms":1,"wait_ms":2}"#, "appears twice");
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
