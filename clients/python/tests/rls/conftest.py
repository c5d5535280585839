"""Envoy's rate limit service of ``sluice gateway --grpc-listen``, called
with ``grpcio`` and Envoy's own ``rls.proto`` (see third_party/README.md).

- ``rls``: the generated modules, compiled once per session from
  ``third_party/`` with ``grpcio-tools`` into a temporary directory
  (``protos.py``).
- ``start_gateway(nats_url, config_text, dir)``: a ``sluice gateway``
  process on loopback with ``--grpc-listen 127.0.0.1:0``; the address it
  bound is read from its log line on stderr (the log is also written to
  ``dir/gateway-*.log``), so no port is guessed.

The nats-server and worker come from ``tests/conftest.py`` (``stack``,
``bare_nats``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator, Sequence

import grpc
import pytest

from tests.conftest import STARTUP_TIMEOUT, Process, _tail, sluice_bin
from tests.rls import protos

LISTENING = re.compile(r"envoy rate limit service listening on (\S+) \(gRPC\)")


@pytest.fixture(scope="session")
def rls() -> Iterator[SimpleNamespace]:
    """The generated modules (see ``protos.load``), for the session."""
    with tempfile.TemporaryDirectory(prefix="sluice-rls-") as out:
        try:
            yield protos.load(Path(out))
        finally:
            sys.path.remove(out)


@dataclass
class Gateway:
    process: Process
    address: str


def _read_log(stream, log: Path, found: "queue.Queue[str]") -> None:
    """Copies the gateway's stderr to ``log``; reports the gRPC address once."""
    reported = False
    with open(log, "a") as out:
        for line in stream:
            out.write(line)
            out.flush()
            if not reported:
                m = LISTENING.search(line)
                if m:
                    found.put(m.group(1))
                    reported = True
    if not reported:
        found.put("")  # the process ended without listening


@contextlib.contextmanager
def start_gateway(
    nats_url: str, config_text: str, dir: Path, name: str, extra_args: Sequence[str] = ()
) -> Iterator[Gateway]:
    config = dir / "gateway-{}.toml".format(name)
    config.write_text(config_text)
    log = dir / "gateway-{}.log".format(name)
    env = dict(os.environ, NO_COLOR="1", SLUICE_LOG="info,async_nats=warn")
    popen = subprocess.Popen(
        [
            sluice_bin(), "gateway", "--nats", nats_url, "--config", str(config),
            "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", *extra_args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    process = Process("gateway", popen, log)
    found: "queue.Queue[str]" = queue.Queue()
    reader = threading.Thread(target=_read_log, args=(popen.stderr, log, found), daemon=True)
    reader.start()
    try:
        try:
            address = found.get(timeout=STARTUP_TIMEOUT)
        except queue.Empty:
            address = ""
        if not address:
            raise RuntimeError("the gateway did not serve gRPC:\n" + _tail(log))
        yield Gateway(process, address)
    finally:
        process.stop()
        reader.join(STARTUP_TIMEOUT)


@contextlib.contextmanager
def rls_stub(rls: SimpleNamespace, gateway: Gateway) -> Iterator[object]:
    """A RateLimitService stub on a channel that is ready (bounded wait)."""
    with grpc.insecure_channel(gateway.address) as channel:
        grpc.channel_ready_future(channel).result(timeout=STARTUP_TIMEOUT)
        yield rls.grpc.RateLimitServiceStub(channel)
