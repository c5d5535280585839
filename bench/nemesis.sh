#!/usr/bin/env bash
# The long nemesis run (docs/RELIABILITY.md): every algorithm in both durabilities on a
# 3-node NATS cluster with 3 workers under steady load, eight faults each
# (services/cli/tests/cli/nemesis.rs), then docs/RELIABILITY.md's table rendered
# from the results (bench/nemesis_report.py).
#
#   bench/nemesis.sh                 # ~10 minutes; rewrites the table in docs/RELIABILITY.md
#   bench/nemesis.sh --no-docs       # print the results only
#
# To look at one fault (prints the results; render the docs only from a
# whole run): SLUICE_NEMESIS_FAULTS=freeze_nats_node (fault names as in
# the JSON, comma-separated), SLUICE_NEMESIS_RUNS=journal/gcra,... and
# SLUICE_NEMESIS_LOGS=DIR (every worker's and NATS node's log kept there).
#
# The short form (journal mode, sliding log, four faults) runs in the normal
# suite (`scripts/test.sh --test nemesis`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
out="$(mktemp -d)/nemesis.json"
SLUICE_NEMESIS=long SLUICE_NEMESIS_OUT="$out" timeout -k 30 1800 \
    scripts/test.sh -p sluice-cli --test cli -- nemesis:: --nocapture
if [ "${1:-}" = "--no-docs" ]; then
    cat "$out"
else
    python3 bench/nemesis_report.py "$out" docs/RELIABILITY.md
    cp "$out" docs/bench/nemesis.json
    echo "docs/RELIABILITY.md and docs/bench/nemesis.json updated"
fi
