#!/usr/bin/env bash
# Build the CI image locally: no image can be pulled, so the base is a debootstrapped
# Debian bookworm imported into Docker, then docker/Dockerfile adds Open vSwitch, the
# tools and the project's Python environment. Run as root from the repository root:
#   docker/build.sh            # reroute-base:bookworm (once), reroute-ci:latest and
#                              # reroute-service:latest (docker/service/: the service alone)
set -euo pipefail
cd "$(dirname "$0")/.."
# the Debian mirror: the one this host's apt uses (its sources list), or MIRROR=URL
MIRROR=${MIRROR:-$(docker/host-mirror.sh bookworm)}
ROOTFS=${ROOTFS:-/var/tmp/reroute-rootfs}

if ! docker image inspect reroute-base:bookworm >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
  rm -rf "$ROOTFS"
  echo "docker/build.sh: debootstrap bookworm into $ROOTFS"
  debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >/dev/null
  echo "docker/build.sh: importing reroute-base:bookworm"
  tar -C "$ROOTFS" -c . | docker import - reroute-base:bookworm >/dev/null
  rm -rf "$ROOTFS"
fi
# the context is the committed tree (git archive HEAD: no work in progress, no .venv), plus
# the host's CA bundle (the package registries may be reached through an inspecting proxy)
context=$(mktemp --suffix=.tar)
trap 'rm -f "$context"' EXIT
git archive --format=tar HEAD > "$context"
tar --append -f "$context" --transform 's|.*|docker/ca-certificates.crt|' \
  /etc/ssl/certs/ca-certificates.crt 2>/dev/null
echo "docker/build.sh: building reroute-ci:latest from $(git rev-parse --short HEAD)"
docker build -q -t reroute-ci:latest -f docker/Dockerfile - < "$context"
echo "docker/build.sh: building reroute-service:latest (the service alone, make install)"
docker build -q -t reroute-service:latest -f docker/service/Dockerfile - < "$context"
