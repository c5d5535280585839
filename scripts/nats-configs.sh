#!/usr/bin/env bash
# Writes (or checks) the nats-server configs of compose.yaml's 3-node cluster
# and of compose.regions.yaml's two regions (deploy/regions/{east,west}.conf).
#
#   scripts/nats-configs.sh           write deploy/nats/nats{1,2,3}.conf
#   scripts/nats-configs.sh --check   exit 1 with a diff if they differ from
#                                     what `sluice nats-config` prints now
#
# Each file is exactly `sluice nats-config` for that node: the same partition
# mapping on every server (a server with another mapping would silently send
# keys to other partitions), JetStream in /data, a route to each node. The
# partition count comes from config/sluice.toml; --check also makes sure every
# other sluice config that compose may mount (deploy/*/sluice.toml, e.g. the
# e2e one) gives the same files, i.e. has the same `partitions`.
#
# With the roles of SPEC §10 (`--auth --auth-from-env`): users client,
# worker and admin, whose passwords the files name as variables
# ($SLUICE_AUTH_CLIENT_PASSWORD, ...) that nats-server reads from its
# environment (compose.yaml sets them), so no secret is checked in.
#
# The sluice binary: $SLUICE_BIN, else `cargo run -p sluice-cli`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/deploy/nats"
NODES=(nats1 nats2 nats3)
CONFIG="$ROOT/config/sluice.toml"

check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

sluice() {
    if [ -n "${SLUICE_BIN:-}" ]; then
        "$SLUICE_BIN" "$@"
    else
        (cd "$ROOT" && cargo run --quiet -p sluice-cli -- "$@")
    fi
}

render() { # <sluice config> <node>
    local routes=() n
    for n in "${NODES[@]}"; do routes+=(--route "nats-route://$n:6222"); done
    sluice nats-config --config "$1" --auth --auth-from-env \
        --server-name "$2" --listen 0.0.0.0:4222 --http 0.0.0.0:8222 \
        --store-dir /data/jetstream \
        --cluster-name sluice --cluster-listen 0.0.0.0:6222 "${routes[@]}"
}

# compose.regions.yaml's two regions (docs/REGIONS.md): one server each,
# east listening for the link, west connecting to it. The link's nkey is
# derived from SLUICE_AUTH_LINK_SEED; the default is a seed for trying it
# on one machine (like compose's default passwords): with your own, run
# this script again, since east's file names the key's public half.
REGIONS=(east west)
export SLUICE_AUTH_LINK_SEED="${SLUICE_AUTH_LINK_SEED:-SUAFTP4ORDPOK4G2VI4N23UF7M3E3CGAQFSPVF7UMAMBWQQXMFWJM65GKA}"
render_region() { # <region>
    local link=(--link-listen 0.0.0.0:7422)
    [ "$1" = west ] && link=(--link east=nats-leaf://nats-east:7422)
    sluice nats-config --config "$ROOT/config/regions/$1.toml" --auth --auth-from-env \
        --listen 0.0.0.0:4222 --http 0.0.0.0:8222 --store-dir /data/jetstream "${link[@]}"
}

status=0
if [ "$check" = 0 ]; then
    mkdir -p "$ROOT/deploy/regions"
    for r in "${REGIONS[@]}"; do
        render_region "$r" >"$ROOT/deploy/regions/$r.conf.tmp"
        mv "$ROOT/deploy/regions/$r.conf.tmp" "$ROOT/deploy/regions/$r.conf"
        echo "wrote deploy/regions/$r.conf"
    done
    mkdir -p "$OUT"
    for n in "${NODES[@]}"; do
        render "$CONFIG" "$n" >"$OUT/$n.conf.tmp"
        mv "$OUT/$n.conf.tmp" "$OUT/$n.conf"
        echo "wrote deploy/nats/$n.conf"
    done
else
    for cfg in "$CONFIG" "$ROOT"/deploy/*/sluice.toml; do
        [ -f "$cfg" ] || continue
        for n in "${NODES[@]}"; do
            if ! diff -u "$OUT/$n.conf" <(render "$cfg" "$n") >&2; then
                echo "nats-configs: deploy/nats/$n.conf differs from \`sluice nats-config\` for ${cfg#"$ROOT"/} (run scripts/nats-configs.sh, or make partitions match)" >&2
                status=1
            fi
        done
    done
    for r in "${REGIONS[@]}"; do
        if ! diff -u "$ROOT/deploy/regions/$r.conf" <(render_region "$r") >&2; then
            echo "nats-configs: deploy/regions/$r.conf differs from \`sluice nats-config\` (run scripts/nats-configs.sh)" >&2
            status=1
        fi
    done
    [ "$status" = 0 ] && echo "nats-configs: deploy/nats/*.conf and deploy/regions/*.conf match \`sluice nats-config\`"
fi
exit "$status"
