"""Grouped keys (SPEC §17): a tuple of tokens wherever a key is taken,
encoded and partitioned as the workers expect; against a real worker, an
organisation's pool held across its members, ``levels`` and ``denied_by``
in every decision, and a denial by the organisation served again from the
deny cache for that member only."""

from __future__ import annotations

import asyncio

import pytest

from sluice_client import BadRequest, Decision, Level, SluiceClient, Source, encode_key
from sluice_client.deny_cache import DenyCache
from sluice_client.partition import partition_of
from sluice_client.wire import decode_reply

from .conftest import PARTITIONS, TIMEOUT, fresh


def test_a_tuple_or_list_of_tokens_is_a_grouped_key():
    assert encode_key(("acme", "eng", "alice")) == "acme.eng.alice"
    assert encode_key(["acme", b"bob@x.io"]) == "acme.bob%40x%2Eio"
    assert encode_key(("acme",)) == "acme"
    assert encode_key("acme/alice") == "acme%2Falice", "a str is one key"
    assert encode_key("a.b") == "a%2Eb"
    for bad in [(), ("a", "b", "c", "d"), ("acme", ""), ("", "alice")]:
        with pytest.raises(BadRequest):
            encode_key(bad)
    with pytest.raises(TypeError):
        encode_key((("a",),))


def test_a_grouped_key_lives_in_its_first_tokens_partition():
    for n in (1, 8, 16, 64):
        assert partition_of("acme.eng.alice", n) == partition_of("acme", n)
        assert partition_of("acme.bob", n) == partition_of("acme", n)


def test_a_grouped_reply_carries_its_levels_and_the_level_that_denied():
    body = (
        b'{"allowed":false,"limit":4,"remaining":0,"reset_ms":60000,"retry_after_ms":900,'
        b'"policy":"member","levels":[{"policy":"org","remaining":0,"reset_ms":60000},'
        b'{"policy":"member","remaining":2,"reset_ms":30000}],"denied_by":"org"}'
    )
    d = decode_reply(body)
    assert isinstance(d, Decision)
    assert d.levels == (Level("org", 0, 60000), Level("member", 2, 30000))
    assert d.denied_by == "org"
    plain = decode_reply(b'{"allowed":true,"limit":5,"remaining":4,"reset_ms":1,"retry_after_ms":0,"policy":"p"}')
    assert isinstance(plain, Decision) and plain.levels == () and plain.denied_by is None


def test_a_grouped_denial_is_cached_for_the_same_member_only():
    now = [1000.0]
    cache = DenyCache(100, lambda: now[0])
    denied = Decision(
        False, 4, 0, 60_000, 60_000, "member", Source.WORKER,
        levels=(Level("org", 0, 60_000), Level("member", 2, 30_000)), denied_by="org",
    )
    cache.insert("acme.alice", 1, denied)
    now[0] += 10
    again = cache.get("member", "acme.alice", 1)
    assert again is not None and again.denied_by == "org"
    assert again.levels == (Level("org", 0, 50_000), Level("member", 2, 20_000))
    assert cache.get("member", "acme.bob", 1) is None, "another member"
    assert cache.get("org", "acme", 1) is None, "the org's own key"


async def test_an_organisations_pool_holds_across_its_members(stack):
    org = fresh("org")
    async with await SluiceClient.connect(stack.url, timeout=TIMEOUT, partitions=PARTITIONS) as client:
        for remaining in (2, 1, 0):
            d = await client.allow((org, "alice"), "member")
            assert d.allowed, d
            assert [l.policy for l in d.levels] == ["org", "member"]
            assert d.levels[1].remaining == remaining
            assert d.denied_by is None
        d = await client.allow((org, "alice"), "member")
        assert (d.allowed, d.denied_by) == (False, "member"), d
        assert (await client.allow([org, "bob"], "member")).allowed
        d = await client.allow((org, "carol"), "member")
        assert (d.allowed, d.denied_by, d.source) == (False, "org", Source.WORKER), d
        assert d.levels == (Level("org", 0, d.levels[0].reset_ms), Level("member", 3, d.levels[1].reset_ms))
        again = await client.allow((org, "carol"), "member")
        assert (again.source, again.denied_by) == (Source.DENY_CACHE, "org")
        dave = await client.allow((org, "dave"), "member")
        assert (dave.allowed, dave.source, dave.denied_by) == (False, Source.WORKER, "org")
        # The org's pool is the plain key under `org`; a peek and a hit of a
        # grouped key work as any key's; so do usage and holds' verbs.
        pool = await client.peek(org, "org")
        assert (pool.allowed, pool.remaining, pool.levels) == (False, 0, ())
        await client.hit((org, "erin"), "member")
        seen = await client.hit_and_peek((org, "erin"), "member", 0)
        assert seen.levels[1].remaining == 2, seen
        usage = await client.usage((org, "alice"), "member")
        assert sum(p.used for p in usage.points) == 3
        # The org's members, ranked without its own key: by used, alice's 3
        # first; by denied, the three that were denied once each.
        top = await client.top(n=10, group=org)
        assert all(e.key_token.startswith(org + ".") for e in top.keys), top
        assert (top.keys[0].key_token, top.keys[0].used) == (f"{org}.alice", 3), top
        denied = await client.top(n=10, by="denied", group=org)
        assert sorted(e.key_token for e in denied.keys) == [f"{org}.{m}" for m in ("alice", "carol", "dave")]
        with pytest.raises(BadRequest):
            await client.top(group="")


async def test_members_asking_at_once_share_the_pool_exactly_through_batches(stack):
    org = fresh("org")
    async with await SluiceClient.connect(stack.url, timeout=TIMEOUT, partitions=PARTITIONS) as client:
        asks = [client.allow((org, "m{}".format(i)), "member") for i in range(8)]
        decisions = await asyncio.gather(*asks)
        allowed = [d for d in decisions if d.allowed]
        assert len(allowed) == 4, decisions
        assert all(d.denied_by == "org" for d in decisions if not d.allowed), decisions
        assert client.stats().batches > 0, client.stats()


async def test_a_members_hold_is_held_at_every_level_and_settled_at_every_level(stack):
    org = fresh("org")
    async with await SluiceClient.connect(stack.url, timeout=TIMEOUT, partitions=PARTITIONS) as client:
        held = await client.reserve((org, "alice"), "member", 3)
        assert held.hold is not None, held
        assert held.decision.levels == (
            Level("org", 1, held.decision.levels[0].reset_ms),
            Level("member", 0, held.decision.levels[1].reset_ms),
        ), held
        # The org has 1 left: bob's reserve of 2 is denied by it, holding nothing.
        denied = await client.reserve((org, "bob"), "member", 2)
        assert (denied.hold, denied.decision.denied_by) == (None, "org"), denied
        settled = await client.settle((org, "alice"), "member", hold=held.hold, cost=1)
        assert [l.remaining for l in settled.levels] == [3, 2], settled
        assert (await client.reserve((org, "bob"), "member", 2)).hold is not None
