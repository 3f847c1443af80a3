"""A recording OpenFlow relay: what an Open vSwitch bridge was sent, per client connection,
with the time and the process that sent it (the switch's side of the write history).

Open vSwitch keeps no such log, so the relay stands in front of a bridge's management
endpoint (the inventory names the relay instead) and reads every message both ways, with
its own parsing of the few fields it needs (no driver code: the history must not trust
what it tests):

- from the client: FLOW_MOD and GROUP_MOD (OpenFlow 1.0 and 1.3), ROLE_REQUEST (1.3, with
  its generation id), ONF bundle control and add messages (1.3) and the 1.4 bundle types;
- from the switch: ERROR, matched by xid to the client message it refuses (a FLOW_MOD on
  a connection that lost mastership is answered ``IS_SLAVE``: fenced, never applied).

``on_record`` (optional) is called with each record before its message is handed over: a
test acts at a precise point of a replica's work (e.g. stops it at its first write).

``Record.parent`` is the connecting process's parent: a replica that runs a tool per call
(``dpctl``) is the tool's parent.

``Record.write`` says whether a record changed the switch's tables: a FLOW_MOD or GROUP_MOD
outside a bundle, or a bundle COMMIT, not refused. ``t`` is the wall clock when the message
was handed to the switch.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from emulators.writelog import inode_pid, socket_inode

HEADER = struct.Struct("!BBHI")  # version, type, length, xid
OF10, OF13 = 0x01, 0x04
ERROR, EXPERIMENTER, FLOW_MOD, GROUP_MOD, ROLE_REQUEST = 1, 4, 14, 15, 24
BUNDLE_CONTROL, BUNDLE_ADD = 33, 34  # OpenFlow 1.4+
ONF = 0x4F4E4600
ONF_BUNDLE_CONTROL, ONF_BUNDLE_ADD = 2300, 2301
COMMIT_REQUEST = 4  # ONF_BCT_COMMIT_REQUEST / OFPBCT_COMMIT_REQUEST
ROLES = {0: "nochange", 1: "equal", 2: "master", 3: "slave"}
CHUNK = 65536


@dataclass(slots=True, kw_only=True)
class Record:
    """One client message the switch was handed (mutable: an ERROR may refuse it later)."""

    t: float
    device: str
    conn: int  # the relay's connection number, in accept order
    pid: int | None  # the process that opened the connection (loopback, via /proc)
    xid: int
    kind: str  # flow_mod, group_mod, role_request, bundle_add, bundle_control
    detail: str  # the command, role and generation, or bundle control type
    refused: str | None = None  # "type/code" of the ERROR that answered it
    parent: int | None = None  # ``pid``'s parent when the connection was accepted

    @property
    def write(self) -> bool:
        """It changed the switch's tables (a write outside a bundle, or a commit)."""
        changes = self.kind in ("flow_mod", "group_mod") or self.detail == "commit"
        return changes and self.refused is None


def classify(msg: bytes) -> tuple[str, str] | None:
    """(kind, detail) of a client message the history keeps, or ``None``."""
    version, kind = msg[0], msg[1]
    if kind == FLOW_MOD:
        offset, fmt = (56, "!H") if version == OF10 else (25, "!B")
        command = struct.unpack_from(fmt, msg, offset)[0] if len(msg) > offset + 1 else -1
        return "flow_mod", f"command {command}"
    if kind == GROUP_MOD and version != OF10:
        return "group_mod", f"command {struct.unpack_from('!H', msg, 8)[0]}"
    if kind == ROLE_REQUEST and version != OF10 and len(msg) >= 24:
        role, generation = struct.unpack_from("!I4xQ", msg, 8)
        return "role_request", f"{ROLES.get(role, role)} generation {generation}"
    if kind == EXPERIMENTER and version != OF10 and len(msg) >= 24:
        experimenter, exp_type = struct.unpack_from("!II", msg, 8)
        if experimenter == ONF and exp_type in (ONF_BUNDLE_CONTROL, ONF_BUNDLE_ADD):
            return _bundle(exp_type == ONF_BUNDLE_CONTROL, msg, 20)
    if kind in (BUNDLE_CONTROL, BUNDLE_ADD) and len(msg) >= 16:
        return _bundle(kind == BUNDLE_CONTROL, msg, 12)
    return None


