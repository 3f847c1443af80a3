"""Seed 003's testbed with its switches behind Ryu's ofctl_rest
(topologies/ngncs-ost-ryu.yaml): the optical make-before-break of ``reroute demo`` runs
through real Ryu 4.34 (``fabric up --ryu auto``, the default, takes it where it can be had),
hitless; the fabric's inventory reaches the switches through ofctl_rest, of real Ryu or of
its EMULATOR (``--ryu emulator``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabric import state
from fabric.kinds import ryu_rest as ryusite
from fabric.kinds.ryu_rest import peer as ryupeer
from services.reroute.model.inventory import load_inventory
from tests import peers as need
from tests.e2e.conftest import RATE, ROOT, leftovers, reroute

NGNCS_RYU = ROOT / "topologies" / "ngncs-ost-ryu.yaml"
SECONDS = 4  # the demo's probe per run


@pytest.mark.fabric
def test_the_optical_mbb_demo_through_ryu_loses_nothing_beyond_the_fabric(tmp_path: Path) -> None:
    need.ryu_manager()
    numbers = tmp_path / "demo.json"
    proc = reroute(
        "demo", "--topology", str(NGNCS_RYU), "--json", str(numbers), check=False, timeout=120
    )
    assert leftovers("ngncs-ost-ryu") == []  # torn down, the emulator too
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert f"{ryupeer.NAME} controlling br1, br2, br3, br4" in proc.stdout, proc.stdout

    doc = json.loads(numbers.read_text())
    bbm, mbb = doc["bbm"], doc["mbb"]
    for run in (bbm, mbb):
        assert run["udp"]["sent"] >= RATE * SECONDS * 0.95, run
    # hitless: nothing lost but what the fabric dropped by itself (see test_demo.py)
    assert mbb["udp"]["lost"] <= mbb["fabric_drops"], f"MBB {mbb}; control {doc['control']}"
    assert bbm["udp"]["lost"] > 0, bbm
    assert mbb["timing"]["new_path_ms"] >= mbb["timing"]["dark_ms"], mbb


@pytest.mark.fabric
def test_fabric_up_lists_the_ryu_switches_in_its_inventory() -> None:
    up = reroute("fabric", "up", str(NGNCS_RYU), "--ryu", "emulator", timeout=120)
    assert f"{ryusite.EMULATOR} controlling br1, br2, br3, br4" in up.stderr, up.stderr
    try:
        inventory = load_inventory(state.run_dir() / "ngncs-ost-ryu" / "inventory.yaml")
        kinds = {name: d.driver for name, d in inventory.devices.items()}
        assert kinds == {f"br{i}": "ryu_rest" for i in range(1, 5)} | {"ost1": "polatis_scpi"}
        check = reroute("inventory", "check", "--topology", str(NGNCS_RYU), check=False)
        assert check.returncode == 0, f"{check.stdout}\n{check.stderr}"
        assert "Ryu ofctl_rest, datapath 0000000000000002" in check.stdout, check.stdout
    finally:
        reroute("fabric", "down", "ngncs-ost-ryu")
    assert leftovers("ngncs-ost-ryu") == []
