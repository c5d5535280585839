"""The usage-history part of the benchmark (SPEC §9, docs/USAGE.md):
decisions/s with usage on and off, the JetStream writes usage causes and
what a key costs per record, and the latency of usage queries on records
seeded through NATS (bench/usage_bench.py does the NATS side).

A mixin of `Harness` (bench/harness.py), kept apart because it seeds and
queries JetStream itself rather than only running the load generator.
"""

import json
import time

from configs import matrix_config
from procs import PROCS, log
from stacks import Stack


class UsageParts:
    def usage(self):
        """Usage history (SPEC §9, docs/USAGE.md). 1: decisions/s with usage
        on and off (one worker, snapshot mode), A/B in alternating order per
        round, for each client. 2: the JetStream writes usage causes with
        100,000 keys in use, and the bytes one key costs per record. 3: the
        p99 of a 30-day hourly query for one key and of a top 10 over the
        last hour with 100,000 keys, on synthetic records a worker would
        have stored (1,562 keys per partition and bucket)."""
        import usage_bench as ub
        a = self.args
        on = matrix_config("snapshot")
        off = on + "\n[usage]\nenabled = false\n"
        out = {"rounds": a.rounds}
        for client in self.clients():
            for rnd in range(a.rounds):
                for mode in (["off", "on"] if rnd % 2 == 0 else ["on", "off"]):
                    stack = Stack(self, on if mode == "on" else off, 1, f"usage-{mode}")
                    try:
                        self.cell(stack, None, f"usage {mode} {client} round {rnd + 1}",
                                  self.load_flags() + ["--client", client],
                                  kind="usage", usage=mode, client=client, round=rnd + 1)
                    finally:
                        stack.stop()
        client = "batching" if self.batching else "plain"
        keys = 100_000
        stack = Stack(self, on, 1, "usage-writes")
        try:
            before = ub.run(ub.stream_state(stack.nats.url))
            t0 = time.monotonic()
            load = self.sluice_bench(stack, ["-c", str(a.concurrency), "-m", str(a.connections), "-k", str(keys),
                                             "--duration", "30s", "--warmup", "1s", "--client", client],
                                     "usage writes, 100k keys")
            elapsed = time.monotonic() - t0
            after = ub.run(ub.stream_state(stack.nats.url))
            writes = sum(after[s]["last_seq"] - before.get(s, {}).get("last_seq", 0) for s in after)
            per = ub.run(ub.entries_per_record(stack.nats.url))
            entry = per["bytes"] / per["keys"] if per["keys"] else None
            out["writes"] = {"keys": keys, "client": client, "throughput": load.get("throughput"),
                             "seconds": round(elapsed, 1), "writes": writes,
                             "writes_per_s": round(writes / elapsed, 1), "snapshot_interval_s": 2,
                             "bytes_per_entry": round(entry, 1) if entry else None,
                             "keys_per_record": round(per["keys"] / per["records"]) if per["records"] else None,
                             "bytes_per_key_day": round(entry * (1440 + 288 + 24 + 1)) if entry else None,
                             "streams": after}
            log(f"usage writes: {writes} in {elapsed:.0f} s ({writes / elapsed:.1f}/s) at "
                f"{load.get('throughput') or 0:.0f} decisions/s over {keys} keys; {entry} B per key and record")
        finally:
            stack.stop()
        out["queries"] = self.usage_queries(ub)
        self.extra["usage"] = out

    def usage_queries(self, ub):
        partitions = 64
        per = 1_562
        keys = [f"u-{i}" for i in range(partitions * per * 2)]
        by_partition = {p: [] for p in range(partitions)}
        for k in keys:
            p = ub.partition_of(k, partitions)
            if len(by_partition[p]) < per:
                by_partition[p].append(k)
        target = by_partition[7][0]
        config = matrix_config("snapshot")
        stack = Stack(self, config, 1, "usage-queries")
        try:
            for wid in list(stack.workers):
                p, _ = stack.workers.pop(wid)
                PROCS.stop(p)
            now = int(time.time() * 1000)
            plan = [("1h", 7, now - now % ub.HOUR - h * ub.HOUR) for h in range(1, 31 * 24 + 1)]
            for p in range(partitions):
                plan += [("1m", p, now - now % ub.MINUTE - m * ub.MINUTE) for m in range(1, 66)]
                plan += [("5m", p, now - now % (5 * ub.MINUTE) - f * 5 * ub.MINUTE) for f in range(1, 14)]
            t0 = time.monotonic()
            n = ub.run(ub.seed(stack.nats.url, plan, by_partition))
            log(f"usage queries: seeded {n} records in {time.monotonic() - t0:.0f} s")
            stack.start_worker()
            stack.wait_balanced()
            out = {"keys": partitions * per, "keys_per_record": per, "records": n}
            body = json.dumps({"from_ms": now - 30 * ub.DAY, "step": "1h"}).encode()
            lat, errors, reply = ub.run(ub.timed_requests(stack.nats.url, f"rl.usage.{target}", body, 50))
            out["series_30d_1h"] = {"n": len(lat), "errors": errors, "p50_ms": round(ub.pct(lat, 0.5) * 1000, 1),
                                    "p99_ms": round(ub.pct(lat, 0.99) * 1000, 1),
                                    "points": len(reply["points"]) if reply else None}
            lat, errors, reply = ub.run(ub.timed_requests(stack.nats.url, "rl.top", json.dumps({"n": 10}).encode(), 20))
            out["top10_1h"] = {"n": len(lat), "errors": errors, "p50_ms": round(ub.pct(lat, 0.5) * 1000, 1),
                               "p99_ms": round(ub.pct(lat, 0.99) * 1000, 1)}
            log(f"usage queries: 30-day hourly p50 {out['series_30d_1h']['p50_ms']} ms p99 "
                f"{out['series_30d_1h']['p99_ms']} ms; top 10 over the last hour p50 {out['top10_1h']['p50_ms']} ms "
                f"p99 {out['top10_1h']['p99_ms']} ms")
            return out
        finally:
            stack.stop()
