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
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TARGET_KIND="${1:?usage: bench/half-load.sh echo|sluice RATE}"
RATE="${2:?usage: bench/half-load.sh echo|sluice RATE}"
CLIENT="${CLIENT:-plain}"

cat > "$WORK/sluice.toml" <<TOML
partitions = 64
durability = "snapshot"
snapshot_interval = "${SNAP:-2s}"
[policies.default]
algorithm = "sliding_window"
limits = [ { max = 100, per = "1s" } ]
TOML
EXTRA=()
case "$TARGET_KIND" in
    echo | sluice) ;;
    *) echo "bench/half-load.sh: the first argument is echo or sluice, not $TARGET_KIND" >&2; exit 2 ;;
esac
start_nats
if [ "$TARGET_KIND" = echo ]; then
    start_echo
    EXTRA=(--target echo)
else
    start_worker
fi
"$SLUICE" bench --nats "$URL" --config "$WORK/sluice.toml" --client "$CLIENT" --rate "$RATE" \
    -c 512 -m 2 -k 10000 -d 6s --warmup 1s -q "${EXTRA[@]}" 2>&1 | grep -E "throughput|latency"
