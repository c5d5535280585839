#!/usr/bin/env bash
# Puts the Python client (clients/python), editable, with its test extras
# (nats-py, msgpack, pytest, pytest-asyncio), its `rls` extras (grpcio,
# grpcio-tools: Envoy's rate limit service from Python) and its `api` extras
# (openapi-spec-validator, schemathesis: the gateway's OpenAPI description,
# scripts/test-api.sh) into .tools/venv, and prints that venv's python on
# stdout.
#
#   PY="$(scripts/python-venv.sh)"
#
# The venv itself comes from scripts/install-deps.sh (run it first). pip runs
# only when clients/python/pyproject.toml changed since the last install (a
# stamp in the venv) or an import fails. Used by scripts/test-python.sh and
# scripts/e2e-compose.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PKG="clients/python"
PY="$ROOT/.tools/venv/bin/python"
[ -x "$PY" ] || { echo "python-venv: $PY is missing; run scripts/install-deps.sh first" >&2; exit 1; }

stamp="$ROOT/.tools/venv/.sluice-client-python"
want="$(cd "$PKG" && pwd) $(sha256sum "$PKG/pyproject.toml" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] ||
    ! "$PY" -c 'import sluice_client, nats, msgpack, pytest, pytest_asyncio, grpc, grpc_tools, schemathesis, openapi_spec_validator' 2>/dev/null; then
    echo "==> pip install -e $PKG[test,rls,api] into .tools/venv" >&2
    "$PY" -m pip install --disable-pip-version-check --no-input -q -e "$PKG[test,rls,api]" >&2
    echo "$want" >"$stamp"
fi
echo "$PY"
