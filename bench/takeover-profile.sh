#!/usr/bin/env bash
# Where a takeover after heavy load spends its time: the harness part
# `takeover` (one worker, 100,000 keys under 5 s of the batching client,
# kill -9, a new worker once the leases expired) by hand, with the new
# worker's debug log and, with PERF=1, a perf profile of it from its start.
#
#   bench/takeover-profile.sh                 # journal mode, usage on
#   USAGE=off bench/takeover-profile.sh       # [usage] enabled = false
#   DURABILITY=snapshot PERF=1 bench/takeover-profile.sh
#
# Prints the start-to-answering time, the journal tail read and the slowest
# partitions' "answering" lines; writes to target/takeover-profile/ (or
# $OUT): worker.log (debug), and with PERF=1 worker.data, worker-self.txt
# and worker-incl.txt (software cpu-clock sampling, as bench/profile.sh,
# of the worker's answering thread only, from its start until every
# partition answers).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT="${OUT:-$TARGET/takeover-profile}"
DURABILITY="${DURABILITY:-journal}"; USAGE="${USAGE:-on}"; KEYS="${KEYS:-100000}"
mkdir -p "$OUT"
cat > "$WORK/sluice.toml" <<TOML
partitions = 64
durability = "$DURABILITY"
[policies.default]
algorithm = "sliding_window"
limits = [ { max = 10, per = "1m" }, { max = 500, per = "1h" } ]
TOML
[ "$USAGE" = on ] || printf '[usage]\nenabled = false\n' >> "$WORK/sluice.toml"

unowned_all() {
    "$SLUICE" status --json --nats "$URL" --config "$WORK/sluice.toml" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
sys.exit(0 if len(s["unowned"]) == len(s["partitions"]) else 1)'
}

start_nats
start_worker
"$SLUICE" bench --nats "$URL" --config "$WORK/sluice.toml" --client batching --dist uniform -k "$KEYS" \
    -d 5s --warmup 0s -c 256 -m 2 --key-prefix t- --timeout 10s -q 2>&1 | sed -n 1,2p
kill -9 "$W"
for _ in $(seq 100); do unowned_all && break; sleep 0.2; done

t0=$(date +%s.%N)
if [ "${PERF:-0}" = 1 ]; then
    SLUICE_LOG="sluice_worker=debug,info,async_nats=warn" perf record -q -e cpu-clock -F 4999 -g \
        --call-graph dwarf,16384 -o "$OUT/worker.data" -- \
        "$SLUICE" worker --nats "$URL" --config "$WORK/sluice.toml" > "$OUT/worker.log" 2>&1 &
    PERF_PID=$!
    PIDS+=("$PERF_PID")
else
    SLUICE_LOG="sluice_worker=debug,info,async_nats=warn" \
        "$SLUICE" worker --nats "$URL" --config "$WORK/sluice.toml" > "$OUT/worker.log" 2>&1 &
    PIDS+=("$!")
fi
"$SLUICE" bench --nats "$URL" --config "$WORK/sluice.toml" -n 0 -q --wait-ready 60s > /dev/null
t1=$(date +%s.%N)
echo "durability $DURABILITY, usage $USAGE: every partition answers $(echo "$t1 - $t0" | bc) s after the start"
grep -E "journal tail|takeover phases" "$OUT/worker.log" | sed -E 's/\x1b\[[0-9;]*m//g' | head -3 || true
grep -E " answering" "$OUT/worker.log" | sed -E 's/\x1b\[[0-9;]*m//g' | tail -2 || true
if [ "${PERF:-0}" = 1 ]; then
    # At once, without a handover: the profile is the takeover's.
    kill -9 "$(pgrep -P "$PERF_PID")"
    wait "$PERF_PID" 2>/dev/null || true
    perf report -i "$OUT/worker.data" --comm sluice --no-children --stdio --sort symbol --percent-limit 0.7 -g none \
        2>/dev/null | grep '%' > "$OUT/worker-self.txt" || true
    perf report -i "$OUT/worker.data" --comm sluice --children --stdio --sort symbol --percent-limit 1 -g none \
        2>/dev/null | grep '%' > "$OUT/worker-incl.txt" || true
    echo "profile: $OUT/worker-self.txt, $OUT/worker-incl.txt"
fi
