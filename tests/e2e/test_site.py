"""One site of a topology built alone (what each two-site container runs), here two sites on
this machine joined by veth pairs that play the containers' data-plane links."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fabric import fabric, site
from fabric.errors import FabricError
from fabric.fabric import Fabric
from services.reroute.model.topology import load_topology
from tests.e2e.conftest import TWO_SITE, leftovers

pytestmark = pytest.mark.fabric
NAMES = ("test-site1", "test-site2")
WIRES = {"p10": "tsw-p10", "p11": "tsw-p11", "p12": "tsw-p12"}  # + "a" (site1) / "b" (site2)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _unwire() -> None:
    for wire in WIRES.values():
        subprocess.run(["ip", "link", "del", f"{wire}a"], capture_output=True)


@pytest.fixture
def sites(tmp_path: Path) -> Iterator[tuple[Fabric, Fabric]]:
    topo = load_topology(TWO_SITE)
    for name in NAMES:
        fabric.down(name)
    _unwire()
    made: list[Fabric] = []
    try:
        for wire in WIRES.values():
            _ip("link", "add", f"{wire}a", "type", "veth", "peer", "name", f"{wire}b")
        for n, (name, switch) in enumerate(zip(NAMES, ("sw1", "sw2"), strict=True)):
            ends = {port: f"{wire}{'ab'[n]}" for port, wire in WIRES.items()}
            made.append(site.up(topo, switch, ends, state_dir=tmp_path / switch, name=name))
        yield made[0], made[1]
    finally:
        for name in NAMES:
            fabric.down(name)
        _unwire()


def test_two_sites_forward_between_each_other_and_leave_nothing(
    sites: tuple[Fabric, Fabric], tmp_path: Path
) -> None:
    one, two = sites
    assert set(one.state.host_ns) == {"h1", "c1"} and set(two.state.host_ns) == {"h2", "c2"}
    ping = subprocess.run(
        ["ip", "netns", "exec", one.host_ns("h1"), "ping", "-c", "3", "-i", "0.2", "-W", "1",
         "10.10.0.2"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert ping.returncode == 0, ping.stdout + ping.stderr
    inventory = yaml.safe_load(one.state.inventory.read_text())
    assert set(inventory["devices"]) == {"sw1"}
    assert inventory["state_dir"] == str(tmp_path / "sw1")
    flows = one.ovs.ofctl("-O", "OpenFlow13", "dump-flows", one.ovs.mgmt("sw1"))
    assert "output:10" in flows  # sw1's share of the primary path
    ports = one.ovs.vsctl("--columns=name,ofport", "--format=csv", "list", "Interface")
    assert "sw1-p10,10" in ports and "sw1-p12,12" in ports
    for name in NAMES:
        fabric.down(name)
        assert leftovers(name) == []


def test_missing_or_unknown_interfaces_are_refused_before_anything_is_made(tmp_path: Path) -> None:
    topo = load_topology(TWO_SITE)
    assert site.external_ports(topo, "sw1") == ["p10", "p11", "p12"]
    with pytest.raises(FabricError, match="missing: p12, unknown: p13"):
        site.up(
            topo, "sw1", {"p10": "a", "p11": "b", "p13": "c"}, state_dir=tmp_path, name=NAMES[0]
        )
    with pytest.raises(FabricError, match="not a packet switch"):
        site.up(topo, "lh1", {}, state_dir=tmp_path, name=NAMES[0])
    assert leftovers(NAMES[0]) == []
