"""The NATS side of the usage benchmark (bench/harness.py, part `usage`):
the usage streams' state, synthetic usage records, and timed queries.

Synthetic records are what a worker would have stored (docs/USAGE.md): one
MessagePack map per partition and bucket, `{"v": 2, "w": 0, "keys":
{policy: {key: [used, denied]}}}`, on `sluice.usage.<step>.<partition>.<ms>`.
They let a 30-day query be measured without waiting 30 days.
"""

import asyncio
import json
import random
import time

import msgpack
import nats

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
STEPS = {"1m": MINUTE, "5m": 5 * MINUTE, "1h": HOUR, "1d": DAY}


def fnv1a32(data):
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def partition_of(token, partitions):
    return fnv1a32(token.encode()) % partitions


async def stream_state(url):
    """Messages, bytes and last sequence of every usage stream."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        out = {}
        for step in STEPS:
            try:
                info = await js.stream_info(f"SLUICE_USAGE_{step}")
            except Exception:
                continue
            out[step] = {"messages": info.state.messages, "bytes": info.state.bytes,
                         "last_seq": info.state.last_seq}
        return out
    finally:
        await nc.close()


async def entries_per_record(url, step="1m", sample=20):
    """Keys per record and bytes per record over up to `sample` records of
    `step` (the most recent ones)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(f"SLUICE_USAGE_{step}")
        last = info.state.last_seq
        keys = size = n = 0
        seq = last
        while seq >= info.state.first_seq and n < sample:
            try:
                msg = await js.get_msg(f"SLUICE_USAGE_{step}", seq)
            except Exception:
                seq -= 1
                continue
            rec = msgpack.unpackb(msg.data, raw=False)
            keys += sum(len(k) for k in rec["keys"].values())
            size += len(msg.data)
            n += 1
            seq -= 1
        return {"records": n, "keys": keys, "bytes": size}
    finally:
        await nc.close()


def record(keys, rng):
    return msgpack.packb({"v": 2, "w": 0, "keys": {"default": {k: [rng.randint(1, 50), rng.randint(0, 3)]
                                                                for k in keys}}})


async def seed(url, plan, keys_by_partition, seed_value=1):
    """Publishes one synthetic record per (step, partition, bucket) of `plan`."""
    rng = random.Random(seed_value)
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        pending = []
        n = 0
        for step, partition, bucket in plan:
            body = record(keys_by_partition[partition], rng)
            pending.append(js.publish(f"sluice.usage.{step}.{partition}.{bucket}", body))
            n += 1
            if len(pending) >= 256:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
        return n
    finally:
        await nc.close()


async def timed_requests(url, subject, body, n, timeout=30.0):
    """`n` requests one after the other: sorted latencies (s) and errors."""
    nc = await nats.connect(url)
    try:
        lat, errors = [], 0
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                msg = await nc.request(subject, body, timeout=timeout)
                if msg.headers and msg.headers.get("Nats-Service-Error-Code"):
                    errors += 1
                    continue
            except Exception:
                errors += 1
                continue
            lat.append(time.perf_counter() - t0)
        lat.sort()
        if not lat:
            return lat, errors, None
        return lat, errors, json.loads(msg.data) if msg.data[:1] == b"{" else msgpack.unpackb(msg.data, raw=False)
    finally:
        await nc.close()


def pct(sorted_values, q):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, int(round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def run(coro):
    return asyncio.run(coro)
