"""A capped link's queue overflows by itself, counted, and never OVS's one send socket:
caps read back from tc, TCP through a capped line counted by tc and OVS's log (fabric.lines)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from experiments.measuring import drops
from fabric import lines
from fabric.fabric import Fabric
from fabric.run import run
from fabric.traffic.iperf import run_iperf
from services.reroute.topology import load_topology
from tests.e2e.conftest import NGNCS, running

pytestmark = pytest.mark.fabric

LINE, OTHER = "br3-p1", "br1-p3"  # br3 -> vm3 (every path's last link), br1 -> br4


@pytest.fixture(scope="module")
def fab() -> Iterator[Fabric]:
    with running(load_topology(NGNCS)) as f:
        yield f


@pytest.fixture
def uncapped(fab: Fabric) -> Iterator[Fabric]:
    """The fabric, with every cap a test made removed after it."""
    yield fab
    for dev in lines.capped(fab.state.fabric_ns):
        run(["tc", "qdisc", "del", "dev", dev, "root"], ns=fab.state.fabric_ns)


def _fifo_limits(fab: Fabric) -> dict[str, int]:
    shown = run(["tc", "qdisc", "show"], ns=fab.state.fabric_ns)
    found = re.findall(r"qdisc pfifo \S+ dev (\S+) parent 1:1 limit (\d+)p", shown)
    return {dev: int(n) for dev, n in found}


def _flood(fab: Fabric, seconds: int = 3) -> tuple[int, int, float]:
    """Unpaced TCP vm2 -> vm3 (through LINE) for ``seconds``: (the queues' drops, OVS's
    failed sends, Mbit/s received)."""
    before = drops(fab)
    got = run_iperf(
        "10.0.0.3",
        duration_s=seconds,
        server_netns=fab.host_ns("vm3"),
        client_netns=fab.host_ns("vm2"),
    )
    dropped = drops(fab) - before
    return dropped.queues, dropped.send_failures, got.received_bps / 1e6


def test_capped_queues_share_the_send_buffer_and_a_new_cap_resizes_them(
    uncapped: Fabric,
) -> None:
    ns, buffer = uncapped.state.fabric_ns, lines.send_buffer()
    one = lines.cap(ns, LINE, 100, burst_kb=32)
    assert one == lines.queue_packets(buffer, 1) and one * lines.TRUESIZE <= buffer
    assert _fifo_limits(uncapped) == {LINE: one}
    two = lines.cap(ns, OTHER, 45, burst_kb=16)
    assert two == lines.queue_packets(buffer, 2) < one
    assert _fifo_limits(uncapped) == {LINE: two, OTHER: two}
    shown = run(["tc", "qdisc", "show", "dev", LINE], ns=ns)
    assert "qdisc tbf 1: root" in shown and "rate 100Mbit" in shown, shown
    assert sorted(lines.capped(ns)) == sorted([LINE, OTHER])


def test_tcp_overfilling_a_capped_line_is_dropped_by_its_queue_counted(uncapped: Fabric) -> None:
    lines.cap(uncapped.state.fabric_ns, LINE, 100, burst_kb=32)
    queued, failed, mbps = _flood(uncapped)
    assert queued > 0 and failed == 0, (queued, failed)
    assert 50 < mbps <= 105, mbps


def test_a_queue_deeper_than_the_send_buffer_loses_packets_uncounted(uncapped: Fabric) -> None:
    """Why the queues are sized: 1,000 packets (1.5 MB) of queue against OVS's 208 kB send
    buffer, and OVS's sends fail, on every port, before the queue drops anything. (A first
    stream on a fresh fabric may take seconds to fill the line: 8 s of it.)"""
    ns = uncapped.state.fabric_ns
    lines.cap(ns, LINE, 100, burst_kb=32)
    fifo = ["parent", "1:1", "handle", "10:", "pfifo", "limit", "1000"]
    run(["tc", "qdisc", "replace", "dev", LINE, *fifo], ns=ns)
    queued, failed, _ = _flood(uncapped, seconds=8)
    assert failed > 0 and queued == 0, (queued, failed)
