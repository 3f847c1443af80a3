"""The emulated fabric: built from the topologies, carries traffic, leaves nothing behind."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric import fabric, longhaul, netns, state
from fabric.errors import FabricError
from fabric.fabric import Fabric
from fabric.status import port_counters, ports
from fabric.traffic.iperf import run_iperf
from services.reroute.model.topology import Topology, load_topology
from tests.e2e.conftest import NGNCS, ROOT, TWO_SITE, leftovers, reroute, running

pytestmark = pytest.mark.fabric


def ping(fab: Fabric, src: str, dst_ip: str, count: int = 3) -> int:
    """Replies received for ``count`` pings from host ``src``."""
    out = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            fab.host_ns(src),
            "ping",
            "-c",
            str(count),
            "-i",
            "0.05",
            "-W",
            "1",
            dst_ip,
        ],
        capture_output=True,
        text=True,
    ).stdout
    line = next(line for line in out.splitlines() if "received" in line)
    return int(line.split(",")[1].split()[0])


def iperf_bps(fab: Fabric, client: str, server: str, server_ip: str) -> float:
    result = run_iperf(
        server_ip, duration_s=1, server_netns=fab.host_ns(server), client_netns=fab.host_ns(client)
    )
    return result.received_bps


class TestOneNgncsFabric:
    """What a built fabric does, checked on one ngncs fabric brought up once for the class:
    these tests only look and send traffic, none changes it (the refused second ``up``,
    which must leave it untouched, last)."""

    @pytest.fixture(scope="class")
    @classmethod
    def ngncs(cls) -> Iterator[Fabric]:
        with running(load_topology(NGNCS)) as fab:
            yield fab

    def test_ngncs_initial_paths_carry_ping_and_tcp(
        self, ngncs: Fabric, topo_ngncs: Topology
    ) -> None:
        for path in topo_ngncs.paths.values():
            if path.initial:
                assert ping(ngncs, path.src, str(path.dst_ip)) == 3, path.name
                assert ping(ngncs, path.dst, str(path.src_ip)) == 3, path.name
        assert iperf_bps(ngncs, "vm2", "vm3", "10.0.0.3") > 0

    def test_ngncs_only_initial_paths_forward(self, ngncs: Fabric) -> None:
        assert ping(ngncs, "vm2", "10.0.0.1", count=2) == 0  # no path vm2 <-> vm1
        assert ping(ngncs, "vm1", "10.0.0.3", count=2) == 0

    def test_ngncs_stable_port_numbers_and_links_up(
        self, ngncs: Fabric, topo_ngncs: Topology
    ) -> None:
        found = ports(ngncs.ovs)
        assert set(found) == {"br1", "br2", "br3", "br4", "ost1"}
        for switch in topo_ngncs.switches:
            assert [p.ofport for p in found[switch.name]] == list(switch.ports)
            assert all(p.link == "up" for p in found[switch.name])
        assert [p.ofport for p in found["ost1"]] == [1, 2, 3, 4]

    def test_long_path_crosses_the_optical_patch_panel(self, ngncs: Fabric) -> None:
        before = port_counters(ngncs.ovs, "ost1")
        assert ping(ngncs, "vm2", "10.0.0.3", count=5) == 5
        after = port_counters(ngncs.ovs, "ost1")
        # requests leave ost1 towards br1 (p1) and br3 (p3), replies towards br4 (p4)
        # and br2 (p2)
        assert all(after[p][1] - before[p][1] >= 5 for p in (1, 2, 3, 4)), (before, after)

    def test_name_taken_is_refused_and_the_running_fabric_is_untouched(self, ngncs: Fabric) -> None:
        with pytest.raises(FabricError, match="already up"):
            fabric.up(load_topology(NGNCS))
        assert ping(ngncs, "vm2", "10.0.0.3", count=1) == 1


def test_two_site_primary_and_control_paths() -> None:
    topo = load_topology(TWO_SITE)
    fab = fabric.up(topo)
    try:
        assert ping(fab, "h1", "10.10.0.2") == 3
        assert ping(fab, "c2", "10.10.0.11") == 3
        assert iperf_bps(fab, "h1", "h2", "10.10.0.2") > 0
        assert "lh1" not in ports(fab.ovs)  # a delay line, not a bridge
        assert longhaul.control(fab.state, "lh1").get().delay_ms == 15.0
    finally:
        fabric.down(topo.name)
    assert leftovers(topo.name) == []


def test_up_down_twice_in_a_row(topo_ngncs: Topology) -> None:
    for _ in range(2):
        fab = fabric.up(topo_ngncs)
        assert ping(fab, "vm1", "10.0.0.4", count=1) == 1
        assert fabric.down(topo_ngncs.name)
        assert leftovers(topo_ngncs.name) == []
    assert fabric.down(topo_ngncs.name) == []  # idempotent


SECOND = """
name: nc-second
topology:
  subnets: [10.77.0.0/24]
  nodes:
    a: {kind: host, interfaces: {eth0: 10.77.0.1/24}}
    b: {kind: host, interfaces: {eth0: 10.77.0.2/24}}
    s1: {kind: ovs, dpid: 77}
  links:
    - endpoints: ["a:eth0", "s1:p1"]
    - endpoints: ["b:eth0", "s1:p2"]
  paths:
    ab: {src: a, dst: b, via: ["s1:p2"], initial: true}
