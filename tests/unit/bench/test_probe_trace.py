"""bench/probe_trace.py's reading of captures: a datagram that vm3 never saw is lost, and
the places it was seen (an Ethernet capture's host, an "any"-device capture's device and
direction) say where it vanished."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("probe_trace", ROOT / "bench" / "probe_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


trace = _module()
RUN = 77


def _datagram(seq: int) -> bytes:
    payload = struct.pack("!4sBQQQ", b"RRPB", 0, RUN, seq, 0) + b"\0" * 8
    ip = bytes([0x45]) + b"\0" * 19  # a 20-byte IPv4 header (only its length is read)
    return ip + b"\0" * 8 + payload  # and an 8-byte UDP header


def _pcap(link: int, frames: list[tuple[float, bytes]]) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, link)
    for t, frame in frames:
        out += struct.pack("<IIII", int(t), round((t % 1) * 1e6), len(frame), len(frame)) + frame
    return out


def _ethernet(seq: int) -> bytes:
    return b"\0" * 12 + b"\x08\x00" + _datagram(seq)


def _sll2(seq: int, ifindex: int, outgoing: bool) -> bytes:
    head = struct.pack("!HHIHBB8s", 0x0800, 0, ifindex, 1, 4 if outgoing else 0, 6, b"")
    return head + _datagram(seq)


def test_a_datagram_vm3_never_saw_is_lost_where_it_was_last_seen() -> None:
    names = {5: "br2-p1", 9: "ost1-p4"}
    vm2 = _pcap(trace.ETHERNET, [(100.0 + q / 1000, _ethernet(q)) for q in range(3)])
    fabric = _pcap(
        trace.LINUX_SLL2,
        [(100.0001 + q / 1000, _sll2(q, 5, outgoing=False)) for q in range(3)]
        + [(100.0015, _sll2(1, 9, outgoing=False))],
    )
    vm3 = _pcap(trace.ETHERNET, [(100.002, _ethernet(0)), (100.004, _ethernet(2))])
    seen = [
        *trace.read_pcap(vm2, "vm2", names),
        *trace.read_pcap(fabric, "fabric", names),
        *trace.read_pcap(vm3, "vm3", names),
    ]
    assert {(s.where, s.seq) for s in seen if s.seq == 1} == {
        ("vm2", 1), ("br2-p1/in", 1), ("ost1-p4/in", 1),
    }  # fmt: skip
    lost = trace.lost_by_path(seen)
    assert list(lost) == [RUN] and list(lost[RUN]) == [1]
    lines = trace.describe(lost[RUN], request_t=100.0)
    assert lines == ["    1 x vm2 br2-p1/in ost1-p4/in, the first sent at +1.0 ms"]


def test_device_names_come_from_ip_o_link() -> None:
    shown = "1: lo: <LOOPBACK,UP> mtu 65536\n13: br2-p2@ost1-p2: <BROADCAST> mtu 1500\n"
    assert trace.ifnames(shown) == {1: "lo", 13: "br2-p2"}
