#!/usr/bin/env bash
# End-to-end test of compose.regions.yaml: two regions in Docker, checked
# from the host through the gateways' published ports and `sluice status`.
#
#   scripts/e2e-regions.sh        (needs the images: scripts/build-images.sh)
#
# What it checks, in order; the first failed check stops it (exit 1):
#   1. both regions come up: NATS, two workers and a gateway each, and the
#      link (west's NATS connects to east's, authenticated by the link's
#      nkey: the configs are `sluice nats-config --auth --auth-from-env`);
#   2. regional limits: one key under a 15-per-hour policy gets 15 x 200 and
#      then 429 in east, and 15 x 200 again in west (each region counts its
#      own asks);
#   3. `sluice status` as admin in west lists east with its link up;
#   4. everything goes down with `down -v`; nothing of the project is left.
# It runs under a unique project name with every port picked by Docker, and
# always tears down (trap); every wait is bounded.
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT="${SLUICE_E2E_PROJECT:-sluice-regions-$(date +%s)-$$}"
LIMIT=15 # policy hourly in config/regions/*.toml
KEY="r$$-shared"
STARTED=$SECONDS

if command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
else
    echo "e2e-regions: neither docker-compose nor docker compose is installed" >&2
    exit 1
fi
export SLUICE_EAST_NATS_PORT='' SLUICE_WEST_NATS_PORT=''
export SLUICE_EAST_GATEWAY_PORT='' SLUICE_WEST_GATEWAY_PORT=''
LOG="$(mktemp)"

dc() { "${COMPOSE[@]}" -p "$PROJECT" -f "$ROOT/compose.regions.yaml" "$@"; }
say() { printf '[e2e-regions %3ds] %s\n' "$((SECONDS - STARTED))" "$*"; }
fail() { say "FAIL $*"; exit 1; }

teardown() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [ "$rc" != 0 ]; then
        echo "---- last log lines of every service ----"
        dc logs --no-color --tail=30 2>&1 | tail -n 300
        echo "----"
    fi
    say "tearing down: down -v --remove-orphans"
    dc down -v --remove-orphans -t 20 >>"$LOG" 2>&1
    local f="label=com.docker.compose.project=$PROJECT" left
    left="$({ docker ps -aq --filter "$f"; docker network ls -q --filter "$f"; docker volume ls -q --filter "$f"; } 2>/dev/null)"
    if [ -n "$left" ]; then
        say "FAIL after down, the project still has: $(echo "$left" | tr '\n' ' ')"
        rc=1
    else
        say "ok   nothing of project $PROJECT is left"
    fi
    rm -f "$LOG"
    if [ "$rc" != 0 ]; then
        say "e2e-regions: FAILED"
        exit 1
    fi
    say "e2e-regions: all checks passed in $((SECONDS - STARTED))s"
    exit 0
}
trap teardown EXIT
trap 'say "interrupted"; exit 1' INT TERM

published() { # <service> <container port>
    local a
    a="$(dc port "$1" "$2" 2>/dev/null | tail -n 1)"
    [ -n "$a" ] || fail "$1:$2 is not published"
    echo "${a/0.0.0.0/127.0.0.1}"
}

# until <seconds> <what> <command...>: runs the command every 0.5 s until it
# succeeds (the pace of polling a stack with no event to wait on).
until_ok() {
    local within="$1" what="$2" deadline=$((SECONDS + $1))
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || fail "$what: not within ${within}s"
        sleep 0.5
    done
}

code() { curl -s -o /dev/null --max-time 10 -w '%{http_code}' "http://$1/v1/allow/$2?policy=hourly"; }
answers() { [ "$(code "$1" "r$$-probe-$2")" = 200 ]; }

# --- 1. up ---------------------------------------------------------------------
say "up: compose.regions.yaml as project $PROJECT"
dc up -d >>"$LOG" 2>&1 || fail "docker-compose up: $(tail -n 20 "$LOG")"
EAST="$(published gateway-east 8080)"
WEST="$(published gateway-west 8080)"
until_ok 120 "east's gateway answers" curl -sf --max-time 2 "http://$EAST/healthz"
until_ok 120 "west's gateway answers" curl -sf --max-time 2 "http://$WEST/healthz"
# Every partition owned: probe keys answer 200 (a few, across partitions).
for i in 1 2 3 4 5 6 7 8; do
    until_ok 120 "east answers probe $i" answers "$EAST" "$i"
    until_ok 120 "west answers probe $i" answers "$WEST" "$i"
done
say "ok   both regions answer"

# --- 2. regional limits ----------------------------------------------------------
count_200() { # <gateway>: asks KEY LIMIT+1 times; prints "<200s> <last code>"
    local ok=0 c
    for _ in $(seq 1 $((LIMIT + 1))); do
        c="$(code "$1" "$KEY")"
        [ "$c" = 200 ] && ok=$((ok + 1))
    done
    echo "$ok $c"
}
read -r ok last <<<"$(count_200 "$EAST")"
[ "$ok" = "$LIMIT" ] && [ "$last" = 429 ] || fail "east: $ok x 200, then $last (want $LIMIT, then 429)"
read -r ok last <<<"$(count_200 "$WEST")"
[ "$ok" = "$LIMIT" ] && [ "$last" = 429 ] || fail "west: $ok x 200, then $last (want $LIMIT, its own count, then 429)"
say "ok   one key: $LIMIT allowed in east and $LIMIT in west, each region its own count"

# --- 3. sluice status in west ------------------------------------------------------
west_status() {
    dc run --rm --no-deps -T \
        -e SLUICE_NATS_USER=admin -e "SLUICE_NATS_PASSWORD=${SLUICE_AUTH_ADMIN_PASSWORD:-sluice-admin-dev}" \
        worker-west status --wait 2s 2>>"$LOG"
}
east_link_up() { west_status | grep -Eq '^ +east +link up'; }
until_ok 60 "west's status shows east with its link up" east_link_up
say "ok   sluice status in west: $(west_status | grep -E '^ +east ' | tr -s ' ')"
