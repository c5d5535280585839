"""The holds part of the benchmark (SPEC §13, docs/HOLDS.md): reserve +
settle pairs per second against allows on the same worker, with the plain
and the batching client, and the memory one live hold costs a worker.

A mixin of `Harness` (bench/harness.py). Pairs and allows run on one
stack in alternating order per round, so that the drift of this shared
machine moves both alike; the targets table takes the median ratio.
"""

import time

from configs import HOLDS_POLICY, holds_config
from procs import log
from stacks import Stack


class HoldsParts:
    def holds(self):
        """1: `sluice bench --verb allow` against `--verb hold` (a reserve
        and the settle of its hold is one request), one worker, snapshot
        mode, the matrix's load (C, M, K, duration), both clients, in
        alternating order per round. 2: memory per live hold."""
        a = self.args
        stack = Stack(self, holds_config(), 1, "holds")
        try:
            for client in self.clients():
                for rnd in range(a.rounds):
                    for verb in (["allow", "hold"] if rnd % 2 == 0 else ["hold", "allow"]):
                        self.cell(stack, None, f"holds {verb} {client} round {rnd + 1}",
                                  self.load_flags() + ["--client", client, "--verb", verb, "--policy", HOLDS_POLICY],
                                  kind="holds", verb=verb, client=client, round=rnd + 1)
        finally:
            stack.stop()
        self.extra["holds"] = {"rounds": a.rounds, "memory": self.hold_memory()}

    def hold_memory(self):
        """One worker; N keys asked once each (their counters), then one
        reserve on each with a 1 h ttl (N live holds): the worker's RSS
        before and after the holds, over N. N stays under the 4,096 live
        holds a partition keeps (64 partitions)."""
        n = self.args.hold_keys
        client = "batching" if self.batching else "plain"
        flags = ["--client", client, "--policy", HOLDS_POLICY, "--dist", "seq", "-k", str(n), "-n", str(n),
                 "-c", "256", "-m", "2", "--key-prefix", "held-", "--timeout", "10s"]
        stack = Stack(self, holds_config(), 1, "holds-memory")
        try:
            (wid,) = list(stack.workers)
            out = {"keys": n, "client": client, "rss_empty_kib": stack.rss_kib(wid)["VmRSS"]}
            self.sluice_bench(stack, flags, f"holds memory: {n} keys asked once")
            time.sleep(2)  # a snapshot or two: what it allocates is freed again
            out["rss_keys_kib"] = stack.rss_kib(wid)["VmRSS"]
            held = self.sluice_bench(stack, flags + ["--verb", "reserve"], f"holds memory: {n} reserves")
            out["holds"] = held.get("allowed")
            out["reserve_throughput"] = held.get("throughput")
            out["errors"] = (held.get("errors") or {}).get("total")
            time.sleep(2)
            rss = stack.rss_kib(wid)
            out["rss_holds_kib"] = rss["VmRSS"]
            out["hwm_kib"] = rss["VmHWM"]
            if out["holds"]:
                out["bytes_per_hold"] = round((out["rss_holds_kib"] - out["rss_keys_kib"]) * 1024 / out["holds"])
            log(f"holds memory: {out['holds']} live holds on {n} keys: RSS {out['rss_keys_kib'] / 1024:.0f} -> "
                f"{out['rss_holds_kib'] / 1024:.0f} MiB, {out.get('bytes_per_hold')} bytes per hold")
            return out
        finally:
            stack.stop()
