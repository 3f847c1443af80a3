"""The devices' own write history: every EMULATOR appends one JSON line per state-changing
request it accepted, naming the connection (and, on loopback, the process) that made it.

A checker of a replicated service must know which replica wrote what, when, as the device
saw it (not as the replica believes it did: a paused or cut-off replica's belief is the
thing under test). Off unless ``REROUTE_WRITE_LOG`` names a file; then each write is one
line, appended with a single ``write()`` on an ``O_APPEND`` descriptor (atomic between the
processes sharing the file, lines well under ``PIPE_BUF``)::

    {"t": 1764380000.123, "device": "polatis@127.0.0.1:40001", "peer": "127.0.0.1:51234",
     "pid": 4242, "what": ":OXC:SWITCH:CONN:ADD 2,19"}

``t`` is the wall clock when the device applied the write (processes on one host share
it); ``pid`` is the process owning the peer's socket, found once per connection (per socket
inode: a port reused by another process later is told apart) in ``/proc`` (Linux, same
network namespace), ``null`` when not found.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import time
from pathlib import Path
from typing import Any

ENV = "REROUTE_WRITE_LOG"


class WriteLog:
    """Appends writes to one file; ``from_env`` gives ``None`` when logging is off, so the
    emulators' only cost then is an ``is None`` test per write."""

    def __init__(self, path: Path, device: str) -> None:
        self.device = device
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pids: dict[str | None, int | None] = {}  # peer socket inode -> process

    @classmethod
    def from_env(cls, device: str) -> WriteLog | None:
        """A log for ``device`` if ``REROUTE_WRITE_LOG`` is set, else ``None``."""
        path = os.environ.get(ENV)
        return cls(Path(path), device) if path else None

    def write(self, peer: str, what: str, device: str | None = None, **extra: object) -> None:
        """Record one applied write from ``peer`` (``host:port``), on ``device`` (default:
        the log's; a controller emulator names its switch)."""
        inode = socket_inode(peer)  # per connection: a port reused later is another one
        if inode not in self._pids:
            self._pids[inode] = inode_pid(inode)
        line = {"t": time.time(), "device": device or self.device, "peer": peer}
        line |= {"pid": self._pids[inode], "what": what, **extra}
        os.write(self._fd, (json.dumps(line) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def transport_ends(request: Any) -> tuple[str, str]:
    """(server ``host:port``, peer ``host:port``) of an aiohttp request's connection."""
    transport = request.transport
    if transport is None:
        return "?", "?"
    ends = (transport.get_extra_info(k) or ("?", "?") for k in ("sockname", "peername"))
    server, peer = (f"{e[0]}:{e[1]}" for e in ends)
    return server, peer


def _hex_endpoints(peer: str) -> list[tuple[str, str]]:
    """(table, address) as ``/proc/net/tcp`` or ``tcp6`` write ``peer`` (``host:port``):
    each 32-bit word in host order (little-endian here); an IPv4 peer may sit on an IPv6
    socket (``::ffff:a.b.c.d``, as gRPC's are)."""
    host, _, port = peer.rpartition(":")
    try:
        address = ipaddress.ip_address(host.strip("[]").removeprefix("ipv4:"))
    except ValueError:
        return []
    if not port.isdigit():
        return []
    tail = f":{int(port):04X}"
    if isinstance(address, ipaddress.IPv4Address):
        mapped = ipaddress.IPv6Address(f"::ffff:{address}")
        return [
            ("tcp", _words(address.packed) + tail),
            ("tcp6", _words(mapped.packed) + tail),
        ]
    return [("tcp6", _words(address.packed) + tail)]


def _words(packed: bytes) -> str:
    return "".join(packed[i : i + 4][::-1].hex() for i in range(0, len(packed), 4)).upper()


def socket_inode(peer: str) -> str | None:
    """The inode of the TCP socket whose local address is ``peer``."""
    for table, wanted in _hex_endpoints(peer):
        with open(f"/proc/net/{table}") as rows:
            for row in rows.readlines()[1:]:
                fields = row.split()
                if fields[1] == wanted:
                    return fields[9]
    return None


def peer_pid(peer: str) -> int | None:
    """The process holding the socket bound to ``peer`` (the other end of a loopback
    connection), or ``None``."""
    return inode_pid(socket_inode(peer))


def inode_pid(inode: str | None) -> int | None:
    """The process holding socket ``inode``, or ``None``."""
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and target in _links(proc / "fd"):
            return int(proc.name)
    return None


def _links(fds: Path) -> set[str]:
    """What a process's descriptors point at (those still open while read)."""
    found: set[str] = set()
    try:
        names = list(fds.iterdir())
    except OSError:
        return found  # gone, or not ours to read
    for fd in names:
        with contextlib.suppress(OSError):  # closed meanwhile
            found.add(os.readlink(fd))
    return found
