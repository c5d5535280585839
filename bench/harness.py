#!/usr/bin/env python3
"""The sluice benchmark harness: runs the whole matrix with one load
generator (`sluice bench`; for the Redis baselines `sluice-bench-redis`,
the same engine and report) and rewrites the generated part of
docs/BENCHMARKS.md, plus docs/bench/results.json and docs/bench/*.png.

Run it through bench/run.sh (which installs what it needs and builds the
release binaries). Everything runs on loopback, on free ports, and every
process it starts is stopped by its pid when it ends (also on Ctrl-C).

What it measures, all with the same load (C in flight over M connections,
K keys uniform and Zipf, the same duration per cell):

- the ceiling: `sluice bench --serve-echo`, a bare responder on the
  workers' subjects that decides nothing;
- sluice through the plain subject and through the batching client, with 1
  and 2 workers, for each algorithm, in snapshot and journal durability;
- Redis + Lua (sorted-set sliding log, INCR fixed window, token bucket hash),
  loaded by `sluice-bench-redis`;
- the Redis targets again back to back (`paired`): rounds of the batching
  echo, sluice and Redis one right after the other, so that the machine's
  drift during the run does not decide them;
- hot keys (`hotkeys`, docs/CLIENT.md "Local budgets"): half of all asks on 10 keys, the rest
  uniform, under a fixed window the hot keys exceed: the batching echo,
  Redis INCR and sluice with local budgets off and on, back to back in
  rotating rounds, with over- and under-admission counted per key and
  window; and uniform keys with budgets off and on;
- p99 at half of sluice's best throughput, open loop, against the ceiling's
  p99 at the same rate;
- worker RSS with 1M active keys, and the time to restore them after kill -9;
- holds (`holds`, docs/HOLDS.md): reserve + settle pairs per second against
  allows on the same worker, both clients, alternating per round; and the
  worker's memory per live hold.
"""

# This file is the entry point (bench/run.sh runs it; the docstring above is
# its --help): `main` reads the options and `Harness` runs the parts asked for.
# The rest lives by job: procs.py (processes, CPU accounting, a quiet
# machine), stacks.py (nats-server and workers), configs.py (the configs),
# cells.py (one measured cell), parts_load.py, parts_state.py,
# parts_usage.py and parts_holds.py (the parts), report.py (the document).

import argparse
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

from cells import Cells
from configs import ALGORITHMS, ROOT, matrix_config
from parts_holds import HoldsParts
from parts_load import LoadParts
from parts_state import StateParts
from parts_usage import UsageParts
from procs import PROCS, Foreign, log, machine_quiet

DOCS = ROOT / "docs" / "BENCHMARKS.md"
ASSETS = ROOT / "docs" / "bench"


