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


Endpoint = tuple[str, int]  # (address, port), an IPv4-mapped IPv6 address as IPv4


def _endpoint(text: str) -> Endpoint | None:
    """``host:port`` as the write log is handed it (``[v6]:port``, ``ipv4:a.b.c.d:port``)."""
    host, _, port = text.rpartition(":")
    try:
        address = ipaddress.ip_address(host.strip("[]").removeprefix("ipv4:"))
    except ValueError:
        return None
    return (_plain(address), int(port)) if port.isdigit() else None


def _plain(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def _hex_endpoint(text: str) -> Endpoint:
    """``/proc/net/tcp{,6}``'s ``ADDR:PORT``: the address in 32-bit words, each in host
    order (little-endian here), the port in hex."""
    address, _, port = text.partition(":")
    raw = bytes.fromhex(address)
    packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return _plain(ipaddress.ip_address(packed)), int(port, 16)


def _sockets() -> list[tuple[Endpoint, Endpoint, str]]:
    """(local, remote, inode) of every TCP socket in this network namespace."""
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/net/{table}") as rows:
            for row in rows.readlines()[1:]:
                fields = row.split()
                found.append((_hex_endpoint(fields[1]), _hex_endpoint(fields[2]), fields[9]))
    return found


def socket_inode(peer: str) -> str | None:
    """The inode of the TCP socket whose local address is ``peer`` and whose other end is
    a socket of this process (the device's side of the connection). Linux hands one
    ephemeral port to several connections with other destinations, and a closed one
    lingers in TIME_WAIT (inode 0): the local address alone can name another process's
    socket."""
    wanted = _endpoint(peer)
    if wanted is None:
        return None
    sockets = _sockets()
    mine = {link.removeprefix("socket:[").rstrip("]") for link in _links(Path("/proc/self/fd"))}
    ours = {local for local, remote, inode in sockets if remote == wanted and inode in mine}
    return next(
        (
            inode
            for local, remote, inode in sockets
            if local == wanted and inode != "0" and (not ours or remote in ours)
        ),
        None,
    )


def peer_pid(peer: str) -> int | None:
    """The process holding the socket bound to ``peer`` (the other end of a loopback
    connection), or ``None``."""
    return inode_pid(socket_inode(peer))


def inode_pid(inode: str | None, newest_first: bool = False) -> int | None:
    """The process holding socket ``inode``, or ``None``; ``newest_first``: the highest pid
    holding it (a tool run per call, that may exit soon after it connected)."""
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    pids = sorted((int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()),
                  reverse=newest_first)  # fmt: skip
    return next((pid for pid in pids if target in _links(Path(f"/proc/{pid}/fd"))), None)


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
