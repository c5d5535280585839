"""Key encoding, bodies, replies and headers: no server needed."""

from __future__ import annotations

import msgpack
import pytest

from sluice_client import (
    BadRequest,
    Decision,
    SluiceError,
    Source,
    TooLarge,
    Unavailable,
    UnknownPolicy,
    encode_key,
)
from sluice_client.client import fnv1a32, partition_of
from sluice_client.wire import MalformedReply, check_cost, check_policy, decode_reply, request_body


@pytest.mark.parametrize(
    "key, token",
    [
        ("alice", "alice"),
        ("bob@x.io", "bob%40x%2Eio"),
        ("tenant:acme", "tenant%3Aacme"),
        ("100%", "100%25"),
        ("ключ", "%D0%BA%D0%BB%D1%8E%D1%87"),
        ("*", "%2A"),
        ("A-z_0-9", "A-z_0-9"),
        (b"\x00\xff.", "%00%FF%2E"),
        (bytearray(b"a b"), "a%20b"),
    ],
)
def test_keys_are_percent_encoded_as_protocol_md_says(key, token):
    assert encode_key(key) == token


def test_an_empty_key_is_refused_before_sending():
    with pytest.raises(BadRequest, match="empty"):
        encode_key("")
    with pytest.raises(BadRequest, match="empty"):
        encode_key(b"")


def test_the_256_byte_limit_is_on_the_encoded_token():
    assert len(encode_key("a" * 256)) == 256
    assert len(encode_key("@" * 85 + "a")) == 256
    with pytest.raises(BadRequest, match="257 bytes"):
        encode_key("a" * 257)
    with pytest.raises(BadRequest, match="258 bytes"):
        encode_key("@" * 86)


def test_a_key_of_another_type_is_a_type_error():
    with pytest.raises(TypeError):
        encode_key(42)  # type: ignore[arg-type]


def test_policy_names_and_costs_are_checked_before_sending():
    assert check_policy(None) == "default"
    assert check_policy("login-2_x") == "login-2_x"
    assert check_policy("p" * 64) == "p" * 64
    for bad in ["", "a.b", "p" * 65, "ключ"]:
        with pytest.raises(BadRequest, match="not valid"):
            check_policy(bad)
    assert check_cost(0) == 0
    assert check_cost(1_000_000_000) == 1_000_000_000
    with pytest.raises(BadRequest, match="absurd"):
        check_cost(1_000_000_001)
    with pytest.raises(BadRequest, match="negative"):
        check_cost(-1)
    for bad in [1.5, "5", True]:
        with pytest.raises(BadRequest, match="unsigned integer"):
            check_cost(bad)  # type: ignore[arg-type]


def test_the_default_request_is_empty_and_others_send_what_differs():
    assert request_body("default", 1) == b""
    # docs/PROTOCOL.md §2, pinned: {"policy":"login","cost":3}, 20 bytes.
    assert request_body("login", 3) == bytes.fromhex("82 a6706f6c696379 a56c6f67696e a4636f7374 03")
    assert msgpack.unpackb(request_body("default", 0)) == {"cost": 0}
    assert msgpack.unpackb(request_body("login", 1)) == {"policy": "login"}


# docs/PROTOCOL.md §3, pinned: the first ask of alice under the built-in default.
PINNED_REPLY = bytes.fromhex(
    "86"
    "a7616c6c6f776564 c3"
    "a56c696d6974 0f"
    "a972656d61696e696e67 0e"
    "a872657365745f6d73 43"
    "ae72657472795f61667465725f6d73 00"
    "a6706f6c696379 a764656661756c74"
)


def test_a_decision_reply_decodes_into_a_frozen_decision():
    assert len(PINNED_REPLY) == 69
    d = decode_reply(PINNED_REPLY)
    assert d == Decision(True, 15, 14, 67, 0, "default", Source.WORKER)
    assert d.source == "worker"
    with pytest.raises(Exception):
        d.allowed = False  # type: ignore[misc]


def test_unknown_fields_and_any_integer_encoding_are_accepted():
    body = {
        "allowed": False,
        "limit": 2**40,
        "remaining": 0,
        "reset_ms": 70_000,
        "retry_after_ms": 1,
        "policy": "p",
        "new_field": [1, 2],
    }
    assert decode_reply(msgpack.packb(body)) == Decision(False, 2**40, 0, 70_000, 1, "p")


