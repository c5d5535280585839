#!/usr/bin/env bash
# A/B of two builds of `sluice`, in the same minutes: for a change that
# should not move throughput (a refactoring), or to see what one does.
#
#   bench/ab.sh OLD_SLUICE NEW_SLUICE [ROUNDS]      # default 3 rounds
#
# Each round runs every cell with both builds, the order swapped every
# round (this VM drifts by 20 % within minutes: only alternating rounds say
# anything). A cell: a fresh nats-server and one worker of the build, 10 000
# uniform keys, C=64 over 2 connections, 1 s warm-up then $SECS measured.
# The load generator is always NEW_SLUICE's `sluice bench`, so only the
# worker differs. Prints each measurement and, per cell, the median of
# each build and new ÷ old.
#
# Environment: DURABILITY (snapshot), POLICY (fixed_window; any algorithm
# name), CLIENTS ("plain batching"), WORKERS (1), SECS (4), KEYS (10000);
# OLD_TOML / NEW_TOML: lines added to that build's sluice.toml (to A/B a
# setting with one binary given twice, e.g. NEW_TOML=$'[usage]\nenabled = false');
# OLD_KEYS / NEW_KEYS: that build's key count (default KEYS).
# OLD_ARGS / NEW_ARGS: flags added to that side's `sluice bench` (to A/B a
# load with one binary given twice, e.g. NEW_ARGS=--ids: every ask named by
# an id, SPEC §16).
# OLD_WORKER_ARGS / NEW_WORKER_ARGS: flags added to that side's workers (to
# A/B a worker flag with one binary given twice, e.g.
# NEW_WORKER_ARGS="--otlp-endpoint http://127.0.0.1:9": tracing on, asks
# without a trace header).
# HOT=1: the hot-key workload instead (docs/BENCHMARKS.md, "Hot keys:
# local budgets"): 10 of the keys get half the asks, under a fixed window of
# 2000 per second with `local_budget = true`, and the deny cache on (POLICY
# is then `hot`; HOT_BUDGET=0 turns the budgets off).
#
# CPU=1: each cell sends a fixed number of requests instead (REQUESTS,
# default 500000, no warm-up) and also prints the CPU time per decision of
# the load generator (bash's `time`), the worker(s) and nats-server (user +
# system time from /proc/<pid>/stat): steadier than throughput on a VM that
# drifts, and it says which process a change made cheaper
# (docs/BENCHMARKS-HISTORY.md, "Hot keys with local budgets").
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OLD="${1:?usage: bench/ab.sh OLD_SLUICE NEW_SLUICE [ROUNDS]}"
NEW="${2:?usage: bench/ab.sh OLD_SLUICE NEW_SLUICE [ROUNDS]}"
ROUNDS="${3:-3}"
DURABILITY="${DURABILITY:-snapshot}"
POLICY="${POLICY:-fixed_window}"
CLIENTS="${CLIENTS:-plain batching}"
WORKERS="${WORKERS:-1}"
SECS="${SECS:-4}"
KEYS="${KEYS:-10000}"
CPU="${CPU:-0}"
REQUESTS="${REQUESTS:-500000}"

HOT="${HOT:-0}"
LOAD_ARGS=()
if [ "$HOT" = 1 ]; then
    POLICY=hot
    write_config "$DURABILITY" fixed_window hot 2000 1s
    [ "${HOT_BUDGET:-1}" = 1 ] && echo 'local_budget = true' >> "$WORK/sluice.toml"
    LOAD_ARGS=(--hot-keys 10 --hot-share 0.5 --deny-cache)
else
    write_config "$DURABILITY" "$POLICY"
fi
for label in old new; do
    cp "$WORK/sluice.toml" "$WORK/$label.toml"
    extra="${label^^}_TOML"
    printf '%s\n' "${!extra:-}" >> "$WORK/$label.toml"
done

# cpu_ticks <pid...>: their user + system time, in clock ticks.
cpu_ticks() {
    local total=0 p
    for p in "$@"; do total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
    echo "$total"
}

