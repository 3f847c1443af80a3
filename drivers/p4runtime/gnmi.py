"""A P4Runtime switch's port state over gNMI, as real P4 switches expose it (P4Runtime has
none): OpenConfig ``interfaces/interface[name=*]/state/oper-status`` and ``.../ifindex``,
subscribed ON_CHANGE in one STREAM subscription (Stratum serves both, beside P4Runtime on
its gRPC port). Messages are the ``gnmi`` protos ``pygnmi`` ships; the channel, its TLS
and the translation of gRPC errors are the P4Runtime client's (``rpc.Client``).

``open``: ``Capabilities`` answered, the subscription made and its ``sync_response``
received (every port known) within ``timeout``. The subscription keeps a view of the
ports (by name: ifindex, oper-status); ``port_states`` answers from it, keyed by ifindex
(the P4Runtime port number on Stratum), ``UP`` for ``UP`` and ``DOWN`` for every other
oper-status (DOWN, LOWER_LAYER_DOWN, TESTING, ...). When the subscription has ended (the
server restarted, the connection went) the next ``port_states`` subscribes again, so a
view is never older than the stream that made it. ``port_events`` hands every change the
stream reports to a listener (``PortEvents``). A value of an unexpected type is a
``ProtocolError`` (and ends the view).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc  # the gnmi protos pygnmi ships

from drivers.base import PortListener, PortState
from drivers.errors import DeviceTimeout, DeviceUnreachable, DriverError, ProtocolError
from drivers.p4runtime.rpc import Client, oneline
from drivers.spec import TlsFiles

log = logging.getLogger("reroute.drivers.p4runtime")
G = gnmi_pb2
LEAVES = ("oper-status", "ifindex")


def subscription() -> Any:
    """The STREAM subscription of every interface's oper-status and ifindex, ON_CHANGE."""
    subs = [
        G.Subscription(path=_path(leaf), mode=G.ON_CHANGE) for leaf in LEAVES
    ]  # fmt: skip
    listed = G.SubscriptionList(subscription=subs, mode=G.SubscriptionList.STREAM, encoding=G.PROTO)
    return G.SubscribeRequest(subscribe=listed)


def _path(leaf: str) -> Any:
    return G.Path(
        elem=[
            G.PathElem(name="interfaces"),
            G.PathElem(name="interface", key={"name": "*"}),
            G.PathElem(name="state"),
            G.PathElem(name=leaf),
        ]
    )


def leaf_of(prefix: Any, path: Any) -> tuple[str, str] | None:
    """(interface name, leaf) of an ``interfaces/interface[name]/state/LEAF`` path, module
    prefixes ignored; None for any other path."""
    elems = [*prefix.elem, *path.elem]
    names = [e.name.rpartition(":")[2] for e in elems]
    if len(names) != 4 or names[:3] != ["interfaces", "interface", "state"]:
        return None
    name = elems[1].key.get("name")
    return (name, names[3]) if name and names[3] in LEAVES else None


class _GnmiClient(Client):
    """The P4Runtime client's channel (options, TLS, errors) with a gNMI stub."""

    def open(self) -> None:
        super().open()
        self.stub = gnmi_pb2_grpc.gNMIStub(self._channel)


