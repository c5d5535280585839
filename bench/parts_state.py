"""The parts of the benchmark that measure a worker's state rather than its
throughput: memory with many active keys and the restore after kill -9
(`million`), a flood of new keys against `max_keys` (`flood`), and a
takeover after heavy load in journal and snapshot mode (`takeover`).

A mixin of `Harness` (bench/harness.py), kept apart from the throughput
parts (parts_load.py) because these read RSS, statuses and worker logs.
"""

import time

from configs import MILLION_CONFIG
from procs import log
from stacks import Stack, restore_times


class StateParts:
    def million(self):
        a = self.args
        n = a.million_keys
        out = {"keys": n, "policy": "sliding_window, 10 per minute and 500 per hour",
               "lease_ttl": a.lease_ttl or "3s"}
        config = MILLION_CONFIG
        if a.lease_ttl:
            config = config.replace("\n[policies", f'lease_ttl = "{a.lease_ttl}"\n\n[policies', 1)
        stack = Stack(self, config, 1, "million")
        try:
            (wid,) = list(stack.workers)
            out["rss_empty_kib"] = stack.rss_kib(wid)["VmRSS"]
            client = "batching" if self.batching else "plain"
            fill = self.sluice_bench(stack, ["--client", client, "--dist", "seq", "-k", str(n), "-n", str(n),
                                             "-c", "256", "-m", "2", "--key-prefix", "m-", "--timeout", "10s"],
                                     f"fill {n} keys")
            out["fill"] = {k: fill.get(k) for k in ("throughput", "allowed", "denied", "errors", "latency_us",
                                                    "duration_s", "client")}
            out["fill_client"] = client
            # Wait until the snapshots hold every key.
            deadline = time.time() + 60
            keys = live = 0
            while time.time() < deadline:
                s = stack.status()
                if s:
                    keys = sum(p["snapshot_keys"] or 0 for p in s["partitions"])
                    live = sum(sum(p.get("keys", 0) for p in w["partitions"]) for w in s["workers"])
                    if keys >= n:
                        break
                time.sleep(0.5)
            out["snapshot_keys"] = keys
            out["live_keys"] = live
            time.sleep(1)
            rss = stack.rss_kib(wid)
            out["rss_kib"] = rss["VmRSS"]
            out["hwm_kib"] = rss["VmHWM"]
            out["bytes_per_key"] = round((rss["VmRSS"] - out["rss_empty_kib"]) * 1024 / n)
            log(f"{n} keys: RSS {rss['VmRSS'] / 1024:.0f} MiB (peak {rss['VmHWM'] / 1024:.0f} MiB), "
                f"{keys} keys in snapshots")

            # 1. kill -9, start another worker at once: kill -> every partition answers.
            t_kill = time.time()
            stack.kill9(wid)
            w2 = stack.start_worker()
            r = self.sluice_bench(stack, ["--requests", "0", "--wait-ready", "60s"], "restore after kill -9")
            out["crash_to_answering_s"] = round(time.time() - t_kill, 2)
            out["crash_ready_ms"] = r.get("ready_ms")
            out["crash_log"] = restore_times(stack.workers[w2][1])
            rss2 = stack.rss_kib(w2)
            out["rss_after_restore_kib"] = rss2["VmRSS"]
            log(f"kill -9 -> all answering: {out['crash_to_answering_s']} s; {out['crash_log']}")

            # 2. kill -9 again, wait for the leases to expire, then start a
            #    worker: its start -> every partition answers (restore only).
            time.sleep(3)  # let it snapshot under its own lease
            out["start_to_answering_s"], out["restore_log"] = self.restart_after_leases_expire(
                stack, w2, "restore, leases expired")
            log(f"start -> all answering (leases expired): {out['start_to_answering_s']} s; {out['restore_log']}")
        finally:
            stack.stop()
        self.extra["million"] = out

    def flood(self):
        """A flood of new keys against a worker with a key bound: five times
        `max_keys` distinct keys asked once each, twice over. Its RSS must
        level off at the bound (the second flood adds nothing) while every
        ask is answered."""
        a = self.args
        bound = a.flood_bound
        n = bound * 5
        config = MILLION_CONFIG.replace('durability = "snapshot"', f'durability = "snapshot"\nmax_keys = {bound}')
        out = {"max_keys": bound, "keys_per_flood": n, "policy": "sliding_window, 10 per minute and 500 per hour"}
        stack = Stack(self, config, 1, "flood")
        try:
            (wid,) = list(stack.workers)
            out["rss_empty_kib"] = stack.rss_kib(wid)["VmRSS"]
            client = "batching" if self.batching else "plain"
            out["client"] = client
            out["floods"] = []
            for i in range(2):
                fill = self.sluice_bench(stack, ["--client", client, "--dist", "seq", "-k", str(n), "-n", str(n),
                                                 "-c", "256", "-m", "2", "--key-prefix", f"flood{i}-",
                                                 "--timeout", "10s"], f"flood {i + 1}: {n} new keys")
                s = stack.status() or {"workers": [{}]}
                w = s["workers"][0] if s["workers"] else {}
                rss = stack.rss_kib(wid)
                step = {"throughput": fill.get("throughput"), "allowed": fill.get("allowed"),
                        "errors": (fill.get("errors") or {}).get("total"), "latency_us": fill.get("latency_us"),
                        "keys": w.get("keys"), "evicted": w.get("evicted_keys"),
                        "rss_kib": rss["VmRSS"], "hwm_kib": rss["VmHWM"]}
                out["floods"].append(step)
                log(f"flood {i + 1}: {step['throughput']:.0f}/s, errors {step['errors']}, keys {step['keys']}, "
                    f"evicted {step['evicted']}, RSS {rss['VmRSS'] / 1024:.0f} MiB (peak {rss['VmHWM'] / 1024:.0f} MiB)")
        finally:
            stack.stop()
        self.extra["flood"] = out

    def restart_after_leases_expire(self, stack, wid, label):
        """kill -9 of `wid`; once its leases expired, a new worker starts.
        Returns the seconds from that start until every partition answers,
        and the new worker's restore times."""
        stack.kill9(wid)
        deadline = time.time() + 30
        while time.time() < deadline:
            s = stack.status()
            if s and len(s["unowned"]) == len(s["partitions"]):
                break
            time.sleep(0.2)
        t_start = time.time()
        new = stack.start_worker()
        self.sluice_bench(stack, ["--requests", "0", "--wait-ready", "60s"], label)
        return round(time.time() - t_start, 2), restore_times(stack.workers[new][1])

    def takeover(self):
        """A takeover after heavy load: one worker, 100,000 keys under 5 s of
        load, kill -9; once its leases expired a new worker starts, and the
        time from its start until every partition answers is measured, in
        journal mode (which replays what was counted since each partition's
        snapshot) and in snapshot mode. Three runs each."""
        a = self.args
        n = a.takeover_keys
        client = "batching" if self.batching else "plain"
        out = {"keys": n, "client": client, "runs": {}}
        for durability in ["journal", "snapshot"]:
            config = MILLION_CONFIG.replace('durability = "snapshot"', f'durability = "{durability}"')
            runs = []
            for run in range(3):
                stack = Stack(self, config, 1, f"takeover-{durability}-{run}")
                try:
                    (wid,) = list(stack.workers)
                    load = self.sluice_bench(stack, ["--client", client, "--dist", "uniform", "-k", str(n),
                                                     "-d", "5s", "--warmup", "0s", "-c", "256", "-m", "2",
                                                     "--key-prefix", f"t{run}-", "--timeout", "10s"],
                                             f"takeover {durability} {run + 1}: load")
                    took, restore = self.restart_after_leases_expire(stack, wid, "takeover: restore")
                    runs.append({"load_throughput": load.get("throughput"), "start_to_answering_s": took,
                                 "restore": restore})
                    log(f"takeover {durability} {run + 1}: every partition answers {took} s after the start; "
                        f"{restore}")
                finally:
                    stack.stop()
            out["runs"][durability] = runs
        self.extra["takeover"] = out
