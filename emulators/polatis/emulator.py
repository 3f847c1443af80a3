"""An EMULATOR of a Polatis optical switch's SCPI interface. It is not a real device.

``SwitchState`` is the state machine: one SCPI command in, replies and Layer-1 effects out
(no I/O, no clock: a lock timer is an effect, ``ArmLock``, and its expiry an input,
``lock_done``). ``emulators.polatis.server`` runs it: ``PolatisEmulator`` arms the timers
with an injected scheduler and applies the effects to a ``Layer1`` in order, overlapped
with the following commands (``*OPC?`` waits for them); ``EmulatorServer`` puts it on a
TCP port.

Commands (headers case-insensitive, short or long forms, leading colon optional; ``;``
joins commands, each taken as a full path, where real SCPI would resolve one without a
leading colon against the previous path; each query's answer is its own line)::

    *IDN?  *OPC?  *RST  *CLS
    :OXC:SWITch:SIZE?                               -> 16,16
    :OXC:SWITch:CONNect:ADD (@1,2),(@17,18)         add; rejected whole on any conflict
    :OXC:SWITch:CONNect:SUBtract (@1),(@17)         remove; (@) as egress list = all of them
    :OXC:SWITch:CONNect:ONLY (@1),(@17)             replace every connection (unchanged
                                                    ones stay lit)
    :OXC:SWITch:CONNect:STATe?                      -> (@1,2),(@17,18)
    :OXC:SWITch:CONNect:PORT? 2                     -> "18" or ""
    :PMON:POWer? (@17,18)                           -> (-2.48,-60.00), at most 256 ports
    :SYSTem:ERRor[:NEXT]?                           -> -222,"Data out of range;port 40"

Error codes (SCPI-99; a failing command changes nothing, a failing query sends no reply):

    -102 Syntax error             an argument is not a port list / port number
    -104 Data type error          :EMULator:LOCK with neither a number nor DEFault
    -108 Parameter not allowed    arguments to a command that takes none, or too many
    -109 Missing parameter        fewer arguments than the command needs
    -113 Undefined header         unknown command
    -220 Parameter error          ingress and egress lists differ in length
    -222 Data out of range        a port outside 1..N (ingress), N+1..N+M (egress) or
                                  1..N+M (any); a negative lock time
    -223 Too much data            more than 256 ports in one :PMON:POWer?
    -224 Illegal parameter value  a port given twice in one command
    -300 Device-specific error    the Layer-1 hook failed (logged; the table did change;
                                  queued once the overlapped work ran: after ``*OPC?``)
    -350 Queue overflow           replaces the newest entry when 32 are queued
    1001 Ingress already connected   (device-specific; the real unit's answer is unverified)
    1002 Egress already in use       (device-specific; unverified)
    1003 Ports not connected         SUB of a pair that is not a connection (unverified)

``EmulatorConfig.model`` names the product family ``*IDN?`` reports; ``I-OST`` plays a
model without optical power monitors, whose ``:PMON:POWer?`` is an undefined header, and
``monitors=False`` a unit of another family without them (the same answer). ``*OPT?`` is
not emulated (an undefined header, as any command it lacks): what a Polatis answers to it
is documented nowhere we could read.

Physics: a new connection is dark for ``switch_ms`` plus a lock time drawn per connection
(seeded): by default seed 003's Table 4.3 (485 runs: mean 605, std 115, min 529, p50 532,
p75 786, max 834 ms) as a piecewise-linear quantile function through (0, 529), (0.5, 532),
(0.73, 540), (0.75, 786), (1, 834) (mean 604, std 120), or a fixed time. ``:PMON:POWer?`` of an
egress port reads about -2.5 dBm (seeded jitter) once its connection is locked, -60.00
when dark or unconnected; an ingress port reads lit while connected (a simplification:
the emulator has no input light model). Initial connections start lit.

Emulator-only controls (not Polatis commands)::

    :EMULator:HOLDdark (@17,19)   keep these egress ports dark (a lit one goes dark now)
    :EMULator:RELease (@17,19)    stop holding them ((@) = all); a locked one lights now
    :EMULator:LOCK 40 | DEFault   fixed lock time for new connections | Table 4.3 again
    :EMULator:LOCK NEVer          new connections never lock (stay dark) until LOCK DEFault
    :EMULator:LOCK?               last drawn lock ms per egress -> (@19,18),(612,531)
    :EMULator:DROP BEFore|AFTer   fault injection, once: the next change command (ADD, SUB,
                                  ONLY) hangs up its client's connection, before it is
                                  executed (nothing changes) or after (the change is made);
                                  ``DROP OFF`` disarms; ``DROP?`` -> BEFORE, AFTER or OFF

Layer 1: on ADD ``signal(e, False)``, ``patch(i, e)``, then after switch+lock
``signal(e, True)`` unless held dark; on removal ``unpatch(i, e)``, ``signal(e, False)``;
at start ``patch`` + ``signal(e, True)`` for each initial connection.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

TABLE_4_3_KNOTS: tuple[tuple[float, float], ...] = (
    (0.0, 529.0),
    (0.5, 532.0),
    (0.73, 540.0),
    (0.75, 786.0),
    (1.0, 834.0),
)
LIT_DBM = -2.5
JITTER_DB = 0.15
DARK_DBM = -60.0
MAX_POWER_PORTS = 256
NO_ERROR = '0,"No error"'
NO_POWER_MONITORS = frozenset({"I-OST"})  # model families without them (PROTOCOLS.md)


# --------------------------------------------------------------------------------------
# the Layer-1 hook


class Layer1(Protocol):
    """What the emulated switch does to a (real or emulated) optical layer."""

    async def patch(self, ingress: int, egress: int) -> None:
        """Light from ``ingress`` now goes to ``egress``."""

    async def unpatch(self, ingress: int, egress: int) -> None:
        """Light from ``ingress`` no longer goes to ``egress``."""

    async def signal(self, egress: int, lit: bool) -> None:
        """The receiver on ``egress`` has (or has lost) a locked signal."""


class NullLayer1:
    """A Layer 1 that does nothing."""

    async def patch(self, ingress: int, egress: int) -> None:
        """Patch nothing."""
        return None

    async def unpatch(self, ingress: int, egress: int) -> None:
        """Unpatch nothing."""
        return None

    async def signal(self, egress: int, lit: bool) -> None:
        """Signal nothing."""
        return None


# --------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True, slots=True, kw_only=True)
class FixedLock:
    ms: float

    def draw(self, rng: random.Random) -> float:
        """The fixed lock time."""
        return self.ms


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantileLock:
    """Inverse-transform sampling of a piecewise-linear quantile function (u, ms)."""

    knots: tuple[tuple[float, float], ...] = TABLE_4_3_KNOTS

    def draw(self, rng: random.Random) -> float:
        """A lock time drawn from the quantile table."""
        return quantile(self.knots, rng.random())


LockModel = FixedLock | QuantileLock


def quantile(knots: Sequence[tuple[float, float]], u: float) -> float:
    """The value at probability ``u`` of the polyline through ``knots`` (sorted by u)."""
    us = [k[0] for k in knots]
    i = min(max(bisect.bisect_right(us, u), 1), len(knots) - 1)
    (u0, v0), (u1, v1) = knots[i - 1], knots[i]
    return v0 + (v1 - v0) * (u - u0) / (u1 - u0)


@dataclass(frozen=True, slots=True, kw_only=True)
class EmulatorConfig:
    ingress: int = 16  # N: ports 1..N
    egress: int = 16  # M: ports N+1..N+M
    connections: tuple[tuple[int, int], ...] = ()  # initial ingress->egress, already lit
    switch_ms: float = 25.0
    lock: LockModel = field(default_factory=QuantileLock)
    seed: int = 0
    serial: str = "EMU0001"
    max_errors: int = 32
    # the product family *IDN? names; "I-OST" plays a model without power monitors:
    # its :PMON:POWer? is an undefined header (-113), as any command it does not have
    model: str = "N-VST"
    # False: a unit of a family that has them, built without (a unit without the option:
    # unverified that Polatis sells one so); its :PMON:POWer? too is an undefined header
    monitors: bool = True

    def __post_init__(self) -> None:
        if self.ingress <= 0 or self.egress <= 0:
            raise ValueError(f"size {self.ingress}x{self.egress}: both must be positive")
        if self.switch_ms < 0 or self.max_errors < 1:
            raise ValueError("switch_ms must be >= 0 and max_errors >= 1")
        ins, outs = [i for i, _ in self.connections], [e for _, e in self.connections]
        fault = _pairs_fault(self, ins, outs)
        if fault is not None:
            raise ValueError(f"initial connections {self.connections}: {fault.message}")

    @property
    def identity(self) -> str:
        """The ``*IDN?`` answer."""
        product = f"{self.model}-{self.ingress}x{self.egress}-LA1-EMUL-701"
        return f"Polatis,{product},{self.serial},6.5.1.7"

    @property
    def power_monitors(self) -> bool:
        """Whether the unit played has optical power monitors (``:PMON:POWer?``)."""
        return self.monitors and self.model.upper() not in NO_POWER_MONITORS


# --------------------------------------------------------------------------------------
# effects: what a command asks of Layer 1 and of the timers


@dataclass(frozen=True, slots=True, kw_only=True)
class Patch:
    ingress: int
    egress: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Unpatch:
    ingress: int
    egress: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Signal:
    egress: int
    lit: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmLock:
    """Call ``SwitchState.lock_done(egress, token)`` after ``delay_ms``."""

    egress: int
    token: int
    delay_ms: float


Effect = Patch | Unpatch | Signal | ArmLock


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    replies: tuple[str, ...] = ()
    effects: tuple[Effect, ...] = ()
    hangup: bool = False  # :EMULator:DROP fired: the server closes this client's connection
    changed: bool = False  # an accepted connection change (the write log records it)


# --------------------------------------------------------------------------------------
# SCPI parsing


class _Fault(Exception):
    """A command error to queue (never leaves this module)."""

    def __init__(self, code: int, message: str, detail: str = "") -> None:
        self.code = code
        self.message = f"{message};{detail}" if detail else message
        super().__init__(self.message)


@dataclass(frozen=True, slots=True)
class _Node:
    short: str
    long: str
    optional: bool

    def matches(self, token: str) -> bool:
        """``token`` names this node (short or long form)."""
        return token.upper() in (self.short, self.long)


def _compile(pattern: str) -> tuple[_Node, ...]:
    """``:SYSTem:ERRor[:NEXT]`` -> nodes; the short form is a mnemonic's upper-case part."""
    nodes = []
    for raw in pattern.replace("[", "").lstrip(":").split(":"):
        optional = raw.endswith("]")
        word = raw.rstrip("]")
        short = "".join(itertools.takewhile(lambda c: not c.islower(), word))
        nodes.append(_Node(short=short, long=word.upper(), optional=optional))
    return tuple(nodes)


