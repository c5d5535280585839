#!/usr/bin/env bash
# The dashboard's browser tests (tests/ui/test_dashboard.py): Debian's
# chromium, driven by selenium, against a stack the test starts.
#
#   scripts/test-ui.sh [pytest args...]
#   scripts/test-ui.sh --screenshot   # also writes docs/dashboard.png
#
# 1. scripts/install-deps.sh (nats-server, chromium, chromium-driver and
#    selenium); 2. scripts/python-venv.sh (pytest in .tools/venv);
# 3. the sluice binary (scripts/sluice-bin.sh); 4. pytest tests/ui with SLUICE_BIN and
# SLUICE_NATS_SERVER set. Fails on any failure, and when pytest collects no
# test (its exit code 5).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ "${1:-}" = "--screenshot" ]; then
    shift
    export SLUICE_UI_SCREENSHOT="$ROOT/docs/dashboard.png"
fi
echo "==> test dependencies"
nats_server="$(scripts/install-deps.sh)"
export SLUICE_NATS_SERVER="${SLUICE_NATS_SERVER:-$nats_server}"
PY="$(scripts/python-venv.sh)"

SLUICE_BIN="$(scripts/sluice-bin.sh)"
export SLUICE_BIN

echo "==> pytest tests/ui $*"
set +e
"$PY" -m pytest -p no:cacheprovider -p no:asyncio tests/ui "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test-ui: pytest collected no test" >&2
fi
exit "$rc"