class Harness(Cells, LoadParts, StateParts, UsageParts, HoldsParts):
    """The whole run: the parts asked for (--parts), in their order, plus
    the machine's state and the versions measured."""

    def versions(self):
        def run(argv):
            try:
                return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
            except OSError:
                return "?"
        cpu = "?"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 // 1024
        return {
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu, "cores": os.cpu_count(), "mem_gib": mem,
            "kernel": platform.release(),
            "os": run(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
            "rustc": run(["rustc", "--version"]),
            "nats_server": run([self.nats_server, "--version"]),
            "sluice_commit": run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
            "dirty": bool(run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"])),
        }

    def run(self):
        a = self.args
        self.batching = self.detect_batching()
        quiet, load1, busy = machine_quiet()
        self.extra["start"] = {"load1": load1, "compilers": busy[:10], "quiet": quiet}
        self.extra["versions"] = self.versions()
        log(f"machine quiet: {quiet} (load {load1:.2f}, {len(busy)} compiler processes); "
            f"batching client: {'yes' if self.batching else 'no'}")
        t0 = time.monotonic()
        f = Foreign()
        if "ceiling" in a.parts:
            self.ceiling()
        if "redis" in a.parts:
            self.redis()
        if "matrix" in a.parts:
            self.sluice_matrix()
        if "batching" in a.parts:
            self.batching_grid()
        if "paired" in a.parts:
            self.paired()
        if "hotkeys" in a.parts:
            self.hotkeys()
        if "rate" in a.parts:
            self.half_load()
        if "stall" in a.parts:
            self.snapshot_stall()
        if "million" in a.parts:
            self.million()
        if "flood" in a.parts:
            self.flood()
        if "takeover" in a.parts:
            self.takeover()
        if "usage" in a.parts:
            self.usage()
        if "holds" in a.parts:
            self.holds()
        self.extra["total"] = f.done()
        quiet, load1, busy = machine_quiet()
        self.extra["end"] = {"load1": load1, "compilers": busy[:10], "quiet": quiet}
        self.extra["elapsed_s"] = round(time.monotonic() - t0)
        log(f"done in {self.extra['elapsed_s']} s")

    def detect_batching(self):
        if self.args.no_batching:
            return False
        r = subprocess.run([self.sluice, "bench", "--help"], capture_output=True, text=True)
        if "batching" not in r.stdout:
            return False
        # The stub build says so when asked.
        cfg = self.workdir / "probe.toml"
        cfg.write_text(matrix_config("snapshot"))
        nats, echo = self.start_echo(cfg)
        try:
            r = subprocess.run([self.sluice, "bench", "--nats", nats.url, "--config", str(cfg), "--target", "echo",
                                "--client", "batching", "-n", "100", "-q", "--json"],
                               capture_output=True, text=True, timeout=60)
            return r.returncode == 0
        finally:
            PROCS.stop(echo)
            nats.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smaller matrix, shorter cells (a smoke run)")
    p.add_argument("--duration", type=float, help="measured seconds per cell (default 4, quick 2)")
    p.add_argument("--warmup", type=float, help="warm-up seconds per cell (default 1, quick 0.5)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--connections", type=int, default=2)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--million-keys", type=int, help="keys for the memory/restore test (default 1000000, quick 200000)")
    p.add_argument("--parts",
                   default="ceiling,redis,matrix,batching,paired,hotkeys,rate,stall,million,flood,takeover,usage,holds",
                   help="comma-separated subset of ceiling,redis,matrix,batching,paired,hotkeys,rate,stall,million,"
                   "flood,takeover,usage,holds")
    p.add_argument("--takeover-keys", type=int, default=100_000,
                   help="keys under load before the kill of the takeover test (default 100000)")
    p.add_argument("--flood-bound", type=int, help="max_keys of the flood test's worker, which is sent 5 times as "
                   "many new keys, twice (default 500000, quick 100000)")
    p.add_argument("--rounds", type=int, help="rounds of the back-to-back Redis and hot-key comparisons "
                   "(default 3, quick 2)")
    p.add_argument("--lease-ttl", help="lease_ttl of the memory/restore test's worker (default: the worker's, 3s); "
                   "the kill -9 -> answering time is about lease_ttl plus the restore")
    p.add_argument("--hold-keys", type=int, help="live holds of the memory-per-hold test, one per key; under 4096 "
                   "per partition (default 200000, quick 50000)")
    p.add_argument("--stall-keys", type=int, help="keys held while measuring snapshot stalls (default 300000, quick 100000)")
    p.add_argument("--no-batching", action="store_true", help="leave the batching client out")
    p.add_argument("--no-docs", action="store_true", help="print results; do not touch docs/")
    p.add_argument("--results", help="write the raw results JSON here (default docs/bench/results.json)")
    p.add_argument("--render-only", help="regenerate the docs from a results JSON without running anything")
    p.add_argument("--sluice", default=os.environ.get("SLUICE_BIN"))
    p.add_argument("--bench-redis", default=os.environ.get("SLUICE_BENCH_REDIS_BIN"),
                   help="the Redis load generator (default: $SLUICE_BENCH_REDIS_BIN, else the release build's)")
    p.add_argument("--nats-server", default=str(ROOT / ".tools/venv/bin/nats-server"))
    a = p.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import report
    if a.render_only:
        data = json.loads(Path(a.render_only).read_text())
        report.write_docs(data, DOCS, ASSETS)
        return
    a.parts = a.parts.split(",")
    if a.quick:
        a.duration = a.duration or 2.0
        a.warmup = a.warmup if a.warmup is not None else 0.5
        a.million_keys = a.million_keys or 200_000
        a.flood_bound = a.flood_bound or 100_000
        a.stall_keys = a.stall_keys or 100_000
        a.hold_keys = a.hold_keys or 50_000
        a.rounds = a.rounds or 2
        a.algorithms = ["fixed_window", "sliding_log", "sliding_window"]
        a.dists = ["uniform"]
        a.workers = [1, 2]
        a.durabilities = ["snapshot", "journal"]
        a.concurrencies = [a.concurrency]
    else:
        a.duration = a.duration or 4.0
        a.warmup = a.warmup if a.warmup is not None else 1.0
        a.million_keys = a.million_keys or 1_000_000
        a.flood_bound = a.flood_bound or 500_000
        a.stall_keys = a.stall_keys or 300_000
        a.hold_keys = a.hold_keys or 200_000
        a.rounds = a.rounds or 3
        a.algorithms = ALGORITHMS
        a.dists = ["uniform", "zipf"]
        a.workers = [1, 2]
        a.durabilities = ["snapshot", "journal"]
        a.concurrencies = [a.concurrency, 256]
    release = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
    a.sluice = a.sluice or str(release / "sluice")
    a.bench_redis = a.bench_redis or str(release / "sluice-bench-redis")

    h = Harness(a)

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        h.run()
    finally:
        PROCS.stop_all()
    data = {
        "args": {k: v for k, v in vars(a).items() if k not in ("sluice", "bench_redis", "nats_server", "render_only")},
        "results": h.results,
        **h.extra,
    }
    data["batching"] = h.batching
    out = Path(a.results) if a.results else ASSETS / "results.json"
    if a.no_docs and not a.results:
        out = h.workdir / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    log(f"results in {out}")
    if a.no_docs:
        print(report.render(data, None))
    else:
        report.write_docs(data, DOCS, ASSETS)
        log(f"wrote {DOCS.relative_to(ROOT)} and {ASSETS.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()
