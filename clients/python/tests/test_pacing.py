"""Asks that may wait (SPEC §18) against a real worker: ``allow(wait=)``
says when the caller starts, ``acquire()`` sleeps until then, so that
concurrent callers start spaced at the ``paced`` policy's rate (one every
50 ms, conftest.py) and none is denied."""

from __future__ import annotations

import asyncio
import time

import msgpack
import pytest

from sluice_client import BadRequest
from sluice_client.wire import request_body, wait_ms_of

from .conftest import fresh

INTERVAL = 0.05
RATE = 20
# A closed second holds 21 starts of a GCRA of burst 1 (at 0 and 1000 ms),
# and a sleep that wakes late may push one more into a window.
TOLERANCE = 2


def test_a_wait_goes_as_whole_milliseconds_rounded_down():
    assert wait_ms_of(None) == 0
    assert wait_ms_of(0.2509) == 250
    assert msgpack.unpackb(request_body("paced", 1, None, 250)) == {"policy": "paced", "wait_ms": 250}
    assert request_body("default", 1, None, 0) == b""
    for bad in (-1, "1s", True):
        with pytest.raises(BadRequest, match="seconds"):
            wait_ms_of(bad)


async def test_waits_grow_in_arrival_order_until_past_the_wait_an_ask_is_denied(client):
    key = fresh("queue")
    waits = []
    while True:
        d = await client.allow(key, "paced", wait=0.5)
        if not d.allowed:
            break
        waits.append(d.wait_ms)
        assert len(waits) <= 12, waits
    assert waits == sorted(set(waits)), waits
    assert waits[0] == 0 and 10 <= len(waits) <= 12, waits
    assert d.retry_after_ms > 500 and d.wait_ms == 0
    # A denial returns at once, without sleeping, and takes nothing.
    asked = time.monotonic()
    again = await client.acquire(key, "paced", wait=0.5)
    assert not again.allowed and time.monotonic() - asked < 0.5
    longer = await client.allow(key, "paced", wait=2.0)
    assert longer.allowed and longer.wait_ms <= waits[-1] + 50, (longer, waits)
    with pytest.raises(BadRequest, match="max_wait"):
        await client.allow(key, "paced", wait=5.0)
    with pytest.raises(BadRequest, match="cannot admit"):
        await client.allow(fresh("log"), "default", wait=0.5)


async def test_concurrent_callers_that_acquire_start_at_the_rate(client):
    key = fresh("partner")
    callers = 16

    async def caller():
        d = await client.acquire(key, "paced", wait=2.0)
        return d, time.monotonic()

    results = await asyncio.gather(*(caller() for _ in range(callers)))
    assert all(d.allowed for d, _ in results), [d for d, _ in results]
    waits = sorted(d.wait_ms for d, _ in results)
    assert waits == sorted(set(waits)), waits
    starts = sorted(t for _, t in results)
    for i, first in enumerate(starts):
        within = sum(1 for t in starts[i:] if t - first <= 1.0)
        assert within <= RATE + TOLERANCE, starts
    span = starts[-1] - starts[0]
    assert span + 0.01 >= INTERVAL * (callers - 1), (span, waits)


async def test_a_reserve_that_may_wait_is_kept_for_its_start(client):
    key = fresh("hold")
    held = [await client.reserve(key, "paced", ttl_ms=5000, wait=1.0) for _ in range(3)]
    assert all(h.allowed and h.hold for h in held), held
    # One start every 50 ms, less the time between the reserves; the
    # hold's ttl runs from its start.
    for n, h in enumerate(held):
        assert 50 * n - 20 <= h.decision.wait_ms <= 50 * n, held
        assert abs(h.expires_ms - h.decision.wait_ms - 5000) <= 1, held
    # Asks queue behind the holds.
    d = await client.allow(key, "paced", wait=1.0)
    assert d.allowed and 150 - 30 <= d.wait_ms <= 150, d
    with pytest.raises(BadRequest, match="max_wait"):
        await client.reserve(key, "paced", wait=5.0)
    # A scope that may wait begins at its start.
    asked = time.monotonic()
    async with client.hold(key, "paced", wait=1.0) as h:
        waited = h.decision.wait_ms
        assert 200 - 40 <= waited <= 200, h.decision
        assert time.monotonic() - asked >= waited / 1000
        await h.settle(1)
