"""Envoy's rate limit service, from the protos in ``third_party/``: compiled
with ``grpcio-tools`` (Google's well-known types come with it) into a
directory, then imported. Used by the tests (``conftest.py``) and by
``ask.py`` (the compose end-to-end test's one gRPC call).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

THIRD_PARTY = Path(__file__).resolve().parent / "third_party"


def load(out: Path) -> SimpleNamespace:
    """Compiles every proto of ``third_party/`` into ``out``, puts ``out``
    on ``sys.path`` (the caller removes it when done) and returns
    ``pb`` (rls_pb2), ``grpc`` (rls_pb2_grpc), ``descriptor``
    (ratelimit_pb2: RateLimitDescriptor) and ``wrappers`` (wrappers_pb2)."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    files = sorted(str(p.relative_to(THIRD_PARTY)) for p in THIRD_PARTY.rglob("*.proto"))
    rc = protoc.main(
        ["grpc_tools.protoc", "-I", str(THIRD_PARTY), "-I", str(well_known)]
        + ["--python_out", str(out), "--grpc_python_out", str(out)]
        + files
    )
    if rc != 0:
        raise RuntimeError("grpc_tools.protoc failed on {} (exit {})".format(THIRD_PARTY, rc))
    sys.path.insert(0, str(out))
    return SimpleNamespace(
        pb=importlib.import_module("envoy.service.ratelimit.v3.rls_pb2"),
        grpc=importlib.import_module("envoy.service.ratelimit.v3.rls_pb2_grpc"),
        descriptor=importlib.import_module("envoy.extensions.common.ratelimit.v3.ratelimit_pb2"),
        wrappers=importlib.import_module("google.protobuf.wrappers_pb2"),
    )