def _header_matches(nodes: Sequence[_Node], tokens: Sequence[str]) -> bool:
    if not nodes:
        return not tokens
    head, rest = nodes[0], nodes[1:]
    if tokens and head.matches(tokens[0]) and _header_matches(rest, tokens[1:]):
        return True
    return head.optional and _header_matches(rest, tokens)


def split_commands(line: str) -> list[str]:
    """The commands of a line (``;``-separated)."""
    return [c.strip() for c in line.split(";") if c.strip()]


def _split_params(text: str) -> list[str]:
    """Top-level comma split: ``(@1,2),(@17,18)`` -> ``["(@1,2)", "(@17,18)"]``."""
    params, depth, current = [], 0, ""
    for c in text:
        depth += {"(": 1, ")": -1}.get(c, 0)
        if c == "," and depth == 0:
            params.append(current.strip())
            current = ""
        else:
            current += c
    if current.strip() or params:
        params.append(current.strip())
    return params


STATE_QUERY = ":OXC:SWIT:CONN:STAT?"  # the cross-connects: ``(@ingresses),(@egresses)``


def read_connections(reply: str) -> dict[int, int]:
    """The emulator's own answer to ``:OXC:SWIT:CONN:STAT?`` read back, for the fabric
    (``fabric.restart`` restores its patches): ``(@1,2),(@19,18)`` -> ``{1: 19, 2: 18}``."""
    ingress, egress = (_ports(param) for param in _split_params(reply))
    return dict(zip(ingress, egress, strict=True))