def test_shadow_denied_is_read_when_present():
    body = {
        "allowed": True,
        "limit": 3,
        "remaining": 0,
        "reset_ms": 9,
        "retry_after_ms": 0,
        "policy": "p",
        "shadow_denied": True,
    }
    d = decode_reply(msgpack.packb(body))
    assert d == Decision(True, 3, 0, 9, 0, "p", shadow_denied=True)
    assert d.headers()["Sluice-Shadow"] == "denied"
    with pytest.raises(MalformedReply):
        decode_reply(msgpack.packb(dict(body, shadow_denied=1)))


def test_a_blocked_denial_reads_as_a_denial_with_its_retry():
    # SPEC §18: "blocked" marks a penalty's denial; the client reads the
    # denial, its retry_after_ms (the block's rest) and the mark, which its
    # deny cache reads.
    body = {
        "allowed": False,
        "limit": 2,
        "remaining": 0,
        "reset_ms": 60_000,
        "retry_after_ms": 6_000,
        "policy": "strict",
        "blocked": True,
    }
    assert decode_reply(msgpack.packb(body)) == Decision(False, 2, 0, 60_000, 6_000, "strict", blocked=True)
    with pytest.raises(MalformedReply, match="blocked"):
        decode_reply(msgpack.packb(dict(body, blocked=1)))


@pytest.mark.parametrize(
    "word, status, cls",
    [
        ("bad_request", "400", BadRequest),
        ("unknown_policy", "404", UnknownPolicy),
        ("too_large", "413", TooLarge),
        ("unavailable", "503", Unavailable),
    ],
)
def test_error_replies_become_typed_errors_with_the_message(word, status, cls):
    body = msgpack.packb({"error": word, "message": "what was wrong"})
    err = decode_reply(body, {"Nats-Service-Error-Code": status})
    assert type(err) is cls
    assert isinstance(err, SluiceError)
    assert err.message == str(err) == "what was wrong"
    assert err.status == int(status)
    assert err.code == word


def test_an_unknown_error_word_falls_back_to_the_header_code():
    body = msgpack.packb({"error": "something_new", "message": "m"})
    assert type(decode_reply(body, {"Nats-Service-Error-Code": "404"})) is UnknownPolicy
    other = decode_reply(body, {"Nats-Service-Error-Code": "429"})
    assert type(other) is SluiceError and other.status == 429 and other.code == "something_new"


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", msgpack.packb([1]), msgpack.packb({"allowed": 1}), msgpack.packb({"allowed": True})],
)
def test_malformed_replies_are_refused(data):
    with pytest.raises(MalformedReply):
        decode_reply(data)


@pytest.mark.parametrize(
    "reset_ms, retry_ms, allowed, reset, retry",
    [
        (0, 0, True, "0", None),
        (300, 0, True, "1", None),
        (2000, 2000, False, "2", "2"),
        (2001, 1, False, "3", "1"),
    ],
)
def test_headers_are_whole_seconds_rounded_up_and_retry_after_only_on_denials(
    reset_ms, retry_ms, allowed, reset, retry
):
    d = Decision(allowed, 15, 3, reset_ms, retry_ms, "default")
    expected = {"RateLimit-Limit": "15", "RateLimit-Remaining": "3", "RateLimit-Reset": reset}
    if retry is not None:
        expected["Retry-After"] = retry
    assert d.headers() == expected
    assert list(d.headers()) == list(expected)


def test_the_partition_hash_is_nats_servers():
    # docs/PROTOCOL.md §6, checked against nats-server 2.15.1.
    assert fnv1a32(b"alice") == 0x872213E7
    assert [partition_of(k, 16) for k in ["alice", "bob", "carol", "user-42", "0123456789abcdef"]] == [
        7,
        4,
        2,
        11,
        13,
    ]


def test_a_top_entry_is_the_key_as_asked_and_an_older_workers_token_is_decoded():
    from sluice_client.usage import decode_top

    def reply(entry):
        return msgpack.packb(
            {"by": "used", "from_ms": 0, "to_ms": 60000, "keys": [entry], "complete_to_ms": 60000}
        )

    counts = {"policy": "default", "used": 5, "denied": 1}
    current = decode_top(reply({"key": "bob@x.io", "key_token": "bob%40x%2Eio", **counts}))
    older = decode_top(reply({"key": "bob%40x%2Eio", **counts}))
    assert current.keys == older.keys
    assert (current.keys[0].key, current.keys[0].key_token) == ("bob@x.io", "bob%40x%2Eio")
    assert decode_top(reply({"key": "a%FFb", **counts})).keys[0].key == "a\ufffdb"
