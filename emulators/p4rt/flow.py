"""The flows of the EMULATOR's bridge, as its dataplane and its bridge code share them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

FIELDS = ("in_port", "dl_vlan", "dl_type", "nw_src", "nw_dst", "nw_proto", "tp_src", "tp_dst")
PREFIXED = ("nw_src", "nw_dst")  # value/mask; every other field is matched whole
SHORTHANDS = {"ip": (0x0800, None), "icmp": (0x0800, 1), "tcp": (0x0800, 6), "udp": (0x0800, 17)}
DEFAULT_PRIORITY = 0x8000  # what ovs-ofctl leaves out of a dump
VID_PRESENT = 0x1000
WHOLE = -1  # the mask of a field matched whole


class BridgeError(Exception):
    """``ovs-ofctl`` failed without the bridge refusing anything (no bridge, say)."""


class BridgeRefused(BridgeError):
    """The bridge refused a batch (nothing of it applied); ``code`` names the error."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class Flow(NamedTuple):  # tuples: thousands are made per Write
    """One flow: ``match`` is (field, value, mask) in ``FIELDS`` order (mask ``WHOLE`` but
    for ``PREFIXED``); ``actions`` ("push_vlan", vid), ("pop_vlan", 0), ("output", port)
    in order, none to drop."""

    priority: int
    cookie: int
    match: tuple[tuple[str, int, int], ...]
    actions: tuple[tuple[str, int], ...]

    @property
    def key(self) -> tuple[int, tuple[tuple[str, int, int], ...]]:
        """What the bridge tells flows apart by: another flow with it replaces this one."""
        return self.priority, self.match


class Change(NamedTuple):
    """Add (or replace) a flow, or delete the one with its key."""

    flow: Flow
    delete: bool = False


class FlowTable(Protocol):
    """What the emulator's table needs of a bridge (``Bridge``, or a test's in memory)."""

    async def apply(self, changes: Sequence[Change]) -> None: ...

    async def read(self) -> list[Flow]: ...

    async def clear(self) -> None: ...
