#!/usr/bin/env bash
# End-to-end test of compose.yaml: the whole stack in Docker, checked from the
# host through the gateways' published ports only.
#
#   scripts/e2e-compose.sh        (needs the images: scripts/build-images.sh)
#
# What it checks, in order; the first failed check stops it (exit 1):
#   1. the stack comes up: 3 NATS nodes, 3 workers, 2 gateways, all healthy;
#   2. every partition answers through both gateways;
#   3. one key's limit holds across both gateways (15 per hour: alternating
#      16 requests between them gives 15 x 200, then 429 with Retry-After),
#      and a limit holds on every partition; and Envoy's rate limit service
#      answers once over gRPC (gateway1's published gRPC port, asked with
#      grpcio and Envoy's rls.proto: clients/python/tests/rls/ask.py);
#      and the roles of SPEC §10 (NATS runs `sluice nats-config --auth
#      --auth-from-env`, with passwords made for this run): `sluice reset`
#      as client is refused by the server and changes nothing, a wrong
#      password is refused, `sluice status` and `sluice reset` as admin work;
#   4. a worker killed with SIGKILL: its partitions answer again through the
#      survivors, and every limit still holds (the e2e config uses the
#      journal, so a kill loses no counts); restarted, it takes its share back
#      and the limits still hold;
#   5. the JetStream meta leader's NATS node stopped: decisions keep flowing
#      (the R3 buckets and journal keep a quorum; clients reconnect) and the
#      limits hold; started again, it rejoins and all is well; then another
#      worker killed: the survivors (whose lease watches went through the
#      failover) still take its partitions over, and the limits hold;
#   6. the stack goes down with `down -v`, and no container, network or
#      volume of the project is left (checked, also after a failure).
#
# The stack runs under a unique compose project name, with the e2e config
# deploy/e2e/sluice.toml, and every port published on 127.0.0.1 at a port
# Docker picks, so it can run beside anything else. It always tears down
# (trap), and every wait is bounded: the whole run takes about two minutes.
#
# Environment: SLUICE_IMAGE, SLUICE_NATS_IMAGE (as compose.yaml),
# SLUICE_E2E_PROJECT (project name), SLUICE_E2E_KEEP=1 (leave the stack up
# after a failure, to look at it; then tear it down yourself).
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT="${SLUICE_E2E_PROJECT:-sluice-e2e-$(date +%s)-$$}"
CONFIG_FILE="deploy/e2e/sluice.toml"
POLICY="e2e" # 15 per hour, sliding log (deploy/e2e/sluice.toml)
LIMIT=15
RUN="r$$" # keys of this run

if command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
else
    echo "e2e: neither docker-compose nor docker compose is installed" >&2
    exit 1
fi

