"""The capped queues' share of OVS's send buffer (fabric.lines), without a fabric."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabric import lines
from fabric.errors import FabricError

BUFFER = 212_992  # net.core.wmem_default on this machine


@pytest.mark.parametrize("queues", [1, 2, 3, 4])
def test_full_queues_fit_their_share_and_one_packet_more_would_not(queues: int) -> None:
    n = lines.queue_packets(BUFFER, queues)
    assert n * lines.TRUESIZE * queues <= BUFFER * lines.SHARE
    assert (n + 1) * lines.TRUESIZE * queues > BUFFER * lines.SHARE


def test_more_queues_than_the_buffer_holds_are_refused() -> None:
    with pytest.raises(FabricError, match="do not fit"):
        lines.queue_packets(BUFFER, 100)


def test_send_failures_counts_the_logs_failed_sends(tmp_path: Path) -> None:
    log = tmp_path / "ovs-vswitchd.log"
    assert lines.send_failures(log) == 0  # no log yet: nothing failed
    log.write_text(
        "2026-11-30T12:16:15.987Z|00146|netdev_linux|WARN|error sending Ethernet packet on"
        " br3-p1: Resource temporarily unavailable\n"
        "2026-11-30T12:16:27.756Z|00155|netdev_linux|WARN|Dropped 50 log messages in last 12"
        " seconds (most recently, 1 seconds ago) due to excessive rate\n"
        "2026-11-30T12:16:27.756Z|00156|netdev_linux|WARN|error sending Ethernet packet on"
        " br1-p3: Resource temporarily unavailable\n"
        "2026-11-30T12:16:28.001Z|00157|netdev_linux|WARN|error sending Ethernet packet on"
        " ost1-p2: Network is down\n"  # a dark circuit: not the buffer's doing
    )
    assert lines.send_failures(log) == 2
