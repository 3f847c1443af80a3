"""A driver's connection to a device that restarts: opened again when it was lost, with
backoff bounded by the device's timeout. Shared by the drivers that hold a connection
(``ovs``: an OpenFlow channel; ``p4runtime``: its arbitration stream).

``Reconnecting(device, connect, alive, timeout)`` keeps one connection. ``get()`` returns
it while ``alive(conn)``; once lost (the switch restarted, its daemon died) the next
``get()`` calls ``connect()`` again: at once, then after 50 ms, doubling up to 1 s,
until it succeeds or ``timeout`` has passed since the first attempt (then the last
``DeviceUnreachable`` / ``DeviceTimeout`` is raised, saying for how long it tried). One
attempt at a time, shared: every caller meanwhile gets its outcome (a caller that gives
up, its own deadline passed, does not cancel it for the others), so no request waits
longer than one attempt, however many are made at once. An error that is not about reaching the
device (``DeviceRejected``: another datapath id, not the primary) is raised at once.

A connection whose reopening failed half-way (``connect`` raised after the transport came
up: a P4Runtime server back without its pipeline refuses with PIPELINE_MISMATCH after the
arbitration stream opened) is never handed out: the next ``get()`` tries ``connect()``
again, so a device whose pipeline is put back is used again without a restart.

Nothing is retried here but the connection: a request that was in flight when the device
went fails, as it must (its outcome is the caller's to read back). For health reports:
``down_since`` says since when the device has not been usable (None while it is; set by a
loss or a failed reconnect, cleared by the next connection), ``last_error`` why, and
``connections`` counts the connections made (one more after every restart of the device:
a tracker compares it to find restarts it did not see).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from drivers.errors import DeviceTimeout, DeviceUnreachable, DriverError

log = logging.getLogger("reroute.drivers")
C = TypeVar("C")
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 1.0


class Reconnecting(Generic[C]):
    def __init__(
        self,
        device: str,
        connect: Callable[[], Awaitable[C]],
        alive: Callable[[C], bool],
        timeout: float,
    ) -> None:
        self.device = device
        self.timeout = timeout
        self.down_since: float | None = None  # time.time() of the loss, while down
        self.last_error: DriverError | None = None  # why the last reconnect failed
        self.connections = 0  # made so far (``set`` and every reconnect)
        self._connect = connect
        self._alive = alive
        self._conn: C | None = None
        self._usable = False  # False after a failed reconnect: ``get`` connects again
        self._attempt: asyncio.Future[C] | None = None  # the reconnect under way

    @property
    def current(self) -> C | None:
        """The connection as it is (None before the first one), alive or not."""
        return self._conn

    def set(self, conn: C) -> None:
        """Take ``conn`` (opened by the caller) as the connection."""
        self._conn = conn
        self._up()

    def _up(self) -> None:
        self._usable = True
        self.down_since = None
        self.last_error = None
        self.connections += 1

    def forget(self) -> C | None:
        """Drop the connection (the caller closes it); ``get`` will not reopen it, and a
        reconnect under way is cancelled."""
        conn, self._conn = self._conn, None
        if self._attempt is not None and not self._attempt.done():
            self._attempt.cancel()
        return conn

    async def get(self) -> C:
        """The connection, opened again if it was lost (see the module docstring)."""
        conn = self._conn
        if conn is None:
            raise DeviceUnreachable(self.device, "not connected (call open() first)")
        if self._usable and self._alive(conn):
            return conn
        if self._attempt is None or self._attempt.done():
            self._usable = False
            self._attempt = asyncio.ensure_future(self._reopen())
            self._attempt.add_done_callback(_retrieved)
        return await asyncio.shield(self._attempt)

    async def _reopen(self) -> C:
        try:
            conn = await self._again()
        except DriverError as exc:
            self.last_error = exc
            raise
        if self._conn is None:  # forgotten (closed) meanwhile
            raise DeviceUnreachable(self.device, "closed while reconnecting")
        self._conn = conn
        return conn

    async def _again(self) -> C:
        if self.down_since is None:
            self.down_since = time.time()
            log.warning("%s: connection lost; reconnecting", self.device)
        started = time.monotonic()
        pause = FIRST_PAUSE_S
        while True:
            try:
                conn = await self._connect()
            except (DeviceUnreachable, DeviceTimeout) as exc:
                waited = time.monotonic() - started
                if waited + pause > self.timeout:
                    raise type(exc)(
                        self.device,
                        f"{str(exc).removeprefix(f'{self.device}: ')} (reconnecting for "
                        f"{waited:.1f} s, within its timeout of {self.timeout:g} s)",
                    ) from exc
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_S)
                continue
            log.warning(
                "%s: reconnected after %.1f s down", self.device, time.time() - self.down_since
            )
            self._up()
            return conn


def _retrieved(attempt: asyncio.Future[Any]) -> None:
    """Mark an attempt's error seen (every caller may have given up waiting for it)."""
    if not attempt.cancelled():
        attempt.exception()
