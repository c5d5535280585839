"""Threshold alerts (SPEC §14) through the client against a real
nats-server and a real `sluice worker` (conftest.py): the stored alerts of a
policy, read once and followed as new ones are stored."""

from __future__ import annotations

import asyncio
import time

import pytest

from sluice_client import Alert, BadRequest

from .conftest import fresh

WAIT = 20.0


async def test_alerts_are_followed_as_they_come_and_read_once_each(client):
    key = fresh("tenant")
    hour = int(time.time()) // 3600
    seen: "asyncio.Queue[Alert]" = asyncio.Queue()

    async def follow() -> None:
        async for a in client.alerts("quota", follow=True):
            if a.key == key:
                await seen.put(a)

    task = asyncio.create_task(follow())
    try:
        for _ in range(5):
            assert (await client.allow(key, "quota")).allowed
        half = await asyncio.wait_for(seen.get(), WAIT)
        assert (half.policy, half.threshold_pct, half.max, half.per, half.used) == ("quota", 50, 10, "1h", 5)
        assert half.window_start_ms <= half.at_ms < half.window_end_ms
        for _ in range(6):
            await client.allow(key, "quota")
        if int(time.time()) // 3600 != hour:
            return  # the hour's window ended during the test
        full = await asyncio.wait_for(seen.get(), WAIT)
        assert (full.threshold_pct, full.used) == (100, 10)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    # Read again from the stream: each threshold once, oldest first.
    stored = [a async for a in client.alerts("quota") if a.key == key]
    assert stored == [half, full]
    everything = [a async for a in client.alerts() if a.key == key]
    assert everything == stored


async def test_a_bad_policy_name_is_refused_before_reading(client):
    with pytest.raises(BadRequest):
        async for _ in client.alerts("no such"):
            pass
