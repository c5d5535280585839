#!/usr/bin/env bash
# Checks the Prometheus rules of deploy/prometheus/: `promtool check rules`
# (they parse, every expression is valid PromQL) and `promtool test rules`
# (their unit tests, sluice-rules.test.yml: series in, which alerts fire and
# when, what the recording rules compute). promtool comes from Debian's
# `prometheus` package (scripts/install-deps.sh installs it). That every
# metric the rules name is one a live worker or gateway exports is checked
# by services/cli/tests/metrics.rs.
#
#   scripts/test-rules.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/deploy/prometheus"

command -v promtool >/dev/null 2>&1 ||
    { echo "test-rules: promtool not found; run scripts/install-deps.sh (Debian's prometheus package)" >&2; exit 1; }
promtool --version 2>&1 | head -1
promtool check rules sluice-rules.yml
promtool test rules sluice-rules.test.yml
