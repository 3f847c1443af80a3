# The two commands a user needs: `make demo` and `make test`. Both install what is missing.
VENV := .venv
BIN := $(VENV)/bin
TOPO ?= topologies/ngncs-ost.yaml

.PHONY: setup demo test lint typecheck unit clean containers-test experiments-quick experiments-full install bench-quick

setup:
	@scripts/setup.sh

# The service for a lab server (README "Deploy"): a venv of its own under PREFIX, the config
# in ETC (never overwritten), the systemd unit in UNIT_DIR ("" to skip). As root.
PREFIX ?= /opt/reroute
ETC ?= /etc/reroute
UNIT_DIR ?= /etc/systemd/system
install:
	PREFIX=$(PREFIX) ETC=$(ETC) UNIT_DIR=$(UNIT_DIR) scripts/install.sh

demo: setup
	$(BIN)/reroute demo --topology $(TOPO)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/python -m pytest

IMPULSE_OUT = results/impulse-response/$(shell date -u +%Y%m%dT%H%M%SZ)-quick
# Every experiment at quick scale on its default backend (root; about 12 minutes), results
# under results/NAME/
experiments-quick: setup
	$(BIN)/reroute experiment run ost-vs-mbb --quick
	$(BIN)/reroute experiment run rto-sweep --quick
	$(BIN)/reroute experiment run bandwidth-steering --quick
	$(BIN)/reroute experiment run data-rate-sweep --quick
	$(BIN)/reroute experiment run switching-delay --quick
	$(BIN)/reroute experiment run impulse-response --quick --out $(IMPULSE_OUT)
	$(BIN)/reroute experiment run impulse-response --quick --out $(IMPULSE_OUT) --backend dpctl
	$(BIN)/reroute experiment run mptcp --quick
	$(BIN)/reroute experiment run mptcp-bdp --quick
	$(BIN)/reroute experiment run lock-sweep --quick

# Every experiment at the seeds' sample sizes (experiments/configs/full.yaml; root; hours:
# `reroute experiment full --dry-run` estimates them) into $(FULL_OUT)/NAME/, resumable (run
# it again to continue), from a clean commit. A smoke run of the whole plan:
#   make experiments-full FULL_OUT=/tmp/smoke FULL_ARGS="--quick --set runs=1"
FULL_OUT ?= results/full
FULL_ARGS ?=
experiments-full: setup
	$(BIN)/reroute experiment full --out $(FULL_OUT) $(FULL_ARGS)

# The numbers that must not grow (root; under 3 minutes; bench/README "make bench-quick"):
# run it after any change to services/, drivers/ or emulators/ and add its last line to
# bench/README's table.
bench-quick: setup
	$(BIN)/python bench/quick.py

unit: setup
	$(BIN)/python -m pytest -m "not fabric"

clean:
	-$(BIN)/reroute fabric down --all
	rm -rf $(VENV) .venv-p4shell .mypy_cache .pytest_cache .ruff_cache

# The two sites as containers (docker/two-site/): build the image (cached layers; from the
# committed tree), bring the deployment up, fail both sites over, kill and restart a site
# mid-failover, the service image (docker/service/) alone and managing both sites' switches
# through a reroute; the tests take everything down (only the images stay).
containers-test: setup
	docker/build.sh
	REROUTE_CONTAINERS=1 $(BIN)/python -m pytest -m containers tests/e2e/containers -v -s
