"""Batching against a real nats-server and worker: requests are counted by
an independent subscriber (``subjects``, conftest.py)."""

from __future__ import annotations

import asyncio

import msgpack
import nats
import pytest

from sluice_client import BadRequest, SluiceClient, Source, Unavailable, UnknownPolicy, encode_key
from sluice_client.batch import decode_batch, encode_items, Waiter
from sluice_client.client import partition_of
from sluice_client.wire import MalformedReply

from .conftest import PARTITIONS, TIMEOUT, fresh


async def test_an_ask_with_nothing_to_batch_with_goes_at_once_and_teaches_the_owner(client, subjects):
    await subjects.after(client)
    key = fresh("lone")
    p = partition_of(encode_key(key), PARTITIONS)
    assert (await client.allow(key)).remaining == 14
    first = await subjects.after(client)
    assert first == ["rl.p.{}.batch".format(p)], "alone, to the partition"
    owner = client._batcher.owners[p]
    assert owner, "the reply named the worker"
    # Another partition of the same worker: straight to the worker now.
    assert (await client.allow(key)).remaining == 13
    assert await subjects.after(client) == ["rl.w.{}.batch".format(owner)]


async def test_two_hundred_concurrent_asks_on_one_key_are_batched_and_exactly_fifteen_pass(client, subjects):
    await subjects.after(client)
    key = fresh("crowd")
    decisions = await asyncio.gather(*(client.allow(key) for _ in range(200)))
    assert sum(d.allowed for d in decisions) == 15
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(15))
    sent = await subjects.after(client)
    # One alone, the rest in the second turn's batch (and, maybe, one
    # more from the queue): far fewer requests than asks.
    assert 2 <= len(sent) <= 4, sent
    assert all(s.endswith(".batch") for s in sent)


async def test_each_caller_in_a_batch_gets_the_decision_for_its_own_key_policy_and_cost(client):
    a, b, c = fresh("mix-a"), fresh("mix-b"), fresh("mix-c")
    await client.allow(c, cost=3)
    results = await asyncio.gather(
        client.allow(a),
        client.allow(b, "burst", 5),
        client.peek(c),
        client.allow(a, "nope"),
        client.allow(b, "burst", 21),
        client.allow(a, cost=2),
        return_exceptions=True,
    )
    first, burst, peek, unknown, too_big, second = results
    assert (first.allowed, first.policy, first.limit) == (True, "default", 15)
    assert (burst.allowed, burst.policy, burst.limit, burst.remaining) == (True, "burst", 100, 15)
    assert (peek.allowed, peek.remaining) == (True, 12)
    assert isinstance(unknown, UnknownPolicy) and "nope" in unknown.message
    assert isinstance(too_big, BadRequest) and "21" in too_big.message
    assert (second.allowed, second.remaining) == (True, 12), "in item order, after the first"


async def test_a_client_with_another_partition_count_still_gets_every_decision_right(stack, subjects):
    """Its batches reach the wrong partitions: the worker answers each
    stray item 503 and the client asks it alone, through the mapping."""
    nc = await nats.connect(stack.url)
    try:
        client = SluiceClient(nc, timeout=TIMEOUT, partitions=PARTITIONS - 1)
        with pytest.raises(ValueError, match="partitions"):
            await client.check_partitions()
        key = fresh("stray")
        decisions = await asyncio.gather(*(client.allow(key) for _ in range(20)))
        assert sum(d.allowed for d in decisions) == 15
        assert all(d.source is Source.WORKER for d in decisions)
    finally:
        await nc.close()


async def test_with_no_worker_batched_asks_fall_back(bare_nats):
    async with await SluiceClient.connect(bare_nats, timeout=TIMEOUT, partitions=PARTITIONS) as client:
        with pytest.raises(Unavailable, match="no responders"):
            await client.allow(fresh("nobody"))
    async with await SluiceClient.connect(
        bare_nats, timeout=TIMEOUT, partitions=PARTITIONS, fallback="open"
    ) as client:
        answers = await asyncio.gather(*(client.allow(fresh("open")) for _ in range(10)))
        assert all(d.allowed and d.source is Source.FALLBACK_OPEN for d in answers)


def test_batch_bodies_and_replies_are_read_strictly():
    loop = asyncio.new_event_loop()
    try:
        w = Waiter("alice", "default", 1, None, 0, loop.create_future())
        assert encode_items([w]) == b"\x81\xa5items\x91\x82\xa3key\xa5alice\xa6policy\xa7default"
    finally:
        loop.close()
    with pytest.raises(MalformedReply, match="2 results"):
        decode_batch(b"\x81\xa7results\x90", None, 2)
    refused = decode_batch(b"\x82\xa5error\xabunavailable\xa7message\xa3now", None, 1)
    assert isinstance(refused, Unavailable)


async def test_a_caller_that_gives_up_mid_batch_leaves_its_neighbours_answered(client):
    """The caller sending a batch is cancelled while it is in flight: the
    others in it ask again alone (with their ids: counted once) and every
    turn is handed back."""
    key = fresh("cancelled")
    request = client.nats.request
    in_flight = asyncio.Event()
    release = asyncio.Event()

    async def slow_batches(subject, body, *args, **kwargs):  # type: ignore[no-untyped-def]
        if subject.endswith(".batch") and len(msgpack.unpackb(body)["items"]) > 1:
            in_flight.set()
            await release.wait()
        return await request(subject, body, *args, **kwargs)

    client.nats.request = slow_batches  # type: ignore[method-assign]
    try:
        tasks = [asyncio.ensure_future(client.allow(key)) for _ in range(5)]
        await asyncio.wait_for(in_flight.wait(), TIMEOUT)
        tasks[1].cancel()  # it took the second turn and sends the batch of 2..5
        release.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        client.nats.request = request  # type: ignore[method-assign]
    assert isinstance(results[1], asyncio.CancelledError)
    answered = [r for i, r in enumerate(results) if i != 1]
    assert all(r.source is Source.WORKER and r.allowed for r in answered), answered
    assert (await client.peek(key)).remaining == 15 - 4, "each counted once"
    assert client._batcher._lanes == {}, "every turn handed back"
