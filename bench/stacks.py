"""What a benchmark runs against: `Nats` (a nats-server with the
JetStream config `sluice nats-config` makes for a sluice config) and
`Stack` (that nats-server plus n workers sharing one config, balanced and
answering before any load), and the reading of a worker's log (when it
started, when its partitions answered, how long each restore took).

Kept apart from the benchmark parts: they say what to measure on a stack,
this module how a stack comes up, settles and goes down.
"""

import datetime as dt
import json
import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from procs import PROCS, free_port, log


class Nats:
    def __init__(self, binary, sluice, workdir, partitions_config):
        self.dir = Path(tempfile.mkdtemp(prefix="nats-", dir=workdir))
        self.port = free_port()
        conf = subprocess.run([sluice, "nats-config", "--config", str(partitions_config)],
                              check=True, capture_output=True, text=True).stdout
        (self.dir / "nats.conf").write_text(conf)
        self.proc = PROCS.start("nats-server", [binary, "-c", str(self.dir / "nats.conf"), "-a", "127.0.0.1",
                                                "-p", str(self.port), "-js", "-sd", str(self.dir / "js")],
                                self.dir / "nats.log")
        self.url = f"nats://127.0.0.1:{self.port}"
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nats-server did not start: see {self.dir / 'nats.log'}")

    def stop(self):
        PROCS.stop(self.proc)


class Stack:
    """nats-server + n workers sharing one config."""

    def __init__(self, h, config_text, workers, label):
        self.h = h
        self.dir = Path(tempfile.mkdtemp(prefix=f"stack-{label}-", dir=h.workdir))
        self.config = self.dir / "sluice.toml"
        self.config.write_text(config_text)
        self.nats = Nats(h.nats_server, h.sluice, h.workdir, self.config)
        self.workers = {}
        self.count = 0
        started = time.monotonic()
        for _ in range(workers):
            self.start_worker()
        self.wait_balanced()
        self.h.sluice_bench(self, ["--requests", "0", "--wait-ready", "60s"], "ready")
        log(f"stack {label}: {workers} worker(s) answering after {time.monotonic() - started:.1f}s")

    def start_worker(self):
        wid = f"w{self.count}"
        self.count += 1
        logf = self.dir / f"{wid}.log"
        env = dict(os.environ, SLUICE_LOG="info", NO_COLOR="1")
        p = PROCS.start(wid, [self.h.sluice, "worker", "--nats", self.nats.url, "--config", str(self.config),
                              "--worker-id", wid], logf, env=env)
        self.workers[wid] = (p, logf)
        return wid

    def status(self):
        r = subprocess.run([self.h.sluice, "status", "--json", "--nats", self.nats.url, "--config",
                            str(self.config)], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)

    def wait_balanced(self, timeout=60):
        n = len(self.workers)
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.status()
            if s and not s["unowned"] and len(s["workers"]) == n:
                shares = [len(w["partitions"]) for w in s["workers"]]
                total = len(s["partitions"])
                answering = all(p["answering"] for w in s["workers"] for p in w["partitions"])
                if sum(shares) == total and max(shares) - min(shares) <= 1 and answering:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"workers did not settle; logs in {self.dir}")

    def rss_kib(self, wid):
        p, _ = self.workers[wid]
        out = {}
        for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
        return out

    def kill9(self, wid):
        p, _ = self.workers.pop(wid)
        PROCS.kill9(p)

    def stop(self):
        for wid, (p, logf) in list(self.workers.items()):
            rc = PROCS.stop(p)
            if rc not in (0, None):
                log(f"worker {wid} exited {rc}; see {logf}")
        self.workers.clear()
        self.nats.stop()


ANSI = re.compile(r"\x1b\[[0-9;]*m")
TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")


def log_events(path):
    """(time, line) of a worker log, ANSI stripped."""
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        line = ANSI.sub("", line)
        m = TS.match(line)
        if m:
            t = dt.datetime.fromisoformat(m.group(1)[:26]).replace(tzinfo=dt.timezone.utc).timestamp()
            out.append((t, line))
    return out



def restore_times(logfile):
    """From a worker log: when it started, when partitions began answering,
    and the per-partition took_ms."""
    ev = log_events(logfile)
    start = next((t for t, l in ev if "worker started" in l), None)
    answering = [(t, l) for t, l in ev if l.rstrip().endswith("answering") or " answering" in l and "took_ms" in l]
    took = [int(m.group(1)) for _, l in answering for m in [re.search(r"took_ms=(\d+)", l)] if m]
    keys = [int(m.group(1)) for _, l in answering for m in [re.search(r"keys=(\d+)", l)] if m]
    if not answering or start is None:
        return {"partitions": len(answering)}
    return {
        "partitions": len(answering),
        "keys": sum(keys),
        "first_answering_s": round(answering[0][0] - start, 3),
        "last_answering_s": round(answering[-1][0] - start, 3),
        "took_ms_max": max(took) if took else None,
        "took_ms_median": sorted(took)[len(took) // 2] if took else None,
    }
