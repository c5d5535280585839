#!/usr/bin/env bash
# What alert thresholds cost the worker's decision path (SPEC §14; the
# target: at most 5 %), in instructions and in interleaved wall time
# (services/worker/benches/alert_cost.rs says why both).
#
#   bench/alert_cost.sh [decisions]   (default 200000; needs valgrind)
#
# Prints the interleaved timing, then each variant's instructions per
# decision, counted by callgrind inside `measured` only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N="${1:-200000}"
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cargo bench -p sluice-worker --bench alert_cost --no-run -q
BIN=$(cargo bench -p sluice-worker --bench alert_cost --no-run --message-format=json -q 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "alert_cost" and m.get("executable"):
        print(m["executable"])')
"$BIN" --bench
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
declare -A ir
for variant in bare alerts; do
    ALERT_COST_ONLY=$variant ALERT_COST_N=$N valgrind --tool=callgrind --toggle-collect='*measured*' \
        --callgrind-out-file="$OUT/$variant.out" "$BIN" --bench >/dev/null 2>"$OUT/$variant.log"
    # Both calls of `measured` are counted: the warm-up (one per key) and the N.
    total=$(grep -m1 '^summary:' "$OUT/$variant.out" | awk '{print $2}')
    ir[$variant]=$(python3 -c "print(f'{$total / ($N + 10000):.1f}')")
    echo "$variant: ${ir[$variant]} instructions per decision ($total over $N + 10000 decisions)"
done
python3 -c "print(f'alerts cost {(${ir[alerts]} / ${ir[bare]} - 1) * 100:+.1f} % instructions per decision')"
