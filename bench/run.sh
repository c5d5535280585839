#!/usr/bin/env bash
# The benchmark harness, one command:
#
#   bench/run.sh            # the full matrix (~14 minutes), rewrites docs/BENCHMARKS.md
#   bench/run.sh --quick    # a smaller, shorter matrix (a smoke run, ~3 minutes)
#   bench/run.sh --help     # every option (bench/harness.py)
#
# Installs what it needs (bench/install.sh: nats-server, redis-server,
# matplotlib), builds `sluice` and `sluice-bench-redis` (the Redis
# baselines) in release mode, then runs bench/harness.py with the venv's
# Python. Honours CARGO_TARGET_DIR. Run it on a quiet machine: the numbers
# come from 2 cores shared by everything.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
for arg in "$@"; do
    case "$arg" in -h|--help) exec python3 bench/harness.py --help ;; esac
done
bench/install.sh
cargo build --release --locked -p sluice-cli -p sluice-bench-redis >&2
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
export SLUICE_BIN="$TARGET/release/sluice"
export SLUICE_BENCH_REDIS_BIN="$TARGET/release/sluice-bench-redis"
exec "$ROOT/.tools/venv/bin/python" bench/harness.py "$@"
