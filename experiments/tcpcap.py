"""Seed 003's metrics of a TCP stream from packet captures (tcpdump pcap files). Pure.

Seed 003 (Table 4.6) captured the stream with tcpdump and measured, per stream: packet loss
= segments retransmitted / segments sent, link unavailability = the longest time "where
packets were not observed by the sniffer", RTT of the stream's packets, and throughput.
Here the sender's capture (vm2) gives what left and the ACKs that came back, the
receiver's (vm3) what arrived:

- *unavailability*: the longest time the sender's sniffer saw no packet of the stream
  (seed 003 Table 4.6: "time gap ... where packets were not observed by the sniffer", its
  tcpdump "on the sender side"): data going out or ACKs coming back; while the circuit is
  dark only the retransmissions, so this is the longest wait between two of them (or before
  the first); beside it the longest gap between data segments arriving at the receiver,
  which runs from the last segment before the outage to the first after it;
- *retransmitted / sent*: data segments the sender sent again (a sequence number below the
  highest one already sent) over every data segment it sent (a frame carrying several
  segments, as the sender's capture may see before segmentation, counts as that many);
- *lost*: data segments sent that never arrived (sender's count - receiver's count);
- *duplicates*: data segments that arrived carrying only bytes the receiver already had: a
  retransmission whose original was not lost (a timeout while the ACKs were late, or
  segments reordered past the duplicate-ACK threshold), what RFC 3522 and RFC 4015 call
  spurious; retransmitted - duplicates is what the stream really had to resend;
- *RTT*: from a segment's first transmission to the first ACK that covers it (a segment sent
  into a dark circuit counts its whole wait, as the seed's "hundreds of ms");
- *throughput*: payload bytes arriving per bin.

The pcap reader takes classic pcap (micro- or nanosecond timestamps, either byte order) of
Ethernet frames carrying IPv4, which is what ``tcpdump -w`` writes on the hosts' veths.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

MAGIC = {0xA1B2C3D4: 1e-6, 0xA1B23C4D: 1e-9}
ETHERNET, ETH_IPV4, TCP = 1, 0x0800, 6
FIN, SYN, RST = 0x01, 0x02, 0x04


class PcapError(ValueError):
    """The file is not a capture this reader understands."""


@dataclass(frozen=True, slots=True)
class Packet:
    """One TCP packet: wall time (s), addresses, ports, sequence and ack numbers, flags and
    payload length (from the IP header: the capture may keep the headers only)."""

    t: float
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    length: int


def read_pcap(path: Path) -> Iterator[Packet]:
    """The TCP/IPv4 packets of a classic pcap file (others skipped); PcapError if it is not
    one."""
    data = path.read_bytes()
    if len(data) < 24:
        raise PcapError(f"{path}: {len(data)} bytes, not a pcap file")
    for order in ("<", ">"):
        (magic,) = struct.unpack_from(f"{order}I", data, 0)
        if magic in MAGIC:
            break
    else:
        raise PcapError(f"{path}: not a classic pcap file (magic {data[:4].hex()})")
    unit = MAGIC[magic]
    (link,) = struct.unpack_from(f"{order}I", data, 20)
    if link != ETHERNET:
        raise PcapError(f"{path}: link type {link}, expected Ethernet (1)")
    record = struct.Struct(f"{order}IIII")
    at = 24
    while at + 16 <= len(data):
        sec, frac, caplen, _ = record.unpack_from(data, at)
        frame = data[at + 16 : at + 16 + caplen]
        at += 16 + caplen
        pkt = _tcp(sec + frac * unit, frame)
        if pkt is not None:
            yield pkt


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


def headers_only(path: Path, into: Writable) -> int:
    """Copy the classic pcap ``path`` into ``into`` with every frame cut after its headers
    (Ethernet, IPv4 and TCP with its options; 64 bytes of anything else), the original
    length kept: what the measurements read, without the payload bytes a ``-s 96`` capture
    keeps of some segments. The number of frames."""
    data = path.read_bytes()
    order = next(
        (
            o
            for o in ("<", ">")
            if len(data) >= 24 and struct.unpack_from(f"{o}I", data)[0] in MAGIC
        ),
        None,
    )
    if order is None:
        raise PcapError(f"{path}: not a classic pcap file")
    into.write(data[:24])
    record = struct.Struct(f"{order}IIII")
    at, frames = 24, 0
    while at + 16 <= len(data):
        sec, frac, caplen, length = record.unpack_from(data, at)
        frame = data[at + 16 : at + 16 + caplen]
        at += 16 + caplen
        keep = frame[: _header_length(frame)]
        into.write(record.pack(sec, frac, len(keep), length) + keep)
        frames += 1
    return frames


def _header_length(frame: bytes) -> int:
    if len(frame) < 14 + 20 or int.from_bytes(frame[12:14], "big") != ETH_IPV4:
        return min(len(frame), 64)
    ihl = (frame[14] & 0x0F) * 4
    if frame[23] != TCP or len(frame) < 14 + ihl + 13:
        return min(len(frame), 14 + ihl + 8)
    return min(len(frame), 14 + ihl + (frame[14 + ihl + 12] >> 4) * 4)


def _tcp(t: float, frame: bytes) -> Packet | None:
    if len(frame) < 14 + 20 + 20 or int.from_bytes(frame[12:14], "big") != ETH_IPV4:
        return None
    ihl = (frame[14] & 0x0F) * 4
    total = int.from_bytes(frame[16:18], "big")
    if frame[23] != TCP or len(frame) < 14 + ihl + 20:
        return None
    src, dst = frame[26:30], frame[30:34]
    tcp = 14 + ihl
    sport, dport, seq, ack = struct.unpack_from("!HHII", frame, tcp)
    offset = (frame[tcp + 12] >> 4) * 4
    return Packet(
        t=t,
        src=".".join(map(str, src)),
        dst=".".join(map(str, dst)),
        sport=sport,
        dport=dport,
        seq=seq,
        ack=ack,
        flags=frame[tcp + 13],
        length=max(0, total - ihl - offset),
    )


Flow = tuple[str, int, str, int]  # sender address, port, receiver address, port


def data_flow(packets: Sequence[Packet], port: int) -> Flow | None:
    """The connection to ``port`` that carried the most payload (iperf3's data connection,
    not its control one), as (sender, sport, receiver, dport)."""
    sizes: dict[Flow, int] = {}
    for p in packets:
        if p.dport == port and p.length:
            flow = (p.src, p.sport, p.dst, p.dport)
            sizes[flow] = sizes.get(flow, 0) + p.length
    return max(sizes, key=lambda f: sizes[f]) if sizes else None


def _forward(packets: Sequence[Packet], flow: Flow) -> list[Packet]:
    src, sport, dst, dport = flow
    return [p for p in packets if (p.src, p.sport, p.dst, p.dport) == (src, sport, dst, dport)]


def _backward(packets: Sequence[Packet], flow: Flow) -> list[Packet]:
    src, sport, dst, dport = flow
    return [p for p in packets if (p.src, p.sport, p.dst, p.dport) == (dst, dport, src, sport)]


def _relative(seq: int, isn: int) -> int:
    return (seq - isn) & 0xFFFFFFFF


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    """The sender's side: data segments sent, how many again, and RTT samples (t, ms)."""

    segments: int
    retransmitted: int
    rtt: tuple[tuple[float, float], ...]


