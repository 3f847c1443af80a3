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
import select
import socket
import struct
import subprocess
import time
from collections import deque
from ipaddress import IPv4Address

from fabric.netlink import open_in
from services.reroute.errors import FabricError

ICMP_ECHO, ICMP_ECHO_REPLY = 8, 0
_HEAD = struct.Struct("!BBHHH")


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return int(~total & 0xFFFF)


def echo_request(ident: int, seq: int, payload: bytes = b"reroute-monitor") -> bytes:
    head = _HEAD.pack(ICMP_ECHO, 0, 0, ident, seq)
    return _HEAD.pack(ICMP_ECHO, 0, _checksum(head + payload), ident, seq) + payload


class Pinger:
    def __init__(self, netns: str | None, target: IPv4Address, timeout_s: float) -> None:
        self.target = str(target)
        self.timeout_s = timeout_s
        family, kind, proto = socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP
        try:
            self.sock = (
                open_in(netns, family, kind, proto) if netns else socket.socket(family, kind, proto)
            )
        except OSError as exc:
            raise FabricError(f"cannot open an ICMP socket (needs root): {exc}") from exc
        self.ident = os.getpid() & 0xFFFF
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def sample(self) -> float:
        """One echo: rtt in ms, NaN if no reply within the timeout."""
        self.seq = (self.seq + 1) & 0xFFFF
        sent = time.perf_counter()
        self.sock.sendto(echo_request(self.ident, self.seq), (self.target, 0))
        deadline = sent + self.timeout_s
        while (left := deadline - time.perf_counter()) > 0:
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                break
            packet = self.sock.recv(2048)
            ihl = (packet[0] & 0x0F) * 4
            kind, _, _, ident, seq = _HEAD.unpack_from(packet, ihl)
            if kind == ICMP_ECHO_REPLY and ident == self.ident and seq == self.seq:
                return (time.perf_counter() - sent) * 1000
        return math.nan


class LossWindow:
    """Loss ratio over the last ``size`` echoes of a pinger."""

    def __init__(self, pinger: Pinger, size: int = 10) -> None:
        self.pinger = pinger
        self.answered: deque[bool] = deque(maxlen=size)

    def sample(self) -> float:
        self.answered.append(not math.isnan(self.pinger.sample()))
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
            raise FabricError(f"cannot read counters of {self.iface}: {out.stderr.strip()}")
        return int(json.loads(out.stdout)[0]["stats64"]["rx"]["bytes"])

    def sample(self) -> float:
        now, count = time.perf_counter(), self._bytes()
        last, self.last = self.last, (now, count)
        return (count - last[1]) * 8 / (now - last[0]) if now > last[0] else math.nan
