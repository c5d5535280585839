"""The Python client against every conformance vector of
``docs/conformance/`` (generated from the Rust core and a real worker):
keys, partitions, request bodies, and the replies of ``asks.json`` sent
to a worker of the file's config and read by the client's decoder. The
checks return one sentence per vector a function gets wrong, and the last
tests show that a deliberately wrong key encoding or hash fails them.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import msgpack
import nats
import pytest

from sluice_client import BadRequest, Decision, SluiceError, encode_key
from sluice_client.client import fnv1a32, partition_of
from sluice_client.wire import decode_reply, request_body

from .conftest import ROOT, Stack, start_stack

VECTORS = ROOT / "docs" / "conformance"


def vectors(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


Encoder = Callable[[bytes], str]


def as_vector_says(case: Mapping[str, Any], encode: Callable[[], str]) -> Optional[str]:
    """What is wrong with ``encode()`` against a key or path vector: a token
    differs, or a refusal (a 400) is not given, or the other way round."""
    try:
        got: Union[str, SluiceError] = encode()
    except SluiceError as e:
        got = e
    if case["token"] is not None:
        ok = got == case["token"]
    else:
        ok = isinstance(got, SluiceError) and (got.status, got.code) == (
            case["refusal"]["status"],
            case["refusal"]["error"],
        )
    return None if ok else "{}: want {}, got {!r}".format(case["name"], case["token"] or case["refusal"], got)


def check_keys(encode: Encoder) -> List[str]:
    """The key vectors ``encode`` gets wrong."""
    cases = vectors("keys.json")["keys"]
    wrong = [as_vector_says(c, lambda c=c: encode(bytes.fromhex(c["key_hex"]))) for c in cases]
    return [w for w in wrong if w]


def check_paths(encode: Callable[[Tuple[bytes, ...]], str]) -> List[str]:
    """The key path vectors (SPEC §17) ``encode`` gets wrong."""
    cases = vectors("keys.json")["paths"]
    wrong = [as_vector_says(c, lambda c=c: encode(tuple(bytes.fromhex(t) for t in c["tokens_hex"]))) for c in cases]
    return [w for w in wrong if w]


def check_partitions(partition: Callable[[str, int], int]) -> List[str]:
    wrong = []
    for case in vectors("partitions.json")["cases"]:
        for n, want in case["partition"].items():
            got = partition(case["token"], int(n))
            if got != want:
                wrong.append("{!r} with {} partitions: want {}, got {}".format(case["token"], n, want, got))
    return wrong


def test_keys_are_encoded_or_refused_as_the_vectors_say():
    assert check_keys(encode_key) == []


def test_key_paths_are_encoded_or_refused_as_the_vectors_say():
    assert check_paths(encode_key) == []


def test_a_path_joined_into_one_key_fails_the_path_vectors():
    failures = check_paths(lambda tokens: encode_key(b".".join(tokens)))
    assert any(f.startswith("an organisation and a key") for f in failures), failures


def test_keys_go_to_the_partitions_the_vectors_say():
    assert check_partitions(partition_of) == []


def test_request_bodies_read_as_the_vectors_say():
    """The client's body for each accepted case's fields reads as them
    (absent fields are the defaults: policy ``default``, cost 1)."""
    for case in vectors("requests.json")["cases"]:
        want = case["accepted"]
        if want is None:
            continue
        body = request_body(want["policy"], want["cost"], want["id"])
        fields = msgpack.unpackb(body) if body else {}
        got = {"policy": "default", "cost": 1, "id": None, **fields}
        assert got == want, case["name"]


def test_a_wrong_key_encoding_fails_the_vectors():
    """Three mistakes a hand-written client makes, each caught by name."""

    def lower_hex(key: bytes) -> str:
        return "".join(chr(b) if chr(b).isalnum() and b < 128 or b in b"_-" else "%{:02x}".format(b) for b in key)

    failures = check_keys(lower_hex)
    assert any(f.startswith("an email") for f in failures), failures
    assert not any(f.startswith("plain") for f in failures), failures

    def url_quote(key: bytes) -> str:  # keeps '.' and '~', allows the empty key
        return urllib.parse.quote(key, safe="")

    failures = check_keys(url_quote)
    assert any(f.startswith("dots, which would split") for f in failures), failures
    assert any(f.startswith("the empty key") for f in failures), failures

    def bound_on_bytes(key: bytes) -> str:  # 256 bytes of key, not of token
        if not key or len(key) > 256:
            raise BadRequest("bad key")
        return "".join(c if c.isalnum() or c in "_-" else "%{:02X}".format(ord(c)) for c in key.decode("latin-1"))

    failures = check_keys(bound_on_bytes)
    assert any(f.startswith("86 escapes") for f in failures), failures


def test_a_wrong_hash_fails_the_partition_vectors():
    def hashes_the_key(token: str, n: int) -> int:  # the key, not its token
        return fnv1a32(urllib.parse.unquote_to_bytes(token)) % n

    failures = check_partitions(hashes_the_key)
    assert any(f.startswith("'bob%40x%2Eio'") for f in failures), failures


# The asks: a worker of their own, since they count on fresh keys.


@pytest.fixture(scope="module")
def asks_stack() -> Iterator[Tuple[Stack, Mapping[str, Any]]]:
    asks = vectors("asks.json")
    partitions = int(re.search(r"^partitions = ([0-9]+)$", asks["config"], re.M).group(1))
    with start_stack("sluice-py-asks-", asks["config"], partitions) as s:
        yield s, asks


def field(body: Mapping[str, Any], name: str) -> Any:
    """A reply's field by name, or by its path into a list (``levels.0.policy``)."""
    at: Any = body
    for part in name.split("."):
        if isinstance(at, list) and part.isdigit() and int(part) < len(at):
            at = at[int(part)]
        elif isinstance(at, dict) and part in at:
            at = at[part]
        else:
            return None
    return at


