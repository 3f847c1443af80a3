#!/usr/bin/env bash
# Installs what a fresh machine lacks: Debian packages and the Python venv. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=(openvswitch-switch iproute2 ethtool iperf3 tcpdump iputils-ping procps psmisc
      chromium chromium-driver  # the browser test of the web page (tests/unit/services/service/test_ui.py)
      iptables  # the fault harness cuts a device off (tests/e2e/faults: packets dropped)
      etcd-server  # the replicas' store (services/reroute/store/etcd); tests run their own members
      systemd openssl  # systemd-analyze checks the unit, openssl makes the TLS tests' CA
      prometheus)  # its promtool checks /metrics, the alert rules and the dashboard's queries

missing=()
for pkg in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $EUID -ne 0 ]]; then
    echo "setup: missing Debian packages (${missing[*]}); run 'make setup' as root" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The package may start the system-wide OVS; the fabric runs its own, private instances.
  # Only promtool is wanted of prometheus: its server is not left running where systemd is.
  if [[ " ${missing[*]} " == *" prometheus "* && -d /run/systemd/system ]]; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [[ ! -f $stamp ]]; then
  echo "setup: installing Python dependencies"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
# The p4runtime wheel's generated modules need the slow pure-Python protobuf: regenerate them.
if ! grep -q "NO CHECKED-IN PROTOBUF GENCODE" "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/p4/v1/p4runtime_pb2.py" 2>/dev/null; then
  .venv/bin/python scripts/p4stubs.py
fi
# p4runtime-shell pins protobuf < 3.21: a venv of its own, for the interop test and the bench.
if [[ ! -x .venv-p4shell/bin/python ]] || [[ ! -f .venv-p4shell/.installed ]]; then
  echo "setup: creating .venv-p4shell (p4runtime-shell)"
  "$PY" -m venv .venv-p4shell
  .venv-p4shell/bin/pip install -q p4runtime-shell==0.0.6
  touch .venv-p4shell/.installed
fi
# Third-party peers the tests run against (fabric/peers.py): the OpenFlow 1.0 reference dpctl
# (gcc, make) and Ryu 4.34 in a venv of its own (a Python 3.9), built once and cached outside
# the checkout (~/.cache/reroute). Where one cannot be had this says why, and its tests skip.
.venv/bin/python -m fabric.peers || echo "setup: a peer failed to build (above): its tests will fail until it builds" >&2
