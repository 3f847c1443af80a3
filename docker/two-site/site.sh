#!/usr/bin/env bash
# Entry point of a site container (docker-compose.yml): builds the site (reroute fabric
# site: its switch, its hosts, the data-plane interfaces as the switch's external ports),
# then runs its reroute service and its rtt monitor until SIGTERM, then takes it down.
# Environment: SWITCH HOST PEER LINKS TOPOLOGY FLOW STANDBY RTT_TRIGGER_MS RTT_CLEAR_MS
# REROUTE_TOKEN PEER_WAIT_S; optional MONITOR_ARGS (more `reroute monitor` options),
# OPENFLOW_LISTEN (HOST:PORT: the switch's OpenFlow on the management network, through
# openflow-relay.py, for a service elsewhere) and SERVE=0 (the switch alone: no service, no
# monitor; a service in another container manages it, README "Deploy").
set -euo pipefail
cd /src
R=.venv/bin/reroute
STATE=/var/lib/reroute/$SWITCH        # a volume: the journal survives a restart
RUN=/run/reroute                      # tmpfs: the switch starts afresh
NAME=$(awk '/^name:/ {print $2; exit}' "$TOPOLOGY")   # the site's state: $RUN/$NAME
log() { echo "site $SWITCH: $*" >&2; }

iface_of() {  # the interface with an address in subnet $1 (Docker attaches them at start)
  local i
  for i in $(seq 100); do
    ip -o -4 addr show to "$1" | awk '{print $2; exit}' | grep . && return 0
    sleep 0.1
  done
  log "no interface in $1"; return 1
}

# the switch's namespaces set sysctls: /proc/sys is read-only in a container
[[ -w /proc/sys/net ]] || mount -o remount,rw /proc/sys
ports=()
for link in $LINKS; do ports+=(--port "${link%%=*}=$(iface_of "${link#*=}")"); done
$R fabric down "$NAME" >/dev/null 2>&1 || true   # what a crashed run left
# a journal from an earlier run: this is a restart (the service recovers what it cut)
restart=0; [[ -e $STATE/journal.sqlite ]] && restart=1
$R fabric site "$TOPOLOGY" "$SWITCH" "${ports[@]}" --state-dir "$STATE"

mkdir -p "$RUN"
(umask 077; printf '%s\n' "$REROUTE_TOKEN" > "$RUN/token")
cat > "$RUN/serve.yaml" <<YAML
topology: /src/$TOPOLOGY
inventory: $RUN/$NAME/inventory.yaml
scope: [$SWITCH]
listen: 0.0.0.0:8080
tokens: [{token: "$REROUTE_TOKEN", role: operator}]
YAML

pids=()
if [[ -n ${OPENFLOW_LISTEN:-} ]]; then
  target=$(.venv/bin/python -c 'import sys, yaml
print(yaml.safe_load(open(sys.argv[1]))["devices"][sys.argv[2]]["target"])' \
    "$RUN/$NAME/inventory.yaml" "$SWITCH")
  .venv/bin/python docker/two-site/openflow-relay.py "$OPENFLOW_LISTEN" "$target" & pids+=($!)
fi
stop() {
  log "stopping"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  $R fabric down "$NAME" >/dev/null || true
  exit 0
}
trap stop TERM INT

if [[ ${SERVE:-1} == 0 ]]; then
  ((${#pids[@]})) || { sleep infinity & pids+=($!); }
  log "up: switch only (no service here), OpenFlow on ${OPENFLOW_LISTEN:-its unix socket}"
  wait -n "${pids[@]}" || true
  log "a process ended"; stop
fi
$R serve --config "$RUN/serve.yaml" & pids+=($!)
for i in $(seq 300); do  # the monitor checks the service once at start: wait for it
  .venv/bin/python -c 'import httpx; httpx.get("http://127.0.0.1:8080/healthz").raise_for_status()' \
    2>/dev/null && break
  sleep 0.1
done
# First start: the monitor arms once the connection works (the other site may start
# later), at most PEER_WAIT_S. After a restart it starts at once: a connection that does not
# work then is a degradation to repair.
if ((!restart)); then
  for ((i = 0; i < PEER_WAIT_S; i++)); do
    ip netns exec "rr-$NAME.$HOST" ping -c1 -W1 "$PEER" >/dev/null && break
    ((i % 10)) || log "waiting for $PEER to answer before the monitor starts"
    sleep 1
  done
fi
$R monitor rtt --netns "rr-$NAME.$HOST" --target "$PEER" \
  --trigger "$RTT_TRIGGER_MS" --clear "$RTT_CLEAR_MS" --samples 3 --rate-hz 20 \
  --api http://127.0.0.1:8080 --token-file "$RUN/token" --flow "$FLOW" --to "$STANDBY" \
  --id "$SWITCH-$(date +%s)" ${MONITOR_ARGS:-} & pids+=($!)
log "up: service on :8080, monitor $HOST -> $PEER$( ((restart)) && echo ' (restarted)')"
wait -n "${pids[@]}" || true
log "a process ended"; stop
