"""``ShouldRateLimit`` through grpcio and Envoy's rls.proto, against a real
nats-server, a real worker and a real ``sluice gateway --grpc-listen``.

The stack's ``default`` policy is 15 per minute (a sliding log, so that 16
calls never straddle a window; see tests/conftest.py). Every test uses its
own domain, so the keys (``<domain>|<key>=<value>``) never meet.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import grpc
import pytest

from tests.conftest import CONFIG, Stack
from tests.rls.conftest import Gateway, rls_stub, start_gateway

Entries = Sequence[Tuple[str, str]]
# A descriptor: its entries, or its entries and its own hits_addend.
Descriptor = Union[Entries, Tuple[Entries, int]]

U32_MAX = 2**32 - 1


def call(
    rls: SimpleNamespace,
    stub,
    domain: str,
    *descriptors: Descriptor,
    hits_addend: int = 0,
    metadata: Sequence[Tuple[str, str]] = (),
):
    pb, d = rls.pb, rls.descriptor
    request = pb.RateLimitRequest(domain=domain, hits_addend=hits_addend)
    for item in descriptors:
        own: Optional[int] = None
        if len(item) == 2 and isinstance(item[1], int):
            item, own = item  # type: ignore[misc]
        desc = request.descriptors.add()
        for key, value in item:  # type: ignore[union-attr]
            desc.entries.append(d.RateLimitDescriptor.Entry(key=key, value=value))
        if own is not None:
            desc.hits_addend.CopyFrom(rls.wrappers.UInt64Value(value=own))
    return stub.ShouldRateLimit(request, timeout=10, metadata=tuple(metadata))


def headers(response) -> dict:
    return {h.key: h.value for h in response.response_headers_to_add}


def codes(response) -> List[int]:
    return [s.code for s in response.statuses]


@pytest.fixture(scope="module")
def gateway(stack: Stack) -> Iterator[Gateway]:
    """A gateway without an [envoy] table: every descriptor under ``default``."""
    with start_gateway(stack.url, CONFIG, stack.dir, "default") as gw:
        yield gw


@pytest.fixture()
def stub(rls, gateway):
    with rls_stub(rls, gateway) as s:
        yield s


def test_fifteen_ok_then_over_limit_under_the_default_policy(rls, stub):
    ok, over = rls.pb.RateLimitResponse.OK, rls.pb.RateLimitResponse.OVER_LIMIT
    for remaining in range(14, -1, -1):
        r = call(rls, stub, "py-fifteen", [("user", "alice")])
        assert r.overall_code == ok
        (s,) = r.statuses
        assert s.code == ok
        assert s.limit_remaining == remaining
        assert s.current_limit.requests_per_unit == 15
        assert s.current_limit.unit == rls.pb.RateLimitResponse.RateLimit.MINUTE
        assert s.current_limit.name == "default"
        assert 0 < s.duration_until_reset.ToMilliseconds() <= 60_000
        assert headers(r) == {
            "x-ratelimit-limit": "15",
            "x-ratelimit-remaining": str(remaining),
            "x-ratelimit-reset": str(-(-s.duration_until_reset.ToMilliseconds() // 1000)),
        }
    r = call(rls, stub, "py-fifteen", [("user", "alice")])
    assert r.overall_code == over
    (s,) = r.statuses
    assert (s.code, s.limit_remaining) == (over, 0)
    assert s.duration_until_reset.ToMilliseconds() > 0
    assert headers(r)["x-ratelimit-remaining"] == "0"
    # Another value of the entry is another key.
    assert call(rls, stub, "py-fifteen", [("user", "bob")]).overall_code == ok


def test_hits_addend_is_the_cost(rls, stub):
    ok, over = rls.pb.RateLimitResponse.OK, rls.pb.RateLimitResponse.OVER_LIMIT
    key = [("user", "carol")]
    r = call(rls, stub, "py-hits", key, hits_addend=5)
    assert (r.overall_code, r.statuses[0].limit_remaining) == (ok, 10)
    # A descriptor's own hits_addend wins; 0 looks without consuming.
    r = call(rls, stub, "py-hits", (key, 0), hits_addend=5)
    assert (r.overall_code, r.statuses[0].limit_remaining) == (ok, 10)
    # More than the limit can ever hold: OVER_LIMIT, and nothing is taken.
    r = call(rls, stub, "py-hits", (key, 16))
    assert r.overall_code == over
    r = call(rls, stub, "py-hits", key, hits_addend=10)
    assert (r.overall_code, r.statuses[0].limit_remaining) == (ok, 0)
    r = call(rls, stub, "py-hits", key)
    assert r.overall_code == over


def test_two_descriptors_a_denied_request_consumes_nothing(rls, stub):
    ok, over = rls.pb.RateLimitResponse.OK, rls.pb.RateLimitResponse.OVER_LIMIT
    ip, user = [("remote_address", "10.1.1.1")], [("user", "dave")]
    r = call(rls, stub, "py-two", ip, user)
    assert r.overall_code == ok
    assert [s.limit_remaining for s in r.statuses] == [14, 14]
    # Use up the user's limit alone.
    r = call(rls, stub, "py-two", user, hits_addend=14)
    assert r.statuses[0].limit_remaining == 0
    r = call(rls, stub, "py-two", ip, user)
    assert r.overall_code == over
    assert codes(r) == [ok, over]
    assert r.statuses[0].limit_remaining == 14, "the ip was looked at, not counted"
    assert headers(r)["x-ratelimit-remaining"] == "0", "the headers describe the denial"
    # The ip still has its 14.
    r = call(rls, stub, "py-two", (ip, 0))
    assert r.statuses[0].limit_remaining == 14


def test_bad_requests_are_invalid_argument(rls, stub):
    for domain, descriptors, hits in [
        ("py-bad", [], 0),
        ("", [[("k", "v")]], 0),
        ("py-bad", [[]], 0),
        ("py-bad", [[("k", "v" * 300)]], 0),
        ("py-bad", [([("k", "v")], 2**63)], 0),
    ]:
        with pytest.raises(grpc.RpcError) as e:
            call(rls, stub, domain, *descriptors, hits_addend=hits)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
        assert e.value.details(), "a reason is given"


ENVOY_RULES = """
[[envoy.rules]]
domain = "py-known"
entries = [ { key = "user" } ]
policy = "default"
key = "known-{user}"
"""


def test_with_an_envoy_table_unknown_domains_and_descriptors_are_ok(rls, stack):
    ok, over = rls.pb.RateLimitResponse.OK, rls.pb.RateLimitResponse.OVER_LIMIT
    with start_gateway(stack.url, CONFIG + ENVOY_RULES, stack.dir, "rules") as gw:
        with rls_stub(rls, gw) as stub:
            for _ in range(3):
                r = call(rls, stub, "py-unknown", [("user", "erin")])
                assert r.overall_code == ok
                (s,) = r.statuses
                assert (s.code, s.limit_remaining) == (ok, U32_MAX)
                assert not s.HasField("current_limit")
                assert headers(r) == {}
            r = call(rls, stub, "py-known", [("user", "erin")], [("path", "/")])
            assert r.overall_code == ok
            assert [s.limit_remaining for s in r.statuses] == [14, U32_MAX]
            r = call(rls, stub, "py-known", [("user", "erin")], hits_addend=14)
            assert r.statuses[0].limit_remaining == 0
            assert call(rls, stub, "py-known", [("user", "erin")]).overall_code == over


def test_with_an_api_token_only_calls_that_carry_it_are_answered(rls, stack):
    with start_gateway(stack.url, CONFIG, stack.dir, "token", ["--api-token", "s3cret"]) as gw:
        with rls_stub(rls, gw) as stub:
            for metadata in [(), (("authorization", "Bearer wrong"),), (("authorization", "s3cret"),)]:
                with pytest.raises(grpc.RpcError) as refused:
                    call(rls, stub, "py-token", [("user", "gina")], metadata=metadata)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "API token" in refused.value.details()
            right = (("authorization", "Bearer s3cret"),)
            r = call(rls, stub, "py-token", [("user", "gina")], metadata=right)
            # The refused calls counted nothing: this is the key's first unit.
            assert r.statuses[0].limit_remaining == 14


def fallback_config(fallback: str) -> str:
    return 'fallback = "{}"\n'.format(fallback) + CONFIG


@pytest.mark.parametrize("fallback", ["open", "closed", "local"])
def test_no_worker_answering_follows_the_fallback(rls, bare_nats, tmp_path, fallback):
    ok, over = rls.pb.RateLimitResponse.OK, rls.pb.RateLimitResponse.OVER_LIMIT
    with start_gateway(bare_nats, fallback_config(fallback), tmp_path, fallback) as gw:
        with rls_stub(rls, gw) as stub:
            if fallback == "closed":
                with pytest.raises(grpc.RpcError) as e:
                    call(rls, stub, "py-fallback", [("user", "frank")])
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "closed" in e.value.details()
                return
            for _ in range(15):
                assert call(rls, stub, "py-fallback", [("user", "frank")]).overall_code == ok
            r = call(rls, stub, "py-fallback", [("user", "frank")])
            # open allows everything; local limits in the gateway's process.
            assert r.overall_code == (ok if fallback == "open" else over)
