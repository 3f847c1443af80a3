"""Reaching devices in a degraded fabric: every call with a deadline, devices opened in the
background, and the set a reroute needs told apart from the rest.

- ``Devices``: the drivers of an inventory as a mapping, some of them perhaps not connected
  yet. ``open_all`` opens every device at once, each within its own timeout, and waits for
  them at most ``device_timeout_s``; a device not open by then goes on being opened in the
  background (again after a failure, backoff up to ``RETRY_MAX_S``) until it opens or the
  set is closed. Until then ``unready(name)`` is the error it last gave and no call
  reaches its driver.
- ``ask`` / ``ask_each``: one call per device bounded by a deadline; a device that does not
  answer in time is a ``DeviceTimeout`` ("hung"), one that is not connected its last error.
  ``ask_each`` asks several at once and returns the answers and the errors apart, so a
  device elsewhere being down, hung or slow costs the others nothing.
- ``what_it_did``: an error as the few words a refusal names (refused / timed out / no
  pipeline ...).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TypeVar

from drivers.base import CrossConnectSwitch, FlowProgrammer, Session
from drivers.errors import DeviceRejected, DeviceTimeout, DeviceUnreachable, DriverError

log = logging.getLogger("reroute.devices")
T = TypeVar("T")
Driver = FlowProgrammer | CrossConnectSwitch
DEVICE_TIMEOUT_S = 2.0  # the inventory's default device_timeout_s: one read at plan time
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0


class Devices(Mapping[str, Driver]):
    """The drivers of the devices in scope, opened or still being opened (see the module
    docstring). ``open(name)`` is the driver's open bounded by its timeout."""

    def __init__(
        self,
        drivers: Mapping[str, Session],
        open_one: Callable[[str, Session], Awaitable[None]],
    ) -> None:
        self._drivers = dict(drivers)
        self._open_one = open_one
        self._waiting: dict[str, DriverError] = {}
        self._since: dict[str, float] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._typed: dict[str, Driver] = {}  # checked once: a protocol isinstance is slow

    def __getitem__(self, name: str) -> Driver:
        typed = self._typed.get(name)
        if typed is None:
            driver = self._drivers[name]
            assert isinstance(driver, FlowProgrammer | CrossConnectSwitch), driver
            typed = self._typed[name] = driver
        return typed

    def __iter__(self) -> Iterator[str]:
        return iter(self._drivers)

    def __len__(self) -> int:
        return len(self._drivers)

    def unready(self, name: str) -> DriverError | None:
        """The error device ``name`` gave when it was last opened, while it is not open."""
        return self._waiting.get(name)

    def down_since(self, name: str) -> float | None:
        """Since when (``time.time()``) device ``name`` has failed to open, while it has."""
        return self._since.get(name) if name in self._waiting else None

    async def open_all(self, *, background: bool, wait: float = DEVICE_TIMEOUT_S) -> None:
        """Open every device at once, each within its timeout. ``background``: wait at most
        ``wait`` seconds; a device not open by then (or that failed) goes on being opened
        in the background, its error kept for ``unready``. Else the first failure is raised
        (after closing every device opened)."""
        if not background:
            await self._open_strictly()
            return
        now = time.time()
        for name in self._drivers:
            self._waiting[name] = DeviceUnreachable(name, "being opened")
            self._since[name] = now
            self._tasks[name] = asyncio.create_task(self._bring_up(name), name=f"open {name}")
        await asyncio.wait(list(self._tasks.values()), timeout=wait)
        for name, error in self._waiting.items():
            if error.args == (f"{name}: being opened",):  # no answer yet: hung or cut off
                self._waiting[name] = error = DeviceTimeout(
                    name, f"no answer in {wait:g} s (still being opened)"
                )
            log.warning("%s: not open yet, opening in the background: %s", name, error)

    async def _open_strictly(self) -> None:
        names = list(self._drivers)
        results = await asyncio.gather(
            *(self._open_one(n, self._drivers[n]) for n in names), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await self.close()
            raise failed[0]

    async def _bring_up(self, name: str) -> None:
        """Open device ``name``, again and again (backoff) until it opens."""
        pause = RETRY_FIRST_S
        while True:
            try:
                await self._open_one(name, self._drivers[name])
            except DriverError as exc:
                self._waiting[name] = exc
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_S)
                continue
            del self._waiting[name]
            self._since.pop(name, None)
            self._tasks.pop(name, None)
            log.info("%s: opened", name)
            return

    async def close(self) -> None:
        """Stop opening and close every driver (errors of closing are not raised)."""
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        await asyncio.gather(*(d.close() for d in self._drivers.values()), return_exceptions=True)


def unready(drivers: Mapping[str, object], name: str) -> DriverError | None:
    """Why device ``name`` of ``drivers`` cannot be asked now (None: it can)."""
    return drivers.unready(name) if isinstance(drivers, Devices) else None


async def ask(
    drivers: Mapping[str, object], name: str, call: Callable[[], Awaitable[T]], timeout: float
) -> T:
    """``call()`` on device ``name`` within ``timeout`` seconds: its answer, or a
    DriverError (``DeviceTimeout`` when it does not answer in time)."""
    error = unready(drivers, name)
    if error is not None:
        raise error
    try:
        return await asyncio.wait_for(call(), timeout)
    except TimeoutError:
        since = getattr(drivers.get(name), "down_since", None)
        if isinstance(since, float):  # its connection was lost: it refuses, it is not hung
            raise DeviceUnreachable(
                name,
                f"connection lost {time.time() - since:.1f} s ago, reconnecting (no answer "
                f"within {timeout:g} s)",
            ) from None
        raise DeviceTimeout(name, f"no answer in {timeout:g} s") from None


async def ask_each(
    drivers: Mapping[str, object],
    calls: Mapping[str, Callable[[], Awaitable[T]]],
    timeout: float,
) -> tuple[dict[str, T], dict[str, DriverError]]:
    """Every call at once, each on its device within ``timeout``: the answers and, apart,
    the errors of the devices that failed (any other exception is raised)."""
    names = list(calls)
    results = await asyncio.gather(
        *(ask(drivers, n, calls[n], timeout) for n in names), return_exceptions=True
    )
    answers: dict[str, T] = {}
    errors: dict[str, DriverError] = {}
    for name, result in zip(names, results, strict=True):
        if isinstance(result, DriverError):
            errors[name] = result
        elif isinstance(result, BaseException):
            raise result
        else:
            answers[name] = result
    return answers, errors


def what_it_did(exc: DriverError) -> str:
    """What a device did, in a few words, then its error: for refusals and health."""
    text = str(exc).removeprefix(f"{exc.device}: ")
    if isinstance(exc, DeviceRejected) and exc.code == "PIPELINE_MISMATCH":
        return f"has no pipeline ({text})"
    if isinstance(exc, DeviceTimeout):
        return f"timed out ({text})"
    if isinstance(exc, DeviceUnreachable):
        return f"is unreachable ({text})"
    return f"failed ({text})"
