"""The EMULATOR's southbound: os-ken's OpenFlow 1.3 controller, bridged onto asyncio.

``start_osken(link, host, port)`` starts os-ken (its ``ofp_handler`` plus
``emulators.odl.oskenapp``) listening for switches on ``host:port`` (0: a free port, chosen
before os-ken binds it, as its listener cannot report one) and returns the port once it
listens. ``Link`` is the bridge: os-ken threads call ``connected`` / ``disconnected`` /
``message``, which only schedule work on the asyncio loop; the controller awaits
``flow_mod`` (FLOW_MOD + BARRIER: an OFPT_ERROR for the flow-mod raises ``SwitchError``),
``flow_stats`` and ``port_desc`` (multipart requests, parts collected until the last).

xids: this side numbers its own requests from ``XID_BASE`` up, apart from the xids os-ken
gives its HELLOs and ECHOs (a random start), so a reply finds its request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from emulators.odl import ofmsg
from emulators.odl.flows import Counters, Flow, Port
from emulators.odl.ofmsg import Command
from emulators.odl.oskenapp import CONTEXT, LinkSlot
from protocols.openflow13.errors import error_name

log = logging.getLogger("reroute.emulators.odl")
XID_BASE = 0x4F44_0000
REQUEST_TIMEOUT_S = 5.0


class SouthboundError(Exception):
    """A request to a switch failed (not connected, lost, no answer)."""


class SwitchError(SouthboundError):
    """The switch answered OFPT_ERROR; ``code`` is its name, e.g. ``OFPET_.../OFPFMFC_...``."""

    def __init__(self, code: str) -> None:
        self.code = code
        super().__init__(code)


class SwitchEvents(Protocol):
    """What the controller hears from switches (on the asyncio loop)."""

    def switch_connected(self, dpid: int) -> None:
        """A switch connected."""

    def switch_disconnected(self, dpid: int) -> None:
        """A switch disconnected."""

    def port_changed(self, dpid: int, port: Port) -> None:
        """A switch's port changed."""


