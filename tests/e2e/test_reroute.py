"""Reroutes on the real fabric, measured by the UDP probe: MBB is hitless, BBM loses what
it should, a rejected step rolls back, a killed apply is recovered."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers, journal_path
from services.reroute.engine.engine import read_tables, reroute
from services.reroute.model.intent import FlowSpec, Intent, Strategy
from services.reroute.model.topology import Topology
from services.reroute.rules import ROLE_INGRESS, tag_of
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from tests.e2e.conftest import NGNCS, RATE, ROOT, during
from tests.e2e.conftest import reroute as reroute_cli

pytestmark = pytest.mark.fabric
CLI = [sys.executable, "-m", "services.reroute.cli"]
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")


async def move(topo: Topology, fab: Fabric, to: str, **kw: Any) -> RerouteState:
    journal = Journal(journal_path(fab.state))
    try:
        async with fabric_drivers(topo, fab.state) as drivers:
            _, outcome = await reroute(
                topo, drivers, journal, Intent(flows=(FLOW,), to_path=to, **kw)
            )
    finally:
        journal.close()
    return outcome.state


async def path_tags(topo: Topology, fab: Fabric) -> dict[str, set[int]]:
    """Tags of the ingress rules of vm2<->vm3 at br2 and br3, and all transit tags."""
    async with fabric_drivers(topo, fab.state) as drivers:
        tables = await read_tables(drivers)
    found: dict[str, set[int]] = {"ingress": set(), "transit": set()}
    for bridge in ("br2", "br3"):
        for rule in tables[bridge].values():
            if rule.cookie & 0xFF == ROLE_INGRESS and rule.match.in_port == 1:
                found["ingress"].add(tag_of(rule) or 0)
    for table in tables.values():
        found["transit"] |= {
            tag_of(r) or 0 for r in table.values() if r.cookie & 0xFF != ROLE_INGRESS
        }
    return found


def test_mbb_moves_are_hitless_at_5000_pps(ngncs: Fabric, topo_ngncs: Topology) -> None:
    async def there_and_back() -> None:
        assert await move(topo_ngncs, ngncs, "temporary") is RerouteState.DONE
        await asyncio.sleep(0.5)
        assert await move(topo_ngncs, ngncs, "long") is RerouteState.DONE

    report = during(ngncs, 3.0, there_and_back)
    assert report["sent"] >= RATE * 3 * 0.95
    assert report["lost"] == 0, report
    assert asyncio.run(path_tags(topo_ngncs, ngncs))["ingress"] == {2}  # back on "long"


def test_bbm_loses_gap_times_rate(ngncs: Fabric, topo_ngncs: Topology) -> None:
    gap = 0.3

    async def bbm() -> None:
        assert (
            await move(topo_ngncs, ngncs, "temporary", strategy=Strategy.BBM, bbm_gap_s=gap)
            is RerouteState.DONE
        )

    report = during(ngncs, 2.5, bbm)
    expected = gap * RATE
    assert abs(report["lost"] - expected) <= 0.1 * expected, report
    assert report["longest_gap"]["ms"] >= gap * 1000


def test_rejected_step_rolls_back_and_traffic_keeps_flowing(
    ngncs: Fabric, topo_ngncs: Topology
) -> None:
    # br4 refuses any new flow: its table is full (a real OpenFlow TABLE_FULL from OVS)
    count = ngncs.ovs.ofctl("-O", "OpenFlow13", "dump-aggregate", ngncs.ovs.mgmt("br4"))
    flows = int(count.split("flow_count=")[1].split()[0])
    ngncs.ovs.cap_table("br4", flows)
    before = asyncio.run(path_tags(topo_ngncs, ngncs))
    states: list[RerouteState] = []

    async def refused() -> None:
        states.append(await move(topo_ngncs, ngncs, "temporary"))

    report = during(ngncs, 2.0, refused)
    assert states == [RerouteState.ROLLED_BACK]
    assert report["lost"] == 0, report
    assert asyncio.run(path_tags(topo_ngncs, ngncs)) == before


def test_killed_apply_is_recovered_to_one_working_path(ngncs: Fabric, topo_ngncs: Topology) -> None:
    """``apply`` killed -9 while it drains (shifted: the ingress on temporary, both paths'
    rules kept): ``recover`` plans from what the devices hold -- forward (``done`` on
    temporary) once the shift landed there, back (``rolled_back`` to long) otherwise --
    and leaves exactly one path's rules, traffic delivered."""
    proc = subprocess.Popen(
        [
            *CLI,
            "apply",
            "--topology",
            str(NGNCS),
            "--flow",
            "10.0.0.2>10.0.0.3",
            "--to",
            "temporary",
            "--drain-ms",
            "5000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # wait until it is draining: shifted, not cleaned
        tags = asyncio.run(path_tags(topo_ngncs, ngncs))
        if tags["ingress"] == {3}:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    held = asyncio.run(path_tags(topo_ngncs, ngncs))  # what the devices hold at the kill
    assert held["transit"] >= {2, 3}, held  # both paths' rules: killed mid-reroute
    forward = 3 in held["ingress"]  # a shift landed on temporary (no circuit to connect)
    out = reroute_cli("recover", "--topology", str(NGNCS))
    assert "recovered 1" in out.stdout
    tags = asyncio.run(path_tags(topo_ngncs, ngncs))
    on, gone = (3, 2) if forward else (2, 3)
    assert tags["ingress"] == {on} and gone not in tags["transit"], tags  # exactly one path
    report = during(ngncs, 1.0, _noop, at=0.1)
    assert report["lost"] == 0 and report["received"] > 0
    history = Journal(journal_path(ngncs.state)).history()
    expected = RerouteState.DONE if forward else RerouteState.ROLLED_BACK
    assert history[0].state is expected and "interrupted" in (history[0].error or ""), history[0]
    assert ("recovered forward" in (history[0].error or "")) is forward, history[0].error


async def _noop() -> None:
    return None


def test_tcp_across_mbb_has_no_retransmission_timeout(ngncs: Fabric, topo_ngncs: Topology) -> None:
    def timeouts() -> int:
        text = subprocess.run(
            ["ip", "netns", "exec", ngncs.host_ns("vm2"), "cat", "/proc/net/netstat"],
            capture_output=True,
            text=True,
        ).stdout
        head, values = [line.split() for line in text.splitlines() if line.startswith("TcpExt:")][
            :2
        ]
        return int(values[head.index("TCPTimeouts")])

    server = subprocess.Popen(
        ["ip", "netns", "exec", ngncs.host_ns("vm3"), "iperf3", "-s", "-1", "-B", "10.0.0.3"],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        before = timeouts()
        client = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ngncs.host_ns("vm2"),
                "iperf3",
                "-c",
                "10.0.0.3",
                "-t",
                "3",
                "-b",
                "100M",
                "-J",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)
        assert asyncio.run(move(topo_ngncs, ngncs, "temporary")) is RerouteState.DONE
        out, _ = client.communicate(timeout=30)
        result = json.loads(out)
        assert result["end"]["sum_received"]["bytes"] > 0
        assert timeouts() - before == 0
    finally:
        server.kill()
        server.wait()


def test_cli_plan_is_a_dry_run(ngncs: Fabric, topo_ngncs: Topology) -> None:
    before = asyncio.run(path_tags(topo_ngncs, ngncs))
    out = reroute_cli(
        "plan", "--topology", str(NGNCS), "--flow", "10.0.0.2>10.0.0.3", "--to", "temporary"
    )
    assert "MBB: 1 flow(s) long -> temporary (hitless)" in out.stdout
    assert asyncio.run(path_tags(topo_ngncs, ngncs)) == before
    bad = reroute_cli(
        "apply",
        "--topology",
        str(NGNCS),
        "--flow",
        "10.0.0.2>10.0.0.9",
        "--to",
        "temporary",
        check=False,
    )
    assert bad.returncode == 1 and "not installed" in bad.stderr
    assert asyncio.run(path_tags(topo_ngncs, ngncs)) == before
