#!/usr/bin/env bash
# Run the test suite (or any command) in the CI image. The fabric needs network
# namespaces, veths, sysctls inside its namespaces and real-time scheduling for the delay
# line: every capability but CAP_SYS_RESOURCE (which this host cannot grant, so
# --privileged fails here), unmasked /proc/sys, no seccomp/apparmor filter. Open vSwitch
# runs inside the container (userspace datapath).
#   docker/run.sh                 # make test
#   docker/run.sh make demo
set -euo pipefail
exec docker run --rm --name "reroute-ci-$$" \
  --cap-add ALL --cap-drop SYS_RESOURCE \
  --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
  --security-opt systempaths=unconfined --device /dev/net/tun \
  reroute-ci:latest "$@"
