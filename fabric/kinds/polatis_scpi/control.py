"""The fabric's own road to its Polatis emulators, for the fabric, the experiments and the
benches: the cross-connects as they stand, the lock model (``:EMUL:LOCK``, emulator-only
SCPI) and the lock times it last drew, each a short TCP exchange with the emulator's SCPI
port (``FabricState.scpi``) under a deadline.

Not the service's road to a switch: that is ``drivers/polatis_scpi``, which the emulator is
tested against (so this module shares none of its code). The cross-connects' answer is read
by the emulator's own parser. A failure (no answer, a refused connection, a reply of another
shape) is a ``FabricError`` naming the port.
"""

from __future__ import annotations

import socket

from emulators.polatis.emulator import STATE_QUERY, read_connections
from fabric.errors import FabricError

TIMEOUT_S = 3.0


def ask(port: int, query: str, timeout_s: float = TIMEOUT_S) -> str:
    """The emulator's one-line answer to ``query`` (an SCPI query, or commands ending in one:
    ``*OPC?``)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
            conn.sendall(f"{query}\n".encode())
            reply = conn.makefile().readline()
    except OSError as exc:
        raise FabricError(f"Polatis emulator on port {port}: {query!r}: {exc}") from exc
    if not reply.endswith("\n"):
        raise FabricError(f"Polatis emulator on port {port}: {query!r}: no answer")
    return reply.strip()


def connections(port: int) -> dict[int, int]:
    """The cross-connects, ingress -> egress."""
    reply = ask(port, STATE_QUERY)
    try:
        return read_connections(reply)
    except Exception as exc:  # the emulator's parser raises its own SCPI fault
        raise FabricError(f"Polatis emulator on port {port}: cross-connects {reply!r}") from exc


def drawn_locks(port: int) -> dict[int, float]:
    """The lock time (ms) the emulator last drew, by egress port (``inf``: LOCK NEVer)."""
    reply = ask(port, ":EMUL:LOCK?")
    try:
        return parse_lock_reply(reply)
    except ValueError as exc:
        raise FabricError(f"Polatis emulator on port {port}: {exc}") from exc


def set_lock(port: int, lock_ms: float | None) -> None:
    """The emulator's lock model from now on: every lock ``lock_ms``, or (None) each drawn
    from seed 003 Table 4.3 (``DEFault``)."""
    command = "DEFault" if lock_ms is None else f"{lock_ms:g}"
    reply = ask(port, f":EMUL:LOCK {command}\n*OPC?")
    if reply != "1":
        raise FabricError(f"Polatis emulator on port {port}: :EMUL:LOCK {command}: {reply!r}")


def parse_lock_reply(reply: str) -> dict[int, float]:
    """The ``:EMUL:LOCK?`` answer ``(@19,18),(612,531)``: the lock time last drawn, by egress
    port (``INF`` for LOCK NEVer). ValueError if it is not that shape."""
    ports, sep, times = reply.strip().removeprefix("(@").removesuffix(")").partition("),(")
    if not sep:
        raise ValueError(f"unexpected :EMUL:LOCK? reply {reply!r}")
    if not ports:
        return {}
    return {int(p): float(t) for p, t in zip(ports.split(","), times.split(","), strict=True)}