def _bundle(control: bool, msg: bytes, type_at: int) -> tuple[str, str]:
    if not control:
        return "bundle_add", ""
    ctrl = struct.unpack_from("!H", msg, type_at)[0]
    return "bundle_control", "commit" if ctrl == COMMIT_REQUEST else f"type {ctrl}"


def split(buffer: bytearray) -> list[bytes]:
    """The whole OpenFlow messages at the front of ``buffer`` (removed from it)."""
    out = []
    while len(buffer) >= HEADER.size:
        length = HEADER.unpack_from(buffer)[2]
        if length < HEADER.size or len(buffer) < length:
            break
        out.append(bytes(buffer[:length]))
        del buffer[:length]
    return out


def _upstream(target: str) -> socket.socket:
    if target.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(target.removeprefix("unix:"))
        return sock
    host, port = target.removeprefix("tcp:").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=2)


def parent_pid(pid: int | None) -> int | None:
    """The parent of process ``pid`` (``None``: gone, or none). A tool run once per call
    (the OpenFlow 1.0 ``dpctl``) opens the connection: its parent is the replica that ran
    it, read while the tool still lives (at accept)."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])  # the command may hold spaces, ")"


@dataclass(slots=True)
class _Conn:
    number: int
    pid: int | None
    parent: int | None = None
    sent: dict[int, Record] = field(default_factory=dict)  # xid -> the last record


class RecordingRelay:
    """127.0.0.1:``port`` -> ``target`` (``unix:PATH`` or ``tcp:HOST:PORT``) for the switch
    ``device``, keeping every ``Record`` in ``records`` (thread-safe to read a copy of)."""

    def __init__(self, device: str, target: str) -> None:
        self.device = device
        self.target = target
        self.records: list[Record] = []
        self.on_record: Callable[[Record], None] | None = None  # before it is handed over
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._socks: list[socket.socket] = []
        self._conns = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        """What the inventory names instead of the bridge."""
        return f"tcp:127.0.0.1:{self.port}"

    def snapshot(self) -> list[Record]:
        with self._lock:
            return list(self.records)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, (host, port) = self._server.accept()
            except OSError:
                return
            pid = inode_pid(socket_inode(f"{host}:{port}"), newest_first=True)
            parent = parent_pid(pid)
            try:
                up = _upstream(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += 1
                conn = _Conn(self._conns, pid, parent)
                self._socks += [client, up]
            threading.Thread(target=self._forward, args=(client, up, conn), daemon=True).start()
            threading.Thread(target=self._answers, args=(up, client, conn), daemon=True).start()

    def _forward(self, client: socket.socket, up: socket.socket, conn: _Conn) -> None:
        """Client -> switch: each message recorded as it is handed over."""
        buffer = bytearray()
        with contextlib.suppress(OSError):
            while data := client.recv(CHUNK):
                buffer += data
                for msg in split(buffer):
                    self._record(msg, conn)
                    up.sendall(msg)
        self._close(client, up)

    def _record(self, msg: bytes, conn: _Conn) -> None:
        found = classify(msg)
        if found is None:
            return
        xid = HEADER.unpack_from(msg)[3]
        record = Record(
            t=time.time(), device=self.device, conn=conn.number, pid=conn.pid,
            xid=xid, kind=found[0], detail=found[1], parent=conn.parent,
        )  # fmt: skip
        with self._lock:
            self.records.append(record)
            conn.sent[xid] = record
        if self.on_record is not None:
            self.on_record(record)

    def _answers(self, up: socket.socket, client: socket.socket, conn: _Conn) -> None:
        """Switch -> client: an ERROR marks the message it answers refused."""
        buffer = bytearray()
        with contextlib.suppress(OSError):
            while data := up.recv(CHUNK):
                buffer += data
                for msg in split(buffer):
                    if msg[1] == ERROR and len(msg) >= 12:
                        self._refused(conn, HEADER.unpack_from(msg)[3], msg)
                    client.sendall(msg)
        self._close(client, up)

    def _refused(self, conn: _Conn, xid: int, msg: bytes) -> None:
        err_type, code = struct.unpack_from("!HH", msg, 8)
        with self._lock:
            record = conn.sent.get(xid)
            if record is not None:
                record.refused = f"{err_type}/{code}"

    def _close(self, *socks: socket.socket) -> None:
        """End a connection both ways (the other direction's thread sees it end) and free its
        descriptors: a tool run per call (dpctl) opens hundreds of connections a minute."""
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        with self._lock:
            self._socks = [s for s in self._socks if s not in socks]

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()