def _ports(param: str) -> list[int]:
    """``(@1,2,5:7)`` -> ``[1, 2, 5, 6, 7]``; ``(@)`` -> ``[]``."""
    text = param.replace(" ", "")
    if not (text.startswith("(@") and text.endswith(")")):
        raise _Fault(-102, "Syntax error", f"expected a port list, got {param!r}")
    body = text[2:-1]
    return [p for item in body.split(",") for p in _port_range(item, param)] if body else []


def _port_range(item: str, param: str) -> range:
    first, sep, last = item.partition(":")
    if not first.isdigit() or (sep and not last.isdigit()):
        raise _Fault(-102, "Syntax error", f"bad port list {param!r}")
    return range(int(first), int(last if sep else first) + 1)


def _pairs_fault(config: EmulatorConfig, ins: Sequence[int], outs: Sequence[int]) -> _Fault | None:
    """What is wrong with these ingress and egress lists by themselves, if anything."""
    n, m = config.ingress, config.egress
    if len(ins) != len(outs):
        return _Fault(-220, "Parameter error", "ingress and egress lists differ in length")
    for ports, low, high in ((ins, 1, n), (outs, n + 1, n + m)):
        bad = [p for p in ports if not low <= p <= high]
        if bad:
            return _Fault(-222, "Data out of range", f"port {bad[0]}")
        twice = [p for p, k in Counter(ports).items() if k > 1]
        if twice:
            return _Fault(-224, "Illegal parameter value", f"port {twice[0]} given twice")
    return None


