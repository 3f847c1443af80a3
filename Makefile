# The two commands a user needs: `make demo` and `make test`. Both install what is missing.
VENV := .venv
BIN := $(VENV)/bin
TOPO ?= topologies/ngncs-ost.yaml

.PHONY: setup demo test lint typecheck unit clean containers-test

setup:
	@scripts/setup.sh

demo: setup
	$(BIN)/reroute demo --topology $(TOPO)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/python -m pytest

unit: setup
	$(BIN)/python -m pytest -m "not fabric"

clean:
	-$(BIN)/reroute fabric down --all
	rm -rf $(VENV) .venv-p4shell .mypy_cache .pytest_cache .ruff_cache
