#!/usr/bin/env bash
# The project's test command.
#
#   scripts/test.sh [cargo test args...]
#
# Installs the test dependencies (scripts/install-deps.sh: nats-server v2.15.1
# into .tools/venv), then runs `cargo test --workspace` with SLUICE_NATS_SERVER
# pointing at that nats-server. Extra arguments go to `cargo test`, e.g.
#
#   scripts/test.sh --test harness            # one integration test file
#   scripts/test.sh -p sluice-tests           # one package (drops --workspace)
#   scripts/test.sh -- --nocapture restart    # filter + show output
#
# An explicit SLUICE_NATS_SERVER in the environment is kept.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

echo "==> test dependencies"
nats_server="$(scripts/install-deps.sh)"
export SLUICE_NATS_SERVER="${SLUICE_NATS_SERVER:-$nats_server}"
echo "    SLUICE_NATS_SERVER=$SLUICE_NATS_SERVER"

# `--workspace` unless the caller chose packages (cargo would ignore -p).
scope=(--workspace)
for arg in "$@"; do
    case "$arg" in
        --) break ;;
        -p | --package | -p* | --package=*) scope=() ;;
    esac
done

echo "==> cargo test ${scope[*]} $*"
exec cargo test "${scope[@]}" "$@"