def _count(params: Sequence[str], want: int) -> None:
    if len(params) < want:
        raise _Fault(-109, "Missing parameter")
    if len(params) > want:
        raise _Fault(-108, "Parameter not allowed")


# --------------------------------------------------------------------------------------
# the state machine


@dataclass(slots=True)
class _Link:
    ingress: int
    token: int
    locked: bool  # switch + lock time has passed


Handler = Callable[["SwitchState", list[str]], str | None]


class SwitchState:
    """The switch: connection table, error queue, lock draws. Commands in, replies out."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.links: dict[int, _Link] = {}  # egress -> its connection
        self.errors: deque[tuple[int, str]] = deque()
        self.held: set[int] = set()
        self.lock_model: LockModel = config.lock
        self.last_lock_ms: dict[int, float] = {}
        self._lock_rng = random.Random(config.seed)
        self._power_rng = random.Random(f"{config.seed}/power")
        self._tokens = itertools.count(1)
        self._effects: list[Effect] = []
        self.drop = "OFF"  # :EMULator:DROP armed: BEFORE, AFTER or OFF
        for i, e in config.connections:
            self.links[e] = _Link(ingress=i, token=next(self._tokens), locked=True)

    # views

    def connections(self) -> dict[int, int]:
        """ingress -> egress, by ingress."""
        return dict(sorted((link.ingress, e) for e, link in self.links.items()))

    def lit(self, egress: int) -> bool:
        """``egress`` receives a locked signal."""
        link = self.links.get(egress)
        return link is not None and link.locked and egress not in self.held

    def power(self, port: int) -> float:
        """The optical power at ``port``, in dBm."""
        lit = self.lit(port) if port > self.config.ingress else port in self.connections()
        return LIT_DBM + self._power_rng.uniform(-JITTER_DB, JITTER_DB) if lit else DARK_DBM

    # inputs

    def initial_effects(self) -> tuple[Effect, ...]:
        """The layer-1 effects of the starting cross-connects."""
        effects: list[Effect] = []
        for e, link in self.links.items():
            effects += [Patch(ingress=link.ingress, egress=e), Signal(egress=e, lit=self.lit(e))]
        return tuple(effects)

    def execute(self, command: str) -> Result:
        """One command (no ``;``). Errors go to the queue, never raised."""
        self._effects = []
        hangup = self.drop != "OFF" and _is_change(command)
        if hangup:
            armed, self.drop = self.drop, "OFF"
            if armed == "BEFORE":
                return Result(hangup=True)
        try:
            reply = self._dispatch(command)
        except _Fault as fault:
            self.fault(fault.code, fault.message)
            return Result(hangup=hangup)
        return Result(
            replies=(reply,) if reply is not None and not hangup else (),
            effects=tuple(sorted(self._effects, key=_dark_first)),
            hangup=hangup,
            changed=_is_change(command),
        )

    def lock_done(self, egress: int, token: int) -> tuple[Effect, ...]:
        """The lock timer of connection ``token`` on ``egress`` expired."""
        link = self.links.get(egress)
        if link is None or link.token != token:
            return ()
        link.locked = True
        return (Signal(egress=egress, lit=True),) if self.lit(egress) else ()

    def fault(self, code: int, message: str) -> None:
        """Queue an error; when full, the newest entry becomes -350 Queue overflow."""
        if len(self.errors) >= self.config.max_errors:
            self.errors[-1] = (-350, "Queue overflow")
        else:
            self.errors.append((code, message))

    # dispatch

    def _dispatch(self, command: str) -> str | None:
        header, *rest = command.split(None, 1)
        query = header.endswith("?")
        tokens = header.rstrip("?").lstrip(":").split(":")
        for nodes, is_query, handler in _COMMANDS:
            if is_query == query and _header_matches(nodes, tokens):
                return handler(self, _split_params(rest[0] if rest else ""))
        raise _Fault(-113, "Undefined header", header)

    def _emit(self, *effects: Effect) -> None:
        self._effects.extend(effects)

    # common commands

    def _idn(self, params: list[str]) -> str:
        _count(params, 0)
        return self.config.identity

    def _opc(self, params: list[str]) -> str:
        _count(params, 0)
        return "1"

    def _rst(self, params: list[str]) -> None:
        _count(params, 0)
        for e in list(self.links):
            self._remove(e)

    def _cls(self, params: list[str]) -> None:
        _count(params, 0)
        self.errors.clear()

    def _next_error(self, params: list[str]) -> str:
        _count(params, 0)
        if not self.errors:
            return NO_ERROR
        code, message = self.errors.popleft()
        return f'{code},"{message}"'

    # switch

    def _size(self, params: list[str]) -> str:
        _count(params, 0)
        return f"{self.config.ingress},{self.config.egress}"

    def _pair_lists(self, params: list[str]) -> tuple[list[int], list[int]]:
        _count(params, 2)
        ins, outs = _ports(params[0]), _ports(params[1])
        fault = _pairs_fault(self.config, ins, outs)
        if fault is not None:
            raise fault
        return ins, outs

    def _add(self, params: list[str]) -> None:
        ins, outs = self._pair_lists(params)
        connected = {link.ingress: e for e, link in self.links.items()}
        for i in ins:
            if i in connected:
                raise _Fault(1001, "Ingress already connected", f"{i} -> {connected[i]}")
        for e in outs:
            if e in self.links:
                raise _Fault(1002, "Egress already in use", f"{e} <- {self.links[e].ingress}")
        for i, e in zip(ins, outs, strict=True):
            self._connect(i, e)

    def _sub(self, params: list[str]) -> None:
        _count(params, 2)
        ins, outs = _ports(params[0]), _ports(params[1])
        if outs:
            self._pair_lists(params)
            self._sub_pairs(list(zip(ins, outs, strict=True)))
            return
        self._check_range(ins, 1, self.config.ingress)
        for e in [e for e, link in self.links.items() if link.ingress in ins]:
            self._remove(e)

    def _sub_pairs(self, pairs: list[tuple[int, int]]) -> None:
        for i, e in pairs:
            link = self.links.get(e)
            if link is None or link.ingress != i:
                raise _Fault(1003, "Ports not connected", f"{i} -> {e}")
        for _, e in pairs:
            self._remove(e)

    def _only(self, params: list[str]) -> None:
        ins, outs = self._pair_lists(params)
        wanted = dict(zip(ins, outs, strict=True))
        for e, link in list(self.links.items()):
            if wanted.get(link.ingress) != e:
                self._remove(e)
        for i, e in wanted.items():
            if e not in self.links:
                self._connect(i, e)

    def _state(self, params: list[str]) -> str:
        _count(params, 0)
        table = self.connections()
        return f"{_plist(table)},{_plist(table.values())}"

    def _port(self, params: list[str]) -> str:
        _count(params, 1)
        if not params[0].isdigit():
            raise _Fault(-102, "Syntax error", f"expected a port number, got {params[0]!r}")
        port = int(params[0])
        self._check_range([port], 1, self.config.ingress + self.config.egress)
        if port <= self.config.ingress:
            peer = self.connections().get(port)
        else:
            peer = self.links[port].ingress if port in self.links else None
        return f'"{peer}"' if peer is not None else '""'

    def _power(self, params: list[str]) -> str:
        if not self.config.power_monitors:
            raise _Fault(-113, "Undefined header", ":PMON:POWer? (no power monitors)")
        _count(params, 1)
        ports = _ports(params[0])
        self._check_range(ports, 1, self.config.ingress + self.config.egress)
        if len(ports) > MAX_POWER_PORTS:
            raise _Fault(-223, "Too much data", f"{len(ports)} ports, at most {MAX_POWER_PORTS}")
        return "(" + ",".join(f"{self.power(p):.2f}" for p in ports) + ")"

    # emulator controls

    def _hold(self, params: list[str]) -> None:
        _count(params, 1)
        ports = self._egress_list(params[0])
        for e in ports:
            if self.lit(e):
                self._emit(Signal(egress=e, lit=False))
        self.held.update(ports)

    def _release(self, params: list[str]) -> None:
        _count(params, 1)
        ports = self._egress_list(params[0]) or sorted(self.held)
        for e in ports:
            if e in self.held:
                self.held.discard(e)
                if self.lit(e):
                    self._emit(Signal(egress=e, lit=True))

    def _lock_set(self, params: list[str]) -> None:
        _count(params, 1)
        value = params[0].upper()
        if value in ("DEF", "DEFAULT"):
            self.lock_model = QuantileLock()
            return
        if value in ("NEV", "NEVER"):
            self.lock_model = FixedLock(ms=math.inf)
            return
        try:
            ms = float(value)
        except ValueError:
            raise _Fault(-104, "Data type error", f"not ms or DEFault: {params[0]!r}") from None
        if not 0 <= ms < math.inf:
            raise _Fault(-222, "Data out of range", f"lock time {ms}")
        self.lock_model = FixedLock(ms=ms)

    def _lock_query(self, params: list[str]) -> str:
        _count(params, 0)
        values = ",".join(
            f"{ms:.0f}" if math.isfinite(ms) else "INF" for ms in self.last_lock_ms.values()
        )
        return f"{_plist(self.last_lock_ms)},({values})"

    def _drop_set(self, params: list[str]) -> None:
        _count(params, 1)
        value = params[0].upper()
        for short, full in (("BEF", "BEFORE"), ("AFT", "AFTER"), ("OFF", "OFF")):
            if value in (short, full):
                self.drop = full
                return
        raise _Fault(-104, "Data type error", f"not BEFore, AFTer or OFF: {params[0]!r}")

    def _drop_query(self, params: list[str]) -> str:
        _count(params, 0)
        return self.drop

    # helpers

    def _connect(self, ingress: int, egress: int) -> None:
        token = next(self._tokens)
        lock_ms = self.lock_model.draw(self._lock_rng)
        self.last_lock_ms.pop(egress, None)
        self.last_lock_ms[egress] = lock_ms
        self.links[egress] = _Link(ingress=ingress, token=token, locked=False)
        delay = self.config.switch_ms + lock_ms
        self._emit(Signal(egress=egress, lit=False), Patch(ingress=ingress, egress=egress))
        if math.isfinite(delay):  # LOCK NEVer: the transceivers never lock
            self._emit(ArmLock(egress=egress, token=token, delay_ms=delay))

    def _remove(self, egress: int) -> None:
        link = self.links.pop(egress)
        self._emit(Unpatch(ingress=link.ingress, egress=egress), Signal(egress=egress, lit=False))

    def _check_range(self, ports: Sequence[int], low: int, high: int) -> None:
        bad = [p for p in ports if not low <= p <= high]
        if bad:
            raise _Fault(-222, "Data out of range", f"port {bad[0]}")

    def _egress_list(self, param: str) -> list[int]:
        ports = _ports(param)
        n = self.config.ingress
        self._check_range(ports, n + 1, n + self.config.egress)
        return ports


def _is_change(command: str) -> bool:
    """``command`` is a connection change (what ``:EMULator:DROP`` waits for)."""
    header = command.split(None, 1)[0] if command.strip() else ""
    if header.endswith("?"):
        return False
    tokens = header.lstrip(":").split(":")
    return any(_header_matches(nodes, tokens) for nodes in _CHANGES)


def _plist(ports: Iterable[int]) -> str:
    return "(@" + ",".join(str(p) for p in ports) + ")"


_COMMANDS: tuple[tuple[tuple[_Node, ...], bool, Handler], ...] = tuple(
    (_compile(pattern.rstrip("?")), pattern.endswith("?"), handler)
    for pattern, handler in (
        ("*IDN?", SwitchState._idn),
        ("*OPC?", SwitchState._opc),
        ("*RST", SwitchState._rst),
        ("*CLS", SwitchState._cls),
        (":SYSTem:ERRor[:NEXT]?", SwitchState._next_error),
        (":OXC:SWITch:SIZE?", SwitchState._size),
        (":OXC:SWITch:CONNect:ADD", SwitchState._add),
        (":OXC:SWITch:CONNect:SUBtract", SwitchState._sub),
        (":OXC:SWITch:CONNect:ONLY", SwitchState._only),
        (":OXC:SWITch:CONNect:STATe?", SwitchState._state),
        (":OXC:SWITch:CONNect:PORT?", SwitchState._port),
        (":PMON:POWer?", SwitchState._power),
        (":EMULator:HOLDdark", SwitchState._hold),
        (":EMULator:RELease", SwitchState._release),
        (":EMULator:LOCK", SwitchState._lock_set),
        (":EMULator:LOCK?", SwitchState._lock_query),
        (":EMULator:DROP", SwitchState._drop_set),
        (":EMULator:DROP?", SwitchState._drop_query),
    )
)
_CHANGES = tuple(
    _compile(p)
    for p in (":OXC:SWITch:CONNect:ADD", ":OXC:SWITch:CONNect:SUBtract", ":OXC:SWITch:CONNect:ONLY")
)


def _dark_first(effect: Effect) -> int:
    """Sort key putting a command's darkenings first (the sort is stable): a unit's light
    goes off at the command, while the emulator's patch work (an OVS bundle each, ms under
    load) follows in the worker's queue; the other effects keep their order."""
    return 0 if isinstance(effect, Signal) and not effect.lit else 1
