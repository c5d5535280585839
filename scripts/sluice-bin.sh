#!/usr/bin/env bash
# Prints the path of the sluice binary the test scripts run:
#
#   SLUICE_BIN="$(scripts/sluice-bin.sh)"
#
# $SLUICE_BIN when set (scripts/test.sh passes the one `cargo test` built,
# so nothing is built twice); otherwise the dev build, built first
# (`cargo build -p sluice-cli`, into $CARGO_TARGET_DIR when set; cargo's
# output goes to stderr).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -n "${SLUICE_BIN:-}" ]; then
    echo "$SLUICE_BIN"
    exit 0
fi
echo "==> cargo build -p sluice-cli" >&2
(cd "$ROOT" && cargo build -p sluice-cli >&2)
echo "${CARGO_TARGET_DIR:-$ROOT/target}/debug/sluice"
