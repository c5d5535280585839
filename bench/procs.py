"""The processes the harness starts and the machine they run on: `Procs`
(every long-running process started, stopped by its pid, also on Ctrl-C),
free loopback ports, CPU accounting (`Foreign`: the CPU other processes used
during a cell) and whether the machine is quiet (no compilers, low load).

Kept apart from the benchmark parts so that each part only says what it
runs, not how a process is started, stopped or accounted for.
"""

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Procs:
    """Every long-running process the harness started, stopped by pid."""

    def __init__(self):
        self.live = {}

    def start(self, name, argv, logfile, env=None):
        f = open(logfile, "ab")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        f.close()
        self.live[p.pid] = (name, p)
        return p

    def stop(self, p, timeout=20):
        if p is None or p.pid not in self.live:
            return None
        name, _ = self.live.pop(p.pid)
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{name} (pid {p.pid}) did not stop in {timeout}s; SIGKILL")
                p.kill()
                p.wait()
        return p.returncode

    def kill9(self, p):
        name, _ = self.live.pop(p.pid)
        p.kill()
        p.wait()

    def stop_all(self):
        for pid, (name, p) in list(self.live.items()):
            self.stop(p, timeout=10)

    def pids(self):
        return [pid for pid, (_, p) in self.live.items() if p.poll() is None]


PROCS = Procs()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_busy_s():
    """Seconds of CPU the whole machine spent busy (all cores)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def proc_cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return 0.0


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Foreign:
    """CPU that processes other than ours used during a span: the machine's
    busy time, minus our long-running processes, minus the children we
    waited for (the load generator)."""

    def __init__(self):
        self.pids = PROCS.pids()
        self.t = time.monotonic()
        self.busy = cpu_busy_s()
        self.ours = {pid: proc_cpu_s(pid) for pid in self.pids}
        self.children = children_cpu_s()
        self.self_cpu = time.process_time()

    def done(self):
        wall = time.monotonic() - self.t
        busy = cpu_busy_s() - self.busy
        ours = sum(proc_cpu_s(pid) - c for pid, c in self.ours.items())
        ours += children_cpu_s() - self.children
        ours += time.process_time() - self.self_cpu
        foreign = max(0.0, busy - ours)
        return {"wall_s": round(wall, 2), "busy_s": round(busy, 2), "ours_s": round(ours, 2),
                "foreign_cores": round(foreign / wall, 2) if wall > 0 else 0.0}


def busy_processes():
    """Names of compilers and test runs on the machine right now."""
    names = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            comm = (d / "comm").read_text().strip()
        except OSError:
            continue
        if comm in ("rustc", "cargo", "rust-lld", "cc1", "ld", "clippy-driver") or comm.startswith("workers-") or comm.startswith("harness-"):
            names.append(comm)
    return names


def machine_quiet():
    load1 = os.getloadavg()[0]
    busy = busy_processes()
    return load1 < 0.7 and not busy, load1, busy

