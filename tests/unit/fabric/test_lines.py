"""The capped queues' share of OVS's send buffer (fabric.lines), without a fabric."""

from __future__ import annotations

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
