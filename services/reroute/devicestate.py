"""Each device's state, known all the time: probed within its deadline, transitions published.

    State         what the last probe found
    unknown       not probed yet
    up            it answered (``identify``) and holds the rules the journal expects on it
    down          it cannot be reached: refused, unreachable, its connection lost and not
                  made again (``DeviceUnreachable``; a probe that timed out while its driver
                  was reconnecting)
    hung          connected but silent: no answer within its deadline (``DeviceTimeout``,
                  or the probe's own deadline on a connection its driver holds)
    no_pipeline   a P4 target that runs no program (or not ours): ``PIPELINE_MISMATCH``
    out_of_sync   it answers but lacks rules the journal expects there (a cold restart
                  emptied its tables)

``DeviceTracker.probe(name)`` asks one device now: ``identify()`` (its driver answers or
fails within the device's timeout; the probe gives up at ``SLACK`` x timeout), then, when
it answered after it had not (or for the first time), after its driver made a new
connection meanwhile (``connections`` grew: it restarted between two probes),
or while it is out of sync, its rules (ours, by cookie) read back and compared with
``expected(name)``: fewer of ours than expected, and some of them gone, is ``out_of_sync``
(as many as expected, on other paths, is a placement another writer with another journal
made: a resync must not move its traffic back). ``start()`` probes every
device every half timeout, so a device that stops answering is reported within
``1.75 x timeout`` of its last answer (its driver's own liveness, OpenFlow ECHO or gRPC
keepalive, ends a dead connection meanwhile).

``subscribe(callback)``: ``callback(transition)`` for every change of state (a callback
that returns an awaitable is run as a task). ``Transition.came_back``: the device answers
again after it had not; ``Transition.restored``: it is ``up`` again (back and in sync, after
a resync where one was needed) -- the moment to clean what a reroute left on it.

The state machine is ``advance`` (pure, time passed in); the tracker only probes and keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from drivers.base import CrossConnectSwitch, FlowProgrammer, FlowRule
from drivers.errors import DeviceRejected, DeviceTimeout, DeviceUnreachable, DriverError
from services.reroute.engine.executor import Driver
from services.reroute.errors import RerouteError
from services.reroute.reach import unready
from services.reroute.rules import DEFAULT_SPACE, CookieSpace
from services.reroute.tables import RuleKey, tables_from

log = logging.getLogger("reroute.devices")
DEFAULT_TIMEOUT_S = 2.0
SLACK = 1.25  # a probe's own deadline, x timeout: the driver's deadline (and error) first
Expected = Callable[[str], Mapping[RuleKey, FlowRule] | None]  # None: nothing to check
Listener = Callable[["Transition"], Awaitable[None] | None]


class State(StrEnum):
    UNKNOWN = "unknown"
    UP = "up"
    DOWN = "down"
    HUNG = "hung"
    NO_PIPELINE = "no_pipeline"
    OUT_OF_SYNC = "out_of_sync"

    @property
    def answering(self) -> bool:
        """The device answers requests (it may still lack our rules)."""
        return self in (State.UP, State.OUT_OF_SYNC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """What one probe found."""

    state: State
    error: str = ""  # why it is not up ('' when up)
    detail: str = ""  # what it says it is, when it answered


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceStatus:
    name: str
    kind: str
    state: State
    since: float  # time.time() it entered ``state``
    error: str  # the last probe's error ('' when up)
    detail: str  # what it said it is (its last answer)
    checked: float  # time.time() of the last probe (0: never)

    @property
    def up(self) -> bool:
        return self.state is State.UP


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    device: str
    old: State
    new: State
    at: float
    error: str

    @property
    def came_back(self) -> bool:
        """It answers again after it had not (not on the first probe)."""
        return self.new.answering and not self.old.answering and self.old is not State.UNKNOWN

    @property
    def restored(self) -> bool:
        """It is up again after it was not (back and in sync); not on the first probe."""
        return self.new is State.UP and self.old is not State.UNKNOWN


def unknown(name: str, kind: str) -> DeviceStatus:
    """A device before its first probe."""
    return DeviceStatus(
        name=name, kind=kind, state=State.UNKNOWN, since=0.0, error="", detail="", checked=0.0
    )


def advance(
    status: DeviceStatus, found: Finding, now: float
) -> tuple[DeviceStatus, Transition | None]:
    """The status after a probe found ``found`` at ``now``, and the transition (None: the
    same state; its error and detail are updated all the same)."""
    detail = found.detail or status.detail
    if found.state is status.state:
        return replace(status, error=found.error, detail=detail, checked=now), None
    moved = Transition(
        device=status.name, old=status.state, new=found.state, at=now, error=found.error
    )
    new = replace(
        status, state=found.state, since=now, error=found.error, detail=detail, checked=now
    )
    return new, moved


def classify(exc: BaseException, reconnecting: bool, timeout: float) -> Finding:
    """The state an error of a probe means; ``reconnecting``: the driver has lost its
    connection (its ``down_since`` is set)."""
    if isinstance(exc, TimeoutError):
        if reconnecting:
            return Finding(state=State.DOWN, error=f"connection lost; no answer in {timeout:g} s")
        return Finding(state=State.HUNG, error=f"connected, but no answer in {timeout:g} s")
    text = str(exc).removeprefix(f"{exc.device}: ") if isinstance(exc, DriverError) else str(exc)
    if isinstance(exc, DeviceRejected) and exc.code == "PIPELINE_MISMATCH":
        return Finding(state=State.NO_PIPELINE, error=text)
    if isinstance(exc, DeviceTimeout):
        return Finding(state=State.HUNG, error=text)
    if isinstance(exc, DeviceUnreachable):
        return Finding(state=State.DOWN, error=text)
    return Finding(state=State.DOWN, error=text or type(exc).__name__)


async def ask(driver: object, space: CookieSpace = DEFAULT_SPACE) -> str:
    """One cheap request that needs an answer: ``identify`` (a round trip on every driver
    that has it: FEATURES, ``*IDN?``, Capabilities, a GET); else a read."""
    identify = getattr(driver, "identify", None)
    if identify is not None:
        return str((await identify()).summary)
    if isinstance(driver, FlowProgrammer):
        await driver.read(cookie=space.base, cookie_mask=space.mask)
    elif isinstance(driver, CrossConnectSwitch):
        await driver.connections()
    return ""


def missing(want: Mapping[RuleKey, FlowRule], have: Iterable[FlowRule]) -> int:
    """How many of the rules ``want`` the table ``have`` has no entry for at all (a table
    lost). An entry there with other actions is not counted: the flow is on another path
    than the journal says (a writer with another journal, a reroute under way), which a
    resync must not undo behind its back."""
    table = tables_from({"_": list(have)}).get("_", {})
    return sum(1 for key in want if key not in table)


class DeviceTracker:
    """Every device's state (module docstring). ``timeouts``: each device's deadline."""

    def __init__(
        self,
        drivers: Mapping[str, Driver],
        *,
        timeouts: Mapping[str, float] | None = None,
        kinds: Mapping[str, str] | None = None,
        expected: Expected | None = None,
        clock: Callable[[], float] = time.time,
        space: CookieSpace = DEFAULT_SPACE,
    ) -> None:
        self.drivers = drivers
        self.space = space  # the deployment's cookies: which rules are ours
        self.timeouts = dict(timeouts or {})
        self.expected = expected
        self.clock = clock
        kinds = kinds or {}
        self._status = {n: unknown(n, kinds.get(n, type(d).__name__)) for n, d in drivers.items()}
        self._connections: dict[str, int | None] = {}  # at the last sync check
        self._locks = {n: asyncio.Lock() for n in drivers}
        self._listeners: list[Listener] = []
        self._tasks: set[asyncio.Future[None]] = set()
        self._watchers: list[asyncio.Task[None]] = []
        self._probing: dict[str, asyncio.Future[DeviceStatus]] = {}
        self._changed = asyncio.Event()

    # ----------------------------------------------------------------------------------
    # reading

    def status(self, name: str) -> DeviceStatus:
        return self._status[name]

    def statuses(self) -> list[DeviceStatus]:
        """Every device's status, by name."""
        return [self._status[n] for n in sorted(self._status)]

    def not_up(self) -> list[DeviceStatus]:
        """The devices probed and found not up."""
        return [s for s in self.statuses() if s.state not in (State.UP, State.UNKNOWN)]

    @property
    def running(self) -> bool:
        """The periodic probes run (``start``)."""
        return bool(self._watchers)

    # ----------------------------------------------------------------------------------
    # transitions

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every transition from now on; returns the unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    async def wait_for(self, name: str, states: Iterable[State], timeout: float) -> DeviceStatus:
        """Until device ``name`` is in one of ``states`` (TimeoutError after ``timeout``)."""
        wanted = frozenset(states)
        async with asyncio.timeout(timeout):
            while self._status[name].state not in wanted:
                self._changed.clear()
                await self._changed.wait()
        return self._status[name]

    def _publish(self, moved: Transition) -> None:
        log.debug("%s: %s -> %s (%s)", moved.device, moved.old, moved.new, moved.error or "-")
        self._changed.set()
        for listener in list(self._listeners):
            try:
                result = listener(moved)
            except Exception:
                log.exception("%s: a listener of its transitions failed", moved.device)
                continue
            if result is not None:
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Future[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("a listener of device transitions failed: %s", exc, exc_info=exc)

    # ----------------------------------------------------------------------------------
    # probing

    def timeout(self, name: str) -> float:
        return self.timeouts.get(name, DEFAULT_TIMEOUT_S)

    async def probe(self, name: str, *, check_sync: bool = False) -> DeviceStatus:
        """Ask device ``name`` now (module docstring); its status after. A probe under way
        is shared (its answer is as fresh as a new one would be). ``check_sync``: compare
        its rules with the journal's whatever it was before (a probe of its own)."""
        running = self._probing.get(name)
        if check_sync or running is None or running.done():
            running = asyncio.ensure_future(self._probe(name, check_sync))
            self._probing[name] = running
        return await asyncio.shield(running)

    async def _probe(self, name: str, check_sync: bool) -> DeviceStatus:
        async with self._locks[name]:
            found = await self._find(name, check_sync)
            status, moved = advance(self._status[name], found, self.clock())
            self._status[name] = status
        if moved is not None:
            self._publish(moved)
        return status

    def record(self, name: str, found: Finding) -> DeviceStatus:
        """Take ``found`` as device ``name``'s probe now (a failure seen elsewhere: its
        driver could not even be opened)."""
        status, moved = advance(self._status[name], found, self.clock())
        self._status[name] = status
        if moved is not None:
            self._publish(moved)
        return status

    async def probe_all(self) -> list[DeviceStatus]:
        """Every device asked now, at once."""
        await asyncio.gather(*(self.probe(n) for n in self.drivers))
        return self.statuses()

    async def _find(self, name: str, check_sync: bool) -> Finding:
        driver, timeout = self.drivers[name], self.timeout(name)
        not_open = unready(self.drivers, name)  # still being opened (reach.Devices)
        if not_open is not None:
            return classify(not_open, False, timeout * SLACK)
        try:
            async with asyncio.timeout(timeout * SLACK):
                summary = await ask(driver, self.space)
        except Exception as exc:  # every failure is a state to report
            return classify(exc, getattr(driver, "down_since", None) is not None, timeout * SLACK)
        before = self._status[name].state
        again = getattr(driver, "connections", None)
        if check_sync or before is not State.UP or again != self._connections.get(name):
            return await self._sync(name, summary, again)
        return Finding(state=State.UP, detail=summary)

    async def _sync(self, name: str, summary: str, connections: int | None) -> Finding:
        """UP when the device holds every rule the journal expects there, else OUT_OF_SYNC."""
        driver = self.drivers[name]
        try:
            want = self.expected(name) if self.expected is not None else None
        except RerouteError as exc:  # the journal cannot be read now (etcd without quorum):
            log.info("%s: its rules not checked: %s", name, exc)  # checked at the next probe
            return Finding(state=State.UP, detail=summary)
        if not want or not isinstance(driver, FlowProgrammer):
            self._connections[name] = connections
            return Finding(state=State.UP, detail=summary)
        timeout = self.timeout(name)
        try:
            async with asyncio.timeout(timeout * SLACK):
                have = await driver.read(cookie=self.space.base, cookie_mask=self.space.mask)
        except Exception as exc:
            return classify(exc, getattr(driver, "down_since", None) is not None, timeout * SLACK)
        self._connections[name] = connections
        lacking = missing(want, have)
        if not lacking or len(have) >= len(want):  # as many of ours: placed by another view
            return Finding(state=State.UP, detail=summary)
        return Finding(
            state=State.OUT_OF_SYNC,
            detail=summary,
            error=f"{lacking} of the {len(want)} rules the journal expects on it are missing "
            "(restarted with empty tables?)",
        )

    # ----------------------------------------------------------------------------------
    # running

    def start(self) -> None:
        """Probe every device periodically (every half timeout) until ``stop``."""
        if not self._watchers:
            self._watchers = [
                asyncio.create_task(self._watch(n), name=f"probe-{n}") for n in self.drivers
            ]

    async def _watch(self, name: str) -> None:
        """Probe every ``pause`` (half the timeout); a full pause after a probe that found
        it down (its driver reconnecting: room is left for the requests that need it)."""
        pause = max(0.05, self.timeout(name) / 2)
        while True:
            started = asyncio.get_running_loop().time()
            try:
                down = (await self.probe(name)).state is State.DOWN
            except Exception:  # a bug, not a device's state: keep watching the others
                log.exception("%s: probing failed", name)
                down = True
            spent = asyncio.get_running_loop().time() - started
            await asyncio.sleep(pause if down else max(0.0, pause - spent))

    async def stop(self) -> None:
        """Stop probing; listeners still running (a resync) are waited for, not cut."""
        probing: list[asyncio.Future[Any]] = [*self._watchers, *self._probing.values()]
        self._watchers = []
        for task in probing:
            task.cancel()
        for task in probing:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