@dataclass(slots=True)
class _Request:
    dpid: int
    future: asyncio.Future[list[Any]]
    parts: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Link:
    """Thread-safe entry points for os-ken; everything else runs on the asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, events: SwitchEvents) -> None:
        self._loop = loop
        self._events = events
        self._dps: dict[int, Any] = {}
        self._pending: dict[int, _Request] = {}  # reply xid -> request
        self._watched: dict[int, _Request] = {}  # flow-mod xid -> the barrier's request
        self._next_xid = XID_BASE

    # ----------------------------------------------------------------------------------
    # called on os-ken threads

    def connected(self, dp: Any) -> None:
        """A switch connected (called on os-ken's thread)."""
        self._call(self._connected, dp)

    def disconnected(self, dp: Any) -> None:
        """A switch disconnected (called on os-ken's thread)."""
        self._call(self._disconnected, dp)

    def message(self, msg: Any) -> None:
        """A message from a switch (called on os-ken's thread)."""
        self._call(self._message, msg)

    def _call(self, fn: Callable[[Any], None], arg: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            self._loop.call_soon_threadsafe(fn, arg)

    # ----------------------------------------------------------------------------------
    # requests (asyncio loop)

    def connected_dpids(self) -> list[int]:
        """The connected datapath ids."""
        return sorted(self._dps)

    async def flow_mod(self, dpid: int, flow: Flow, command: Command) -> None:
        """Send a FLOW_MOD and a BARRIER; SwitchError when the switch refused the flow-mod."""
        dp = self._dp(dpid)
        xid = self._xids(2)
        request = self._expect(dpid, xid + 1)
        self._watched[xid] = request
        barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
        barrier.set_xid(xid + 1)
        try:
            self._send(dp, ofmsg.flow_mod(dp, flow, command, xid), barrier)
            await self._wait(request, xid + 1)
        finally:
            self._watched.pop(xid, None)
            self._pending.pop(xid + 1, None)
        if request.errors:
            raise SwitchError(request.errors[0])

    async def flow_stats(self, dpid: int) -> list[tuple[Flow, Counters]]:
        """Every entry of every table (``ofmsg.Unreadable`` for one the model cannot hold)."""
        dp = self._dp(dpid)
        parser, ofp = dp.ofproto_parser, dp.ofproto
        request = parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY)
        replies = await self._multipart(dpid, request)
        return list(ofmsg.flow_entries([s for r in replies for s in r.body]))

    async def port_desc(self, dpid: int) -> list[Port]:
        """The ports of ``dpid`` (multipart PORT_DESC)."""
        dp = self._dp(dpid)
        replies = await self._multipart(dpid, dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
        return ofmsg.ports([d for r in replies for d in r.body], dp.ofproto)

    def datapath(self, dpid: int) -> Any | None:
        """The connected os-ken datapath ``dpid`` (None when it is not connected)."""
        return self._dps.get(dpid)

    async def multipart(self, dpid: int, msg: Any) -> list[Any]:
        """Send a multipart request built for ``datapath(dpid)``; its reply parts."""
        return await self._multipart(dpid, msg)

    async def _multipart(self, dpid: int, msg: Any) -> list[Any]:
        xid = self._xids(1)
        msg.set_xid(xid)
        request = self._expect(dpid, xid)
        try:
            self._send(self._dp(dpid), msg)
            return await self._wait(request, xid)
        finally:
            self._pending.pop(xid, None)

    def _dp(self, dpid: int) -> Any:
        dp = self._dps.get(dpid)
        if dp is None:
            raise SouthboundError(f"openflow:{dpid} is not connected")
        return dp

    def _xids(self, count: int) -> int:
        first = self._next_xid
        self._next_xid = XID_BASE + (self._next_xid - XID_BASE + count) % 0x3000_0000
        return first

    def _expect(self, dpid: int, xid: int) -> _Request:
        request = _Request(dpid=dpid, future=self._loop.create_future())
        self._pending[xid] = request
        return request

    def _send(self, dp: Any, *msgs: Any) -> None:
        for msg in msgs:
            if not dp.send_msg(msg):
                raise SouthboundError(f"openflow:{dp.id}: connection closing")

    async def _wait(self, request: _Request, xid: int) -> list[Any]:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                return await request.future
        except TimeoutError:
            raise SouthboundError(f"openflow:{request.dpid}: no reply to xid {xid:#x}") from None

    # ----------------------------------------------------------------------------------
    # what os-ken handed over (asyncio loop)

    def _connected(self, dp: Any) -> None:
        self._dps[dp.id] = dp
        log.info("openflow:%d connected from %s", dp.id, dp.address)
        self._events.switch_connected(dp.id)

    def _disconnected(self, dp: Any) -> None:
        dpid: int = dp.id
        if self._dps.get(dpid) is not dp:
            return  # an older connection of a switch that has reconnected
        del self._dps[dpid]
        for request in [r for r in self._pending.values() if r.dpid == dpid]:
            if not request.future.done():
                request.future.set_exception(SouthboundError(f"openflow:{dpid} disconnected"))
        log.info("openflow:%d disconnected", dpid)
        self._events.switch_disconnected(dpid)

    def _message(self, msg: Any) -> None:
        kind = type(msg).__name__
        if kind == "OFPErrorMsg":
            self._error(msg)
        elif kind == "OFPPortStatus":
            self._events.port_changed(msg.datapath.id, ofmsg.port(msg.desc, msg.datapath.ofproto))
        elif (request := self._pending.get(msg.xid)) is not None and not request.future.done():
            request.parts.append(msg)
            if not getattr(msg, "flags", 0) & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                request.future.set_result(request.parts)

    def _error(self, msg: Any) -> None:
        name = error_name(msg.type, msg.code)
        if (watched := self._watched.get(msg.xid)) is not None:
            watched.errors.append(name)
        elif (request := self._pending.get(msg.xid)) is not None and not request.future.done():
            request.future.set_exception(SwitchError(name))
        else:
            log.warning("openflow:%s: unsolicited error %s", msg.datapath.id, name)

    def close(self) -> None:
        """Hang up on every switch (they reconnect to whoever listens next)."""
        for dp in list(self._dps.values()):
            with contextlib.suppress(OSError):
                dp.close()
                dp.socket.shutdown(socket.SHUT_RDWR)


# --------------------------------------------------------------------------------------
# starting os-ken


@dataclass(frozen=True, slots=True, kw_only=True)
class OsKen:
    """The running os-ken AppManager and the port its OpenFlow listener is on."""

    manager: Any
    port: int

    def close(self) -> None:
        """Stop the applications. os-ken's native-thread listener cannot be stopped: it
        ends with the process."""
        self.manager.close()


def start_osken(link: Link, host: str, port: int, *, timeout: float = 10.0) -> OsKen:
    """Start os-ken's controller on ``host:port`` handing events to ``link``."""
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    port = port or _free_port(host)
    args = ["--ofp-listen-host", host, "--ofp-tcp-listen-port", str(port)]
    cfg.CONF(args, project="os_ken", default_config_files=[])
    manager = AppManager.get_instance()
    manager.load_apps(["emulators.odl.oskenapp"])
    contexts = manager.create_contexts()
    slot: LinkSlot = contexts[CONTEXT]
    slot.link = link
    manager.instantiate_apps(**contexts)
    _wait_listening(port, timeout)
    return OsKen(manager=manager, port=port)


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_listening(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _listening(port):
        if time.monotonic() > deadline:
            raise OSError(f"os-ken is not listening on port {port} after {timeout:g} s")
        time.sleep(0.01)


def _listening(port: int) -> bool:
    """A TCP socket of this network namespace listens on ``port`` (/proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            return True
    return False
