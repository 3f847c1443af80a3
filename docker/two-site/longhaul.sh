#!/usr/bin/env bash
# Entry point of the longhaul container: the delay line (emulators.delayline) between its two
# data-plane interfaces, DELAY_MS each way; its HTTP control on this container's loopback
# port 8090 (`docker exec longhaul ...`, README).
set -euo pipefail
cd /src
iface_of() {
  local i
  for i in $(seq 100); do
    ip -o -4 addr show to "$1" | awk '{print $2; exit}' | grep . && return 0
    sleep 0.1
  done
  echo "longhaul: no interface in $1" >&2; return 1
}
west=$(iface_of "$WEST"); east=$(iface_of "$EAST")
for i in "$west" "$east"; do ip addr flush dev "$i"; ethtool -K "$i" tx off >/dev/null || true; done
exec .venv/bin/python -m emulators.delayline --a "$west" --b "$east" --delay-ms "$DELAY_MS" \
  --control 127.0.0.1:8090
