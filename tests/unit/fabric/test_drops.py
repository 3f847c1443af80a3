"""The drop counters of ``fabric.drops``, read from the outputs of the tools and files it
reads (their formats as on this machine: iproute2 6.1, OVS 3.1, Linux 6.x)."""

from __future__ import annotations

import json

import pytest

from fabric import drops
from fabric.errors import FabricError


def _link(name: str, rx: int, tx: int) -> dict[str, object]:
    stats = {"rx": {"packets": 9, "dropped": rx}, "tx": {"packets": 9, "dropped": tx}}
    return {"ifindex": 7, "ifname": name, "stats64": stats}


def test_a_links_drops_are_named_by_namespace_device_and_direction() -> None:
    shown = json.dumps([_link("lo", 0, 0), _link("br2-p2", 0, 26), _link("br4-p1", 3, 0)])
    assert drops.links("rr-x", shown) == {"link/rr-x/br2-p2/tx": 26, "link/rr-x/br4-p1/rx": 3}


def test_a_link_listing_that_is_not_ip_s_j_is_an_error() -> None:
    with pytest.raises(FabricError, match="rr-x"):
        drops.links("rr-x", '[{"ifname": "a"}]')


PROC_NET = """\
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards
Ip: 1 64 100 0 0 0 0 2 98 50 1
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 900 0 7 10 7 0 0 0 0
TcpExt: SyncookiesSent PruneCalled TCPBacklogDrop TCPRcvQDrop TCPOFODrop TCPDSACKRecvSegs
TcpExt: 0 4 1 2 0 35
"""  # noqa: E501 (as /proc prints it)


def test_a_hosts_udp_ip_and_tcp_drops_are_read_and_nothing_else() -> None:
    assert drops.host_drops(PROC_NET) == {
        "Ip/InDiscards": 2, "Ip/OutDiscards": 1,
        "Udp/InErrors": 7, "Udp/RcvbufErrors": 7, "Udp/SndbufErrors": 0, "Udp/MemErrors": 0,
        "TcpExt/TCPBacklogDrop": 1, "TcpExt/TCPRcvQDrop": 2, "TcpExt/TCPOFODrop": 0,
    }  # fmt: skip
    # the resends D-SACK says were not needed are read apart (not a drop)
    dsack = {"TcpExt": ("TCPDSACKRecvSegs",)}
    assert drops.host_drops(PROC_NET, dsack) == {"TcpExt/TCPDSACKRecvSegs": 35}


COVERAGE = """\
Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=b92ea0dd:
bridge_reconfigure         0.0/sec     0.000/sec        0.0000/sec   total: 44
drop_action_of_pipeline    0.2/sec     0.017/sec        0.0003/sec   total: 8
datapath_drop_upcall_error 0.0/sec     0.000/sec        0.0000/sec   total: 2
netdev_sent                0.0/sec     0.000/sec        0.0000/sec   total: 900
110 events never hit
"""


def test_ovs_drop_coverage_counters_only() -> None:
    assert drops.ovs_drops(COVERAGE) == {
        "ovs/drop_action_of_pipeline": 8, "ovs/datapath_drop_upcall_error": 2,
    }  # fmt: skip


def test_failed_upcalls_of_every_thread_add_up() -> None:
    stats = "main thread:\n  miss with failed upcall: 3\npmd thread numa_id 0 core_id 1:\n"
    stats += "  miss with failed upcall: 4\n"
    assert drops.failed_upcalls(stats) == {"ovs/failed-upcall": 7}


def test_failed_sends_in_ovs_log_are_counted_by_port_and_error() -> None:
    log = (
        "2026-11-30T16:01:02.003Z|00042|netdev_linux|WARN|error sending Ethernet packet on"
        " ost1-p3: Network is down\n"
        "2026-11-30T16:01:02.004Z|00043|netdev_linux|WARN|error sending Ethernet packet on"
        " ost1-p3: Network is down\n"
        "2026-11-30T16:01:03.000Z|00044|netdev_linux|WARN|error sending Ethernet packet on"
        " br1-p2: Resource temporarily unavailable\n"
    )
    assert drops.unsent(log) == {
        "ovs/unsent/ost1-p3/network-is-down": 2,
        "ovs/unsent/br1-p2/resource-temporarily-unavailable": 1,
    }


def test_softnet_drops_are_the_second_column_in_hex_summed_over_cpus() -> None:
    stat = "0000a000 00000010 00000000\n0000b000 0000000a 00000001\n"
    assert drops.softnet_dropped(stat) == 26


def test_only_counters_that_grew_are_drops_of_the_run() -> None:
    before = {"a": 1, "b": 5, "gone": 3}
    after = {"a": 4, "b": 5, "new": 2, "reset": 0}
    assert drops.moved(before, after) == {"a": 3, "new": 2}


def test_send_failures_are_the_unsent_for_want_of_buffer() -> None:
    log = (
        "2026-11-30T12:16:15.987Z|00146|netdev_linux|WARN|error sending Ethernet packet on"
        " br3-p1: Resource temporarily unavailable\n"
        "2026-11-30T12:16:27.756Z|00155|netdev_linux|WARN|Dropped 50 log messages in last 12"
        " seconds (most recently, 1 seconds ago) due to excessive rate\n"
        "2026-11-30T12:16:27.756Z|00156|netdev_linux|WARN|error sending Ethernet packet on"
        " br1-p3: No buffer space available\n"
        "2026-11-30T12:16:28.001Z|00157|netdev_linux|WARN|error sending Ethernet packet on"
        " ost1-p2: Network is down\n"  # a dark circuit: not the buffer's doing
    )
    assert drops.send_failures(drops.unsent(log)) == 2
    assert drops.send_failures({}) == 0  # no log yet: nothing failed