"""


def readme_fabric_commands() -> dict[str, list[str]]:
    """The README's `reroute fabric` lines of "The emulated fabric", by action."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## The emulated fabric")[1].split("```sh")[1].split("```")[0]
    lines = [shlex.split(line.split(" #")[0]) for line in block.splitlines()]
    found: dict[str, list[str]] = {}
    for words in lines:
        if words[:1] == ["sudo"] and words[2] == "fabric":
            found.setdefault(words[3], []).append(words[2:])
    return found


def test_readme_fabric_commands_work_with_another_fabric_up(tmp_path: Path) -> None:
    """The README's lines, as written, on a host where another fabric is up: each names
    its fabric; the forms that do not are refused and change nothing."""
    file = tmp_path / "second.yaml"
    file.write_text(SECOND)
    second = fabric.up(load_topology(file))
    readme = readme_fabric_commands()
    try:
        (up,) = readme["up"]
        assert "fabric ngncs-ost is up" in reroute(*up).stdout
        (status,) = readme["status"]
        shown = reroute(*status).stdout
        assert "bridge br2" in shown and "10.0.0.3/24" in shown and "nc-second" not in shown
        assert "optical ost1 (polatis_scpi emulator" in shown and "2->17" in shown
        ping_vm3, dump_br1 = readme["exec"]
        assert reroute(*ping_vm3).returncode == 0
        assert "nw_dst=10.0.0.4" in reroute(*dump_br1).stdout
        fails = reroute("fabric", "exec", "ngncs-ost", "vm2", "--", "ping", "-c1", "-W1",
                        "10.0.0.1", check=False)  # fmt: skip
        assert fails.returncode == 1
        bad = reroute("fabric", "exec", "ngncs-ost", "vm9", "--", "true", check=False)
        assert bad.returncode == 1 and "no node 'vm9'" in bad.stderr
        unnamed = reroute("fabric", "exec", "vm2", "--", "true", check=False)
        assert unnamed.returncode == 1 and "running: nc-second, ngncs-ost" in unnamed.stderr
        bare = reroute("fabric", "down", check=False)
        assert bare.returncode == 1 and "say which fabric to remove" in bare.stderr
        again = reroute("fabric", "up", str(NGNCS), check=False)
        assert again.returncode == 1 and "already up" in again.stderr
        assert state.running() == ["nc-second", "ngncs-ost"]  # nothing was removed
        (down,) = readme["down"]
        assert "fabric ngncs-ost: removed" in reroute(*down).stdout
        assert leftovers("ngncs-ost") == []
        assert ping(second, "a", "10.77.0.2", count=1) == 1  # the other fabric is untouched
    finally:
        reroute("fabric", "down", str(NGNCS))
        fabric.down("nc-second")
    assert leftovers("nc-second") == []


def test_down_cleans_up_after_a_crashed_up() -> None:
    """kill -9 the `fabric up` process once its OVS runs; `down` still removes it all."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.reroute.cli", "fabric", "up", str(NGNCS)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=Path(__file__).parents[2],
    )  # (the venv's python: its realpath is the base interpreter, without our packages)
    pidfile = state.run_dir() / "ngncs-ost" / "ovs" / "ovs-vswitchd.pid"
    deadline = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert pidfile.exists(), "the build never got as far as starting OVS"
    assert netns.listing("rr-ngncs-ost"), "the crash should have left namespaces behind"
    out = reroute("fabric", "down", "ngncs-ost")
    assert "removed" in out.stdout
    assert leftovers("ngncs-ost") == []


def test_down_without_state_file_still_removes_namespaces() -> None:
    fabric.up(load_topology(NGNCS))
    (state.run_dir() / "ngncs-ost" / "state.json").unlink()
    reroute("fabric", "down", "ngncs-ost")
    assert leftovers("ngncs-ost") == []


def test_missing_tools_are_named_and_nothing_is_made() -> None:
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no /usr/sbin: no ovs-vswitchd, no ip
    proc = subprocess.run(
        [os.sys.executable, "-m", "services.reroute.cli", "fabric", "up", str(NGNCS)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 1
    assert "ovs-vswitchd" in proc.stderr and "make setup" in proc.stderr
    assert leftovers("ngncs-ost") == []


def test_long_haul_delay_line_carries_tagged_traffic_and_changes_delay_at_run_time() -> None:
    topo = load_topology(TWO_SITE)
    fab = fabric.up(topo)
    try:
        reroute(
            "apply", "--topology", str(TWO_SITE), "--flow", "10.10.0.1>10.10.0.2",
            "--to", "longhaul",
        )  # fmt: skip
        assert 29.0 <= median_rtt_ms(fab, "h1", "10.10.0.2") <= 40.0
        longhaul.control(fab.state, "lh1").set(delay_ms=40)  # the seeds' "rtt extension"
        assert 79.0 <= median_rtt_ms(fab, "h1", "10.10.0.2") <= 95.0
    finally:
        fabric.down(topo.name)
    assert leftovers(topo.name) == []


def median_rtt_ms(fab: Fabric, src: str, dst: str) -> float:
    out = subprocess.run(
        ["ip", "netns", "exec", fab.host_ns(src), "ping", "-c", "10", "-i", "0.05", dst],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rtts = sorted(
        float(line.split("time=")[1].split()[0]) for line in out.splitlines() if "time=" in line
    )
    assert len(rtts) == 10, out
    return rtts[5]
