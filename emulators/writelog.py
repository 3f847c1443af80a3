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
it); ``pid`` is the process owning the peer's socket, found once per connection in
``/proc`` (Linux, same network namespace), ``null`` when not found.
"""

from __future__ import annotations

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
        self._pids: dict[str, int | None] = {}

    @classmethod
    def from_env(cls, device: str) -> WriteLog | None:
        """A log for ``device`` if ``REROUTE_WRITE_LOG`` is set, else ``None``."""
        path = os.environ.get(ENV)
        return cls(Path(path), device) if path else None

    def write(self, peer: str, what: str, device: str | None = None, **extra: object) -> None:
        """Record one applied write from ``peer`` (``host:port``), on ``device`` (default:
        the log's; a controller emulator names its switch)."""
        if peer not in self._pids:
            self._pids[peer] = peer_pid(peer)
        line = {"t": time.time(), "device": device or self.device, "peer": peer}
        line |= {"pid": self._pids[peer], "what": what, **extra}
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


def _hex_endpoint(peer: str) -> str | None:
    """``127.0.0.1:51234`` -> ``0100007F:C822`` as ``/proc/net/tcp`` writes it."""
    host, _, port = peer.rpartition(":")
    parts = host.strip("[]").split(".")
    if len(parts) != 4 or not port.isdigit():
        return None
    packed = bytes(int(p) for p in parts)[::-1].hex().upper()
    return f"{packed}:{int(port):04X}"


def socket_inode(peer: str) -> str | None:
    """The inode of the TCP socket whose local address is ``peer`` (IPv4)."""
    wanted = _hex_endpoint(peer)
    if wanted is None:
        return None
    with open("/proc/net/tcp") as table:
        for row in table.readlines()[1:]:
            fields = row.split()
            if fields[1] == wanted:
                return fields[9]
    return None


def peer_pid(peer: str) -> int | None:
    """The process holding the socket bound to ``peer`` (the other end of a loopback
    connection), or ``None``."""
    inode = socket_inode(peer)
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue  # gone, or not ours to read
    return None
