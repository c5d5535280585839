# What bench/profile.sh and bench/half-load.sh share: the binaries, a work
# dir, and nats-server, a worker or the echo responder started on a free
# loopback port, each waited for, and all stopped by PID on exit. Source it
# after `set -euo pipefail`; write "$WORK/sluice.toml" before start_nats.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
SLUICE="${SLUICE_BIN:-$TARGET/release/sluice}"
NATS_SERVER="$ROOT/.tools/venv/bin/nats-server"
WORK="$(mktemp -d)"
KEEP_WORK=0
PIDS=()
stop_all() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap 'stop_all; [ "$KEEP_WORK" = 1 ] || rm -rf "$WORK"' EXIT

# until_ok <what> <command...>: runs the command every 0.1 s until it
# succeeds, for at most 10 s; otherwise stops everything and exits 1,
# keeping $WORK (the logs) for a look.
until_ok() {
    local what="$1"
    shift
    for _ in $(seq 100); do "$@" 2>/dev/null && return 0; sleep 0.1; done
    echo "$(basename "$0"): $what did not happen within 10 s (logs in $WORK)" >&2
    KEEP_WORK=1
    exit 1
}

# write_config <durability> <algorithm> [name] [max] [per]: $WORK/sluice.toml
# with the `default` policy (sliding window, 100/s) and a policy of that
# algorithm, named after it unless given a name, at 100/s unless given a
# limit. Lines appended to the file go into that policy.
write_config() {
    cat > "$WORK/sluice.toml" <<TOML
partitions = 64
durability = "$1"
[policies.default]
algorithm = "sliding_window"
limits = [ { max = 100, per = "1s" } ]
[policies.${3:-$2}]
algorithm = "$2"
limits = [ { max = ${4:-100}, per = "${5:-1s}" } ]
TOML
}

# start_nats: nats-server with JetStream and the partition mapping of
# $WORK/sluice.toml, on a free port; sets PORT, URL and NATS_PID.
start_nats() {
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    URL="nats://127.0.0.1:$PORT"
    "$SLUICE" nats-config --config "$WORK/sluice.toml" > "$WORK/nats.conf"
    "$NATS_SERVER" -c "$WORK/nats.conf" -a 127.0.0.1 -p "$PORT" -js -sd "$WORK/js-$PORT" > "$WORK/nats-$PORT.log" 2>&1 &
    NATS_PID=$!
    PIDS+=("$NATS_PID")
    until_ok "nats-server listening on $PORT" bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT"
}

# start_worker: one worker on $URL, until every partition answers; sets W.
start_worker() {
    SLUICE_LOG=warn "$SLUICE" worker --nats "$URL" --config "$WORK/sluice.toml" > "$WORK/worker.log" 2>&1 &
    W=$!
    PIDS+=("$W")
    "$SLUICE" bench --nats "$URL" --config "$WORK/sluice.toml" -n 0 -q --wait-ready 30s > /dev/null
}

# balanced <n>: true once n workers share every partition evenly, all answering.
balanced() {
    "$SLUICE" status --json --nats "$URL" --config "$WORK/sluice.toml" 2>/dev/null | python3 -c '
import json, sys
s, n = json.load(sys.stdin), int(sys.argv[1])
shares = [len(w["partitions"]) for w in s["workers"]]
sys.exit(0 if not s["unowned"] and len(shares) == n and sum(shares) == len(s["partitions"])
         and max(shares) - min(shares) <= 1
         and all(p["answering"] for w in s["workers"] for p in w["partitions"]) else 1)' "$1"
}

# start_echo: the echo responder (the ceiling) on $URL, until it has
# subscribed; sets E.
start_echo() {
    "$SLUICE" bench --serve-echo --nats "$URL" > "$WORK/echo.log" 2>&1 &
    E=$!
    PIDS+=("$E")
    until_ok "the echo responder subscribing" grep -q "echo responder answering" "$WORK/echo.log"
}
