"""The optical MBB on P4Runtime switches (issue 29, part 4): the new circuit's lock is the
receiving switch ports' oper-status, which the P4Runtime switch EMULATOR serves over gNMI
(OpenConfig, subscribed ON_CHANGE) from its bridge's real ports, never the Polatis's
power monitors (light arriving is not the transceivers' lock); with neither gNMI nor
another port-state source the reroute is refused at plan time, before the circuit
switches."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fabric.fabric import Fabric
from services.reroute.model.topology import load_topology
from tests.e2e.conftest import NGNCS, reroute, running, scpi

pytestmark = pytest.mark.fabric
P4 = NGNCS.with_name("ngncs-ost-p4.yaml")
FLOW = "10.0.0.2>10.0.0.3"


def _inventory(fab: Fabric, tmp_path: Path, name: str, *drop: str) -> Path:
    """The fabric's inventory with the P4Runtime switches' ``drop`` options gone."""
    doc = yaml.safe_load(fab.state.inventory.read_text())
    doc["state_dir"] = str(tmp_path / "state")
    for entry in doc["devices"].values():
        for option in drop:
            entry.pop(option, None)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _lock_line(plan: str) -> str:
    return plan.split("await lock:")[1].split("\n")[0]


def test_the_lock_waits_on_gnmi_oper_status_or_the_plan_is_refused(tmp_path: Path) -> None:
    with running(load_topology(P4)) as fab:
        gnmi = _inventory(fab, tmp_path, "gnmi")
        entries = yaml.safe_load(gnmi.read_text())["devices"]
        p4 = [e for e in entries.values() if e["driver"] == "p4runtime"]
        assert p4 and all("gnmi" in e and "ports" not in e for e in p4), entries
        move = ("--topology", str(P4), "--flow", FLOW)
        plan = reroute("plan", *move, "--inventory", str(gnmi), "--to", "short",
                       "--via", "temporary").stdout  # fmt: skip
        lock = _lock_line(plan)
        assert "br" in lock and "ost1" not in lock, plan  # switch ports, not the power
        done = reroute("apply", *move, "--inventory", str(gnmi), "--to", "short",
                       "--via", "temporary", timeout=120)  # fmt: skip
        assert "done" in done.stdout, done.stdout

        blind = _inventory(fab, tmp_path, "blind", "gnmi", "ports")
        circuits = scpi(fab, ":OXC:SWIT:CONN:STAT?")
        refused = reroute("apply", *move, "--inventory", str(blind), "--to", "long",
                          "--via", "temporary", check=False)  # fmt: skip
        said = refused.stderr + refused.stdout
        assert refused.returncode == 1, said
        assert "nothing changed" in said and "no port state" in said and "gnmi" in said, said
        assert scpi(fab, ":OXC:SWIT:CONN:STAT?") == circuits  # the circuit never switched
        back = reroute("apply", *move, "--inventory", str(gnmi), "--to", "long",
                       "--via", "temporary", timeout=120)  # fmt: skip
        assert "done" in back.stdout, back.stdout  # refused, and nothing half-applied
