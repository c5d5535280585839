"""The deny cache: the cache itself on a fake clock, and with a real
worker, where requests are counted by an independent subscriber."""

from __future__ import annotations

import dataclasses

import pytest

from sluice_client import Decision, SluiceClient, Source
from sluice_client.deny_cache import DenyCache

from .conftest import PARTITIONS, TIMEOUT, fresh


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def denial(retry_after_ms: int, policy: str = "default") -> Decision:
    return Decision(False, 5, 0, 2 * retry_after_ms, retry_after_ms, policy, Source.WORKER)


def test_a_denial_answers_the_same_or_a_larger_cost_until_its_retry_time():
    clock = FakeClock()
    cache = DenyCache(100, clock)
    cache.insert("alice", 2, denial(60_000))
    d = cache.get("default", "alice", 2)
    assert d is not None and not d.allowed and d.source is Source.DENY_CACHE
    assert (d.retry_after_ms, d.reset_ms, d.limit, d.remaining) == (60_000, 120_000, 5, 0)
    assert cache.get("default", "alice", 5) is not None
    assert cache.get("default", "alice", 1) is None, "a smaller cost may fit"
    assert cache.get("other", "alice", 2) is None, "another policy"
    assert cache.get("default", "bob", 2) is None, "another key"
    clock.now += 59.5
    assert cache.get("default", "alice", 2).retry_after_ms == 500
    clock.now += 0.5
    assert cache.get("default", "alice", 2) is None, "its retry time has come"


def test_a_peek_counts_as_one_unit_and_an_allowed_answer_is_not_cached():
    cache = DenyCache(100, FakeClock())
    cache.insert("alice", 0, denial(1000))
    assert cache.get("default", "alice", 0) is not None
    assert cache.get("default", "alice", 1) is not None
    shadow = Decision(True, 5, 0, 0, 0, "default", Source.WORKER, shadow_denied=True)
    cache.insert("bob", 1, shadow)
    cache.insert("carol", 1, denial(0))
    assert len(cache) == 1


def test_a_blocked_denial_answers_every_ask_until_the_block_ends_and_nothing_after():
    """A block (SPEC §18) denies every ask of the key under its policy: any
    cost, a peek, any wait, until its retry time; nothing after."""
    clock = FakeClock()
    cache = DenyCache(100, clock)
    blocked = dataclasses.replace(denial(60_000), blocked=True)
    cache.insert("mallory", 3, blocked)
    for cost, wait in [(3, 0.0), (1, 0.0), (0, 0.0), (1, 120.0)]:
        d = cache.get("default", "mallory", cost, wait)
        assert d is not None and d.blocked and not d.allowed, (cost, wait)
    cache.insert("mallory", 1, denial(1000))
    assert cache.get("default", "mallory", 0).retry_after_ms == 60_000, "a plain denial does not shorten it"
    clock.now += 60
    assert cache.get("default", "mallory", 1) is None, "the block is over"


def test_the_smallest_denied_cost_in_force_is_kept():
    cache = DenyCache(100, FakeClock())
    cache.insert("alice", 1, denial(1000))
    cache.insert("alice", 3, denial(5000))
    assert cache.get("default", "alice", 1).retry_after_ms == 1000


def test_a_full_cache_drops_expired_entries_then_stops_caching():
    clock = FakeClock()
    cache = DenyCache(100, clock)
    for i in range(100):
        cache.insert("k{}".format(i), 1, denial(1000))
    cache.insert("late", 1, denial(1000))
    assert len(cache) == 100 and cache.get("default", "late", 1) is None
    clock.now += 1
    cache.insert("late", 1, denial(1000))
    assert len(cache) == 1 and cache.get("default", "late", 1) is not None
    with pytest.raises(ValueError, match="deny_cache_capacity"):
        DenyCache(0, clock)


async def test_the_deny_cache_answers_denied_keys_without_round_trips(client, subjects):
    await subjects.after(client)  # the partition check's probes, if it sent them after
    key = fresh("hammered")
    decisions = [await client.allow(key) for _ in range(16)]
    assert [d.allowed for d in decisions] == [True] * 15 + [False]
    assert len(await subjects.after(client)) == 16
    cached = [await client.allow(key) for _ in range(100)]
    assert all(not d.allowed and d.source is Source.DENY_CACHE for d in cached)
    assert 0 < cached[-1].retry_after_ms <= decisions[-1].retry_after_ms
    assert cached[-1].headers()["RateLimit-Remaining"] == "0" and "Retry-After" in cached[-1].headers()
    assert await subjects.after(client) == [], "no message for a cached denial"
    assert client.stats().deny_cache == 100
    # a peek asks about one unit: cached too; a hit and another key are not
    assert (await client.peek(key)).source is Source.DENY_CACHE
    assert (await client.allow(fresh("other"))).source is Source.WORKER
    assert len(await subjects.after(client)) == 1


async def test_without_the_deny_cache_every_ask_reaches_the_worker(stack, subjects):
    async with await SluiceClient.connect(
        stack.url, timeout=TIMEOUT, partitions=PARTITIONS, deny_cache=False
    ) as client:
        await subjects.after(client)  # the partition check's probes
        key = fresh("uncached")
        decisions = [await client.allow(key) for _ in range(20)]
        assert sum(d.allowed for d in decisions) == 15
        assert all(d.source is Source.WORKER for d in decisions)
        assert len(await subjects.after(client)) == 20
