"""What a monitor measures, from inside a host's network namespace.

- ``Pinger``: ICMP echo from a raw socket opened in the host's namespace (the monitor
  process itself stays in the root namespace, where the service API listens). One sample
  per echo: the round-trip time in ms, or NaN when no reply came within the timeout.
- ``LossWindow``: the fraction of the last N echoes that went unanswered.
- ``RxRate``: received bits/s of an interface of the namespace, from its counters.
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import subprocess
import time
from collections import deque
from ipaddress import IPv4Address

from services.reroute.errors import HostError
from services.reroute.netns import socket_in

ICMP_ECHO, ICMP_ECHO_REPLY = 8, 0
SO_TIMESTAMPNS = 35  # Linux; SCM_TIMESTAMPNS has the same value
_TIMESPEC = struct.Struct("@qq")
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)
_HEAD = struct.Struct("!BBHHH")


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return int(~total & 0xFFFF)


def echo_request(ident: int, seq: int, payload: bytes = b"reroute-monitor") -> bytes:
    """An ICMP echo request with ``ident``, ``seq`` and ``payload``, checksummed."""
    head = _HEAD.pack(ICMP_ECHO, 0, 0, ident, seq)
    return _HEAD.pack(ICMP_ECHO, 0, _checksum(head + payload), ident, seq) + payload


class Pinger:
    """ICMP echoes sent at the caller's pace (one per ``sample``), without waiting for the
    replies: replies are matched by sequence number as they come.

    ``sample`` reports the oldest echo still owed a value: its rtt once answered, NaN once
    ``timeout_s`` passed, and meanwhile its age, a lower bound of its rtt. So a slow path
    shows as soon as an echo is older than the threshold, and sampling keeps the caller's
    rate whatever the rtt (waiting for each reply made 80 ms paths sample at 12 Hz).
    """

    def __init__(self, netns: str | None, target: IPv4Address, timeout_s: float) -> None:
        self.target = str(target)
        self.timeout_s = timeout_s
        family, kind, proto = socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP
        try:
            self.sock = (
                socket_in(netns, family, kind, proto)
                if netns
                else socket.socket(family, kind, proto)
            )
        except OSError as exc:
            raise HostError(f"cannot open an ICMP socket (needs root): {exc}") from exc
        self.sock.setblocking(False)
        # the kernel stamps each reply on arrival: rtt does not depend on when we read it
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.ident = os.getpid() & 0xFFFF
        self.seq = 0
        self.pending: deque[tuple[int, float]] = deque()  # (seq, sent) in sending order
        self.answered: dict[int, float] = {}  # seq -> rtt ms
        self.done: deque[float] = deque()  # finished echoes (rtt ms or NaN), for LossWindow

    def close(self) -> None:
        """Close the ICMP socket."""
        self.sock.close()

    def sample(self) -> float:
        """The worst echo settled since the last sample (NaN: one went unanswered), else the
        age of the oldest one still out."""
        self.tick()
        settled, self.done = list(self.done), deque()
        if settled:
            return math.nan if any(math.isnan(v) for v in settled) else max(settled)
        if self.pending:
            return (time.time() - self.pending[0][1]) * 1000
        return math.nan

    def tick(self) -> None:
        """Send one echo, collect the replies that arrived, settle answered or late echoes."""
        self.seq = (self.seq + 1) & 0xFFFF
        sent = time.time()  # before sendto: on loopback the reply comes within it
        try:
            self.sock.sendto(echo_request(self.ident, self.seq), (self.target, 0))
            self.pending.append((self.seq, sent))
        except OSError:  # no route, link down: this echo is lost, monitoring goes on
            self.done.append(math.nan)
        self._collect()
        now = time.time()
        while self.pending:
            seq, sent = self.pending[0]
            if seq in self.answered:
                self.done.append(self.answered.pop(seq))
            elif now - sent > self.timeout_s:
                self.done.append(math.nan)
            else:
                break
            self.pending.popleft()

    def _collect(self) -> None:
        waiting = {seq: sent for seq, sent in self.pending}
        while True:
            try:
                packet, ancdata, _, _ = self.sock.recvmsg(2048, _STAMP_SPACE)
            except BlockingIOError:
                return
            at = _arrival(ancdata)
            ihl = (packet[0] & 0x0F) * 4
            kind, _, _, ident, seq = _HEAD.unpack_from(packet, ihl)
            if kind == ICMP_ECHO_REPLY and ident == self.ident and seq in waiting:
                self.answered[seq] = (at - waiting[seq]) * 1000


def _arrival(ancdata: list[tuple[int, int, bytes]]) -> float:
    """The kernel's receive time of a packet (time.time() scale), or now without one."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return float(sec) + float(nsec) / 1e9
    return time.time()


class LossWindow:
    """Loss ratio over the last ``size`` finished echoes of a pinger."""

    def __init__(self, pinger: Pinger, size: int = 10) -> None:
        self.pinger = pinger
        self.answered: deque[bool] = deque(maxlen=size)

    def sample(self) -> float:
        """The share of the last window's echo requests left unanswered."""
        self.pinger.tick()
        while self.pinger.done:
            self.answered.append(not math.isnan(self.pinger.done.popleft()))
        if not self.answered:
            return 0.0
        return 1.0 - sum(self.answered) / len(self.answered)


class RxRate:
    """Received bits/s of ``iface`` in ``netns`` between two samples."""

    def __init__(self, netns: str | None, iface: str) -> None:
        self.netns, self.iface = netns, iface
        self.last = (time.perf_counter(), self._bytes())

    def _bytes(self) -> int:
        cmd = ["ip", *(["-n", self.netns] if self.netns else []), "-s", "-j", "link", "show"]
        out = subprocess.run([*cmd, "dev", self.iface], capture_output=True, text=True)
        if out.returncode:
            raise HostError(f"cannot read counters of {self.iface}: {out.stderr.strip()}")
        return int(json.loads(out.stdout)[0]["stats64"]["rx"]["bytes"])

    def sample(self) -> float:
        """The receive rate since the previous sample, in bit/s."""
        now, count = time.perf_counter(), self._bytes()
        last, self.last = self.last, (now, count)
        return (count - last[1]) * 8 / (now - last[0]) if now > last[0] else math.nan
