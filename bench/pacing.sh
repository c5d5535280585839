#!/usr/bin/env bash
# Pacing accuracy (SPEC §18, docs/PACING.md): 50 callers on 5 clients
# `acquire` through 3 workers at a 20/s GCRA for 20 s, each asking again
# as soon as it begins, and how far from their starts they began: lateness
# past the exact grid of starts (p50, p90, p99, max), the gaps between
# consecutive callers, and the most that began within any second.
# docs/BENCHMARKS.md, "Pacing accuracy", has a run.
#
#   bench/pacing.sh            # about 40 s after the build
#
# It is the ignored test `pacing::pacing_accuracy` of the CLI's tests (a
# real nats-server and workers; debug build, as the tests run), printing
# one line. Needs what the tests need (scripts/install-deps.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SLUICE_NATS_SERVER="${SLUICE_NATS_SERVER:-$(scripts/install-deps.sh --run | tail -1)}"
export SLUICE_NATS_SERVER
cargo test -q -p sluice-cli --test cli -- pacing::pacing_accuracy --ignored --nocapture 2>&1 |
    grep -E '^pacing:|panicked|test result'
