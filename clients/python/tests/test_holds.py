"""Holds (SPEC §13) through the client against a real nats-server and a
real `sluice worker` (conftest.py): reserve, extend and settle; the scope
that settles, or releases on an exception or an exit without a settle;
no fallback without a worker."""

from __future__ import annotations

import pytest

from sluice_client import BadRequest, HoldDenied, SluiceClient, Unavailable, UnknownHold

from .conftest import PARTITIONS, fresh


async def test_reserve_extend_and_settle_give_back_what_was_not_used(client):
    key = fresh("user")
    held = await client.reserve(key, "llm", 4000, ttl_ms=600_000)
    assert held.allowed and held.decision.remaining == 6000, held
    assert held.hold is not None and 590_000 < held.expires_ms <= 600_000
    longer = await client.extend(key, "llm", hold=held.hold, ttl_ms=1_200_000)
    assert longer.hold == held.hold and longer.expires_ms > 600_000
    after = await client.settle(key, "llm", hold=held.hold, cost=1500)
    assert after.remaining == 8500, "2500 of the 4000 held went back"
    with pytest.raises(UnknownHold) as e:
        await client.settle(key, "llm", hold=held.hold, cost=1500)
    assert e.value.status == 404 and "no live hold" in e.value.message
    with pytest.raises(BadRequest):
        await client.settle(key, "llm", hold="guess", cost=1)
    with pytest.raises(BadRequest):
        await client.reserve(key, "llm", 1, ttl_ms=7_200_000)
    assert (await client.peek(key, "llm")).remaining == 8500, "refused requests change nothing"


async def test_the_scope_settles_or_releases_its_slot(client):
    key = fresh("tenant")
    async with client.hold(key, policy="inflight") as h:
        assert h.decision.allowed and len(h.hold) == 32
        settled = await h.settle(1)
    assert h.settled == settled
    # Two of the three slots are taken outside any scope.
    for _ in range(2):
        assert (await client.reserve(key, "inflight", ttl_ms=60_000)).allowed
    # An exception in the block releases its slot: the block that holds the
    # third sees a fourth denied, and the slot is free again after it.
    with pytest.raises(ZeroDivisionError):
        async with client.hold(key, policy="inflight"):
            ran = False
            with pytest.raises(HoldDenied) as denied:
                async with client.hold(key, policy="inflight"):
                    ran = True
            assert not ran and denied.value.decision.retry_after_ms > 0
            1 / 0
    # So does an exit without a settle.
    async with client.hold(key, policy="inflight") as h:
        pass
    assert h.settled is not None and h.settled.allowed, "released at the exit"
    third = await client.reserve(key, "inflight", ttl_ms=60_000)
    fourth = await client.reserve(key, "inflight", ttl_ms=60_000)
    assert (third.allowed, fourth.allowed) == (True, False), "the released slot came back, once"


async def test_with_no_worker_a_hold_is_unavailable_whatever_the_fallback(bare_nats):
    c = await SluiceClient.connect(bare_nats, timeout=0.5, fallback="open", partitions=PARTITIONS)
    try:
        with pytest.raises(Unavailable) as e:
            await c.reserve(fresh("user"), "llm", 10)
        assert "no fallback" in e.value.message
    finally:
        await c.close()


async def test_a_hold_verb_sent_again_with_its_id_is_done_once(client):
    """SPEC §16: a reserve sent again with its id keeps one hold and gets
    the first answer (the same hold); a settle sent again with its id is
    answered as the first time instead of ``UnknownHold``."""
    key = fresh("user")
    first = await client.reserve(key, "llm", 4000, ttl_ms=600_000, id="reserve-1")
    again = await client.reserve(key, "llm", 4000, ttl_ms=600_000, id="reserve-1")
    assert (first.decision.repeat, again.decision.repeat) == (False, True)
    assert again.hold == first.hold and again.decision.remaining == first.decision.remaining == 6000
    assert (await client.peek(key, "llm")).remaining == 6000, "one hold of 4000"
    settled = await client.settle(key, "llm", hold=first.hold, cost=1000, id="settle-1")
    repeated = await client.settle(key, "llm", hold=first.hold, cost=1000, id="settle-1")
    assert (settled.repeat, repeated.repeat) == (False, True) and settled.remaining == 9000
    assert (await client.peek(key, "llm")).remaining == 9000, "settled once"
    with pytest.raises(UnknownHold):
        await client.settle(key, "llm", hold=first.hold, cost=1000, id="settle-2")
    with pytest.raises(BadRequest):
        await client.reserve(key, "llm", 1, id="not ascii é")


@pytest.mark.parametrize("ask_ids", [True, False])
async def test_an_unstored_hold_verb_is_sent_again_only_when_named(bare_nats, ask_ids):
    """A 503 with ``Sluice-Unstored`` (journal mode: done in memory, not
    stored). Named (``ask_ids``, the default), the reserve is sent again:
    the owner answers the retry as the first, so it keeps one hold.
    Unnamed, it ends at once, where a plain 503 is retried: a second
    reserve would keep a second hold. The owner is played by a subscriber."""
    import msgpack
    import nats

    worker = await nats.connect(bare_nats)
    sent = []

    async def refuse(msg):
        sent.append((msg.subject, msgpack.unpackb(msg.data).get("id")))
        headers = {"Nats-Service-Error-Code": "503"}
        if ".reserve.once-" in msg.subject:
            headers["Sluice-Unstored"] = "1"
        body = msgpack.packb({"error": "unavailable", "message": "the journal did not store it"})
        await worker.publish(msg.reply, body, headers=headers)

    try:
        await worker.subscribe("rl.p.*.reserve.*", cb=refuse)
        await worker.flush()
        c = await SluiceClient.connect(bare_nats, timeout=2.0, partitions=PARTITIONS, ask_ids=ask_ids)
        try:
            with pytest.raises(Unavailable, match="did not store"):
                await c.reserve(fresh("once"), "llm", 10)
            if ask_ids:
                ids = {id for _, id in sent}
                assert len(sent) > 1 and len(ids) == 1 and None not in ids, sent
            else:
                assert len(sent) == 1 and sent[0][1] is None, sent
            sent.clear()
            with pytest.raises(Unavailable) as again:
                await c.reserve(fresh("again"), "llm", 10)
            assert len(sent) > 1, "a plain 503 is retried: {} ({})".format(sent, again.value.message)
        finally:
            await c.close()
    finally:
        await worker.close()
