#!/usr/bin/env bash
# CI hook for the compose stack: when a Docker engine answers, build the
# images and run the end-to-end test.
#
#   scripts/ci-compose.sh
#
# 1. `docker info` must answer (within 20 s) and docker-compose (or
#    `docker compose`) must be installed; otherwise it prints why and exits 0
#    ("skipped"), or 1 with SLUICE_REQUIRE_DOCKER=1.
# 2. scripts/build-images.sh: sluice:local and sluice-nats:local, from local
#    binaries, no registry. With the dev profile by default
#    (SLUICE_IMAGE_PROFILE=release to test the release build); with
#    SLUICE_BIN set (.ci/run sets it to the binary its tests ran), that
#    binary, with no compile at all.
# 3. scripts/nats-configs.sh --check: deploy/nats/*.conf are exactly what
#    `sluice nats-config` prints.
# 4. scripts/e2e-compose.sh, bounded by a 10-minute timeout (it tears the
#    stack down itself, also when the timeout hits); then
#    scripts/e2e-regions.sh (compose.regions.yaml, two regions), bounded by 5.
# Prints the time each step took.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
T0=$SECONDS
step() { printf '\n== ci-compose: %s\n' "$*"; }
took() { printf '== ci-compose: %s took %ds\n' "$1" $((SECONDS - $2)); }

skip() {
    echo "ci-compose: skipped: $*"
    if [ "${SLUICE_REQUIRE_DOCKER:-0}" = 1 ]; then
        echo "ci-compose: SLUICE_REQUIRE_DOCKER=1, so that is a failure" >&2
        exit 1
    fi
    exit 0
}

command -v docker >/dev/null 2>&1 || skip "no docker command"
timeout 20 docker info >/dev/null 2>&1 || skip "the Docker engine does not answer (docker info)"
command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 ||
    skip "neither docker-compose nor docker compose is installed"

PROFILE="${SLUICE_IMAGE_PROFILE:-dev}"
case "$PROFILE" in dev) dir=debug ;; *) dir="$PROFILE" ;; esac

step "build images (cargo profile $PROFILE)"
t=$SECONDS
"$ROOT/scripts/build-images.sh" --profile "$PROFILE"
took "building the images" "$t"

step "check deploy/nats/*.conf against sluice nats-config"
SLUICE_BIN="${SLUICE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/$dir/sluice}" "$ROOT/scripts/nats-configs.sh" --check

# e2e <script> <seconds> <what>: runs one end-to-end script under a
# timeout (it tears its stack down itself, also when the timeout hits);
# the first failure's status is kept in rc, and every e2e runs.
rc=0
e2e() {
    local t=$SECONDS status=0
    step "end-to-end test of $3"
    timeout -k 60 "$2" "$ROOT/scripts/$1" || status=$?
    took "the e2e of $3" "$t"
    [ "$status" = 124 ] && echo "ci-compose: the e2e of $3 did not finish within $2s" >&2
    [ "$rc" = 0 ] && rc="$status"
    return 0
}
e2e e2e-compose.sh 600 compose.yaml
e2e e2e-regions.sh 300 compose.regions.yaml
took "ci-compose in all" "$T0"
exit "$rc"
