"""``PolatisScpiDriver``: a Polatis optical switch over SCPI (raw TCP, pyvisa + pyvisa-py).

The resource is ``TCPIP0::HOST::5025::SOCKET`` (``socket_resource(host)``). pyvisa is
blocking: each exchange runs in a worker thread (``asyncio.to_thread``) under one asyncio
lock, and under a thread lock too, so an exchange abandoned by a cancelled caller finishes
before the next one starts.

Changes use only ``:OXC:SWIT:CONN:ADD`` (``connect``) and ``:OXC:SWIT:CONN:SUB ...,(@)``
(``disconnect``); never ``:CONN:ONLY`` or ``*RST``, which replace or drop every
connection. A change is checked locally first (ports in range of ``:OXC:SWIT:SIZE?``, no
port twice): a bad one raises ``DeviceRejected`` with nothing sent. After every change
command the error queue is drained (``SYST:ERR?`` until ``0``); any queued error raises
``DeviceRejected(code=<first code>)``, chained from ``ScpiDeviceError``. After every
query too (written with it, ``SYST:ERR?`` in the same write): a query the device did not
answer (SCPI: a failing query sends no reply and queues its error, so its ``SYST:ERR?``
answers first) or answered with errors queued raises ``DeviceRejected`` (chained from
``QueryRefused``), and an error never waits in the queue for the next command. The emulator
rejects a command whole; that a real unit does too is unverified: read back
(``connections()``) when it matters. A circuit change is SUB then ADD, two commands, so
``atomic_batch`` is False: the executor reads the connections back and puts removed
circuits back when the ADD fails (``services.reroute.engine.guard``).

Power monitors are known, not guessed: the inventory says so (``power_monitors: yes|no``)
or, by default, ``open`` finds out: a product code of a family without them (I-OST) has
none (and is not asked); any other unit is asked for one egress port's power
(``:PMON:POW? (@N+1)``) and has them when it answers, none when the query is refused (its
error drained from the queue). Without them the session declares no port state and no
optical power, and is never asked for power again. (``*OPT?`` is not used: what a Polatis
answers to it is documented nowhere we could read.)

``open`` compares the switch's size (``:OXC:SWIT:SIZE?``) with the topology's
(``Expect.size``): egress ports are numbered from N+1, so a switch of another size would
take every egress port number to another port; ``DeviceRejected(code="SIZE_MISMATCH")``
naming the device and both sizes, before anything is changed.

Failures: no reply in ``timeout`` -> ``DeviceTimeout``; refused or lost connection ->
``DeviceUnreachable``; a reply that does not parse -> ``ProtocolError``. After a timeout
or a lost connection the session is closed (a late reply would otherwise answer the next
query) and the driver reconnects (``RECONNECTS`` attempts, ``RECONNECT_S`` apart,
doubling; the handshake again, stale queued errors discarded): a query is asked again; a
change whose fate is unknown (the connection went mid-command) is settled by reading
``:OXC:SWIT:CONN:STAT?``: done when the table shows it made, sent again when it shows it
not made, so a dropped connection neither loses nor doubles a change. Only when every
attempt fails does the error reach the caller. pyvisa-py quirks: a refused connection
opens fine and fails on the first write (-> ``DeviceUnreachable``); a device that closes
the connection looks like silence (its read spins until the timeout: ``DeviceTimeout``);
``ResourceManager`` is shared by every driver in the process, so only the resource is
ever closed.

Every line written (``>``) and read (``<``) is logged at DEBUG on
``reroute.wire.polatis.<name>`` and kept in a bounded in-memory ``wire_log``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import pyvisa
from pyvisa import constants
from pyvisa.resources import MessageBasedResource

from drivers.base import Capabilities, PortState, Session, register
from drivers.base import Identity as DeviceIdentity
from drivers.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
)
from drivers.polatis_scpi import scpi
from drivers.polatis_scpi.scpi import Identity, MalformedReply
from drivers.polatis_scpi.spec import PolatisSpec
from drivers.spec import Expect

log = logging.getLogger("reroute.drivers.polatis")

LIT_DBM = -30.0  # a receiving port above this has light
MAX_POWER_PORTS = 256  # ports per :PMON:POW? query
MAX_DRAIN = 64  # SYST:ERR? reads after one change before giving up
RECONNECTS = 3  # attempts to reconnect after a lost session, before giving up
RECONNECT_S = 0.1  # the first pause between attempts (doubles)
BUSY_CODES = frozenset({1001, 1002})  # ingress already connected, egress in use (unverified)
_T = TypeVar("_T")


def socket_resource(host: str, port: int = 5025) -> str:
    """The VISA resource name of a raw SCPI socket."""
    return f"TCPIP0::{host}::{port}::SOCKET"


@dataclass(frozen=True, slots=True, kw_only=True)
class WireLine:
    direction: str  # ">" written, "<" read
    text: str


class ScpiDeviceError(Exception):
    """Errors the device queued after a command; the ``__cause__`` of ``DeviceRejected``."""

    def __init__(self, command: str, errors: Sequence[tuple[int, str]]) -> None:
        self.command = command
        self.errors = tuple(errors)
        listed = "; ".join(f"{code},{message!r}" for code, message in errors)
        super().__init__(f"{command}: {listed}")

    @property
    def busy_only(self) -> bool:
        """Every error says a port is already connected or in use."""
        return all(code in BUSY_CODES for code, _ in self.errors)


class QueryRefused(ScpiDeviceError):
    """A query the device did not answer, or answered with errors queued (drained)."""


class ReconnectFailed(DeviceUnreachable):
    """The session was lost and every reconnect attempt failed."""


class _Session:
    """One open pyvisa resource. Blocking; callers hold ``lock`` (see ``run``)."""

    def __init__(
        self, res: MessageBasedResource, wire: logging.Logger, keep: deque[WireLine]
    ) -> None:
        self.res = res
        self.wire = wire
        self.keep = keep
        self.lock = threading.Lock()

    @classmethod
    def open(
        cls,
        resource: str,
        backend: str,
        timeout: float,
        wire: logging.Logger,
        keep: deque[WireLine],
    ) -> _Session:
        """Open a session on the VISA ``resource`` (``backend``: pyvisa's)."""
        ms = max(1, round(timeout * 1000))
        res = pyvisa.ResourceManager(backend).open_resource(
            resource,
            open_timeout=ms,
            timeout=ms,
            read_termination="\r\n",
            write_termination="\n",
        )
        if not isinstance(res, MessageBasedResource):
            res.close()
            raise ValueError(f"{resource} is not a message-based resource")
        res.encoding = "latin-1"
        return cls(res, wire, keep)

    def run(self, fn: Callable[[_Session], _T]) -> _T:
        """Run ``fn`` on the session, one caller at a time."""
        with self.lock:
            return fn(self)

    def write(self, *lines: str) -> None:
        """Lines in one write: a second small write would wait for the ACK of the first
        (Nagle; pyvisa-py cannot set TCP_NODELAY on a SOCKET resource)."""
        for line in lines:
            self._log(">", line)
        self.res.write_raw("".join(f"{line}\n" for line in lines).encode("latin-1"))

    def read(self) -> str:
        """Read one reply line (logged)."""
        line = self.res.read()
        self._log("<", line)
        return line

    def checked(self, line: str) -> str:
        """Ask ``line`` and drain the error queue after it, in one write: its reply, or
        ``QueryRefused`` with the errors queued instead of (or besides) a reply."""
        self.write(line, scpi.ERROR)
        first = self.read()
        if scpi.is_error_reply(first):  # no reply: this is the SYST:ERR? answer
            code, message = scpi.parse_error(first)
            if code == scpi.NO_ERROR:
                raise MalformedReply(f"reply to {line}", "(none, and no error queued)")
            self.write(scpi.ERROR)
            raise QueryRefused(line, [(code, message), *self._drain()])
        errors = self._drain()
        if errors:
            raise QueryRefused(line, errors)
        return first

    def change(self, command: str) -> list[tuple[int, str]]:
        """Send a change and drain the error queue; the errors it queued, oldest first."""
        self.write(command, scpi.ERROR)
        return self._drain()

    def drain(self) -> list[tuple[int, str]]:
        """Read the error queue until it is empty: (code, message) pairs."""
        self.write(scpi.ERROR)
        return self._drain()

    def _drain(self) -> list[tuple[int, str]]:
        """Read ``SYST:ERR?`` replies (one already asked for) until ``0``."""
        errors: list[tuple[int, str]] = []
        for _ in range(MAX_DRAIN):
            reply = self.read()
            code, message = scpi.parse_error(reply)
            if code == scpi.NO_ERROR:
                return errors
            errors.append((code, message))
            self.write(scpi.ERROR)
        raise MalformedReply(f"{scpi.ERROR} (still no 0 after {MAX_DRAIN} reads)", reply)

    def close(self) -> None:
        """Close the VISA resource."""
        with self.lock:
            self.res.close()

    def _log(self, direction: str, text: str) -> None:
        self.wire.debug("%s %s", direction, text)
        self.keep.append(WireLine(direction=direction, text=text))


@register("polatis_scpi", spec=PolatisSpec)
class PolatisScpiDriver(Session):
    """A Polatis switch at a VISA resource such as ``TCPIP0::10.0.0.5::5025::SOCKET``.

    The session is ``open()`` / ``close()`` (or ``async with``): ``connect(pairs)`` is the
    ``CrossConnectSwitch`` method that adds connections."""

    capabilities = Capabilities(
        atomic_batch=False,
        read_back=True,
        max_batch=0,
        port_state=True,
        optical_power=True,
        notes="SCPI over raw TCP (pyvisa-py); a circuit change is SUB then ADD, two commands "
        "(not atomic: the executor reads back and puts removed circuits back when the ADD "
        "fails); ADD of several pairs is one command; the size (:OXC:SWIT:SIZE?) must be "
        "the topology's; port state from the receiving egress port's optical power",
    )

    @classmethod
    def from_spec(cls, name: str, spec: PolatisSpec, expect: Expect) -> PolatisScpiDriver:
        """The driver of an inventory entry (``drivers.polatis_scpi.spec``)."""
        monitors = {"auto": None, "yes": True, "no": False}[spec.power_monitors]
        return cls(
            name, spec.target, timeout=spec.timeout_s, backend=spec.backend, size=expect.size,
            power_monitors=monitors,
        )  # fmt: skip

    def __init__(
        self,
        name: str,
        resource: str,
        *,
        timeout: float = 2.0,
        backend: str = "@py",
        lit_dbm: float = LIT_DBM,
        wire_log: int = 1000,
        size: tuple[int, int] | None = None,
        power_monitors: bool | None = None,
    ) -> None:
        self.name = name
        self.power_monitors = power_monitors  # None: from *IDN? at open
        self.expected_size = size
        self.resource = resource
        self.timeout = timeout
        self.backend = backend
        self.lit_dbm = lit_dbm
        self._wire = logging.getLogger(f"reroute.wire.polatis.{name}")
        self._keep: deque[WireLine] = deque(maxlen=wire_log)
        self._session: _Session | None = None
        self._identity: Identity | None = None
        self._size: tuple[int, int] | None = None
        self._lock = asyncio.Lock()
        self._opened = False  # open() succeeded and close() has not been called: reconnect

    # ----------------------------------------------------------------------------------
    # session

    async def open(self) -> None:
        """Connect, read ``*IDN?`` and ``:OXC:SWIT:SIZE?``, discard stale queued errors."""
        if self._session is not None:
            return
        self._session = await self._open_session()
        try:
            identity, size, stale = await self._call(_handshake)
        except BaseException:
            await self.close()
            raise
        if self.expected_size is not None and size != self.expected_size:
            await self.close()
            raise self._wrong_size(identity, size, self.expected_size)
        self._identity, self._size = identity, size
        self._opened = True
        if self.power_monitors is None:
            try:
                self.power_monitors = await self._has_monitors(identity, size)
            except BaseException:
                await self.close()
                raise
        if not self.power_monitors:
            self.capabilities = replace(
                PolatisScpiDriver.capabilities,
                port_state=False,
                optical_power=False,
                notes=f"{PolatisScpiDriver.capabilities.notes}; this unit ({identity.product}) "
                "has no power monitors: no port state, no optical power, it cannot gate a lock",
            )
        if stale:
            log.warning("%s: discarded errors queued before we connected: %s", self.name, stale)
        log.debug("%s: %s, %dx%d", self.name, identity, *size)

    async def _has_monitors(self, identity: Identity, size: tuple[int, int]) -> bool:
        """Whether the unit has power monitors: not a family without them, and it answers
        a power query of its first egress port (refused: none; the error is drained)."""
        if not identity.power_monitors:
            log.info("%s: %s has no power monitors (its family has none)", self.name,
                     identity.product)  # fmt: skip
            return False
        found = await self._call(partial(_probe, egress=size[0] + 1))
        log.info("%s: power monitors %s (:PMON:POW? %s)", self.name,
                 "found" if found else "absent", "answered" if found else "refused")  # fmt: skip
        return found

    def _wrong_size(
        self, identity: Identity, size: tuple[int, int], want: tuple[int, int]
    ) -> DeviceRejected:
        return DeviceRejected(
            self.name,
            f"{self.resource} is a {size[0]}x{size[1]} switch (:OXC:SWIT:SIZE?; *IDN? "
            f"product {identity.product}), but the topology says {self.name} is "
            f"{want[0]}x{want[1]}: egress ports are numbered from N+1, so the sizes must be "
            "equal; nothing was changed",
            "SIZE_MISMATCH",
        )

    async def identify(self) -> DeviceIdentity:
        """``*IDN?``, asked now (a round trip: a switch that went away is found out), and
        the switch's size (and when it has no power monitors)."""
        self._identity = await self._query(scpi.IDN, scpi.parse_identity)
        n, m = self.size
        monitors = "" if self.power_monitors else ", no power monitors"
        return DeviceIdentity(summary=f"{self.identity}, {n}x{m}{monitors}")

    async def close(self) -> None:
        """Close the SCPI session."""
        self._opened = False
        session, self._session = self._session, None
        if session is not None:
            await asyncio.to_thread(session.close)

    @property
    def identity(self) -> Identity:
        """The identity read at ``open`` (DeviceUnreachable before)."""
        if self._identity is None:
            raise DeviceUnreachable(self.name, "not connected (call open() first)")
        return self._identity

    @property
    def size(self) -> tuple[int, int]:
        """(N ingress ports 1..N, M egress ports N+1..N+M)."""
        if self._size is None:
            raise DeviceUnreachable(self.name, "not connected (call open() first)")
        return self._size

    @property
    def wire_log(self) -> list[WireLine]:
        """The most recent lines written and read (bounded by ``wire_log``)."""
        return list(self._keep)

    # ----------------------------------------------------------------------------------
    # CrossConnectSwitch

    async def connect(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Add ingress->egress connections in one ``ADD``, keeping all others.

        Idempotent: when the device refuses the ADD only because ports are busy (1001,
        1002) and some of the pairs already exist exactly as asked, the rest is added in
        a second ``ADD`` (none left: done); a busy port held by another connection still
        raises ``DeviceRejected``."""
        if not pairs:
            return
        self._check_pairs(pairs)
        try:
            await self._change(scpi.add_command(pairs), partial(_all_made, pairs))
        except DeviceRejected as exc:
            missing = await self._missing(pairs, exc)
            if missing:
                await self._change(scpi.add_command(missing), partial(_all_made, missing))

    async def _missing(
        self, pairs: Sequence[tuple[int, int]], refused: DeviceRejected
    ) -> list[tuple[int, int]]:
        """The pairs not yet connected, after a refused ADD; re-raise ``refused`` unless
        it was only about busy ports and some pairs already exist."""
        cause = refused.__cause__
        if not isinstance(cause, ScpiDeviceError) or not cause.busy_only:
            raise refused
        table = await self.connections()
        missing = [(i, e) for i, e in pairs if table.get(i) != e]
        if len(missing) == len(pairs):
            raise refused
        log.debug(
            "%s: %d of %d pairs already connected", self.name, len(pairs) - len(missing), len(pairs)
        )
        return missing

    async def disconnect(self, ingresses: Sequence[int]) -> None:
        """Remove every connection of these ingress ports in one ``SUB``."""
        if not ingresses:
            return
        n, _ = self.size
        self._check_ports(ingresses, range(1, n + 1), "ingress")
        await self._change(scpi.sub_command(ingresses), partial(_all_gone, ingresses))

    async def connections(self) -> dict[int, int]:
        """The cross-connects: ingress -> egress."""
        return await self._query(scpi.STATE, scpi.parse_connections)

    # ----------------------------------------------------------------------------------
    # PortMonitor and optical power

    async def port_states(self) -> dict[int, PortState]:
        """Duplex port i is UP when its receiving egress port N+i has light (> ``lit_dbm``)."""
        n, m = self.size
        duplex = range(1, min(n, m) + 1)
        power = await self.power([n + i for i in duplex])
        return {i: PortState.UP if power[n + i] > self.lit_dbm else PortState.DOWN for i in duplex}

    async def power(self, ports: Sequence[int]) -> dict[int, float]:
        """Optical power in dBm of each port, ``MAX_POWER_PORTS`` ports a query; a unit
        without power monitors is never asked (``DeviceRejected`` ``NO_POWER_MONITORS``)."""
        n, m = self.size
        if not self.power_monitors:
            raise DeviceRejected(
                self.name,
                f"this unit ({self.identity.product}) has no power monitors: its optical "
                "power, and so its port state, cannot be read (nothing was asked)",
                "NO_POWER_MONITORS",
            )
        self._check_ports(ports, range(1, n + m + 1), "port")
        found: dict[int, float] = {}
        for start in range(0, len(ports), MAX_POWER_PORTS):
            chunk = ports[start : start + MAX_POWER_PORTS]
            found |= await self._query(scpi.power_query(chunk), partial(scpi.parse_powers, chunk))
        return found

    async def peer(self, port: int) -> int | None:
        """The port connected to ``port``, or None."""
        n, m = self.size
        self._check_ports([port], range(1, n + m + 1), "port")
        return await self._query(scpi.peer_query(port), scpi.parse_peer)

    # ----------------------------------------------------------------------------------
    # local validation (nothing is sent when it fails)

    def _check_pairs(self, pairs: Sequence[tuple[int, int]]) -> None:
        n, m = self.size
        self._check_ports([i for i, _ in pairs], range(1, n + 1), "ingress")
        self._check_ports([e for _, e in pairs], range(n + 1, n + m + 1), "egress")

    def _check_ports(self, ports: Sequence[int], valid: range, role: str) -> None:
        bad = [p for p in ports if p not in valid]
        if bad:
            raise self._local(
                "out-of-range", f"{role} port(s) {bad} not in {valid.start}..{valid.stop - 1}"
            )
        twice = sorted(p for p, count in Counter(ports).items() if count > 1)
        if twice:
            raise self._local("duplicate", f"{role} port(s) {twice} given more than once")

    def _local(self, code: str, message: str) -> DeviceRejected:
        return DeviceRejected(self.name, f"{message}; nothing was sent", code)

    # ----------------------------------------------------------------------------------
    # exchanges

    async def _change(self, command: str, made: Callable[[dict[int, int]], bool]) -> None:
        """Send a change; when the connection goes mid-command, reconnect and read the
        table: ``made(table)`` says the change took effect, else it is sent again."""
        for attempt in range(RECONNECTS + 1):
            try:
                errors = await self._call(lambda s: s.change(command))
                break
            except ReconnectFailed:
                raise
            except (DeviceTimeout, DeviceUnreachable) as exc:
                if attempt == RECONNECTS or not self._opened:
                    raise
                log.warning("%s: connection lost during %r (%s): reading the table", self.name,
                            command, exc)  # fmt: skip
                if made(await self.connections()):
                    log.warning("%s: %r had taken effect before the loss", self.name, command)
                    return
        if errors:
            code, message = errors[0]
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise DeviceRejected(
                self.name, f"{command!r} rejected: {code},{message!r}{more}", str(code)
            ) from ScpiDeviceError(command, errors)

    async def _query(self, line: str, parse: Callable[[str], _T]) -> _T:
        """Ask and parse the reply (a reply that does not parse names this device); asked
        again, on a new connection, when the connection goes before the reply."""
        for attempt in range(RECONNECTS + 1):
            try:
                return await self._call(lambda s: parse(s.checked(line)))
            except QueryRefused as exc:
                code, message = exc.errors[0]
                raise DeviceRejected(
                    self.name, f"{line!r} refused: {code},{message!r}", str(code)
                ) from exc
            except ReconnectFailed:
                raise
            except (DeviceTimeout, DeviceUnreachable) as exc:
                if attempt == RECONNECTS or not self._opened:
                    raise
                log.warning("%s: connection lost during %r (%s): asking again", self.name,
                            line, exc)  # fmt: skip
        raise AssertionError("unreachable")

    async def _call(self, fn: Callable[[_Session], _T]) -> _T:
        async with self._lock:
            session = self._session
            if session is None and self._opened:  # lost: open it again
                session = await self._reconnect()
            if session is None:
                raise DeviceUnreachable(self.name, "not connected (call open() first)")
            exchange = asyncio.ensure_future(asyncio.to_thread(session.run, fn))
            try:
                return await asyncio.shield(exchange)
            except asyncio.CancelledError:
                self._abandon(session, exchange)
                raise
            except MalformedReply as exc:  # a reply out of step: the stream is not ours now
                await self._drop(session)
                raise exc.renamed(self.name) from exc
            except (pyvisa.errors.VisaIOError, OSError) as exc:
                await self._drop(session)
                raise self._io_error(exc) from exc

    def _abandon(self, session: _Session, exchange: asyncio.Future[Any]) -> None:
        """The caller gave up (its deadline) while an exchange is under way in its thread:
        its reply may still come and would answer the next query. The session is closed
        once the exchange ends, and the next call opens another (``_reconnect``)."""
        if self._session is session:
            self._session = None
        log.warning(
            "%s: an exchange was abandoned (its caller's deadline); reconnecting", self.name
        )

        def close(_: object) -> None:
            try:
                session.close()
            except Exception as exc:  # already broken; nothing to report
                log.debug("%s: closing an abandoned session: %s", self.name, exc)

        exchange.add_done_callback(close)

    async def _reconnect(self) -> _Session:
        """A new session after a lost one (``RECONNECTS`` attempts, the handshake again:
        the same switch, stale errors discarded); ``DeviceUnreachable`` when none works."""
        pause, error = RECONNECT_S, ""
        for attempt in range(1, RECONNECTS + 1):
            try:
                session = await self._open_session()
            except DeviceUnreachable as exc:
                error = str(exc)
            else:
                try:
                    identity, size, stale = await asyncio.to_thread(session.run, _handshake)
                except (pyvisa.errors.VisaIOError, OSError, MalformedReply) as exc:
                    await asyncio.to_thread(session.close)
                    error = f"handshake: {exc}"
                else:
                    if size != self._size:
                        await asyncio.to_thread(session.close)
                        raise self._wrong_size(identity, size, self._size or size)
                    log.warning("%s: reconnected (attempt %d); discarded stale errors: %s",
                                self.name, attempt, stale)  # fmt: skip
                    self._session = session
                    return session
            await asyncio.sleep(pause)
            pause *= 2
        raise ReconnectFailed(
            self.name, f"connection lost; {RECONNECTS} reconnects failed, the last: {error}"
        )

    async def _open_session(self) -> _Session:
        try:
            return await asyncio.to_thread(
                _Session.open, self.resource, self.backend, self.timeout, self._wire, self._keep
            )
        except Exception as exc:  # pyvisa-py raises a bare Exception when it cannot connect
            raise DeviceUnreachable(self.name, f"cannot open {self.resource}: {exc}") from exc

    async def _drop(self, session: _Session) -> None:
        """Close a session whose stream can no longer be trusted."""
        if self._session is session:
            self._session = None
        try:
            await asyncio.to_thread(session.close)
        except Exception as exc:  # already broken; the original error is what matters
            log.debug("%s: closing a broken session: %s", self.name, exc)

    def _io_error(self, exc: Exception) -> DeviceTimeout | DeviceUnreachable:
        if isinstance(exc, pyvisa.errors.VisaIOError) and exc.error_code == constants.VI_ERROR_TMO:
            return DeviceTimeout(
                self.name, f"no reply from {self.resource} within {self.timeout} s"
            )
        return DeviceUnreachable(self.name, f"{self.resource}: {exc}")


def _all_made(pairs: Sequence[tuple[int, int]], table: dict[int, int]) -> bool:
    return all(table.get(i) == e for i, e in pairs)


def _all_gone(ingresses: Sequence[int], table: dict[int, int]) -> bool:
    return not any(i in table for i in ingresses)


def _handshake(s: _Session) -> tuple[Identity, tuple[int, int], list[tuple[int, str]]]:
    """The stale errors (another client's) discarded first, then who and how big."""
    stale = s.drain()
    identity = scpi.parse_identity(s.checked(scpi.IDN))
    size = scpi.parse_size(s.checked(scpi.SIZE))
    if identity.size is not None and identity.size != size:
        log.warning("product code says %dx%d, SIZE? says %dx%d", *identity.size, *size)
    return identity, size, stale


def _probe(s: _Session, egress: int) -> bool:
    """Whether the unit answers ``:PMON:POW?`` of ``egress`` (refused: its error drained)."""
    try:
        scpi.parse_powers([egress], s.checked(scpi.power_query([egress])))
    except QueryRefused:
        return False
    return True
