#!/usr/bin/env bash
# The regions benchmark (SPEC §12, docs/REGIONS.md): two regions on loopback, 50 ms each way
# on the link, regional against global asks in the region that is not home,
# and both regions hard on one global limit (services/cli/examples/regions_bench.rs).
# Prints one JSON object on stdout; takes about 2 minutes (ROUNDS=3).
#
#   bench/regions.sh > /tmp/regions.json
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SLUICE_NATS_SERVER="${SLUICE_NATS_SERVER:-$(scripts/install-deps.sh | tail -n 1)}"
export SLUICE_NATS_SERVER
cargo build --release -q -p sluice-cli --bin sluice --example regions_bench
SLUICE_BIN="$ROOT/target/release/sluice" timeout 900 "$ROOT/target/release/examples/regions_bench"