def mss(lengths: Sequence[int]) -> int:
    """The segment size of a stream: its most common payload length (a capture on the
    sender's interface may see several segments in one frame, segmented after the tap)."""
    counts: dict[int, int] = {}
    for n in lengths:
        counts[n] = counts.get(n, 0) + 1
    return max(counts, key=lambda n: (counts[n], n)) if counts else 1


def segments(length: int, size: int) -> int:
    """How many segments of ``size`` a payload of ``length`` is."""
    return max(1, -(-length // size))


def sender_side(packets: Sequence[Packet], flow: Flow, size: int | None = None) -> Sent:
    """Segments sent and retransmitted, and RTT samples, from the sender's capture
    (segments of ``size``, default the stream's own :func:`mss`)."""
    data = [p for p in _forward(packets, flow) if p.length]
    acks = [p for p in _backward(packets, flow) if p.flags & 0x10]
    if not data:
        return Sent(segments=0, retransmitted=0, rtt=())
    size = size or mss([p.length for p in data])
    isn = data[0].seq
    ends: list[int] = []  # ends of segments in the order first sent (increasing)
    first: list[float] = []  # their first transmission times
    highest, again, sent = 0, 0, 0
    for p in data:
        seq = _relative(p.seq, isn)
        end = seq + p.length
        n = segments(p.length, size)
        sent += n
        if seq < highest:
            again += n
        if end > highest:
            ends.append(end)
            first.append(p.t)
            highest = end
    rtt = []
    acked = 0
    for a in acks:
        ack = _relative(a.ack, isn)
        if ack <= acked or ack > highest + 1:
            continue
        acked = ack
        i = bisect.bisect_right(ends, ack) - 1
        if i >= 0:
            rtt.append((a.t, (a.t - first[i]) * 1000))
    return Sent(segments=sent, retransmitted=again, rtt=tuple(rtt))


def connection_times(packets: Sequence[Packet], flow: Flow) -> list[float]:
    """When a sniffer at one end saw a packet of the connection, either direction (data,
    ACKs, retransmissions): what seed 003's unavailability is measured on, at the sender."""
    return sorted(p.t for p in [*_forward(packets, flow), *_backward(packets, flow)])


def arrivals(packets: Sequence[Packet], flow: Flow) -> list[tuple[float, int]]:
    """(time, payload bytes) of each data segment the receiver's capture saw arrive."""
    return [(p.t, p.length) for p in _forward(packets, flow) if p.length]


def duplicates(packets: Sequence[Packet], flow: Flow, size: int) -> int:
    """Data segments (of ``size``) the receiver's capture saw arrive with nothing new: every
    byte they carry had arrived before."""
    data = [p for p in _forward(packets, flow) if p.length]
    if not data:
        return 0
    isn = data[0].seq
    upto = 0  # every byte below it has arrived
    above: list[tuple[int, int]] = []  # what arrived beyond it: sorted, disjoint [start, end)
    again = 0
    for p in data:
        start = _relative(p.seq, isn)
        if start >= 1 << 31:  # before the first segment seen: reordered at the start
            start -= 1 << 32
        end = start + p.length
        if end <= upto or any(a <= start and end <= b for a, b in above):
            again += segments(p.length, size)
            continue
        above = _merged([*above, (max(start, upto), end)])
        while above and above[0][0] <= upto:
            upto = max(upto, above.pop(0)[1])
    return again


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def longest_gap(times: Sequence[float], start: float, end: float) -> tuple[float, float] | None:
    """The longest interval (s) between consecutive ``times`` inside [start, end], and when
    it began; None with fewer than two times there."""
    inside = [t for t in times if start <= t <= end]
    if len(inside) < 2:
        return None
    gaps = ((b - a, a) for a, b in itertools.pairwise(inside))
    return max(gaps)


def binned(samples: Sequence[tuple[float, float]], t0: float, bin_s: float, n: int) -> list[float]:
    """The sum of the samples' values per bin of ``bin_s`` from ``t0`` (``n`` bins)."""
    out = [0.0] * n
    for t, v in samples:
        k = int((t - t0) // bin_s)
        if 0 <= k < n:
            out[k] += v
    return out


def binned_max(
    samples: Sequence[tuple[float, float]], t0: float, bin_s: float, n: int
) -> list[float | None]:
    """The largest value per bin (None where a bin has none)."""
    out: list[float | None] = [None] * n
    for t, v in samples:
        k = int((t - t0) // bin_s)
        if 0 <= k < n:
            cur = out[k]
            out[k] = v if cur is None or v > cur else cur
    return out
