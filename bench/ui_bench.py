#!/usr/bin/env python3
"""How long each page of the gateway's dashboard (/ui, SPEC §15) takes with
1M keys in the system.

Starts its own stack (nats-server with JetStream, 2 `sluice worker`s, a
`sluice gateway`, all stopped by PID at the end), fills it through `sluice
bench`: every one of K keys (default 1,000,000: `u-0` .. `u-999999`) asked
exactly once (`--dist seq`), so the workers hold K counters and the usage
history of the last minutes holds K keys; then 20,000 asks over 100 `hot-`
keys (15 per second each under `default`: most are denied). Then times N
(default 20) sequential GETs of every page from one HTTP client and prints
p50, p99 and max per page as a markdown table (and JSON with --json).

    bench/ui_bench.py [--sluice target/release/sluice] [--keys 1000000] [--n 20] [--settle 75]

Needs SLUICE_NATS_SERVER (scripts/install-deps.sh prints it). Results go in
docs/BENCHMARKS.md ("The dashboard").
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(what, check, within=60.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    raise SystemExit(f"ui_bench: {what} not within {within} s")


def rss_mib(pid):
    """A process's resident set (VmRSS) in MiB; 0 where /proc does not say."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", default=str(ROOT / "target/release/sluice"))
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait after filling before timing (75: the minutes counted in are final, "
                         "as for keys counted earlier in the last hour rather than this minute)")
    a = ap.parse_args()
    nats_server = os.environ.get("SLUICE_NATS_SERVER") or shutil.which("nats-server")
    if not nats_server:
        raise SystemExit("ui_bench: set SLUICE_NATS_SERVER (scripts/install-deps.sh prints it)")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-ui-bench-"))
    procs = []
    workers = []

    def spawn(name, args, env=None):
        log = open(tmp / f"{name}.log", "w")
        procs.append(subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env))
        return procs[-1]

    try:
        config = ROOT / "config/sluice.toml"
        nats_port, http_port = free_port(), free_port()
        url, base = f"nats://127.0.0.1:{nats_port}", f"http://127.0.0.1:{http_port}"
        conf = tmp / "nats.conf"
        conf.write_text(subprocess.run([a.sluice, "nats-config", "--config", str(config)], check=True,
                                       capture_output=True, text=True).stdout)
        spawn("nats-server", [nats_server, "-c", str(conf), "-a", "127.0.0.1", "-p", str(nats_port),
                              "-js", "-sd", str(tmp / "js")])
        env = {**os.environ, "SLUICE_NATS_URL": url, "SLUICE_CONFIG": str(config)}
        until("nats-server", lambda: socket.create_connection(("127.0.0.1", nats_port), 0.5).close() or True)
        for i in range(2):
            workers.append(spawn(f"worker-{i}", [a.sluice, "worker", "--worker-id", f"b{i}"], env))
        spawn("gateway", [a.sluice, "gateway", "--listen", f"127.0.0.1:{http_port}"], env)

        def settled():
            out = subprocess.run([a.sluice, "status", "--json"], env=env, capture_output=True, text=True)
            s = json.loads(out.stdout)
            return not s["unowned"] and len(s["workers"]) == 2
        until("the workers", settled)
        until("the gateway", lambda: urllib.request.urlopen(base + "/healthz").status == 200)

        t0 = time.monotonic()
        subprocess.run([a.sluice, "bench", "--client", "batching", "-c", "256", "-m", "2", "--dist", "seq",
                        "-k", str(a.keys), "--requests", str(a.keys), "--key-prefix", "u-", "-q"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([a.sluice, "bench", "-k", "100", "--requests", "20000", "--key-prefix", "hot-", "-q"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        load_s = time.monotonic() - t0

        first = {}

        def counted():
            t = time.perf_counter()
            with urllib.request.urlopen(base + "/v1/usage?top=1") as r:
                keys = json.loads(r.read())["keys"]
            first["ms"] = round((time.perf_counter() - t) * 1000, 1)
            return keys
        until("usage", counted)
        # The first top query ranks every bucket it reads (nothing is kept yet).
        first_top_ms = first["ms"]
        time.sleep(a.settle)
        status = json.loads(subprocess.run([a.sluice, "status", "--json"], env=env, capture_output=True,
                                           text=True).stdout)
        held = sum(w["keys"] for w in status["workers"])
        rss_before = [rss_mib(w.pid) for w in workers]

        pages = [
            ("top 20 by used, last 1h", "/ui/top"),
            ("top 20 by denied, last 1h", "/ui/top?by=denied"),
            ("top 1000 by used, last 1h", "/ui/top?n=1000"),
            ("usage of one key, last 1h (1m)", "/ui/usage?key=u-4242"),
            ("usage of one key, last 24h (5m)", "/ui/usage?key=u-4242&last=24h"),
            ("usage of one key, last 30d (1h)", "/ui/usage?key=u-4242&last=30d"),
            ("key state (inspect)", "/ui/key?key=u-4242"),
            ("policies", "/ui/policies"),
            ("status (64 partitions, 2 workers)", "/ui/status"),
        ]
        results = []
        for name, path in pages:
            lat = []
            for _ in range(a.n):
                t = time.perf_counter()
                with urllib.request.urlopen(base + path, timeout=30) as r:
                    body = r.read()
                    assert r.status == 200 and b'class="error"' not in body, (path, body[-500:])
                lat.append((time.perf_counter() - t) * 1000)
            lat.sort()
            results.append({"page": name, "path": path, "n": a.n, "p50_ms": round(lat[len(lat) // 2], 1),
                            "p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1),
                            "max_ms": round(lat[-1], 1), "bytes": len(body)})
        rss = [rss_mib(w.pid) for w in workers]
        out = {"keys": a.keys, "counters_held": held, "load_s": round(load_s, 1), "first_top_ms": first_top_ms,
               "worker_rss_mib_before": rss_before,
               "worker_rss_mib": rss,
               "loadavg": os.getloadavg()[0], "pages": results}
        if a.json:
            print(json.dumps(out, indent=2))
        print(f"{a.keys:,} keys asked once each (+20,000 asks over 100 hot keys) in {load_s:.1f} s"
              f"{f', timed {a.settle:.0f} s later' if a.settle else ''}; "
              f"the workers hold {held:,} counters; worker RSS before the pages "
              f"{', '.join(f'{r} MiB' for r in rss_before)}, after {', '.join(f'{r} MiB' for r in rss)}; "
              f"the first top query (GET /v1/usage?top=1) took {first_top_ms} ms; load average (1 min) {os.getloadavg()[0]:.2f}\n")
        print("| page | n | p50 | p99 | max | bytes |\n|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['page']} (`{r['path']}`) | {r['n']} | {r['p50_ms']} ms | {r['p99_ms']} ms | "
                  f"{r['max_ms']} ms | {r['bytes']:,} |")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
