"""The client against a real nats-server and a real `sluice worker`
(conftest.py), and against a nats-server with no worker (the fallback)."""

from __future__ import annotations

import asyncio
import time

import msgpack
import nats
import pytest

from sluice_client import (
    BadRequest,
    Decision,
    IdReused,
    SluiceClient,
    Source,
    Unavailable,
    UnknownPolicy,
    encode_key,
)

from .conftest import PARTITIONS, TIMEOUT, fresh

async def eventually(what, check, timeout: float = 5.0, tick: float = 0.02):
    """Awaits ``check()`` until it returns a truthy value; bounded."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("not within {} s: {}".format(timeout, what))
        await asyncio.sleep(tick)


async def test_a_shadow_policy_allows_and_flags_what_it_would_deny(client):
    key = fresh("shadowed")
    decisions = [await client.allow(key, policy="shadow") for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, True]
    assert [d.shadow_denied for d in decisions] == [False, False, True]
    assert [d.remaining for d in decisions] == [1, 0, 0]
    assert decisions[2].retry_after_ms == 0
    assert decisions[2].headers()["Sluice-Shadow"] == "denied"
    assert "Sluice-Shadow" not in decisions[1].headers()
    assert "Retry-After" not in decisions[2].headers()


async def test_fifteen_asks_are_allowed_then_denied_with_retry_after_and_headers(client):
    key = fresh("alice")
    decisions = [await client.allow(key) for _ in range(16)]
    assert [d.allowed for d in decisions] == [True] * 15 + [False]
    assert [d.remaining for d in decisions[:15]] == list(range(14, -1, -1))
    first, denied = decisions[0], decisions[15]
    assert first == Decision(True, 15, 14, first.reset_ms, 0, "default", Source.WORKER)
    assert 0 < first.reset_ms <= 60_000
    assert not denied.allowed and denied.remaining == 0 and denied.limit == 15
    assert 0 < denied.retry_after_ms <= 60_000
    assert denied.source is Source.WORKER
    headers = denied.headers()
    assert headers["RateLimit-Limit"] == "15"
    assert headers["RateLimit-Remaining"] == "0"
    assert int(headers["Retry-After"]) == -(-denied.retry_after_ms // 1000) >= 1
    assert int(headers["RateLimit-Reset"]) >= 1
    assert "Retry-After" not in first.headers()


async def test_keys_are_percent_encoded_and_a_non_ascii_key_is_decided_end_to_end(client):
    key = fresh("ключ@x.io")
    token = encode_key(key)
    assert token.startswith("%D0%BA%D0%BB%D1%8E%D1%87%40x%2Eio-")
    assert (await client.allow(key)).remaining == 14
    # A plain NATS peek on the encoded subject sees the same counter.
    reply = await client.nats.request("rl.allow." + token, msgpack.packb({"cost": 0}), timeout=TIMEOUT)
    assert msgpack.unpackb(reply.data)["remaining"] == 14
    assert reply.headers["RateLimit-Remaining"] == "14"
    # bytes keys too, as the same key when they are its UTF-8
    assert (await client.allow(key.encode())).remaining == 13
    assert (await client.allow(b"\xff\x00" + key.encode())).remaining == 14


async def test_a_peek_consumes_nothing(client):
    key = fresh("peek")
    for _ in range(3):
        d = await client.peek(key)
        assert d.allowed and d.remaining == 15
    assert (await client.allow(key, cost=5)).remaining == 10
    assert (await client.peek(key)).remaining == 10
    assert (await client.peek(key, "default")).remaining == 10


async def test_an_ask_with_an_id_counts_once_and_a_reused_id_is_refused(client):
    """SPEC §16: the same id again is a repeat, counted once; the same id
    with another cost is refused; a bad id is refused before sending."""
    key = fresh("idem")
    first = await client.allow(key, cost=2, id="order-7")
    assert (first.allowed, first.remaining, first.repeat) == (True, 13, False)
    again = await client.allow(key, cost=2, id="order-7")
    assert (again.allowed, again.remaining, again.repeat) == (True, 13, True)
    assert (await client.peek(key)).remaining == 13
    with pytest.raises(IdReused) as e:
        await client.allow(key, cost=1, id="order-7")
    assert "send a new id" in str(e.value)
    for bad in ["", "x" * 129, "caf\u00e9", "a\nb"]:
        with pytest.raises(BadRequest):
            await client.allow(key, id=bad)
    assert (await client.peek(key)).remaining == 13


async def test_the_clients_own_ids_differ_per_ask_and_are_sent_again_unchanged(client):
    """Each ask that counts carries a new id of the client's own (two asks
    count twice); a peek carries none."""
    key = fresh("own-ids")
    bodies = []
    real = client._round_trip

    async def spy(subject, partition, body, *args, **kwargs):
        fields = msgpack.unpackb(body) if body else {}
        bodies.extend(fields["items"] if "items" in fields else [fields])  # a batch or alone
        return await real(subject, partition, body, *args, **kwargs)

    client._round_trip = spy
    try:
        await client.allow(key)
        await client.allow(key)
        await client.peek(key)
    finally:
        client._round_trip = real
    ids = [b.get("id") for b in bodies]
    assert ids[0] and ids[1] and ids[0] != ids[1] and ids[2] is None, bodies
    assert (await client.peek(key)).remaining == 13


async def test_hits_count_without_asking(client):
    key = fresh("hit")
    for _ in range(15):
        await client.hit(key)
    await client.nats.flush()

    async def used_up():
        return (await client.peek(key)).remaining == 0

    await eventually("15 hits are counted", used_up)
    d = await client.allow(key)
    assert not d.allowed and d.retry_after_ms > 0
    # recorded whether or not it fits; hit_and_peek answers as a peek after it
    after = await client.hit_and_peek(key, cost=3)
    assert not after.allowed and after.remaining == 0 and after.source is Source.WORKER


async def test_hit_and_peek_answers_what_a_peek_would_after_the_hit(client):
    key = fresh("hitpeek")
    d = await client.hit_and_peek(key, cost=4)
    assert d.allowed and d.remaining == 11
    assert (await client.peek(key)).remaining == 11


async def test_concurrent_asks_on_one_key_let_exactly_the_limit_through(client):
    key = fresh("crowd")
    decisions = await asyncio.gather(*(client.allow(key) for _ in range(40)))
    assert sum(d.allowed for d in decisions) == 15
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(15))


async def test_usage_shows_what_was_used_and_denied_and_top_ranks_keys(client):
    key, other = fresh("usage"), fresh("usage-other")
    for _ in range(17):
        await client.allow(key)  # 15 allowed, 2 denied: the second by the deny cache
    await client.hit(key, cost=3)
    await client.allow(other)
    await client.nats.flush()

    async def counted():
        u = await client.usage(key)
        return (u.used, u.denied) == (18, 1)  # the cache's denial reached no worker

    await eventually("usage shows the asks and the hit", counted)
    u = await client.usage(key, step="1m")
    assert u.step_ms == 60_000 and u.policy == "default" and u.parts[-1].step_ms == 60_000
    assert u.points[-1].t_ms <= u.complete_to_ms
    top = await client.top(n=1000, by="denied")
    assert [(e.key, e.denied) for e in top.keys if e.key in (key, other)] == [(key, 1)]
    used = await client.top(n=1000)
    mine = {e.key: e.used for e in used.keys}
    assert mine[key] == 18 and mine[other] == 1
    with pytest.raises(BadRequest) as e:
        await client.usage(key, step="2m")
    assert e.value.status == 400 and "1m" in str(e.value)
    with pytest.raises(BadRequest):
        await client.top(n=1001)
    with pytest.raises(UnknownPolicy):
        await client.usage(key, policy="nope")


async def test_top_lists_a_key_as_it_was_asked_with_its_token_beside_it(client):
    key = fresh("bob") + "@x.io"
    await client.allow(key)

    async def listed():
        top = await client.top(n=1000)
        return [e for e in top.keys if e.key_token == encode_key(key)]

    entries = await eventually("top lists the key", listed)
    assert [(e.key, e.key_token, e.used) for e in entries] == [(key, encode_key(key), 1)]


async def test_an_unknown_policy_raises_unknown_policy_with_the_workers_message(client):
    with pytest.raises(UnknownPolicy) as e:
        await client.allow(fresh("u"), policy="logn")
    assert e.value.status == 404 and e.value.code == "unknown_policy"
    assert '"logn"' in e.value.message


async def test_a_cost_above_the_capacity_raises_bad_request_and_counts_nothing(client):
    key = fresh("big")
    with pytest.raises(BadRequest, match="can never be allowed") as e:
        await client.allow(key, cost=16)
    assert e.value.status == 400
    with pytest.raises(BadRequest, match="burst"):
        await client.allow(key, policy="burst", cost=21)
    assert (await client.allow(key, policy="burst", cost=20)).remaining == 0
    assert (await client.peek(key)).remaining == 15


async def test_bad_keys_policies_and_costs_are_refused_before_sending(client):
    for call in [
        client.allow(""),
        client.allow("x" * 257),
        client.allow("k", policy="a.b"),
        client.allow("k", cost=-1),
        client.peek("", "default"),
        client.hit("", cost=1),
        client.hit_and_peek("k", cost=10**10),
    ]:
        with pytest.raises(BadRequest):
            await call


# --- no worker: the fallback ----------------------------------------------

# Each ask alone on rl.allow.<key>, as these tests count them there
# (batches: test_batching.py).
ALONE = {"partitions": PARTITIONS, "batching": False}


async def test_with_no_worker_closed_raises_unavailable_well_before_the_timeout(bare_nats):
    async with await SluiceClient.connect(bare_nats, timeout=TIMEOUT, fallback="closed", **ALONE) as client:
        started = time.monotonic()
        with pytest.raises(Unavailable, match="no responders") as e:
            await client.allow("bob@x.io")
        assert time.monotonic() - started < 1.0  # retries (~30 ms), then the fallback
        assert e.value.status == 503 and "bob%40x%2Eio" in e.value.message
        with pytest.raises(Unavailable):
            await client.hit_and_peek("bob@x.io")


async def test_with_no_worker_open_allows_with_the_fallback_source(bare_nats):
    async with await SluiceClient.connect(bare_nats, timeout=TIMEOUT, fallback="open", **ALONE) as client:
        started = time.monotonic()
        d = await client.allow("bob@x.io", policy="login", cost=3)
        assert time.monotonic() - started < 1.0
        assert d == Decision(True, 0, 0, 0, 0, "login", Source.FALLBACK_OPEN)
        assert d.source == "fallback_open"
        assert (await client.peek("bob@x.io")).source is Source.FALLBACK_OPEN
        # a hit has no reply and no fallback: it is published and lost
        await client.hit("bob@x.io")


def count_requests(client: SluiceClient) -> list:
    """Counts the NATS requests the client sends (subjects, in order)."""
    sent = []
    request = client.nats.request

    async def counting(subject, *args, **kwargs):
        sent.append(subject)
        return await request(subject, *args, **kwargs)

    client.nats.request = counting  # type: ignore[method-assign]
    return sent


async def test_no_responders_is_retried_four_times_and_a_down_partition_once(bare_nats):
    async with await SluiceClient.connect(bare_nats, timeout=TIMEOUT, **ALONE) as client:
        sent = count_requests(client)
        with pytest.raises(Unavailable):
            await client.allow("handover")
        assert sent == ["rl.allow.handover"] * 5  # 1 + retries after 2, 4, 8, 16 ms
    async with await SluiceClient.connect(bare_nats, timeout=TIMEOUT, down_after=0.0, **ALONE) as client:
        sent = count_requests(client)
        for _ in range(3):
            with pytest.raises(Unavailable):
                await client.allow("down")
        assert sent == ["rl.allow.down"] * 3  # silent for down_after: one try each


async def test_a_worker_that_does_not_answer_in_time_gets_the_fallback_at_the_timeout(bare_nats):
    silent = await nats.connect(bare_nats)
    arrived = asyncio.Event()

    async def swallow(_msg):
        arrived.set()

    try:
        await silent.subscribe("rl.p.*.allow.*", cb=swallow)
        await silent.flush()
        for fallback in ["closed", "open"]:
            arrived.clear()
            async with await SluiceClient.connect(bare_nats, timeout=0.3, fallback=fallback, **ALONE) as client:
                started = time.monotonic()
                if fallback == "closed":
                    with pytest.raises(Unavailable, match="timed out"):
                        await client.allow(fresh("slow"))
                else:
                    d = await client.allow(fresh("slow"))
                    assert d.allowed and d.source is Source.FALLBACK_OPEN
                took = time.monotonic() - started
                assert arrived.is_set()  # it was sent, and nobody answered
                assert 0.29 <= took < 2.0
    finally:
        await silent.close()


async def test_a_closed_connection_falls_back_without_sending(stack):
    client = await SluiceClient.connect(stack.url, timeout=TIMEOUT, fallback="closed", partitions=PARTITIONS)
    await client.close()
    with pytest.raises(Unavailable, match="not connected"):
        await client.allow("alice")
    with pytest.raises(Unavailable, match="not connected"):
        await client.hit("alice")


async def test_a_client_around_an_existing_connection_leaves_it_open(stack):
    nc = await nats.connect(stack.url)
    try:
        client = SluiceClient(nc, timeout=TIMEOUT, fallback="open", partitions=PARTITIONS)
        await client.check_partitions()
        assert (await client.allow(fresh("own"))).source is Source.WORKER
        await client.close()
        assert nc.is_connected
    finally:
        await nc.close()


def test_options_are_checked():
    with pytest.raises(ValueError, match="\"local\""):
        SluiceClient(None, fallback="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        SluiceClient(None, timeout=0)  # type: ignore[arg-type]
