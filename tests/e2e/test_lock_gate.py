"""The optical MBB on P4Runtime switches that report no port state (issue 22, part 4): the
lock is gated by the Polatis's power monitors on the new circuit, and with a model that
has none the reroute is refused at plan time, before the circuit switches."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fabric.fabric import Fabric
from services.reroute.topology import load_topology
from tests.e2e.conftest import NGNCS, reroute, running, scpi

pytestmark = pytest.mark.fabric
P4 = NGNCS.with_name("ngncs-ost-p4.yaml")
FLOW = "10.0.0.2>10.0.0.3"


def _inventory(fab: Fabric, tmp_path: Path, name: str, **ost1: object) -> Path:
    """The fabric's inventory with its P4Runtime switches' ``ports`` source gone (a P4Runtime
    target reports no port state), ``ost1``'s entry updated."""
    doc = yaml.safe_load(fab.state.inventory.read_text())
    doc["state_dir"] = str(tmp_path / "state")
    for entry in doc["devices"].values():
        entry.pop("ports", None)
    doc["devices"]["ost1"].update(ost1)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_lock_waits_on_the_polatis_power_or_the_plan_is_refused(tmp_path: Path) -> None:
    with running(load_topology(P4)) as fab:
        monitored = _inventory(fab, tmp_path, "monitored")
        move = ("--topology", str(P4), "--flow", FLOW)
        plan = reroute("plan", *move, "--inventory", str(monitored), "--to", "short",
                       "--via", "temporary").stdout  # fmt: skip
        assert (
            "await lock: ost1:p" in plan and "br" not in plan.split("await lock:")[1].split("\n")[0]
        ), plan
        done = reroute("apply", *move, "--inventory", str(monitored), "--to", "short",
                       "--via", "temporary", timeout=120)  # fmt: skip
        assert "done" in done.stdout, done.stdout

        blind = _inventory(fab, tmp_path, "blind", power_monitors="no")
        circuits = scpi(fab, ":OXC:SWIT:CONN:STAT?")
        refused = reroute("apply", *move, "--inventory", str(blind), "--to", "long",
                          "--via", "temporary", check=False)  # fmt: skip
        said = refused.stderr + refused.stdout
        assert refused.returncode == 1, said
        assert "nothing changed" in said and "no power monitors" in said, said
        assert scpi(fab, ":OXC:SWIT:CONN:STAT?") == circuits  # the circuit never switched
