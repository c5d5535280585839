"""The throughput and latency parts of the benchmark: the echo ceiling,
Redis + Lua, sluice's matrix (algorithms x clients x workers x
durability), the batching grid, snapshot stalls, the Redis targets back to
back (`paired`), hot keys with local budgets (docs/CLIENT.md, "Local budgets") and p99 at half
load.

A mixin of `Harness` (bench/harness.py): each method is one part (or a
helper of one) and measures through `Cells.cell`.
"""

import subprocess

from configs import HOT, MILLION_CONFIG, hotkeys_config, matrix_config
from procs import PROCS, log
from stacks import Stack


class LoadParts:
    def ceiling(self):
        a = self.args
        cfg = self.workdir / "echo.toml"
        cfg.write_text(matrix_config("snapshot"))
        nats, echo = self.start_echo(cfg)
        try:
            for client in self.clients():
                for dist in a.dists:
                    for c in a.concurrencies:
                        if dist == "zipf" and c != a.concurrency:
                            continue
                        self.cell(nats.url, cfg, f"echo {client} {dist} C={c}",
                                  self.load_flags(c) + ["--target", "echo", "--client", client, "--dist", dist],
                                  kind="echo", client=client, dist=dist, c=c)
        finally:
            PROCS.stop(echo)
            nats.stop()

    def redis(self):
        a = self.args
        cfg = self.workdir / "redis.toml"
        cfg.write_text(matrix_config("snapshot"))
        url, p = self.start_redis()
        try:
            version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
            self.extra["redis_version"] = next((v.split("=")[1] for v in version if v.startswith("v=")), "?")
            for target, policy in [("redis-zset", "sliding_log"), ("redis-incr", "fixed_window"),
                                   ("redis-bucket", "token_bucket")]:
                for dist in a.dists:
                    for c in a.concurrencies:
                        if dist == "zipf" and c != a.concurrency:
                            continue
                        self.cell(url, cfg, f"{target} {dist} C={c}",
                                  self.load_flags(c) + ["--target", target, "--policy", policy, "--dist", dist],
                                  kind=target, policy=policy, dist=dist, c=c)
                # The load under which the batching client batches well (see batching()).
                if self.batching and target != "redis-bucket" and "batching" in a.parts:
                    self.cell(url, cfg, f"{target} uniform C=1024 M=1",
                              self.load_flags(1024, 1) + ["--target", target, "--policy", policy],
                              kind=target, policy=policy, dist="uniform", c=1024, m=1)
        finally:
            PROCS.stop(p)

    def sluice_matrix(self):
        a = self.args
        for durability in a.durabilities:
            for workers in a.workers:
                stack = Stack(self, matrix_config(durability), workers, f"{durability}-{workers}w")
                try:
                    for algo in a.algorithms:
                        for client in self.clients():
                            for dist in a.dists:
                                self.cell(stack, None, f"sluice {durability} {workers}w {algo} {client} {dist}",
                                          self.load_flags() + ["--client", client, "--policy", algo,
                                                               "--dist", dist],
                                          kind="sluice", durability=durability, workers=workers,
                                          algorithm=algo, client=client, dist=dist, c=a.concurrency)
                        # The batching client against Redis at the higher concurrency too.
                        if (self.batching and durability == "snapshot" and algo in ("sliding_log", "fixed_window")
                                and len(a.concurrencies) > 1):
                            for c in a.concurrencies:
                                if c == a.concurrency:
                                    continue
                                self.cell(stack, None, f"sluice {durability} {workers}w {algo} batching uniform C={c}",
                                          self.load_flags(c) + ["--client", "batching", "--policy", algo],
                                          kind="sluice", durability=durability, workers=workers,
                                          algorithm=algo, client="batching", dist="uniform", c=c)
                finally:
                    stack.stop()

    def batching_grid(self):
        """How much the batching client batches, and what that buys: it groups
        asks per worker and connection, so a batch grows with the asks in
        flight per connection."""
        if not self.batching:
            return
        stack = Stack(self, matrix_config("snapshot"), 1, "batching")
        try:
            grid = [(64, 2), (64, 1), (256, 2), (256, 1), (1024, 1)]
            for algo in ("fixed_window", "sliding_log"):
                for c, m in grid if algo == "fixed_window" else [(1024, 1)]:
                    for client in (["plain", "batching"] if algo == "fixed_window" else ["batching"]):
                        self.cell(stack, None, f"batching grid {algo} {client} C={c} M={m}",
                                  self.load_flags(c, m) + ["--client", client, "--policy", algo],
                                  kind="grid", algorithm=algo, client=client, c=c, m=m, workers=1, dist="uniform")
        finally:
            stack.stop()

    def snapshot_stall(self):
        """What snapshots do to latency: one worker holding many keys, a
        light open-loop load over them, snapshots every 2 s vs never."""
        n = self.args.stall_keys
        for interval in ("2s", "1h"):
            cfg = MILLION_CONFIG.replace('durability = "snapshot"',
                                         f'durability = "snapshot"\nsnapshot_interval = "{interval}"')
            stack = Stack(self, cfg, 1, f"stall-{interval}")
            try:
                client = "batching" if self.batching else "plain"
                self.sluice_bench(stack, ["--client", client, "--dist", "seq", "-k", str(n), "-n", str(n),
                                          "-c", "256", "--key-prefix", "s-", "--timeout", "10s"], f"fill {n} keys")
                self.cell(stack, None, f"snapshots every {interval}: {n} keys, 5000/s",
                          ["-k", str(n), "--key-prefix", "s-", "--rate", "5000", "-c", "512", "-m", "2",
                           "--duration", f"{round(self.args.duration * 1000) + 2000}ms",
                           "--warmup", f"{round(self.args.warmup * 1000)}ms"],
                          kind="stall", interval=interval, keys=n, rate=5000)
            finally:
                stack.stop()

    def best(self, client):
        rows = [r for r in self.results if "error" not in r and r["tags"].get("kind") == "sluice"
                and r["tags"]["client"] == client and r["tags"]["durability"] == "snapshot"
                and r["tags"]["dist"] == "uniform" and r["tags"]["c"] == self.args.concurrency]
        return max(rows, key=lambda r: r["throughput"]) if rows else None

    def paired(self):
        """The Redis targets measured back to back. On this VM the same cell
        can differ by 20 % between two runs ten minutes apart, and the matrix
        measures Redis minutes before sluice. Here each round runs the
        batching echo (the ceiling), sluice (one worker, snapshot mode) and
        Redis one right after the other, in an order that rotates by round,
        with all three already running, so a drift moves all three alike."""
        if not self.batching:
            return
        a = self.args
        cfg = self.workdir / "paired.toml"
        cfg.write_text(matrix_config("snapshot"))
        echo_nats, echo = self.start_echo(cfg)
        stack = Stack(self, matrix_config("snapshot"), 1, "paired")
        redis_url, redis = self.start_redis()
        try:
            for algo, target in (("sliding_log", "redis-zset"), ("fixed_window", "redis-incr")):
                for c in a.concurrencies:
                    members = [
                        ("echo", echo_nats.url, ["--target", "echo", "--client", "batching"]),
                        ("sluice", stack.nats.url, ["--client", "batching"]),
                        (target, redis_url, ["--target", target]),
                    ]
                    for rnd in range(a.rounds):
                        k = rnd % len(members)
                        for member, url, argv in members[k:] + members[:k]:
                            self.cell(url, cfg, f"paired {algo} C={c} round {rnd + 1}: {member}",
                                      self.load_flags(c) + argv + ["--policy", algo],
                                      kind="paired", member=member, algorithm=algo, redis=target, c=c,
                                      round=rnd + 1)
        finally:
            PROCS.stop(redis)
            stack.stop()
            PROCS.stop(echo)
            echo_nats.stop()

    def local_budget_supported(self):
        """Whether this build's config takes `local_budget` (docs/CONFIG.md): the
        config parser refuses fields it does not know."""
        cfg = self.workdir / "budget-probe.toml"
        cfg.write_text(hotkeys_config(True))
        r = subprocess.run([self.sluice, "nats-config", "--config", str(cfg)], capture_output=True, text=True)
        if r.returncode != 0:
            log(f"hotkeys: this build has no local budgets ({r.stderr.strip().splitlines()[-1:]}); "
                "the budgets-on cells run with budgets off")
        return r.returncode == 0

    def hotkeys(self):
        """The hot-key workload (docs/BENCHMARKS.md, "Hot keys"), back to back in rounds of rotating
        order like `paired`: the batching echo (the ceiling), Redis INCR,
        sluice through the batching client with local budgets off and on
        (one worker, snapshot mode, the same fixed window), and uniform keys
        with budgets off and on. The fixed-window cells count over- and
        under-admission per key and window (the reports' `admission`)."""
        if not self.batching:
            return
        a = self.args
        budgets = self.local_budget_supported()
        cfg = self.workdir / "hotkeys.toml"
        cfg.write_text(hotkeys_config(budgets))
        echo_nats, echo = self.start_echo(cfg)
        stack = Stack(self, hotkeys_config(budgets), 1, "hotkeys")
        redis_url, redis = self.start_redis()
        self.extra["hotkeys"] = {**HOT, "local_budget": budgets, "rounds": a.rounds, "workers": 1}
        hot = ["--hot-keys", str(HOT["hot_keys"]), "--hot-share", str(HOT["hot_share"])]
        load = ["-c", str(HOT["c"]), "-m", str(HOT["m"]), "-k", str(HOT["keys"]),
                "--duration", f"{round(a.duration * 1000)}ms", "--warmup", f"{round(a.warmup * 1000)}ms"]
        batching = ["--client", "batching"]
        # sluice's rows run the batching client as it ships: its deny cache
        # on, so a hot key's denials are local with budgets off and on.
        client = batching + ["--deny-cache"]
        # (member, where, keys, policy, flags)
        members = [
            ("echo", echo_nats.url, "hot", "hot", ["--target", "echo"] + batching + hot),
            ("redis-incr", redis_url, "hot", "hot", ["--target", "redis-incr"] + hot),
            ("budgets off", stack.nats.url, "hot", "hot", client + hot),
            ("budgets on", stack.nats.url, "hot", "hot_budget", client + hot),
            ("uniform, budgets off", stack.nats.url, "uniform", "hot", client),
            ("uniform, budgets on", stack.nats.url, "uniform", "hot_budget", client),
        ]
        try:
            for rnd in range(a.rounds):
                k = rnd % len(members)
                for member, url, keys, policy, argv in members[k:] + members[:k]:
                    self.cell(url, cfg, f"hotkeys round {rnd + 1}: {member}",
                              load + argv + ["--policy", policy], kind="hotkeys", member=member, keys=keys,
                              policy=policy, round=rnd + 1)
        finally:
            PROCS.stop(redis)
            stack.stop()
            PROCS.stop(echo)
            echo_nats.stop()

    def half_load(self):
        """p99 at half of sluice's best throughput, sluice vs the ceiling."""
        a = self.args
        for client in self.clients():
            best = self.best(client)
            if not best:
                continue
            rate = round(best["throughput"] / 2)
            t = best["tags"]
            flags = self.load_flags(512) + ["--rate", str(rate), "--client", client]
            cfg = self.workdir / "echo.toml"
            nats, echo = self.start_echo(cfg)
            try:
                self.cell(nats.url, cfg, f"echo {client} open loop {rate}/s", flags + ["--target", "echo"],
                          kind="echo-rate", client=client, rate=rate, dist="uniform")
            finally:
                PROCS.stop(echo)
                nats.stop()
            stack = Stack(self, matrix_config("snapshot"), t["workers"], f"rate-{client}")
            try:
                self.cell(stack, None, f"sluice {client} {t['workers']}w {t['algorithm']} open loop {rate}/s",
                          flags + ["--policy", t["algorithm"]], kind="sluice-rate", client=client, rate=rate,
                          workers=t["workers"], algorithm=t["algorithm"], dist="uniform")
            finally:
                stack.stop()
