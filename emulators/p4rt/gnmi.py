"""The EMULATOR's gNMI service (grpc.aio, the ``gnmi`` protos ``pygnmi`` ships): its ports'
OpenConfig state, as a P4Runtime switch such as Stratum serves it beside P4Runtime (on
the same gRPC port).

Served: ``interfaces/interface[name=NAME]/state/oper-status`` (``UP`` / ``DOWN``, a
``string_val``) and ``.../state/ifindex`` (the port's number, a ``uint_val``; P4Runtime's
port number on Stratum), ``name`` a port name or ``*``; a path may stop at ``state``,
``interface`` or ``interfaces`` (every leaf below it), module prefixes
(``openconfig-interfaces:``) are ignored. The ports are the bridge's real ones
(``ports.PortWatch``).

- ``Capabilities``: openconfig-interfaces, PROTO encoding, gNMI 0.8.0;
- ``Get``: one notification per leaf;
- ``Subscribe``: ONCE, or STREAM with ON_CHANGE (TARGET_DEFINED is taken as ON_CHANGE):
  every leaf (unless ``updates_only``), ``sync_response``, then a notification whenever a
  port changes (a deleted port: its paths in ``delete``). SAMPLE and POLL are
  UNIMPLEMENTED; an encoding other than PROTO is UNIMPLEMENTED; a path outside the served
  ones is INVALID_ARGUMENT;
- ``Set``: UNIMPLEMENTED (nothing here is configurable).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from emulators.p4rt.ports import Port, PortWatch

VERSION = "0.8.0"
LEAVES = ("oper-status", "ifindex")
MODEL = gnmi_pb2.ModelData(
    name="openconfig-interfaces", organization="OpenConfig working group", version="2.4.3"
)
READY_S = 5.0  # how long a first request waits for the bridge's ports to be read
G = gnmi_pb2


class PathError(ValueError):
    """A path this server does not serve."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """What one path selects: an interface name (``*``: every one), and leaves."""

    name: str
    leaves: tuple[str, ...]

    def matches(self, port: Port) -> bool:
        return self.name in ("*", port.name)


def _bare(elem_name: str) -> str:
    return elem_name.rpartition(":")[2]


def select(prefix: Any, path: Any) -> Selection:
    """The selection of ``path`` under ``prefix`` (PathError: not served)."""
    elems = [*prefix.elem, *path.elem]
    names = [_bare(e.name) for e in elems]
    if not names or names[0] != "interfaces" or len(names) > 4:
        raise PathError(f"not served: /{'/'.join(names)} (only interfaces/interface/state)")
    name = "*"
    if len(names) > 1:
        if names[1] != "interface":
            raise PathError(f"not served: /{'/'.join(names)}")
        name = elems[1].key.get("name", "*")
    if len(names) > 2 and names[2] != "state":
        raise PathError(f"not served: /{'/'.join(names)} (only state)")
    leaves: tuple[str, ...] = LEAVES
    if len(names) == 4:
        if names[3] not in LEAVES:
            raise PathError(f"not served: {names[3]} (only {', '.join(LEAVES)})")
        leaves = (names[3],)
    return Selection(name=name, leaves=leaves)


def leaf_path(port: Port, leaf: str) -> Any:
    """``interfaces/interface[name=NAME]/state/LEAF``."""
    return G.Path(
        elem=[
            G.PathElem(name="interfaces"),
            G.PathElem(name="interface", key={"name": port.name}),
            G.PathElem(name="state"),
            G.PathElem(name=leaf),
        ]
    )


def leaf_value(port: Port, leaf: str) -> Any:
    if leaf == "ifindex":
        return G.TypedValue(uint_val=port.number)
    return G.TypedValue(string_val="UP" if port.up else "DOWN")


def notification(port: Port, selections: Iterable[Selection], deleted: bool = False) -> Any:
    """The leaves of ``port`` the selections ask for (deleted: their paths), or None."""
    leaves = [leaf for s in selections if s.matches(port) for leaf in s.leaves]
    leaves = list(dict.fromkeys(leaves))
    if not leaves:
        return None
    note = G.Notification(timestamp=time.time_ns())
    for leaf in leaves:
        if deleted:
            note.delete.append(leaf_path(port, leaf))
        else:
            note.update.append(G.Update(path=leaf_path(port, leaf), val=leaf_value(port, leaf)))
    return note


class GnmiEmulator(gnmi_pb2_grpc.gNMIServicer):  # type: ignore[misc]
    """The servicer: the state of ``watch``'s ports."""

    def __init__(self, watch: PortWatch) -> None:
        self.watch = watch

    async def Capabilities(self, request: Any, context: Any) -> Any:
        """The model and encoding served."""
        return G.CapabilityResponse(
            supported_models=[MODEL], supported_encodings=[G.PROTO], gNMI_version=VERSION
        )

    async def Get(self, request: Any, context: Any) -> Any:
        """The leaves the paths select, one notification per port."""
        await self._check_encoding(request.encoding, context)
        selections = await self._selections(request.prefix, request.path, context)
        await self._ready(context)
        notes = [notification(p, selections) for p in self._ports()]
        return G.GetResponse(notification=[n for n in notes if n is not None])

    async def Set(self, request: Any, context: Any) -> Any:
        """Nothing is configurable here."""
        await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "Set: the ports are read-only")

    async def Subscribe(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """ONCE, or STREAM with ON_CHANGE (module docstring)."""
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("request") != "subscribe":
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "first a SubscriptionList")
        listed = first.subscribe
        await self._check_mode(listed, context)
        await self._check_encoding(listed.encoding, context)
        paths = [s.path for s in listed.subscription]
        selections = await self._selections(listed.prefix, paths, context)
        await self._ready(context)
        changes: asyncio.Queue[tuple[Port, bool]] = asyncio.Queue()
        with self.watch.listen(lambda port, deleted: changes.put_nowait((port, deleted))):
            if not listed.updates_only:
                for port in self._ports():
                    note = notification(port, selections)
                    if note is not None:
                        yield G.SubscribeResponse(update=note)
            yield G.SubscribeResponse(sync_response=True)
            if listed.mode == G.SubscriptionList.ONCE:
                return
            while True:
                port, deleted = await changes.get()
                note = notification(port, selections, deleted)
                if note is not None:
                    yield G.SubscribeResponse(update=note)

    def _ports(self) -> list[Port]:
        return [self.watch.ports[n] for n in sorted(self.watch.ports)]

    async def _ready(self, context: Any) -> None:
        try:
            await asyncio.wait_for(self.watch.ready.wait(), READY_S)
        except TimeoutError:
            await _abort(context, grpc.StatusCode.UNAVAILABLE, "the ports are not read yet")

    async def _selections(self, prefix: Any, paths: Iterable[Any], context: Any) -> list[Selection]:
        try:
            found = [select(prefix, p) for p in paths]
        except PathError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if not found:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "no path")
        return found

    async def _check_mode(self, listed: Any, context: Any) -> None:
        if listed.mode == G.SubscriptionList.POLL:
            await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "POLL: use STREAM or ONCE")
        if listed.mode == G.SubscriptionList.STREAM:
            for sub in listed.subscription:
                if sub.mode == G.SAMPLE:
                    await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "SAMPLE: use ON_CHANGE")

    async def _check_encoding(self, encoding: int, context: Any) -> None:
        if encoding != G.PROTO:
            await _abort(
                context, grpc.StatusCode.UNIMPLEMENTED,
                f"encoding {G.Encoding.Name(encoding)}: only PROTO (scalar typed values)",
            )  # fmt: skip


def add_to_server(servicer: GnmiEmulator, server: Any) -> None:
    """Serve gNMI on ``server`` (beside P4Runtime, as Stratum does)."""
    gnmi_pb2_grpc.add_gNMIServicer_to_server(servicer, server)


async def _abort(context: Any, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # it raises
