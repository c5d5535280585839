#!/usr/bin/env bash
# Installs what the benchmark harness needs (idempotent):
# - nats-server v2.15.1 into .tools/venv (scripts/install-deps.sh);
# - redis-server from Debian (apt-get; the Redis + Lua baselines);
# - matplotlib into .tools/venv (the chart); nats-py and msgpack (the usage part).
# Prints nothing on stdout; progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf 'bench/install: %s\n' "$*" >&2; }

"$ROOT/scripts/install-deps.sh" >/dev/null

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
        say "need root to run: $*"; exit 1; fi
}

if ! command -v redis-server >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || { say "redis-server is missing and apt-get is not available; install redis-server"; exit 1; }
    say "installing redis-server with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root apt-get install -y -qq --no-install-recommends redis-server >/dev/null
    # The package starts a system service on port 6379; the harness runs its
    # own redis-server on a free port, so stop the service if it came up.
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
        as_root systemctl stop redis-server || true
    fi
fi
say "$(redis-server --version | cut -d' ' -f1-3)"

VENV="$ROOT/.tools/venv"
if ! "$VENV/bin/python" -c 'import matplotlib' >/dev/null 2>&1; then
    say "installing matplotlib into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q matplotlib >&2
fi
say "matplotlib $("$VENV/bin/python" -c 'import matplotlib; print(matplotlib.__version__)')"
if ! "$VENV/bin/python" -c 'import nats, msgpack' >/dev/null 2>&1; then
    say "installing nats-py and msgpack into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q nats-py msgpack >&2
fi
