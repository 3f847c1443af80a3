"""The EMULATOR's controller: config writes become flow-mods; a poll fills the operational
datastore.

As in ODL (its forwarding-rules manager and statistics manager):

- a config write is committed and answered at once; the switch is programmed after it,
  in order, by one writer task per connected node. A write that changes nothing sends
  nothing; one that changes a flow's match or priority removes the old entry first;
- a flow the switch refuses (OFPT_ERROR) stays in config, never reaches operational, and
  is logged (WARNING on ``reroute.emulators.odl``);
- the operational datastore is refreshed every ``stats_interval_s`` from flow stats and
  port descriptions (ports also on PORT_STATUS), so it lags config by up to one poll;
- when a switch connects, every config flow of its node is pushed to it (reconciliation);
  when it disconnects, its node leaves the operational datastore.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from emulators.odl import ofmsg
from emulators.odl.datastore import ConfigStore, NodeState, identify, node_name
from emulators.odl.flows import Counters, Flow, Port
from emulators.odl.ofmsg import Command
from emulators.odl.southbound import SouthboundError, SwitchError

log = logging.getLogger("reroute.emulators.odl")
Write = tuple[Command, Flow]


class Southbound(Protocol):
    def connected_dpids(self) -> list[int]:
        """The connected datapath ids."""

    async def flow_mod(self, dpid: int, flow: Flow, command: Command) -> None:
        """Send a FLOW_MOD of ``flow`` to ``dpid`` and wait for its barrier."""

    async def flow_stats(self, dpid: int) -> list[tuple[Flow, Counters]]:
        """The flow entries of ``dpid`` with their counters."""

    async def port_desc(self, dpid: int) -> list[Port]:
        """The ports of ``dpid``."""


class Controller:
    """Config and operational datastores over a southbound; implements ``SwitchEvents``."""

    def __init__(self, *, stats_interval_s: float) -> None:
        self.stats_interval_s = stats_interval_s
        self.config = ConfigStore()
        self.nodes: dict[int, NodeState] = {}
        self._southbound: Southbound | None = None
        self._writers: dict[int, asyncio.Queue[Write]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._poller: asyncio.Task[None] | None = None
        self._polls: set[asyncio.Task[None]] = set()

    def start(self, southbound: Southbound) -> None:
        """Start polling the switches through ``southbound``."""
        self._southbound = southbound
        self._poller = asyncio.create_task(self._poll_forever(), name="odl-stats-poll")

    async def close(self) -> None:
        """Cancel the poller and every pending write."""
        tasks = [t for t in (self._poller, *self._tasks.values(), *self._polls) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _sb(self) -> Southbound:
        if self._southbound is None:
            raise RuntimeError("Controller.start() was not called")
        return self._southbound

    # ----------------------------------------------------------------------------------
    # config writes

    def put(self, dpid: int, flow: Flow) -> bool:
        """Store a config flow and program it; True when it was created."""
        old = self.config.put(dpid, flow)
        if old is not None and old.key != flow.key:
            self._queue(dpid, Command.DELETE_STRICT, old)
        if old != flow:
            self._queue(dpid, Command.ADD, flow)
        return old is None

    def delete(self, dpid: int, table: int, flow_id: str) -> bool:
        """Remove a config flow and its entry; False when there was no such flow."""
        old = self.config.delete(dpid, table, flow_id)
        if old is not None:
            self._queue(dpid, Command.DELETE_STRICT, old)
        return old is not None

    def delete_table(self, dpid: int, table: int) -> bool:
        """Delete every configured flow of ``table`` on ``dpid``; False if there were none."""
        flows = self.config.flows(dpid, table)
        for flow in flows:
            self.delete(dpid, table, flow.id)
        return bool(flows)

    def _queue(self, dpid: int, command: Command, flow: Flow) -> None:
        queue = self._writers.get(dpid)
        if queue is not None:  # else: pushed when the switch connects
            queue.put_nowait((command, flow))

    async def _write_forever(self, dpid: int, queue: asyncio.Queue[Write]) -> None:
        while True:
            command, flow = await queue.get()
            try:
                await self._sb().flow_mod(dpid, flow, command)
            except SwitchError as exc:
                log.warning(
                    "%s: the switch refused %s of flow %s (table %d): %s",
                    node_name(dpid), command, flow.id, flow.table, exc.code,
                )  # fmt: skip
            except SouthboundError as exc:
                log.warning("%s: %s of flow %s failed: %s", node_name(dpid), command, flow.id, exc)

    # ----------------------------------------------------------------------------------
    # switch events

    def switch_connected(self, dpid: int) -> None:
        """A switch connected: a new operational node, its configured flows queued for it."""
        self.switch_disconnected(dpid)  # a reconnect: the old session's writer goes
        self.nodes[dpid] = NodeState(dpid=dpid)
        queue: asyncio.Queue[Write] = asyncio.Queue()
        for flow in self.config.flows(dpid):
            queue.put_nowait((Command.ADD, flow))
        self._writers[dpid] = queue
        self._tasks[dpid] = asyncio.create_task(self._write_forever(dpid, queue))
        poll = asyncio.create_task(self._poll_node(dpid))  # ports at once, as ODL's inventory
        self._polls.add(poll)
        poll.add_done_callback(self._polls.discard)

    def switch_disconnected(self, dpid: int) -> None:
        """A switch disconnected: its operational node goes."""
        self.nodes.pop(dpid, None)
        self._writers.pop(dpid, None)
        task = self._tasks.pop(dpid, None)
        if task is not None:
            task.cancel()

    def port_changed(self, dpid: int, port: Port) -> None:
        """Record a switch's port change in its operational node."""
        if (state := self.nodes.get(dpid)) is not None:
            self.nodes[dpid] = state.with_port(port)

    # ----------------------------------------------------------------------------------
    # the statistics poll

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.stats_interval_s)
            await asyncio.gather(*(self._poll_node(d) for d in self._sb().connected_dpids()))

    async def _poll_node(self, dpid: int) -> None:
        try:
            entries = await self._sb().flow_stats(dpid)
            ports = await self._sb().port_desc(dpid)
        except (SouthboundError, ofmsg.Unreadable) as exc:
            log.warning("%s: statistics poll failed: %s", node_name(dpid), exc)
            return
        if dpid in self.nodes:
            flows = identify(entries, self.config.flows(dpid))
            self.nodes[dpid] = NodeState(dpid=dpid, flows=flows, ports=tuple(ports))
