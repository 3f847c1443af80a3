"""The recording OpenFlow relay against a fake switch: what it records per connection, and
a FLOW_MOD the switch refused (``IS_SLAVE``: fenced) is not a write."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

from tests.e2e.history import relay_writes
from tests.e2e.recording import HEADER, RecordingRelay, classify, split

SLAVE_XID = 7


def msg(version: int, kind: int, xid: int, body: bytes = b"") -> bytes:
    return HEADER.pack(version, kind, HEADER.size + len(body), xid) + body


def flow_mod13(xid: int, command: int = 0) -> bytes:
    return msg(4, 14, xid, bytes(17) + bytes([command]) + bytes(22))


def role13(xid: int, role: int, generation: int) -> bytes:
    return msg(4, 24, xid, struct.pack("!I4xQ", role, generation))


def bundle13(xid: int, ctrl: int) -> bytes:
    return msg(4, 4, xid, struct.pack("!IIIHH", 0x4F4E4600, 2300, 1, ctrl, 0))


def _switch(server: socket.socket) -> None:
    """Answers the FLOW_MOD with xid ``SLAVE_XID`` with BAD_REQUEST/IS_SLAVE, then echoes a
    barrier reply for everything (so the client knows it was handled)."""
    conn, _ = server.accept()
    buffer = bytearray()
    while data := conn.recv(4096):
        buffer += data
        for m in split(buffer):
            xid = HEADER.unpack_from(m)[3]
            if xid == SLAVE_XID:
                conn.sendall(msg(4, 1, xid, struct.pack("!HH", 1, 10) + m[:64]))
            conn.sendall(msg(4, 21, xid))
    conn.close()


def test_the_relay_records_writes_claims_and_refusals() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_switch, args=(server,), daemon=True).start()
    relay = RecordingRelay("br1", f"tcp:127.0.0.1:{server.getsockname()[1]}")
    try:
        client = socket.create_connection(("127.0.0.1", relay.port))
        sent = [role13(1, 2, 5), flow_mod13(2), flow_mod13(SLAVE_XID, 3), bundle13(8, 4)]
        sent += [msg(4, 20, 9)]  # a barrier: not recorded
        client.sendall(b"".join(sent))
        replies = bytearray()
        while len(split(bytearray(replies))) < len(sent) + 1:
            replies += client.recv(4096)
        client.close()
        time.sleep(0.05)
        writes = relay_writes({"br1": relay}, {os.getpid(): "test"})
    finally:
        relay.close()
        server.close()
    assert [(w.writer, w.conn, w.what, w.refused, w.applied) for w in writes] == [
        ("test", "of#1", "role_request master generation 5 xid 1", None, False),
        ("test", "of#1", "flow_mod command 0 xid 2", None, True),
        ("test", "of#1", f"flow_mod command 3 xid {SLAVE_XID}", "1/10", False),
        ("test", "of#1", "bundle_control commit xid 8", None, True),
    ]


def test_classify_of10_flow_mod_and_14_bundles() -> None:
    of10 = msg(1, 14, 1, bytes(48) + struct.pack("!H", 3) + bytes(14))
    assert classify(of10) == ("flow_mod", "command 3")
    assert classify(msg(5, 33, 1, struct.pack("!IHH", 1, 4, 0))) == ("bundle_control", "commit")
    assert classify(msg(5, 34, 1, bytes(8))) == ("bundle_add", "")
    assert classify(msg(4, 20, 1)) is None
