"""Layer-2 ports: a promiscuous AF_PACKET socket bound to one interface, and its kernel counters.

The socket is created with protocol 0 (it hears nothing) and only then bound to the interface
with ETH_P_ALL, so it never sees a frame of another interface. Frames the host itself sends out
of the interface (packet type PACKET_OUTGOING) are never delivered to it: the kernel filters
them (PACKET_IGNORE_OUTGOING, Linux >= 4.20), so the reader needs no per-frame address tuple
(``recvmsg`` only for PACKET_AUXDATA, which carries the VLAN tag the kernel strips: see
``with_vlan``). Frames this socket sends are never looped back to it by the kernel in any case.
"""

from __future__ import annotations

import socket
import struct

from emulators.delayline.errors import DelayLineError

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
_AUX = struct.Struct("@IIIHHHH")  # struct tpacket_auxdata
AUX_SPACE = socket.CMSG_SPACE(_AUX.size)
_TAG = struct.Struct("!HH")
_SO_RCVBUFFORCE, _SO_SNDBUFFORCE = 33, 32  # Linux; Python's socket module lacks them
_MREQ = struct.Struct("@iHH8s")  # struct packet_mreq
_STATS = struct.Struct("@II")  # struct tpacket_stats: tp_packets, tp_drops
BUFFER_BYTES = 8 << 20


def open_port(ifname: str, *, buffer_bytes: int = BUFFER_BYTES) -> socket.socket:
    """A raw packet socket on ``ifname`` (in the calling thread's network namespace)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        _configure(sock, ifname, buffer_bytes)
    except OSError as exc:
        sock.close()
        raise DelayLineError(f"cannot open a packet socket on {ifname!r}: {exc}") from exc
    return sock


def _configure(sock: socket.socket, ifname: str, buffer_bytes: int) -> None:
    sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, buffer_bytes)
    sock.setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, buffer_bytes)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    sock.bind((ifname, ETH_P_ALL))
    mreq = _MREQ.pack(socket.if_nametoindex(ifname), PACKET_MR_PROMISC, 0, b"")
    sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)


def kernel_drops(sock: socket.socket) -> int:
    """Frames the kernel dropped for this socket since the last call (reading resets them)."""
    _, drops = _STATS.unpack(sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS.size))
    return int(drops)


def with_vlan(frame: bytes, ancdata: list[tuple[int, int, bytes]]) -> bytes:
    """The frame as it was on the wire: the kernel strips an 802.1Q tag before a packet
    socket sees the frame and reports it in PACKET_AUXDATA; put it back after the MACs."""
    for level, kind, data in ancdata:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(data) >= _AUX.size:
            status, _, _, _, _, tci, tpid = _AUX.unpack_from(data)
            if status & TP_STATUS_VLAN_VALID:
                tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
                return frame[:12] + _TAG.pack(tpid, tci) + frame[12:]
    return frame
