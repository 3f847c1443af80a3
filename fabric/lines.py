"""Line-rate caps on the fabric's links: a tbf whose queue is the one that overflows, counted.

OVS's userspace datapath sends every port's packets through ONE AF_PACKET socket (netdev-linux's
``af_packet_sock``), and a packet waiting in a queue on a port it sent to still counts against
that socket's send buffer (an skb keeps its socket until the receiving stack orphans it). The
buffer is ``net.core.wmem_default`` (208 kB here; a namespace cannot set its own). A tbf whose
queue is deeper than that never overflows by itself: OVS's next send fails first (EAGAIN), on
whatever port it was sending to, and those packets vanish uncounted (ovs-vswitchd.log says
"error sending Ethernet packet", rate-limited). Measured on this machine with a 100 Mbit/s tbf
of 20 ms (250 kB): a full-scale run's sends failed on eight ports, the capped one and the MBB's
temporary and new paths among them, and the probe lost packets neither tc nor OVS counted.

So a capped link here is a tbf with a packet fifo under it, and all the capped queues of a
fabric namespace share :data:`SHARE` of the send buffer equally, at :data:`TRUESIZE` bytes a
full-size frame (the kernel's accounting: a 2 kB allocation and its sk_buff; smaller frames cost
less). The line's own queue then drops when the line is full, and ``tc -s`` counts it; adding a
cap re-sizes the ones already there.

The fifo drops at its head (``pfifo_head_drop``: full, it drops the oldest packet and takes
the new one), not at its tail. A tail drop refuses the packet being sent, so AF_PACKET's
send returns ENOBUFS; OVS's ``sendmmsg`` loop then gives up the rest of its output batch (up
to 32 packets no queue ever saw), and OVS treats ENOBUFS as "try later": no log line, no
counter. Measured (stop 48, ``tests/e2e/test_lines.py``): TCP at twice a 100 Mbit/s line
beside the probe, tail drop: 345 retransmissions and 47 probe packets lost against 206 drops
counted; head drop: retransmissions equal to the drops counted, the probe's losses within
them. A head drop answers the send "congested" (NET_XMIT_CN), which is no error: every
drop is the queue's, counted.
"""

from __future__ import annotations

import re
from pathlib import Path

from fabric.errors import FabricError
from fabric.run import run

TRUESIZE = 2304  # bytes of send buffer one full-size frame holds (`ss -0 -m`'s t, in steps)
SHARE = 0.75  # of the send buffer, for every capped queue together; the rest is in flight
WMEM_DEFAULT = Path("/proc/sys/net/core/wmem_default")
TBF_HANDLE, FIFO_HANDLE = "1:", "10:"
FIFO = "pfifo_head_drop"  # full: the oldest packet dropped, the new one taken (module doc)


def cap(ns: str, dev: str, mbps: int, *, burst_kb: int) -> int:
    """Cap ``dev`` (a switch-side veth in namespace ``ns``) at ``mbps`` with a tbf of
    ``burst_kb``; its queue and every other capped queue in ``ns`` then hold their equal
    share of OVS's send buffer. Returns the queue's length in packets."""
    tbf = ["tbf", "rate", f"{mbps}mbit", "burst", f"{burst_kb}kb", "latency", "20ms"]
    run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", TBF_HANDLE, *tbf], ns=ns)
    return resize(ns)


def capped(ns: str) -> list[str]:
    """The devices of ``ns`` that carry a tbf at their root."""
    shown = run(["tc", "qdisc", "show"], ns=ns)
    return re.findall(r"^qdisc tbf \S+ dev (\S+) root", shown, flags=re.MULTILINE)


def resize(ns: str) -> int:
    """Give every capped queue in ``ns`` its share of the send buffer; the share (packets)."""
    devs = capped(ns)
    packets = queue_packets(send_buffer(), len(devs))
    for dev in devs:
        fifo = ["parent", f"{TBF_HANDLE}1", "handle", FIFO_HANDLE, FIFO, "limit", str(packets)]
        run(["tc", "qdisc", "replace", "dev", dev, *fifo], ns=ns)
    return packets


def queue_packets(send_buffer: int, queues: int) -> int:
    """Packets each of ``queues`` capped queues may hold so that, full, they fit in their
    share of a send buffer of ``send_buffer`` bytes."""
    packets = int(send_buffer * SHARE) // (TRUESIZE * max(queues, 1))
    if packets < 2:
        raise FabricError(
            f"{queues} capped queues do not fit OVS's send buffer of {send_buffer} bytes"
            f" (net.core.wmem_default): each would hold fewer than 2 packets"
        )
    return packets


def send_buffer() -> int:
    """OVS's send buffer: the sockets' default (``net.core.wmem_default``), in bytes."""
    return int(WMEM_DEFAULT.read_text())
