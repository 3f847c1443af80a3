#!/usr/bin/env bash
# `make install`: the service in a venv of its own, for a lab server (README "Deploy").
#   PREFIX (/opt/reroute): venv/ (the project and its dependencies, not editable),
#     topologies/ (with the topology and inventory schemas), docs/openapi.json, README.md
#   ETC (/etc/reroute): reroute.yaml, installed only if absent (never overwritten)
#   UNIT_DIR (/etc/systemd/system): reroute.service with PREFIX and ETC filled in ("" skips)
# Run as root from the repository root; again to upgrade (the venv is rebuilt in place).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/opt/reroute}
ETC=${ETC:-/etc/reroute}
UNIT_DIR=${UNIT_DIR-/etc/systemd/system}
PY=${PYTHON:-python3}
say() { echo "install: $*"; }

say "venv in $PREFIX/venv"
mkdir -p "$PREFIX"
"$PY" -m venv --clear "$PREFIX/venv"
"$PREFIX/venv/bin/pip" install -q --upgrade pip
"$PREFIX/venv/bin/pip" install -q .
say "topologies, schemas and docs in $PREFIX"
rm -rf "$PREFIX/topologies"
cp -r topologies "$PREFIX/topologies"
mkdir -p "$PREFIX/docs"
cp docs/openapi.json "$PREFIX/docs/"
cp README.md "$PREFIX/"
mkdir -p "$ETC"
if [[ -e $ETC/reroute.yaml ]]; then
  say "$ETC/reroute.yaml exists: kept"
else
  sed "s|/opt/reroute|$PREFIX|g" packaging/reroute.yaml > "$ETC/reroute.yaml"
  say "$ETC/reroute.yaml: an example; edit topology: and inventory:"
fi
if [[ -n $UNIT_DIR ]]; then
  mkdir -p "$UNIT_DIR"
  sed -e "s|/opt/reroute|$PREFIX|g" -e "s|/etc/reroute|$ETC|g" packaging/reroute.service \
    > "$UNIT_DIR/reroute.service"
  say "$UNIT_DIR/reroute.service"
  if [[ -d /run/systemd/system ]]; then systemctl daemon-reload; fi
fi
say "$("$PREFIX/venv/bin/reroute" --version) installed"
say "done. Tokens: (umask 077; echo \"operator \$(openssl rand -hex 24)\" > $ETC/tokens);"
say "then: systemctl enable --now reroute; journalctl -u reroute -f"