# cell <build-label> <binary> <client>: prints "<label> <client> <decisions/s>"
# (with CPU=1, then µs of CPU per decision: load generator, worker(s), nats-server).
cell() {
    local label="$1" bin="$2" client="$3" workers=()
    local worker_args_var="${label^^}_WORKER_ARGS" worker_args=()
    read -r -a worker_args <<< "${!worker_args_var:-}"
    SLUICE="$bin" start_nats
    for _ in $(seq "$WORKERS"); do
        SLUICE_LOG=warn "$bin" worker --nats "$URL" --config "$WORK/$label.toml" "${worker_args[@]}" >> "$WORK/worker.log" 2>&1 &
        workers+=($!)
        PIDS+=($!)
    done
    "$NEW" bench --nats "$URL" --config "$WORK/$label.toml" -n 0 -q --wait-ready 30s > /dev/null
    if [ "$WORKERS" -gt 1 ]; then SLUICE="$NEW" until_ok "$WORKERS balanced workers" balanced "$WORKERS"; fi
    local keys_var="${label^^}_KEYS"
    local keys="${!keys_var:-$KEYS}"
    local args_var="${label^^}_ARGS" side_args=()
    read -r -a side_args <<< "${!args_var:-}"
    local rate length=(-d "${SECS}s" --warmup 1s)
    [ "$CPU" = 1 ] && length=(-n "$REQUESTS")
    local w0 n0 w1 n1 took TIMEFORMAT='%U %S'
    w0=$(cpu_ticks "${workers[@]}"); n0=$(cpu_ticks "$NATS_PID")
    { took=$({ time "$NEW" bench --nats "$URL" --config "$WORK/$label.toml" --client "$client" \
        --policy "$POLICY" -c 64 -m 2 -k "$keys" "${length[@]}" "${LOAD_ARGS[@]}" "${side_args[@]}" --json -q > "$WORK/report.json" \
        2>> "$WORK/bench.log"; } 2>&1); }
    w1=$(cpu_ticks "${workers[@]}"); n1=$(cpu_ticks "$NATS_PID")
    rate=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["throughput"]))' "$WORK/report.json")
    if [ "$CPU" = 1 ]; then
        python3 - "$label" "$client" "$rate" "$REQUESTS" "$took" $((w1 - w0)) $((n1 - n0)) "$(getconf CLK_TCK)" <<'PY'
import sys
label, client, rate, n, took, w, nats, hz = sys.argv[1:]
n, hz = int(n), int(hz)
bench = sum(float(x) for x in took.split())
us = lambda seconds: seconds * 1e6 / n
print(f"{label} {client} {rate} {us(bench):.2f} {us(int(w) / hz):.2f} {us(int(nats) / hz):.2f}")
PY
    else
        echo "$label $client $rate"
    fi
    kill "${workers[@]}" "$NATS_PID" 2>/dev/null || true
    wait "${workers[@]}" "$NATS_PID" 2>/dev/null || true
}

RESULTS="$WORK/results.txt"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order=("old $OLD" "new $NEW"); else order=("new $NEW" "old $OLD"); fi
    for client in $CLIENTS; do
        for build in "${order[@]}"; do
            # shellcheck disable=SC2086
            cell $build "$client" | tee -a "$RESULTS"
        done
    done
done
python3 - "$RESULTS" "$DURABILITY" "$POLICY" "$WORKERS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"\n{sys.argv[2]}, {sys.argv[3]}, {sys.argv[4]} worker(s), C=64: decisions/s per round, median, new / old")
for client in dict.fromkeys(r[1] for r in rows):
    old = [int(r[2]) for r in rows if r[1] == client and r[0] == "old"]
    new = [int(r[2]) for r in rows if r[1] == client and r[0] == "new"]
    ratio = statistics.median(new) / statistics.median(old)
    print(f"  {client:9} old {old} median {statistics.median(old):.0f} | "
          f"new {new} median {statistics.median(new):.0f} | {ratio:.2f}")
    for i, who in enumerate(["load generator", "worker", "nats-server"], start=3):
        cpu = {b: [float(r[i]) for r in rows if r[1] == client and r[0] == b and len(r) > i] for b in ("old", "new")}
        if cpu["old"] and cpu["new"]:
            o, n = statistics.median(cpu["old"]), statistics.median(cpu["new"])
            print(f"    CPU µs per decision, {who:14} old {o:.2f} | new {n:.2f} | {n / o:.2f}")
PY
