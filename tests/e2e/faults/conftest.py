"""Each fault module's fabric (its ``TOPOLOGY``, built once per module) and, per test,
``reroute serve`` on it (``harness.serving``; a module's ``TIMEOUT_S``, if it has one, is
every device's ``timeout_s`` in the service's inventory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric.fabric import Fabric
from services.reroute.model.topology import Topology, load_topology
from tests.e2e.conftest import running
from tests.e2e.faults.harness import Service, serving


@pytest.fixture(scope="module")
def fab(request: pytest.FixtureRequest) -> Iterator[tuple[Topology, Fabric]]:
    topo = load_topology(request.module.TOPOLOGY)
    with running(topo) as built:
        yield topo, built


@pytest.fixture
def svc(
    fab: tuple[Topology, Fabric], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Service]:
    topo, built = fab
    timeout_s = getattr(request.module, "TIMEOUT_S", None)
    with serving(topo, built, tmp_path, timeout_s) as service:
        yield service