class GnmiPorts:
    """The ports of the switch whose gNMI target is ``address`` (``HOST:PORT``)."""

    def __init__(
        self, name: str, address: str, timeout: float, tls: TlsFiles | None = None
    ) -> None:
        self.name = name
        self.address = address
        self.timeout = timeout
        self._client = _GnmiClient(name, address, timeout, tls)
        self._oper: dict[str, PortState] = {}
        self._index: dict[str, int] = {}
        self._listeners: list[PortListener] = []
        self._call: Any = None
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self._failure: DriverError | None = None

    async def open(self) -> None:
        """Connect, check the server answers gNMI, subscribe and wait for the sync."""
        if self._client.stub is not None:
            return
        self._client.open()
        try:
            await self._client.unary("Capabilities", G.CapabilityRequest())
            await self._subscribe()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """End the subscription and close the channel."""
        await self._end()
        await self._client.close()

    async def port_states(self) -> dict[int, PortState]:
        """Oper-status by ifindex, from the live subscription (subscribed again first
        when it ended)."""
        await self._live()
        return {self._index[n]: s for n, s in self._oper.items() if n in self._index}

    @contextlib.asynccontextmanager
    async def port_events(self, listener: PortListener) -> AsyncIterator[None]:
        """Inside, ``listener(ifindex, state)`` for every change the stream reports."""
        await self._live()
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    # ----------------------------------------------------------------------------------

    async def _live(self) -> None:
        if self._client.stub is None:
            raise DeviceUnreachable(self.name, "gNMI: not connected (call open() first)")
        if self._task is None or self._task.done():
            log.info("%s: gNMI subscription ended (%s): subscribing again", self.name,
                     self._failure)  # fmt: skip
            await self._subscribe()

    async def _subscribe(self) -> None:
        """A new subscription; returns once it is in sync (its failure, or DeviceTimeout)."""
        await self._end()
        self._oper.clear()
        self._index.clear()
        self._synced = asyncio.Event()
        self._failure = None
        request = subscription()
        self._client.wire.debug("> gNMI Subscribe %s", oneline(request))
        self._call = self._client.connected_stub().Subscribe()
        self._task = asyncio.create_task(self._follow(self._call, request))
        synced = asyncio.create_task(self._synced.wait())
        try:
            await asyncio.wait({self._task, synced}, timeout=self.timeout,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            synced.cancel()
        if self._synced.is_set():
            return
        failure = self._failure or DeviceTimeout(
            self.name, f"gNMI: no sync_response from {self.address} in {self.timeout:g} s"
        )
        await self._end()
        raise failure

    async def _end(self) -> None:
        task, call = self._task, self._call
        self._task = self._call = None
        if call is not None:
            call.cancel()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow(self, call: Any, request: Any) -> None:
        """Read the stream until it ends; its end (or a bad value) is kept as the failure."""
        try:
            await call.write(request)
            while (reply := await call.read()) is not grpc.aio.EOF:
                self._reply(reply)
            self._failure = DeviceUnreachable(self.name, "gNMI: the subscription ended")
        except grpc.aio.AioRpcError as exc:
            self._failure = self._client.error("Subscribe", exc)
        except ProtocolError as exc:
            self._failure = exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the call broke in another way: the view is gone
            self._failure = DeviceUnreachable(self.name, f"gNMI: {exc!r}")
        if self._failure is not None:
            log.warning("%s: %s", self.name, self._failure)

    def _reply(self, reply: Any) -> None:
        kind = reply.WhichOneof("response")
        if kind == "sync_response":
            self._client.wire.debug("< gNMI sync_response")
            self._synced.set()
        elif kind == "update":
            self._client.wire.debug("< gNMI %s", oneline(reply.update))
            self._notification(reply.update)
        elif kind == "error":
            raise ProtocolError(self.name, f"gNMI: error in the stream: {oneline(reply)}")

    def _notification(self, note: Any) -> None:
        """Apply one notification; the listeners hear of each port whose state changed."""
        touched: dict[str, tuple[int | None, PortState | None]] = {}
        for path in note.delete:
            found = leaf_of(note.prefix, path)
            if found is not None:
                touched.setdefault(found[0], self._known(found[0]))
                self._oper.pop(found[0], None)
                self._index.pop(found[0], None)
        for update in note.update:
            found = leaf_of(note.prefix, update.path)
            if found is not None:
                touched.setdefault(found[0], self._known(found[0]))
                self._set(*found, update.val)
        for name, before in touched.items():
            index, state = now = self._known(name)
            if now != before and index is not None and state is not None:
                for listener in list(self._listeners):
                    listener(index, state)

    def _known(self, name: str) -> tuple[int | None, PortState | None]:
        return self._index.get(name), self._oper.get(name)

    def _set(self, name: str, leaf: str, value: Any) -> None:
        kind = value.WhichOneof("value")
        if leaf == "ifindex":
            if kind != "uint_val":
                raise ProtocolError(self.name, f"gNMI: ifindex of {name} is a {kind}")
            self._index[name] = int(value.uint_val)
        else:
            if kind != "string_val":
                raise ProtocolError(self.name, f"gNMI: oper-status of {name} is a {kind}")
            self._oper[name] = PortState.UP if value.string_val == "UP" else PortState.DOWN
