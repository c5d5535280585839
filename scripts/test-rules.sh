#!/usr/bin/env bash
# Checks the Prometheus rules of deploy/prometheus/: `promtool check rules`
# (they parse, every expression is valid PromQL) and `promtool test rules`
# (their unit tests, sluice-rules.test.yml: series in, which alerts fire and
# when, what the recording rules compute). promtool comes from Debian's
# `prometheus` package (scripts/install-deps.sh installs it). That every
# metric the rules name is one a live worker or gateway exports is checked
# by services/cli/tests/cli/metrics.rs. promtool is .tools/prometheus's, else
# the one on the PATH.
#
#   scripts/test-rules.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/deploy/prometheus"

PROMTOOL="$ROOT/.tools/prometheus/usr/bin/promtool"
[ -x "$PROMTOOL" ] || PROMTOOL="$(command -v promtool || true)"
[ -n "$PROMTOOL" ] ||
    { echo "test-rules: promtool not found; run scripts/install-deps.sh (Debian's prometheus package)" >&2; exit 1; }
"$PROMTOOL" --version 2>&1 | head -1
"$PROMTOOL" check rules sluice-rules.yml
"$PROMTOOL" test rules sluice-rules.test.yml
