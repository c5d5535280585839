#!/usr/bin/env bash
# Where the CPU goes while `sluice bench` loads one worker through the plain
# subject (or the batching client), with perf's software cpu-clock sampling
# (hardware counters are not available on this VM: `perf stat -e
# instructions true` says <not supported>).
#
#   bench/profile.sh [plain|batching] [policy] [seconds]   (defaults: plain sliding_window 4)
#   DURABILITY=journal WORKERS=2 bench/profile.sh plain gcra   # journal mode, two workers
#                                (worker-*.txt then profile the last one started)
#
# Writes to target/bench-profile/ (or $OUT):
#   by-process.txt   CPU share of every process on the machine (perf -a)
#   worker-self.txt  the worker's hottest functions, self time
#   worker-incl.txt  the worker's functions with callees included (the
#                    interesting ones: sluice, moka, async-nats, malloc, serde)
#   echo-by-process.txt  the same load against the echo responder
# Needs perf (Debian: linux-perf) and the release build (bench/run.sh builds it).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CLIENT="${1:-plain}"; POLICY="${2:-sliding_window}"; SECS="${3:-4}"
OUT="${OUT:-$TARGET/bench-profile}"
mkdir -p "$OUT"
command -v perf >/dev/null || { echo "perf not found (apt-get install linux-perf)" >&2; exit 1; }

DURABILITY="${DURABILITY:-snapshot}"; WORKERS="${WORKERS:-1}"
write_config "$DURABILITY" "$POLICY"
load() { # extra bench args...; perf runs for the middle of the load
    "$SLUICE" bench --nats "$URL" --config "$WORK/sluice.toml" --client "$CLIENT" --policy "$POLICY" \
        -d "$((SECS + 2))s" --warmup 0s -q "$@" > "$WORK/bench.txt" 2>&1 &
    local b=$!; sleep 1
    echo $b
}

# 1. The worker.
start_nats
for _ in $(seq "$WORKERS"); do start_worker; done
[ "$WORKERS" = 1 ] || until_ok "$WORKERS workers sharing the partitions" balanced "$WORKERS"
B=$(load)
perf record -q -a -e cpu-clock -F 999 -o "$WORK/all.data" -- sleep "$SECS" 2>/dev/null
while kill -0 "$B" 2>/dev/null; do sleep 0.1; done
cp "$WORK/bench.txt" "$OUT/bench.txt"
B=$(load)
perf record -q -e cpu-clock -F 999 -g --call-graph dwarf,16384 -p "$W" -o "$WORK/worker.data" -- sleep "$SECS" 2>/dev/null
while kill -0 "$B" 2>/dev/null; do sleep 0.1; done
{ echo "# $CLIENT client, policy $POLICY, $WORKERS worker(s), durability $DURABILITY; the load:"; sed -n 1,3p "$WORK/bench.txt"; echo
  perf report -i "$WORK/all.data" --stdio --sort comm --percent-limit 0.5 2>/dev/null | grep '%'; } > "$OUT/by-process.txt"
perf report -i "$WORK/worker.data" --no-children --stdio --sort symbol --percent-limit 0.7 -g none 2>/dev/null \
    | grep '%' | sed -E 's/ +- +- *$//' > "$OUT/worker-self.txt"
perf report -i "$WORK/worker.data" --children --stdio --sort symbol --percent-limit 0.5 -g none 2>/dev/null \
    | grep '%' | grep -E 'sluice|moka|async_nats::(header|client|connection)|malloc|free|rmp|serde|HeaderMap|Subject|crossbeam|mpsc|epoll|writev|recvfrom|read' \
    | grep -v 'LocalKey\|tokio::runtime' | sed -E 's/ +- +- *$//' > "$OUT/worker-incl.txt"
for p in "${PIDS[@]}"; do [ "$p" = "$NATS_PID" ] || kill "$p" 2>/dev/null || true; done
wait "$W" 2>/dev/null || true
kill "$NATS_PID"; wait "$NATS_PID" 2>/dev/null || true

# 2. The same load against the echo responder (the ceiling).
start_nats
start_echo
B=$(load --target echo)
perf record -q -a -e cpu-clock -F 999 -o "$WORK/echo.data" -- sleep "$SECS" 2>/dev/null
while kill -0 "$B" 2>/dev/null; do sleep 0.1; done
{ echo "# echo responder, $CLIENT client; the load:"; sed -n 1,3p "$WORK/bench.txt"; echo
  perf report -i "$WORK/echo.data" --stdio --sort comm --percent-limit 0.5 2>/dev/null | grep '%'; } > "$OUT/echo-by-process.txt"
echo "profiles in $OUT" >&2