export SLUICE_CONFIG_FILE="./$CONFIG_FILE"
export SLUICE_LOG="info,async_nats=warn"
# Empty: Docker picks a free host port (still on 127.0.0.1).
export SLUICE_NATS1_PORT='' SLUICE_NATS2_PORT='' SLUICE_NATS3_PORT=''
export SLUICE_NATS1_HTTP_PORT='' SLUICE_NATS2_HTTP_PORT='' SLUICE_NATS3_HTTP_PORT=''
export SLUICE_GATEWAY1_PORT='' SLUICE_GATEWAY2_PORT=''
export SLUICE_GATEWAY1_GRPC_PORT='' SLUICE_GATEWAY2_GRPC_PORT=''
# The role users' passwords (SPEC §10), fresh for each run: compose.yaml
# hands them to the NATS nodes (the configs name them as variables) and to
# each service as its own role's. A letter first: nats-server reads the
# variable's value as a config value, and digits alone would be a number.
rand_password() { printf '%s%s' "$1" "$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
SLUICE_AUTH_CLIENT_PASSWORD="$(rand_password c)"
SLUICE_AUTH_WORKER_PASSWORD="$(rand_password w)"
SLUICE_AUTH_ADMIN_PASSWORD="$(rand_password a)"
export SLUICE_AUTH_CLIENT_PASSWORD SLUICE_AUTH_WORKER_PASSWORD SLUICE_AUTH_ADMIN_PASSWORD

LOG="$(mktemp -t sluice-e2e.XXXXXX.log)"
PASSED=0
STARTED=$SECONDS

dc() { "${COMPOSE[@]}" -p "$PROJECT" -f "$ROOT/compose.yaml" "$@"; }
say() { printf '[%3ds] %s\n' $((SECONDS - STARTED)) "$*"; }
pass() { PASSED=$((PASSED + 1)); say "ok   $*"; }
fail() {
    say "FAIL $*"
    FAILED=1
    exit 1
}

# --- teardown, always ----------------------------------------------------------
FAILED=0
# shellcheck disable=SC2317 # called from the trap
leftovers() {
    local f="label=com.docker.compose.project=$PROJECT"
    {
        docker ps -aq --filter "$f"
        docker network ls -q --filter "$f"
        docker volume ls -q --filter "$f"
    } 2>/dev/null
}
# shellcheck disable=SC2317 # called from the trap
teardown() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    [ "$rc" != 0 ] && FAILED=1
    if [ "$FAILED" = 1 ]; then
        echo "---- last log lines of every service (full compose output: $LOG) ----"
        dc logs --no-color --tail=40 2>&1 | tail -n 400
        echo "----"
        if [ "${SLUICE_E2E_KEEP:-0}" = 1 ]; then
            say "SLUICE_E2E_KEEP=1: the stack is left up; remove it with: ${COMPOSE[*]} -p $PROJECT -f $ROOT/compose.yaml down -v --remove-orphans"
            exit 1
        fi
    fi
    say "tearing down: down -v --remove-orphans"
    dc down -v --remove-orphans -t 20 >>"$LOG" 2>&1
    local left
    left="$(leftovers)"
    if [ -n "$left" ]; then
        say "FAIL after down, the project still has: $(echo "$left" | tr '\n' ' ')"
        local f="label=com.docker.compose.project=$PROJECT"
        docker ps -aq --filter "$f" | xargs -r docker rm -f >/dev/null 2>&1
        docker network ls -q --filter "$f" | xargs -r docker network rm >/dev/null 2>&1
        docker volume ls -q --filter "$f" | xargs -r docker volume rm >/dev/null 2>&1
        FAILED=1
    else
        PASSED=$((PASSED + 1))
        say "ok   nothing of project $PROJECT is left (containers, networks, volumes)"
    fi
    if [ "$FAILED" = 1 ]; then
        say "e2e-compose: FAILED"
        echo "$PASSED passed, 1 failed"
        exit 1
    fi
    rm -f "$LOG"
    say "e2e-compose: all checks passed in $((SECONDS - STARTED))s"
    echo "$PASSED passed, 0 failed"
    exit 0
}
trap teardown EXIT
trap 'say "interrupted"; FAILED=1; exit 1' INT TERM
# Anything that fails outside a check (set -e) is a failure too, and says where.
trap 'say "FAIL unexpected error (status $?) at line $LINENO: $BASH_COMMAND"; FAILED=1' ERR

