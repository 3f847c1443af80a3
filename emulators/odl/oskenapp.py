"""The EMULATOR's os-ken application: switch events and replies, handed to the ``Link``.

os-ken loads applications by module name, one ``OSKenApp`` class per module: this module
is that one (``AppManager.load_apps(["emulators.odl.oskenapp"])``), and loading it also loads
os-ken's own ``ofp_handler`` (HELLO, FEATURES, ECHO, the datapath state machine).

os-ken 4.x runs every application on native threads: the handlers here run on this
application's event thread and only pass what they receive to the ``Link``, which moves
it onto the asyncio loop. The ``Link`` comes in through an os-ken *context*
(``LinkSlot``, created by the AppManager, filled before the applications start).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

CONTEXT = "odl_link"
_F = TypeVar("_F", bound=Callable[..., None])
on = cast(Callable[..., Callable[[_F], _F]], set_ev_cls)


class LinkTarget(Protocol):
    """What the application hands events to (``emulators.odl.southbound.Link``); every
    method is called on an os-ken thread and must be thread-safe."""

    def connected(self, dp: Any) -> None:
        """A switch connected."""

    def disconnected(self, dp: Any) -> None:
        """A switch disconnected."""

    def message(self, msg: Any) -> None:
        """A message from a switch."""


class LinkSlot:
    """The os-ken context that carries the ``Link`` (the AppManager creates it bare)."""

    def __init__(self) -> None:
        self.link: LinkTarget | None = None


class OdlSouthboundApp(app_manager.OSKenApp):  # type: ignore[misc]
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    _CONTEXTS = {CONTEXT: LinkSlot}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slot: LinkSlot = kwargs[CONTEXT]

    def _link(self) -> LinkTarget:
        if self.slot.link is None:
            raise RuntimeError("the emulator's Link was not attached before os-ken started")
        return self.slot.link

    @on(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev: Any) -> None:
        """Hand a switch's connection or disconnection to the link."""
        if ev.state == MAIN_DISPATCHER:
            self._link().connected(ev.datapath)
        elif ev.datapath.id is not None:
            self._link().disconnected(ev.datapath)

    @on(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev: Any) -> None:
        """Hand a BARRIER_REPLY to the link."""
        self._link().message(ev.msg)

    @on(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats_reply(self, ev: Any) -> None:
        """Hand a flow-stats reply to the link."""
        self._link().message(ev.msg)

    @on(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def port_desc_reply(self, ev: Any) -> None:
        """Hand a port-description reply to the link."""
        self._link().message(ev.msg)

    @on(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats_reply(self, ev: Any) -> None:
        """Hand a port-statistics reply to the link."""
        self._link().message(ev.msg)

    @on(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev: Any) -> None:
        """Hand a PORT_STATUS to the link."""
        self._link().message(ev.msg)

    @on(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev: Any) -> None:
        """Hand an ERROR to the link."""
        self._link().message(ev.msg)
