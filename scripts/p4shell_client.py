"""A p4runtime-shell client of ``MyIngress.reroute``, for the interop test and the Write
bench. Runs in ``.venv-p4shell`` (p4runtime-shell pins protobuf < 3.21), never imported::

    .venv-p4shell/bin/python scripts/p4shell_client.py ADDRESS ELECTION_ID read
    .venv-p4shell/bin/python scripts/p4shell_client.py ADDRESS ELECTION_ID insert
    .venv-p4shell/bin/python scripts/p4shell_client.py ADDRESS ELECTION_ID bench N

It connects as p4runtime-shell does (``setup``: arbitration with the election id, the
P4Info from the device) and prints one JSON line: ``read`` every entry of the table
(protobuf text, one line each) and whether it is the primary; ``insert`` the entry
``INSERTED`` (ingress port 2, IPv4 to 10.9.9.9, priority 50 -> forward(1)) or the error;
``bench N`` the milliseconds of N inserts (one Write each, as the shell sends them) of
IPv4 host entries 10.8.x.y -> forward(2).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time

import p4runtime_sh.shell as sh
from google.protobuf import text_format

TABLE = "MyIngress.reroute"


def entry(dst: str, port: int, priority: int, in_port: int | None = None) -> object:
    te = sh.TableEntry(TABLE)(action="MyIngress.forward")
    if in_port is not None:
        te.match["standard_metadata.ingress_port"] = f"{in_port}&&&0x1ff"
    te.match["hdr.ipv4.$valid$"] = "1&&&1"
    te.match["hdr.ipv4.dstAddr"] = f"{dst}&&&255.255.255.255"
    te.action["port"] = str(port)
    te.priority = priority
    return te


def read() -> dict[str, object]:
    entries = [
        text_format.MessageToString(te.msg(), as_one_line=True)
        for te in sh.TableEntry(TABLE).read()
    ]
    return {"entries": entries}


def insert() -> dict[str, object]:
    try:
        entry("10.9.9.9", 1, 50, in_port=2).insert()  # type: ignore[attr-defined]
    except Exception as exc:  # p4runtime-shell's errors: report, do not crash
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True}


def bench(n: int) -> dict[str, object]:
    entries = [entry(f"10.8.{i >> 8}.{i & 0xFF}", 2, 100) for i in range(n)]
    start = time.perf_counter()
    for te in entries:
        te.insert()  # type: ignore[attr-defined]
    return {"ms": (time.perf_counter() - start) * 1000, "n": n}


def main(argv: list[str]) -> int:
    address, election, command, *rest = argv
    with contextlib.redirect_stdout(io.StringIO()) as said:
        sh.setup(device_id=1, grpc_addr=address, election_id=(0, int(election)))
    try:
        primary = "not the primary" not in said.getvalue()
        if command == "read":
            out = read()
        elif command == "insert":
            out = insert()
        else:
            out = bench(int(rest[0]))
        out["primary"] = primary
    finally:
        sh.teardown()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
