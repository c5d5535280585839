#!/usr/bin/env bash
# The project's test command.
#
#   scripts/test.sh [cargo test args...]
#
# Installs the test dependencies (scripts/install-deps.sh: nats-server v2.15.1
# into .tools/venv), then runs `cargo test --workspace` with SLUICE_NATS_SERVER
# pointing at that nats-server, then the Python client's tests
# (scripts/test-python.sh) and the documentation's examples against
# `sluice dev` (scripts/test-docs.sh), then the gateway's HTTP API against
# its OpenAPI description (scripts/test-api.sh: schemathesis), then the
# dashboard in a headless chromium (scripts/test-ui.sh), then the
# Prometheus rules with promtool (scripts/test-rules.sh) and the Kubernetes
# manifests (scripts/test-kubernetes.sh). Extra arguments go to `cargo test`; with a
# package (-p) or a test filter, only that runs (no Python tests, no docs), e.g.
#
#   scripts/test.sh --test harness            # one integration test file
#   scripts/test.sh -p sluice-tests           # one package (drops --workspace)
#   scripts/test.sh -- --nocapture restart    # filter + show output
#
# An explicit SLUICE_NATS_SERVER or SLUICE_BIN in the environment is kept.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

echo "==> test dependencies"
nats_server="$(scripts/install-deps.sh)"
export SLUICE_NATS_SERVER="${SLUICE_NATS_SERVER:-$nats_server}"
echo "    SLUICE_NATS_SERVER=$SLUICE_NATS_SERVER"

# `--workspace` unless the caller chose packages (cargo would ignore -p).
# Everything (the Python client too) unless the caller chose a part.
scope=(--workspace)
everything=1
for arg in "$@"; do
    case "$arg" in
        --) everything=0; break ;;
        -p | --package | -p* | --package=*) scope=(); everything=0 ;;
        --test | --test=* | --lib | --bin | --bin=* | --doc) everything=0 ;;
    esac
done

echo "==> cargo test ${scope[*]} $*"
cargo test "${scope[@]}" "$@"
if [ "$everything" = 1 ]; then
    # The sluice binary `cargo test` just built for the CLI's tests: the
    # scripts below use it instead of building sluice-cli again (alone, its
    # features resolve differently, so that would be a second build).
    export SLUICE_BIN="${SLUICE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/sluice}"
    echo "==> the Python client (scripts/test-python.sh)"
    scripts/test-python.sh
    echo "==> the documentation's examples (scripts/test-docs.sh)"
    scripts/test-docs.sh
    echo "==> the HTTP API against its OpenAPI description (scripts/test-api.sh)"
    scripts/test-api.sh
    echo "==> the dashboard in a headless browser (scripts/test-ui.sh)"
    scripts/test-ui.sh
    echo "==> the Prometheus rules (scripts/test-rules.sh)"
    scripts/test-rules.sh
    echo "==> the Kubernetes manifests (scripts/test-kubernetes.sh)"
    scripts/test-kubernetes.sh
fi