# --- helpers -------------------------------------------------------------------
# PART = FNV-1a 32 of a key, mod N: the NATS server's partition(N,1) (ASCII keys).
partition_of() { # <key> <n>
    local s="$1" h=2166136261 i c
    for ((i = 0; i < ${#s}; i++)); do
        printf -v c '%d' "'${s:i:1}"
        h=$(((h ^ c) * 16777619 & 0xFFFFFFFF))
    done
    PART=$((h % $2))
}
# keys_per_partition <prefix>: fills KEYS[p] with one key per partition.
keys_per_partition() {
    local prefix="$1" i=0 p found=0
    KEYS=()
    while [ "$found" -lt "$PARTITIONS" ]; do
        partition_of "$prefix$i" "$PARTITIONS"
        p=$PART
        if [ -z "${KEYS[$p]:-}" ]; then
            KEYS[p]="$prefix$i"
            found=$((found + 1))
        fi
        i=$((i + 1))
    done
}

# codes <gateway addr> <path?query>...: the HTTP status of each request, one
# per line, over one connection (000: no answer).
codes() {
    local gw="$1" args=()
    shift
    for path in "$@"; do args+=(-o /dev/null "http://$gw$path"); done
    curl -s --max-time 20 -w '%{http_code}\n' "${args[@]}" || true
}
code() { codes "$@" | tail -n 1; }
# pcodes_urls: "<status> <url>" per request, in parallel, in no particular order.
pcodes_urls() {
    local gw="$1" args=()
    shift
    for path in "$@"; do args+=(-o /dev/null "http://$gw$path"); done
    curl -s -Z --parallel-max 32 --max-time 20 -w '%{http_code} %{url}\n' "${args[@]}" || true
}
# pcodes: the same, sent in parallel, the codes in no particular order.
pcodes() {
    local gw="$1" args=()
    shift
    for path in "$@"; do args+=(-o /dev/null "http://$gw$path"); done
    curl -s -Z --parallel-max 32 --max-time 20 -w '%{http_code}\n' "${args[@]}" || true
}
allow() { echo "/v1/allow/$1?policy=$POLICY&cost=${2:-1}"; }

# Every partition answers (a decision, 200, for a look with cost 0) through gateway $1.
all_partitions_answer() {
    local paths=() p
    for p in "${!READY[@]}"; do paths+=("$(allow "${READY[$p]}" 0)"); done
    [ "$(pcodes "$1" "${paths[@]}" | grep -c '^200$')" = "$PARTITIONS" ]
}
wait_partitions() { # <what> <seconds>
    local t0=$SECONDS
    while ! { all_partitions_answer "$GW1" && all_partitions_answer "$GW2"; }; do
        [ $((SECONDS - t0)) -lt "$2" ] || fail "$1: not every partition answers through both gateways after $2s"
        sleep 0.5
    done
    WAITED=$((SECONDS - t0))
}

# remaining <gw> <key>: RateLimit-Remaining of a look (cost 0) at <key>
# through <gw>; empty when no worker decided.
remaining() {
    curl -s --max-time 5 -o /dev/null -D - "http://$1$(allow "$2" 0)" |
        tr -d '\r' | awk -F': ' 'tolower($1) == "ratelimit-remaining" { print $2 }'
}

# asks_get <gw> <want> <cost> <what> <key>...: asks for each key once, with
# <cost>, through <gw>; each must get HTTP <want>. A 503 means no worker
# decided in time: a partition moving between workers (nothing counted), or
# a reply later than the gateway's timeout (a journal append slow while the
# cluster settles: the ask may have been counted). So a 503 is asked again,
# for up to 30 s, where that is sound: asks that want a denial (a denied ask
# counts nothing), and asks that want 200 once a look shows nothing of the
# key was used (remaining = <cost>); remaining 0 means the first ask was
# counted, which is what was asked for. A 200 where a denial was wanted is
# over-admission and any other code fails at once. Adds the repeated asks to
# RETRIED.
asks_get() {
    local gw="$1" want="$2" cost="$3" what="$4" k code url r t0=$SECONDS
    shift 4
    local pending=("$@") unsure=()
    while [ "${#pending[@]}" -gt 0 ] || [ "${#unsure[@]}" -gt 0 ]; do
        local paths=() again=() still=()
        for k in "${unsure[@]}"; do
            r="$(remaining "$gw" "$k")"
            case "$r" in
                0) ;;
                "$cost") again+=("$k") ;;
                "") still+=("$k") ;;
                *) fail "$what: key $k has $r of $cost left after an ask of $cost that got no answer" ;;
            esac
        done
        for k in "${pending[@]}"; do paths+=("$(allow "$k" "$cost")"); done
        while read -r code url; do
            k="${url##*/v1/allow/}"
            k="${k%%\?*}"
            case "$code" in
                "$want") ;;
                503 | 000) if [ "$want" = 200 ]; then still+=("$k"); else again+=("$k"); fi ;;
                200) fail "$what: key $k, whose limit was used up, was allowed again through $gw (over-admission)" ;;
                *) fail "$what: key $k through $gw: expected HTTP $want, got $code" ;;
            esac
        done < <([ "${#paths[@]}" -eq 0 ] || pcodes_urls "$gw" "${paths[@]}")
        [ "${#again[@]}" -eq 0 ] && [ "${#still[@]}" -eq 0 ] && break
        RETRIED=$((RETRIED + ${#again[@]} + ${#still[@]}))
        [ $((SECONDS - t0)) -lt 30 ] ||
            fail "$what: keys still get no decision (503) through $gw after 30s: ${again[*]:0:5} ${still[*]:0:5}"
        pending=("${again[@]}")
        unsure=("${still[@]}")
        sleep 0.5
    done
}
retried_note() { [ "$RETRIED" = 0 ] || echo " ($RETRIED asks got 503 first and were looked at again or repeated)"; }

# Every key in LIMITED is exhausted: through both gateways, a request is
# denied (429).
limits_hold() { # <when>
    RETRIED=0
    asks_get "$GW1" 429 1 "$1" "${LIMITED[@]}"
    asks_get "$GW2" 429 1 "$1" "${LIMITED[@]}"
    pass "$1: all ${#LIMITED[@]} exhausted keys (one per partition, and the shared ones) still denied (429) through both gateways$(retried_note)"
}

wait_healthy() { # <seconds> <expected container count>
    local t0=$SECONDS ids states
    while :; do
        ids="$(dc ps -q 2>/dev/null)"
        states="$(for id in $ids; do docker inspect -f '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}}' "$id"; done)"
        if [ "$(echo "$states" | grep -c ' running healthy$')" = "$2" ]; then
            return 0
        fi
        if [ $((SECONDS - t0)) -ge "$1" ]; then
            echo "$states"
            fail "not all $2 containers healthy after $1s"
        fi
        sleep 1
    done
}

# The JetStream meta leader's name, as the NATS node at <monitoring addr> knows it.
meta_leader() {
    local jsz
    jsz="$(curl -s --max-time 5 "http://$1/jsz" || true)"
    [[ "$jsz" =~ \"leader\":\ *\"([^\"]*)\" ]] && echo "${BASH_REMATCH[1]}"
    return 0
}

published() { # <service> <container port>
    local a
    a="$(dc port "$1" "$2" 2>/dev/null | tail -n 1)"
    [ -n "$a" ] || fail "$1:$2 is not published"
    echo "${a/0.0.0.0/127.0.0.1}"
}

# Sends 2*LIMIT+... alternating requests for a fresh key; the first LIMIT must
# be allowed and then every one denied with the rate-limit headers.
shared_limit_holds() { # <key> <when>
    local key="$1" i gw got=() c hdr
    for ((i = 1; i <= LIMIT + 1; i++)); do
        if ((i % 2)); then gw="$GW1"; else gw="$GW2"; fi
        got+=("$(code "$gw" "$(allow "$key")")")
    done
    c="$(printf '%s ' "${got[@]}")"
    [ "$c" = "$(printf '200 %.0s' $(seq "$LIMIT"))429 " ] ||
        fail "$2: $((LIMIT + 1)) requests alternating between the gateways for $key: expected $LIMIT x 200 then 429, got: $c"
    hdr="$(curl -s -i --max-time 10 "http://$GW2$(allow "$key")" | tr -d '\r')"
    [[ "${hdr%%$'\n'*}" == *" 429"* ]] || fail "$2: a further request for $key was not denied: ${hdr%%$'\n'*}"
    grep -qi '^retry-after: [0-9]' <<<"$hdr" || fail "$2: the 429 for $key has no Retry-After header"
    grep -qi '^ratelimit-remaining: 0$' <<<"$hdr" || fail "$2: the 429 for $key does not say RateLimit-Remaining: 0"
    pass "$2: key $key, $((LIMIT + 1)) requests alternating between the 2 gateways: $LIMIT x 200, then 429 (Retry-After, RateLimit-Remaining: 0)"
}

# --- 0. preflight --------------------------------------------------------------
for cmd in curl awk docker; do
    command -v "$cmd" >/dev/null 2>&1 || fail "$cmd is not installed"
done
# curl 7.75 or later: parallel transfers (-Z) and %{url}.
printf '%s\n7.75.0\n' "$(curl -V | awk 'NR == 1 { print $2 }')" | sort -V -C -r ||
    fail "curl $(curl -V | awk 'NR == 1 { print $2 }') is too old (need 7.75 or later)"
for image in "${SLUICE_IMAGE:-sluice:local}" "${SLUICE_NATS_IMAGE:-sluice-nats:local}"; do
    docker image inspect "$image" >/dev/null 2>&1 || fail "image $image is missing: run scripts/build-images.sh"
done
# Python with grpcio, for the one gRPC call (the venv of the tests).
"$ROOT/scripts/install-deps.sh" >/dev/null 2>&1 || fail "scripts/install-deps.sh failed"
PY="$("$ROOT/scripts/python-venv.sh" 2>>"$LOG")" || fail "scripts/python-venv.sh failed (see $LOG)"
PARTITIONS="$(sed -n 's/^partitions *= *\([0-9]*\).*/\1/p' "$ROOT/$CONFIG_FILE")"
[ -n "$PARTITIONS" ] || fail "no partitions in $CONFIG_FILE"
keys_per_partition "ready-$RUN-"
READY=("${KEYS[@]}")
keys_per_partition "limit-$RUN-"
PER_PARTITION=("${KEYS[@]}")
say "project $PROJECT, config $CONFIG_FILE ($PARTITIONS partitions), ${COMPOSE[*]}"

# --- 1. up ---------------------------------------------------------------------
say "docker-compose up -d (3 NATS nodes, then 3 workers and 2 gateways)"
dc up -d >>"$LOG" 2>&1 || { tail -n 30 "$LOG"; fail "docker-compose up failed"; }
wait_healthy 120 8
pass "stack up: 8 containers running and healthy (3 nats, 3 workers, 2 gateways)"
GW1="$(published gateway1 8080)"
GW2="$(published gateway2 8080)"
GRPC1="$(published gateway1 8081)"
MON=()
for n in nats1 nats2 nats3; do MON+=("$(published "$n" 8222)"); done
say "gateways at $GW1 and $GW2; NATS monitoring at ${MON[*]}"

# --- 2. every partition answers ------------------------------------------------
wait_partitions "after start" 60
pass "all $PARTITIONS partitions answer through both gateways (${WAITED}s after healthy)"
for gw in "$GW1" "$GW2"; do
    metrics="$(curl -s --max-time 10 "http://$gw/metrics" || true)"
    grep -q '^sluice_gateway_requests_total{' <<<"$metrics" || fail "GET /metrics on $gw has no sluice_gateway_requests_total"
done
pass "GET /metrics on both gateways is Prometheus text (sluice_gateway_requests_total)"

# --- 3. limits hold across gateways ---------------------------------------------
shared_limit_holds "shared-$RUN" "across gateways"
LIMITED=("shared-$RUN")
for p in "${!PER_PARTITION[@]}"; do LIMITED+=("${PER_PARTITION[$p]}"); done
# Right after start, the third worker may still be taking its partitions
# over, so a partition can be between owners for a moment (503).
RETRIED=0
asks_get "$GW1" 200 "$LIMIT" "taking the whole limit ($LIMIT) of one key per partition" "${PER_PARTITION[@]}"
asks_get "$GW2" 429 1 "one more for each of those keys" "${PER_PARTITION[@]}"
pass "on every partition: a key's whole limit taken through gateway1 (cost $LIMIT: 200), one more through gateway2: 429$(retried_note)"

# Envoy's rate limit service: one ShouldRateLimit, as Envoy would send it
# (no [envoy] table: policy default, key "e2e|user=<run>").
rls="$("$PY" "$ROOT/clients/python/tests/rls/ask.py" "$GRPC1" e2e "user=$RUN" 2>&1)" ||
    fail "ShouldRateLimit through gateway1's gRPC port $GRPC1 failed: $rls"
[ "${rls%%$'\n'*}" = OK ] || fail "ShouldRateLimit through $GRPC1: expected OK, got: $rls"
grep -q '^OK remaining=14 limit=15/SECOND$' <<<"$rls" ||
    fail "ShouldRateLimit through $GRPC1: expected one OK descriptor with 14 of 15/SECOND left, got: $rls"
pass "Envoy's ShouldRateLimit over gRPC (gateway1, $GRPC1): OK, 14 of 15 per SECOND left under default"

# Who may do what (SPEC §10): the NATS nodes enforce the roles; the
# gateways connect as `client`, the workers as `worker`. sluice's admin
# commands run inside gateway1's container (the image's /sluice, on the
# compose network), whose environment is the gateway's: role `client`.
# as_role <user> <password> <sluice args...>
as_role() {
    local user="$1" password="$2"
    shift 2
    dc exec -T -e SLUICE_NATS_USER="$user" -e SLUICE_NATS_PASSWORD="$password" -e SLUICE_LOG=error \
        gateway1 /sluice "$@" 2>&1
}
# What the workers hold for <key> under the e2e policy (a look, cost 0, by
# `sluice check` as client: no gateway deny cache in between).
held() {
    as_role client "$SLUICE_AUTH_CLIENT_PASSWORD" check "$1" --policy "$POLICY" --cost 0 --json |
        sed -n 's/.*"remaining":\([0-9]*\).*/\1/p'
}
rkey="roles-$RUN"
RETRIED=0
asks_get "$GW1" 200 "$LIMIT" "taking the whole limit of $rkey" "$rkey"
[ "$(held "$rkey")" = 0 ] || fail "roles: $rkey should have 0 left after taking its limit (sluice check as client: $(held "$rkey"))"
out="$(as_role client "$SLUICE_AUTH_CLIENT_PASSWORD" reset "$rkey")" &&
    fail "roles: sluice reset as client succeeded: $out"
grep -q 'Permissions Violation' <<<"$out" || fail "roles: sluice reset as client failed, but not as refused by NATS: $out"
[ "$(held "$rkey")" = 0 ] || fail "roles: the refused reset as client changed $rkey"
pass "roles: sluice check as client works; sluice reset as client is refused by the NATS server ($(tail -n 1 <<<"$out" | cut -c1-110)...), $rkey unchanged"
out="$(as_role client "wrong$RUN" check "$rkey")" && fail "roles: sluice check with a wrong password succeeded: $out"
grep -q 'authorization violation' <<<"$out" || fail "roles: sluice check with a wrong password failed otherwise: $out"
pass "roles: a wrong password is refused by the NATS server (authorization violation)"
out="$(as_role admin "$SLUICE_AUTH_ADMIN_PASSWORD" status)" || fail "roles: sluice status as admin failed: $out"
out="$(as_role admin "$SLUICE_AUTH_ADMIN_PASSWORD" reset "$rkey")" || fail "roles: sluice reset as admin failed: $out"
[ "$(held "$rkey")" = "$LIMIT" ] || fail "roles: after sluice reset as admin ($out), $rkey should have $LIMIT left, not $(held "$rkey")"
pass "roles: sluice status and sluice reset as admin work ($out); $rkey has its whole limit again"

# --- 4. kill a worker --------------------------------------------------------------
mapfile -t workers < <(dc ps -q worker)
victim="${workers[0]:-}"
[ -n "$victim" ] || fail "no worker container"
vname="$(docker inspect -f '{{.Name}}' "$victim")"
docker kill -s KILL "$victim" >>"$LOG" 2>&1 || fail "docker kill $vname failed"
say "killed worker ${vname#/} (SIGKILL)"
wait_partitions "after killing a worker" 30
pass "after SIGKILL of worker ${vname#/}: all $PARTITIONS partitions answer again through the 2 survivors within ${WAITED}s"
limits_hold "after the kill"
docker start "$victim" >>"$LOG" 2>&1 || fail "docker start $vname failed"
wait_healthy 60 8
# Let the restarted worker take its share over (handover: final snapshot, release, claim).
sleep 3
wait_partitions "after restarting the worker" 30
pass "worker ${vname#/} restarted: 3 workers again, all partitions answer"
limits_hold "after the restart and handover"

# --- 5. stop a NATS node -------------------------------------------------------------
leader="$(meta_leader "${MON[0]}")"
case "$leader" in nats1 | nats2 | nats3) ;; *) leader=nats1 ;; esac
# Around the stop, sweep all partitions continuously (one look, cost 0, per
# partition, through gateway1) and keep how many answered each time.
rm -f "$LOG.stop"
(
    paths=()
    for p in "${!READY[@]}"; do paths+=("$(allow "${READY[$p]}" 0)"); done
    end=$((SECONDS + 180))
    while [ ! -e "$LOG.stop" ] && [ $SECONDS -lt $end ]; do
        t="$(date +%s.%N)"
        printf '%s %s\n' "$t" "$(pcodes "$GW1" "${paths[@]}" | grep -c '^200$')"
        sleep 0.2
    done
) >"$LOG.sweeps" 2>/dev/null &
sweeper=$!
sleep 2
say "stopping $leader (the JetStream meta leader)"
dc stop -t 15 "$leader" >>"$LOG" 2>&1 || fail "docker-compose stop $leader failed"
wait_partitions "with $leader stopped" 45
first=$WAITED
# Leases live lease_ttl (3 s): a worker whose renewals stalled during the
# failover stops answering before they expire, and another takes over. Let
# that settle, then every partition must answer again.
sleep 4
wait_partitions "with $leader stopped, after the failover settled" 30
pass "with NATS node $leader stopped: all partitions answer through both gateways (${first}s after the stop, and again ${WAITED}s after 4s more)"
limits_hold "with $leader stopped"
shared_limit_holds "shared2-$RUN" "with $leader stopped"
LIMITED+=("shared2-$RUN")
touch "$LOG.stop"
wait "$sweeper" || true
# The longest time some partition was without an answer: from the first sweep
# that missed one to the next complete sweep.
read -r sweeps full longest < <(awk -v n="$PARTITIONS" '
    { if ($2 == n) { full++; if (since) { if ($1 - since > longest) longest = $1 - since; since = 0 } }
      else if (!since) since = $1 }
    END { if (since) longest = -1; printf "%d %d %.1f\n", NR, full, longest }' "$LOG.sweeps")
rm -f "$LOG.sweeps" "$LOG.stop"
[ "$sweeps" -gt 0 ] || fail "the sweeps around the NATS stop recorded nothing"
[ "$longest" != "-1.0" ] || fail "around the NATS stop: the last sweep still missed partitions"
awk -v l="$longest" 'BEGIN { exit !(l <= 15) }' ||
    fail "around the stop of $leader, some partition went ${longest}s without answering (limit 15s)"
pass "decisions kept flowing around the stop of $leader: $sweeps sweeps of all partitions, $full complete; the longest any partition went unanswered: ${longest}s (limit 15s)"
dc start "$leader" >>"$LOG" 2>&1 || fail "docker-compose start $leader failed"
wait_healthy 60 8
# A restarted container gets a new host port (they are picked by Docker).
MON=()
for n in nats1 nats2 nats3; do MON+=("$(published "$n" 8222)"); done
for m in "${MON[@]}"; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://$m/healthz")" = 200 ] || fail "NATS at $m is not healthy after $leader came back"
done
# Only the meta leader knows whether its peers are current: ask it.
t0=$SECONDS
while :; do
    now_leader="$(meta_leader "${MON[0]}")"
    current=0
    case "$now_leader" in
        nats[123]) current="$(curl -s --max-time 5 "http://${MON[${now_leader#nats} - 1]}/jsz" | grep -c '"current": *true' || true)" ;;
    esac
    [ "$current" = 2 ] && break
    [ $((SECONDS - t0)) -lt 30 ] || fail "30s after $leader came back, the meta leader (${now_leader:-none}) does not see its 2 peers as current"
    sleep 1
done
pass "$leader started again: all 3 NATS nodes healthy (/healthz 200); the meta leader $now_leader sees both peers current"
wait_partitions "after $leader came back" 30
limits_hold "after $leader came back"
shared_limit_holds "shared3-$RUN" "after $leader came back"
LIMITED+=("shared3-$RUN")

# --- 5b. the workers still coordinate after the failover ---------------------------
# Their lease watches and heartbeats went through the NATS failover: kill
# another worker and the survivors must still see it go and take over.
mapfile -t workers < <(dc ps -q worker)
victim2=""
for w in "${workers[@]}"; do [ "$w" != "$victim" ] && victim2="$w" && break; done
[ -n "$victim2" ] || fail "no second worker container"
v2name="$(docker inspect -f '{{.Name}}' "$victim2")"
docker kill -s KILL "$victim2" >>"$LOG" 2>&1 || fail "docker kill $v2name failed"
say "killed worker ${v2name#/} (SIGKILL), after the NATS failover"
wait_partitions "after killing a second worker" 30
pass "after the NATS failover, SIGKILL of worker ${v2name#/}: all $PARTITIONS partitions answer again within ${WAITED}s"
limits_hold "after the second kill"

# --- 6. down (in the trap) -------------------------------------------------------
exit 0
