"""Link up/down in a network namespace over rtnetlink, in-process (no ``ip`` per change).

The optical emulator flips a veth's state at every circuit change and lock; spawning
``ip`` costs milliseconds each, a netlink request tens of microseconds. The socket is
opened inside the namespace (the thread enters it, opens, and returns), and keeps
talking to that namespace afterwards.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess

from fabric.errors import FabricError
from fabric.netns import socket_in as netns_socket

RTM_NEWLINK = 16
NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
IFF_UP = 0x1
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change


def socket_in(netns: str) -> socket.socket:
    """A NETLINK_ROUTE socket bound inside network namespace ``netns``."""
    sock = netns_socket(netns, socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    return sock


class Links:
    """Set links of one network namespace up or down (names resolved once)."""

    def __init__(self, netns: str) -> None:
        self.netns = netns
        self.sock = socket_in(netns)
        self.index: dict[str, int] = {}
        self.seq = 0

    def close(self) -> None:
        """Close the netlink socket."""
        self.sock.close()

    def set(self, name: str, up: bool) -> None:
        """Set link ``name`` up or down and wait for the kernel's acknowledgement."""
        self.seq += 1
        body = _IFINFO.pack(socket.AF_UNSPEC, 0, self._index(name), IFF_UP if up else 0, IFF_UP)
        head = _HEADER.pack(
            _HEADER.size + len(body), RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, self.seq, 0
        )
        self.sock.send(head + body)
        reply = self.sock.recv(4096)
        _, kind, _, _, _ = _HEADER.unpack_from(reply)
        if kind == NLMSG_ERROR:
            (errno,) = struct.unpack_from("=i", reply, _HEADER.size)
            if errno:
                raise FabricError(f"link {name} in {self.netns}: {os.strerror(-errno)}")

    def _index(self, name: str) -> int:
        if name not in self.index:
            out = subprocess.run(
                ["ip", "-n", self.netns, "-o", "link", "show", "dev", name],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if out.returncode or ":" not in out.stdout:
                raise FabricError(f"no link {name} in network namespace {self.netns}")
            self.index[name] = int(out.stdout.split(":", 1)[0])
        return self.index[name]
