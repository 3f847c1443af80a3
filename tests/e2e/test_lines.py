"""A capped link's queue overflows by itself, counted, and never OVS's one send socket:
caps read back from tc, TCP through a capped line counted by tc and OVS's log (fabric.lines)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from experiments.measuring import Traffic, drops
from fabric import lines
from fabric.fabric import Fabric
from fabric.run import run
from fabric.traffic.iperf import run_iperf
from services.reroute.model.topology import load_topology
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
    found = re.findall(rf"qdisc {lines.FIFO} \S+ dev (\S+) parent 1:1 limit (\d+)p", shown)
    return {dev: int(n) for dev, n in found}


# The floods' congestion control. Reno's slow start ends only at a loss, so a flood fills
# any queue within its first second. Cubic's HyStart ends it at a rise in delay, which
# userspace OVS's jitter brings early (tens of packets), and cubic then grows a few packets
# a second: one flood in three here filled the line at 94.5 Mbit/s for 8 s and never
# overflowed a 1,000-packet queue, and its cached ssthresh held the next test's stream
# below the line's queue too (neither dropped nor failed a packet).
FLOOD_CC = "reno"


def _fresh_sender(fab: Fabric) -> None:
    """Flush vm2's cached TCP metrics: the ssthresh a stream left caps the next one's slow
    start."""
    run(["ip", "tcp_metrics", "flush", "all"], ns=fab.host_ns("vm2"))


def _flood(fab: Fabric, seconds: int = 3) -> tuple[int, int, float]:
    """Unpaced TCP vm2 -> vm3 (through LINE) for ``seconds``: (the queues' drops, OVS's
    failed sends, Mbit/s received)."""
    _fresh_sender(fab)
    before = drops(fab)
    got = run_iperf(
        "10.0.0.3",
        duration_s=seconds,
        server_netns=fab.host_ns("vm3"),
        client_netns=fab.host_ns("vm2"),
        congestion=FLOOD_CC,
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
    fifo = ["parent", "1:1", "handle", "10:", lines.FIFO, "limit", "1000"]
    run(["tc", "qdisc", "replace", "dev", LINE, *fifo], ns=ns)
    queued, failed, mbps = _flood(uncapped, seconds=8)
    assert failed > 0 and queued == 0, (queued, failed, mbps)


def test_a_probe_through_an_overflowing_line_loses_only_what_its_queue_counted(
    uncapped: Fabric,
) -> None:
    """TCP at twice the line's rate beside the 5 kpps probe, through LINE: the queue drops
    all the time, and the probe's losses plus TCP's retransmissions are no more than the
    queue and OVS's sockets counted (measured: equal). With a tail-drop fifo they were
    about twice the count (stop 48: 185 + 5 against 84): each drop at enqueue fails OVS's
    ``sendmmsg`` (ENOBUFS, which OVS neither logs nor counts) and OVS gives up the rest of
    its output batch, packets no queue ever saw. A head-drop fifo drops the oldest packet
    and takes the new one: the send succeeds, and every drop is the queue's, counted."""
    ns = uncapped.state.fabric_ns
    lines.cap(ns, LINE, 100, burst_kb=32)
    _fresh_sender(uncapped)
    before = drops(uncapped)
    path = load_topology(NGNCS).paths["long"]
    with Traffic(
        uncapped, path, rate=5000, tcp_mbps=200, tcp_s=4, probe_s=3.0, congestion=FLOOD_CC
    ) as traffic:
        probe, tcp = traffic.results()
    dropped = drops(uncapped) - before
    lost = int(probe["lost"])
    assert dropped.queues > 0, dropped  # the line overflowed
    resent = tcp.retransmits or 0  # each lost segment sent again (none spurious here)
    assert lost + resent <= dropped.queues + dropped.sockets, (lost, resent, dropped)
