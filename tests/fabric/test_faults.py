"""Faults in the middle of a reroute, with the probe running: every flow ends on exactly one
working path (traffic delivered afterwards, counted), and the journal or the error says what
happened."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.demo import fabric_drops
from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from services.reroute.engine import reroute
from services.reroute.journal import Journal, JournalError
from services.reroute.model import Intent
from services.reroute.topology import Topology
from tests.fabric.conftest import RATE, during
from tests.fabric.test_reroute import FLOW, path_tags

pytestmark = pytest.mark.fabric


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A tiny tmpfs holding a journal, then filled up: the journal's disk is full."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _fill(mnt: Path) -> None:
    try:
        with open(mnt / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:  # ENOSPC, on a write or on closing
        pass
    assert os.statvfs(mnt).f_bavail == 0


def test_full_journal_disk_refuses_before_anything_changes(
    ngncs: Fabric, topo_ngncs: Topology, full_disk: Path
) -> None:
    journal = Journal(full_disk / "journal.db")  # opened while there was room (a service)
    _fill(full_disk)
    before = asyncio.run(path_tags(topo_ngncs, ngncs))
    drops = fabric_drops(ngncs)
    errors: list[str] = []

    async def refused() -> None:
        async with fabric_drivers(topo_ngncs, ngncs.state) as drivers:
            with pytest.raises(JournalError) as exc:
                await reroute(
                    topo_ngncs, drivers, journal, Intent(flows=(FLOW,), to_path="temporary")
                )
        errors.append(str(exc.value))

    try:
        report = during(ngncs, 2.0, refused)
    finally:
        journal.close()
    assert len(errors) == 1 and "reroute refused, nothing changed" in errors[0], errors
    assert "full" in errors[0], errors
    assert asyncio.run(path_tags(topo_ngncs, ngncs)) == before  # rules read back unchanged
    assert report["sent"] >= RATE * 2 * 0.95 and report["received"] > 0, report
    assert report["lost"] <= fabric_drops(ngncs) - drops, report  # only what a busy OVS drops
    # a later opening on the full disk (the CLI) is refused the same way, before any plan
    with pytest.raises(JournalError, match="cannot be written"):
        Journal(full_disk / "other.db")
