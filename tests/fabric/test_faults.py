"""Faults in the middle of a reroute, with the probe running: every flow ends on exactly one
working path (traffic delivered afterwards, counted), and the journal or the error says what
happened."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from experiments.demo import fabric_drops
from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from services.reroute.engine import reroute
from services.reroute.journal import Journal, JournalError
from services.reroute.model import Intent
from services.reroute.planner import initial_optics
from services.reroute.topology import Topology
from tests.fabric.conftest import CLI, NGNCS, RATE, ROOT, Probe, during
from tests.fabric.test_optical import _nothing, circuits, ingress_tags, scpi
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


TOKEN = "faults-test-operator-token"


def _serve(config: Path) -> tuple[subprocess.Popen[str], str]:
    """``reroute serve`` and its base URL (from the line it prints when it listens)."""
    proc = subprocess.Popen([*CLI, "serve", "--config", str(config)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "http://" in line, line
    return proc, "http://" + line.split("http://")[1].split()[0]


def test_serve_killed_between_park_and_swap_recovers_on_restart(
    ngncs: Fabric, topo_ngncs: Topology, tmp_path: Path
) -> None:
    """kill -9 of `reroute serve` while an optical MBB waits for the lock (the flows parked
    on the temporary path, the circuit not yet swapped): the restart recovers, the journal
    says so, and every flow is on one working path that delivers."""
    scpi(ngncs, ":EMUL:LOCK NEVER")  # the lock wait lasts until we kill
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"topology: {NGNCS}\ninventory: {ngncs.state.inventory}\nlisten: 127.0.0.1:0\n"
        f"tokens: [{{token: {TOKEN}, role: operator}}]\n"
    )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    drops = fabric_drops(ngncs)
    probe = Probe(ngncs, 4.0)
    serve, url = _serve(config)
    try:
        answer = httpx.post(f"{url}/v1/reroutes", headers=headers, timeout=10,
                            json={"flows": [str(FLOW)], "to_path": "short", "via": "temporary",
                                  "drain_ms": 5, "lock_timeout_ms": 30000})  # fmt: skip
        assert answer.status_code in (201, 202), answer.text
        reroute_id = answer.json()["id"]
        deadline = time.monotonic() + 15
        while asyncio.run(circuits(topo_ngncs, ngncs)) == initial_optics(topo_ngncs):
            assert time.monotonic() < deadline, "ost1 was never reconfigured"
            time.sleep(0.05)  # until ost1 is reconfigured: parked, waiting for the lock
        time.sleep(0.2)
    finally:
        os.kill(serve.pid, signal.SIGKILL)
        serve.wait()
    scpi(ngncs, ":EMUL:LOCK DEFAULT")
    serve, url = _serve(config)  # recovers what the kill interrupted, then listens
    try:
        record = httpx.get(f"{url}/v1/reroutes/{reroute_id}", headers=headers, timeout=10)
    finally:
        serve.terminate()
        serve.wait(timeout=20)
    assert record.status_code == 200, record.text
    assert record.json()["state"] == "rolled_back", record.text
    assert "interrupted" in (record.json()["error"] or ""), record.text
    assert asyncio.run(ingress_tags(topo_ngncs, ngncs)) == {3}  # one path: temporary
    report = probe.report()
    assert report["received"] > 0, report
    assert report["lost"] <= fabric_drops(ngncs) - drops, report
    after = during(ngncs, 1.0, _nothing, at=0.1)  # and it keeps delivering
    assert after["received"] > 0 and after["lost"] <= fabric_drops(ngncs) - drops, after
