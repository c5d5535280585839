#!/usr/bin/env bash
# One open-loop latency cell, alone: sluice (one worker) or the echo
# responder at a fixed rate through the plain subject, for looking at the
# "p99 at half load" target one setting at a time.
#
#   bench/half-load.sh echo 21400          # the ceiling: a responder that decides nothing
#   bench/half-load.sh sluice 21400        # one worker, snapshots every 2 s
#   SNAP=1h bench/half-load.sh sluice 21400   # the same with snapshots effectively off
#   CLIENT=batching bench/half-load.sh sluice 30000
#
# 10 000 uniform keys, sliding_window 100/s, C ≤ 512 over 2 connections,
# 1 s warm-up then 6 s measured. Prints `sluice bench`'s throughput and
# latency lines. Needs bench/install.sh and the release build (bench/run.sh
# does both).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET_KIND="${1:?usage: bench/half-load.sh echo|sluice RATE}"
RATE="${2:?usage: bench/half-load.sh echo|sluice RATE}"
CLIENT="${CLIENT:-plain}"
SLUICE="${SLUICE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/sluice}"
NATS_SERVER="$ROOT/.tools/venv/bin/nats-server"
WORK="$(mktemp -d)"
PIDS=()
cleanup_procs() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
cleanup() { cleanup_procs; rm -rf "$WORK"; }
trap cleanup EXIT

cat > "$WORK/sluice.toml" <<TOML
partitions = 64
durability = "snapshot"
snapshot_interval = "${SNAP:-2s}"
[policies.default]
algorithm = "sliding_window"
limits = [ { max = 100, per = "1s" } ]
TOML
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL="nats://127.0.0.1:$PORT"
"$SLUICE" nats-config --config "$WORK/sluice.toml" > "$WORK/nats.conf"
"$NATS_SERVER" -c "$WORK/nats.conf" -a 127.0.0.1 -p "$PORT" -js -sd "$WORK/js" > "$WORK/nats.log" 2>&1 &
PIDS+=($!)
# until(what, command...): runs the command every 0.1 s, for at most 10 s.
until_ok() {
    local what="$1"; shift
    for _ in $(seq 100); do "$@" 2>/dev/null && return 0; sleep 0.1; done
    echo "bench/half-load.sh: $what did not happen within 10 s (logs in $WORK)" >&2
    trap - EXIT; cleanup_procs; exit 1
}
until_ok "nats-server listening on $PORT" bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT"
EXTRA=()
case "$TARGET_KIND" in
    echo)
        "$SLUICE" bench --serve-echo --nats "$URL" > "$WORK/echo.log" 2>&1 &
        PIDS+=($!)
        EXTRA=(--target echo)
        until_ok "the echo responder subscribing" grep -q "echo responder answering" "$WORK/echo.log"
        ;;
    sluice)
        SLUICE_LOG=warn "$SLUICE" worker --nats "$URL" --config "$WORK/sluice.toml" > "$WORK/worker.log" 2>&1 &
        PIDS+=($!)
        # Until every partition is restored and answers.
        "$SLUICE" bench --nats "$URL" --config "$WORK/sluice.toml" -n 0 -q --wait-ready 30s > /dev/null
        ;;
    *) echo "bench/half-load.sh: the first argument is echo or sluice, not $TARGET_KIND" >&2; exit 2 ;;
esac
"$SLUICE" bench --nats "$URL" --config "$WORK/sluice.toml" --client "$CLIENT" --rate "$RATE" \
    -c 512 -m 2 -k 10000 -d 6s --warmup 1s -q "${EXTRA[@]}" 2>&1 | grep -E "throughput|latency"
