"""Other writers' entries on the fabric's switches (issue 22): a lab's discovery traps,
table-miss and pipeline entries are read around and stay as they were; an entry that would
shadow the rules of a reroute refuses it at plan time, naming the switch and the entry,
with nothing changed (read back), and traffic keeps flowing on its path.

Issue 29, on the same fabric: a drop above a transit rule the new path shares (already on
the switch, so the plan writes none there) refuses the reroute too; a second deployment
(``cookie_tag: 1``) on the same switches never takes the first's rules as its own, and each
sees the other's as another writer's; an entry of ours whose tag is no path is a refusal
naming the switch and the cookie. Then the flows move, hitless, over the shared rules."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from drivers.base import FlowChange, FlowOp, FlowProgrammer, FlowRule, ForeignEntry
from drivers.errors import DriverError
from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from services.reroute.engine.engine import survey_tables
from services.reroute.model.intent import FlowSpec
from services.reroute.model.topology import Topology
from services.reroute.rules import CookieSpace, directions, ingress_rule, path_rules, path_tag
from services.reroute.tables import Tables
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
    ngncs: Fabric, topo_ngncs: Topology, tmp_path: Path
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

    _a_drop_over_a_shared_transit_rule_refuses(ngncs, topo_ngncs, move)
    _two_deployments_never_take_each_others_rules(ngncs, topo_ngncs, move, tmp_path)
    _a_tag_that_is_no_path_is_refused_naming_switch_and_cookie(ngncs, topo_ngncs, move)

    async def over_the_shared_rules() -> None:
        assert "done" in reroute_cli(*move, "--to", "long").stdout

    report = during(ngncs, 2.0, over_the_shared_rules, at=0.3)
    assert report["received"] >= RATE * 1.9 and report["lost"] == 0, report
    assert asyncio.run(path_tags(topo_ngncs, ngncs))["ingress"] == {2}  # both flows: long


Move = tuple[str, ...]
Surveyed = tuple[Tables, dict[str, list[ForeignEntry]], dict[str, DriverError]]
STAGING = CookieSpace(tag=1)  # the second deployment's cookies


async def _write(fab: Fabric, topo: Topology, rules: Mapping[str, list[FlowRule]]) -> None:
    """Write ``rules`` by bridge through the fabric's drivers (beside reroute's engine)."""
    async with fabric_drivers(topo, fab.state, frozenset(rules)) as drivers:
        for bridge, rs in rules.items():
            flows = drivers[bridge]
            assert isinstance(flows, FlowProgrammer)
            await flows.apply([FlowChange(op=FlowOp.ADD, rule=r) for r in rs])


def _refused(*args: str) -> str:
    proc = reroute_cli(*args, check=False)
    said = proc.stderr + proc.stdout
    assert proc.returncode == 1 and "Traceback" not in said, said
    return said


def _a_drop_over_a_shared_transit_rule_refuses(fab: Fabric, topo: Topology, move: Move) -> None:
    """Another flow rides "long": its transit rules are on br1, br3, br4 already, so the move
    of vm2<->vm3 back to "long" writes only ingress rules. A drop an operator left above
    long's transit rule on br1 would swallow its traffic after a "done": refused."""
    other = FlowSpec.parse("10.0.0.2>10.0.0.3,udp,dport=9")
    asyncio.run(_write(fab, topo, path_rules(topo, topo.paths["long"], [other])))
    before = asyncio.run(path_tags(topo, fab))
    assert 2 in before["transit"] and 3 in before["ingress"]
    _add(fab, "br1", "cookie=0x9,priority=500,ip,in_port=2,actions=drop")
    theirs = _dump(fab, "br1")
    said = _refused(*move, "--to", "long")
    assert "br1" in said and "priority=500" in said and "vlan_vid=2" in said, said
    assert "nothing changed" in said, said
    assert asyncio.run(path_tags(topo, fab)) == before and _dump(fab, "br1") == theirs
    report = during(fab, 1.0, _nothing, at=0.1)  # still on "temporary", past the drop
    assert report["received"] >= RATE * 0.9 and report["lost"] <= RATE * 0.01, report
    fab.ovs.ofctl("-O", "OpenFlow13", "del-flows", "--strict", fab.ovs.mgmt("br1"),
                  "priority=500,ip,in_port=2")  # fmt: skip


def _staging_inventory(fab: Fabric, tmp_path: Path) -> Path:
    body = yaml.safe_load(fab.state.inventory.read_text())
    body.update(cookie_tag=STAGING.tag, state_dir=str(tmp_path / "staging"))
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def _two_deployments_never_take_each_others_rules(
    fab: Fabric, topo: Topology, move: Move, tmp_path: Path
) -> None:
    staging = ("--inventory", str(_staging_inventory(fab, tmp_path)))
    before = asyncio.run(path_tags(topo, fab))
    said = _refused(*move, *staging, "--to", "long")  # the flows are the first's, not its
    assert "not installed" in said, said
    assert asyncio.run(path_tags(topo, fab)) == before

    # the staging deployment's own flow enters at br2 beside the first's (same priority)
    flow = FlowSpec.parse("10.0.0.2>10.0.0.3,udp,dport=7")
    hops = directions(topo.paths["temporary"])[0].hops
    its = ingress_rule(hops, path_tag(topo, "temporary"), flow, STAGING)
    asyncio.run(_write(fab, topo, {"br2": [its]}))

    async def surveys() -> list[Surveyed]:
        async with fabric_drivers(topo, fab.state, frozenset({"br2"})) as drivers:
            return [await survey_tables(drivers), await survey_tables(drivers, space=STAGING)]

    (mine, others, _), (theirs, foreign, _) = asyncio.run(surveys())
    assert list(theirs["br2"].values()) == [its] and its not in mine["br2"].values()
    assert len(foreign["br2"]) >= len(mine["br2"])  # the first's rules: another writer's
    assert any(f"{its.cookie:#x}" in e.text for e in others["br2"])  # and the reverse
    said = _refused(*move, "--to", "long")  # the first's move would share its priority
    assert "br2" in said and f"{its.cookie:#x}" in said and "nothing changed" in said, said
    assert asyncio.run(path_tags(topo, fab)) == before
    fab.ovs.ofctl(
        "-O", "OpenFlow13", "del-flows", fab.ovs.mgmt("br2"), f"cookie={its.cookie:#x}/-1"
    )


def _a_tag_that_is_no_path_is_refused_naming_switch_and_cookie(
    fab: Fabric, topo: Topology, move: Move
) -> None:
    stray = 0x5252_0000_0000_6302  # ours, transit, tag 99: ngncs-ost has 4 paths
    _add(fab, "br3", f"cookie={stray:#x},priority=300,ip,in_port=3,dl_vlan=99,actions=output:2")
    before = asyncio.run(path_tags(topo, fab))["ingress"]
    said = _refused(*move, "--to", "long")
    assert "br3" in said and f"{stray:#x}" in said, said
    assert asyncio.run(path_tags(topo, fab))["ingress"] == before
    fab.ovs.ofctl("-O", "OpenFlow13", "del-flows", fab.ovs.mgmt("br3"), f"cookie={stray:#x}/-1")
