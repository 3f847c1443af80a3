"""The devices' write history, merged: the EMULATORS' write log (``REROUTE_WRITE_LOG``,
``emulators/writelog.py``) and the recording OpenFlow relays' records
(``tests/e2e/recording.py``), as one time-ordered list of ``checker.Write`` per device.

Which replica made a write: every source names the process that held the connection's
other end (found in ``/proc`` when the connection was first seen, on loopback), and the
test knows each replica's pid (or its parent's, for a tool a replica runs per call, as
``dpctl``: the relay reads the parent when it accepts). A pid no replica has is named
``pid N`` (another client, e.g. the test's own reads; reads are never logged).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.e2e.checker import History, Write
from tests.e2e.recording import Record, RecordingRelay


def _writer(pid: int | None, replicas: Mapping[int, str]) -> str:
    return replicas.get(pid, f"pid {pid}") if pid is not None else "?"


def emulator_writes(
    path: Path, devices: Mapping[str, str], replicas: Mapping[int, str]
) -> list[Write]:
    """The write log's lines for ``devices`` (the log's device name, e.g.
    ``polatis@127.0.0.1:40001``, -> the topology's); other devices' lines are skipped."""
    found = []
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        entry = json.loads(line)
        device = devices.get(entry["device"])
        if device is not None:
            found.append(
                Write(
                    t=entry["t"], device=device, writer=_writer(entry["pid"], replicas),
                    conn=entry["peer"], what=entry["what"],
                )
            )  # fmt: skip
    return found


def relay_writes(relays: Mapping[str, RecordingRelay], replicas: Mapping[int, str]) -> list[Write]:
    """Every relay's records that changed or claimed its switch (refused ones kept, marked):
    ``relays`` maps the topology's device name to its relay."""
    return [
        _relayed(device, r, replicas)
        for device, relay in relays.items()
        for r in relay.snapshot()
        if r.kind != "bundle_add" and (r.kind != "bundle_control" or r.detail == "commit")
    ]


def _relayed(device: str, r: Record, replicas: Mapping[int, str]) -> Write:
    pid = r.parent if r.pid not in replicas and r.parent in replicas else r.pid
    return Write(
        t=r.t, device=device, writer=_writer(pid, replicas), conn=f"of#{r.conn}",
        what=f"{r.kind} {r.detail} xid {r.xid}".strip(), refused=r.refused,
        claim=r.kind == "role_request",
    )  # fmt: skip


def merged(*sources: Iterable[Write]) -> History:
    """One time-ordered history per device."""
    history: dict[str, list[Write]] = {}
    for source in sources:
        for w in source:
            history.setdefault(w.device, []).append(w)
    return {d: sorted(ws, key=lambda w: w.t) for d, ws in sorted(history.items())}
