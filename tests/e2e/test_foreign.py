"""Other writers' entries on the fabric's switches (issue 22): a lab's discovery traps,
table-miss and pipeline entries are read around and stay as they were; an entry that would
shadow the rules of a reroute refuses it at plan time, naming the switch and the entry,
with nothing changed (read back), and traffic keeps flowing on its path."""

from __future__ import annotations

import asyncio

import pytest

from fabric.fabric import Fabric
from services.reroute.topology import Topology
from tests.e2e.conftest import NGNCS, RATE, during
from tests.e2e.conftest import reroute as reroute_cli
from tests.e2e.test_optical import _nothing
from tests.e2e.test_reroute import path_tags

pytestmark = pytest.mark.fabric
LAB = [  # no NORMAL here: the fabric's paths make loops, a flood would circle them
    "cookie=0x1,priority=65535,dl_type=0x88cc,actions=CONTROLLER:65535",
    "cookie=0x1,priority=65535,dl_type=0x8942,actions=CONTROLLER:65535",
    "cookie=0x1,priority=5,dl_dst=01:80:c2:00:00:0e,actions=CONTROLLER:65535",
    "cookie=0x3,priority=1,dl_type=0x88b5,actions=goto_table:1",
    "cookie=0x3,table=1,priority=5,actions=write_actions(drop)",
    "priority=0,actions=drop",
]
SHADOW = "cookie=0x7,priority=500,ip,nw_dst=10.0.0.0/24,dl_src=02:00:00:00:00:99,actions=drop"


def _dump(fab: Fabric, bridge: str) -> list[str]:
    text = fab.ovs.ofctl("-O", "OpenFlow13", "--no-stats", "dump-flows", fab.ovs.mgmt(bridge))
    return sorted(line.strip() for line in text.splitlines() if "cookie=0x5252" not in line)


def _add(fab: Fabric, bridge: str, line: str) -> None:
    fab.ovs.ofctl("-O", "OpenFlow13", "add-flow", fab.ovs.mgmt(bridge), line)


def test_a_labs_entries_are_read_around_and_a_shadowing_one_refuses_the_plan(
    ngncs: Fabric, topo_ngncs: Topology
) -> None:
    bridges = [s.name for s in topo_ngncs.switches]
    for bridge in bridges:
        for line in LAB:
            _add(ngncs, bridge, line)
    theirs = {b: _dump(ngncs, b) for b in bridges}
    move = ("apply", "--topology", str(NGNCS), "--flow", "10.0.0.2>10.0.0.3")
    out = reroute_cli(*move, "--to", "temporary").stdout
    assert "done" in out, out
    moved = asyncio.run(path_tags(topo_ngncs, ngncs))
    assert {b: _dump(ngncs, b) for b in bridges} == theirs

    _add(ngncs, "br2", SHADOW)  # above our rules, on every IPv4 packet to 10.0.0.0/24
    theirs["br2"] = _dump(ngncs, "br2")
    proc = reroute_cli(*move, "--to", "long", check=False)
    said = proc.stderr + proc.stdout
    assert proc.returncode == 1, said
    assert "br2" in said and "priority=500" in said and "nothing changed" in said, said
    assert asyncio.run(path_tags(topo_ngncs, ngncs)) == moved
    assert {b: _dump(ngncs, b) for b in bridges} == theirs
    ngncs.ovs.ofctl("-O", "OpenFlow13", "del-flows", "--strict", ngncs.ovs.mgmt("br2"),
                    "priority=500,ip,nw_dst=10.0.0.0/24,dl_src=02:00:00:00:00:99")  # fmt: skip
    report = during(ngncs, 1.0, _nothing, at=0.1)  # on the path it was moved to, still
    assert report["received"] >= RATE * 0.9 and report["lost"] <= RATE * 0.01, report