def check_reply(want: Mapping[str, Any], data: bytes, headers: Optional[Mapping[str, str]]) -> List[str]:
    """What is wrong with a reply against its vector (docs/conformance/README.md)."""
    headers = dict(headers or {})
    json_body = data[:1] == b"{"
    body = json.loads(data) if json_body else msgpack.unpackb(data, raw=False)
    wrong = []
    if ("json" if json_body else "msgpack") != want["encoding"]:
        wrong.append("encoding")
    status = int(headers.get("Nats-Service-Error-Code", 200))
    if status != want["status"]:
        wrong.append("status {} not {}".format(status, want["status"]))
    for name, value in want["fields"].items():
        if field(body, name) != value:
            wrong.append("{} is {!r}, not {!r}".format(name, field(body, name), value))
    for name, r in want.get("timed", {}).items():
        got = field(body, name)
        if not isinstance(got, int) or not r["at_least"] <= got <= r["at_most"]:
            wrong.append("{} is {!r}".format(name, got))
    for name, value in want["headers"].items():
        if headers.get(name) != value:
            wrong.append("header {} is {!r}, not {!r}".format(name, headers.get(name), value))
    for name, r in want.get("timed_headers", {}).items():
        if not r["at_least"] <= int(headers.get(name, -1)) <= r["at_most"]:
            wrong.append("header {} is {!r}".format(name, headers.get(name)))
    return wrong


def decoded_agrees(want: Mapping[str, Any], got: Union[Decision, SluiceError]) -> bool:
    """The client's decoder reads the reply as the vector says."""
    f = want["fields"]
    if isinstance(got, SluiceError):
        return (got.status, got.code, got.message) == (want["status"], f["error"], f["message"])
    decoded: Dict[str, Any] = {
        "allowed": got.allowed,
        "limit": got.limit,
        "remaining": got.remaining,
        "policy": got.policy,
    }
    return want["status"] == 200 and all(f[k] == v for k, v in decoded.items())


async def test_a_worker_answers_the_asks_as_the_vectors_say_and_the_client_reads_them(asks_stack):
    stack, asks = asks_stack
    nc = await nats.connect(stack.url)
    try:
        wrong = []
        for case in asks["cases"]:
            msg = await nc.request(case["subject"], bytes.fromhex(case["body"]["hex"]), timeout=5)
            wrong += ["{}: {}".format(case["name"], w) for w in check_reply(case["reply"], msg.data, msg.headers)]
            if not decoded_agrees(case["reply"], decode_reply(msg.data, msg.headers)):
                wrong.append("{}: decoded as {!r}".format(case["name"], decode_reply(msg.data, msg.headers)))
        assert wrong == []
    finally:
        await nc.close()


def test_the_asks_vectors_name_every_kind_of_reply():
    """The file covers what a client must read: both encodings, a denial
    with Retry-After, a repeat, and each error status."""
    replies = [c["reply"] for c in vectors("asks.json")["cases"]]
    assert {r["encoding"] for r in replies} == {"json", "msgpack"}
    assert {r["status"] for r in replies} == {200, 400, 404, 409, 413}
    assert any("Retry-After" in r.get("timed_headers", {}) for r in replies)
    assert any(r["fields"].get("repeat") for r in replies)
