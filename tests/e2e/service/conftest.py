"""The service's own fabric for the runs that need one (built once per session)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from emulators.writelog import ENV
from fabric import fabric
from fabric import state as fabric_state
from fabric.fabric import Fabric
from services.reroute.model.topology import Topology, load_topology
from services.reroute.runtime import run_dir
from tests.unit.services.service.conftest import FABRIC, NGNCS


@pytest.fixture(scope="package")
def svc_fabric() -> Iterator[tuple[Topology, Fabric]]:
    """The ngncs-ost fabric under this directory's own name (built once, torn down when the
    package's tests are done, before the other fabric tests run)."""
    with built(NGNCS, FABRIC) as built_:
        yield built_


@contextlib.contextmanager
def built(
    topology: Path, name: str, options: Mapping[str, object] | None = None
) -> Iterator[tuple[Topology, Fabric]]:
    """The fabric of ``topology`` under the name ``name``, its emulators logging their writes
    (``WRITES`` in its run directory; ``options``: its players', ``fabric.up``'s, e.g.
    ``odl_stats_s``, the OpenDaylight emulator's statistics poll); torn down on leaving."""
    if os.geteuid() != 0:
        pytest.fail("fabric tests need root (CI runs as root); deselect with -m 'not fabric'")
    topo = dataclasses.replace(load_topology(topology), name=name)
    left = fabric_state.load(name)
    if left is not None and Path(f"/proc/{left.builder_pid}").exists():
        pytest.fail(f"fabric {name} is in use by process {left.builder_pid} (another test run)")
    fabric.down(name)  # what a crashed earlier run left
    with write_log(run_dir() / name / WRITES):
        fab = fabric.up(topo, options=options)
    try:
        yield topo, fab
    finally:
        fabric.down(name)


WRITES = "writes.jsonl"  # the emulators' write log, in the fabric's run directory


@contextlib.contextmanager
def write_log(path: Path) -> Iterator[None]:
    """The emulators started in the block log their writes to ``path`` (the devices' own
    history, for ``tests/e2e/history.py``); the service processes started later do not
    inherit the setting."""
    before = os.environ.get(ENV)
    os.environ[ENV] = str(path)
    try:
        yield
    finally:
        if before is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = before


def serve_yaml(fab: Fabric, into: Path, tokens: str) -> Path:
    """A ``reroute serve`` config in ``into`` for the service fabric: its inventory (for the
    topology file it was built from, under another name), ``tokens`` (YAML list items)."""
    inventory = fab.state.inventory.read_text().replace(
        f"topology: {FABRIC}", "topology: ngncs-ost"
    )
    (into / "inventory.yaml").write_text(inventory)
    path = into / "serve.yaml"
    path.write_text(
        f"topology: {NGNCS}\ninventory: inventory.yaml\njournal: journal.sqlite\n"
        f"tokens: [{tokens}]\nstep_timeout_s: 5\n"
    )
    return path
