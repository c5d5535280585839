"""The check at connect that the client's partition count is the server's
(the Rust client's, docs/CLIENT.md "Partition count").

Batches go straight to ``rl.p.<n>.batch`` with ``n`` computed by the
client, past the server's mapping. With another count than the server's
``partition(N,1)``, batches reach partitions that do not exist (no
responders: the asks fall back) or workers that do not own their keys (503:
asked again alone), so the count is checked once, against the server
itself: subscribe to ``rl.p.*.allow.<probe>`` for eight fixed probe keys,
publish ``rl.allow.<probe>`` *without* a reply subject (workers ignore such
messages, so nothing is counted), and compare the partition each arrives
on with the client's own.
"""

from __future__ import annotations

import asyncio
from typing import List

from nats.aio.client import Client as NATS

from .partition import partition_of

PROBE_KEYS = ["sluice-client-probe-{}".format(i) for i in range(8)]
"""The same keys as the Rust client's, which the ``client`` role of
``sluice nats-config --auth`` may subscribe to."""

TIMEOUT = 2.0


async def check_partitions(nc: NATS, partitions: int) -> None:
    """Raises :class:`ValueError` saying what to set when the server maps
    keys to other partitions than ``partitions`` gives, or has no mapping."""
    arrivals: "asyncio.Queue[str]" = asyncio.Queue()

    async def arrived(msg) -> None:  # type: ignore[no-untyped-def]
        await arrivals.put(msg.subject)

    subs = [await nc.subscribe("rl.p.*.allow." + key, cb=arrived) for key in PROBE_KEYS]
    try:
        await nc.flush()
        for key in PROBE_KEYS:
            await nc.publish("rl.allow." + key, b"")
        await nc.flush()
        for _ in PROBE_KEYS:
            try:
                subject = await asyncio.wait_for(arrivals.get(), TIMEOUT)
            except asyncio.TimeoutError:
                raise ValueError(
                    "partition check: a probe published on rl.allow.<key> did not arrive on any "
                    "rl.p.*.allow.<key> subject within {:g} s: the NATS server lacks sluice's partition "
                    "mapping (run it with the config `sluice nats-config` prints), or pass "
                    "check_partitions=False".format(TIMEOUT)
                ) from None
            _, _, arrived_on, _, key = subject.split(".", 4)
            expected = partition_of(key, partitions)
            if arrived_on != str(expected):
                raise ValueError(
                    "partition check: the NATS server maps key {} to partition {}, but with "
                    "partitions={} the client computes {}; set partitions to the workers' "
                    "`partitions` (the N of the server's partition(N,1) mapping)".format(
                        key, arrived_on, partitions, expected
                    )
                )
    finally:
        for sub in subs:
            await sub.unsubscribe()
