"""The harness's core: `Cells` holds a run's state (arguments, binaries,
scratch directory, results) and measures one cell: a run of the load
generator (`sluice bench`, or `sluice-bench-redis` for the Redis targets;
the same engine and report) against a stack, the echo ceiling or Redis,
with the CPU other processes used meanwhile; and it starts the echo
responder and redis-server the parts measure against.

The benchmark parts (parts_*.py) build on it; bench/harness.py puts them
together into `Harness`.
"""

import json
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from procs import PROCS, Foreign, free_port, log, machine_quiet
from stacks import Nats, Stack


class Cells:
    def __init__(self, args):
        self.args = args
        self.sluice = args.sluice
        self.bench_redis = args.bench_redis
        self.nats_server = args.nats_server
        self.workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
        self.results = []
        self.extra = {}
        self.batching = None
        log(f"logs and scratch in {self.workdir}")

    def load_flags(self, c=None, m=None):
        a = self.args
        return ["-c", str(c or a.concurrency), "-m", str(m or a.connections), "-k", str(a.keys),
                "--duration", f"{round(a.duration * 1000)}ms", "--warmup", f"{round(a.warmup * 1000)}ms"]

    def run_bench(self, cmd, argv, label):
        """Runs `cmd ... --json -q` (`sluice bench`, or `sluice-bench-redis`:
        the same load generator and report); returns the report (dict) with
        the CPU other processes used meanwhile, or {"error": ...}."""
        logf = self.workdir / "bench.log"
        quiet, load1, busy = machine_quiet()
        foreign = Foreign()
        with open(logf, "a") as f:
            f.write(f"\n=== {label}: {' '.join(cmd + argv)}\n")
            f.flush()
            r = subprocess.run(cmd + ["--json", "-q"] + argv, stdout=subprocess.PIPE,
                               stderr=f, text=True, timeout=600)
        cpu = foreign.done()
        try:
            report = json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            report = {}
        if r.returncode != 0:
            tail = (self.workdir / "bench.log").read_text().splitlines()[-3:]
            report["error"] = " / ".join(tail)
            log(f"{label}: FAILED: {report['error']}")
        report["machine"] = {"load1_before": round(load1, 2), "compilers_before": len(busy), **cpu}
        return report

    def sluice_bench(self, stack, argv, label):
        return self.run_bench([self.sluice, "bench"], ["--nats", stack.nats.url, "--config", str(stack.config)] + argv,
                              label)

    def cell(self, where, config, label, argv, **tags):
        """One measured cell against `where`: a Stack (sluice), a NATS URL
        (`sluice bench` against the echo responder there), or a redis:// URL
        (`sluice-bench-redis`, whose --target picks the Lua limiter)."""
        if isinstance(where, Stack):
            rep = self.sluice_bench(where, argv, label)
        elif where.startswith("redis://"):
            rep = self.run_bench([self.bench_redis], ["--redis", where, "--config", str(config)] + argv, label)
        else:
            rep = self.run_bench([self.sluice, "bench"], ["--nats", where, "--config", str(config)] + argv, label)
        rep["tags"] = tags
        rep["label"] = label
        self.results.append(rep)
        if "error" not in rep:
            lat = rep["latency_us"]
            log(f"{label}: {rep['throughput']:.0f}/s p50 {lat['p50']}µs p99 {lat['p99']}µs "
                f"p99.9 {lat['p999']}µs errors {rep['errors']['total']} other-cpu {rep['machine']['foreign_cores']}")
        return rep

    def clients(self):
        return ["plain", "batching"] if self.batching else ["plain"]

    def start_echo(self, cfg):
        """A nats-server for `cfg` and the echo responder on it: (nats, process)."""
        nats = Nats(self.nats_server, self.sluice, self.workdir, cfg)
        echo = PROCS.start("echo", [self.sluice, "bench", "--serve-echo", "--nats", nats.url], nats.dir / "echo.log")
        return nats, echo

    def start_redis(self):
        """A redis-server with persistence off on a free port: (url, process)."""
        port = free_port()
        rdir = Path(tempfile.mkdtemp(prefix="redis-", dir=self.workdir))
        p = PROCS.start("redis-server", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                         "--save", "", "--appendonly", "no", "--dir", str(rdir)],
                        rdir / "redis.log")
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return f"redis://127.0.0.1:{port}/", p
            except OSError:
                if time.time() > deadline:
                    PROCS.stop(p)
                    raise
                time.sleep(0.05)
