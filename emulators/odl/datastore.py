"""The EMULATOR's two datastores, as in ODL. Pure: no I/O, no clock.

- ``ConfigStore``: what was asked, by node, table and flow id. A write here is what the
  northbound answers for; programming the switch follows asynchronously.
- ``NodeState`` (the operational datastore of one connected node): the flows and ports the
  switch reported at the last statistics poll. Switch entries are given the id of the
  config flow with the same (table, priority, match), as ODL does, and
  ``#UF$TABLE*<table>-<n>`` ("unknown flow") otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from emulators.odl.flows import Counters, Flow, FlowError, Port

FlowKey = tuple[int, str]  # (table, id)


def node_name(dpid: int) -> str:
    """ODL's node id of datapath ``dpid`` (``openflow:N``)."""
    return f"openflow:{dpid}"


def parse_node(text: str) -> int:
    """``openflow:1`` -> 1 (FlowError when not an OpenFlow node id)."""
    kind, _, dpid = text.partition(":")
    if kind != "openflow" or not dpid.isdigit():
        raise FlowError(f"bad node id {text!r}: expected openflow:<datapath id>", "invalid-value")
    return int(dpid)


@dataclass(slots=True)
class ConfigStore:
    """Config flows by datapath id, then (table, id)."""

    nodes: dict[int, dict[FlowKey, Flow]] = field(default_factory=dict)

    def get(self, dpid: int, table: int, flow_id: str) -> Flow | None:
        """The configured flow ``flow_id`` of ``table`` on ``dpid``, or None."""
        return self.nodes.get(dpid, {}).get((table, flow_id))

    def put(self, dpid: int, flow: Flow) -> Flow | None:
        """Store ``flow``; the flow it replaced (None: created)."""
        flows = self.nodes.setdefault(dpid, {})
        old = flows.get((flow.table, flow.id))
        flows[(flow.table, flow.id)] = flow
        return old

    def delete(self, dpid: int, table: int, flow_id: str) -> Flow | None:
        """Remove a flow; the flow removed (None: there was none)."""
        return self.nodes.get(dpid, {}).pop((table, flow_id), None)

    def flows(self, dpid: int, table: int | None = None) -> list[Flow]:
        """The configured flows of ``dpid`` (of ``table``, if given)."""
        found = self.nodes.get(dpid, {}).values()
        return [f for f in found if table is None or f.table == table]

    def dpids(self) -> list[int]:
        """The datapaths with configured flows."""
        return sorted(d for d, flows in self.nodes.items() if flows)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """One connected node as the last poll saw it."""

    dpid: int
    flows: tuple[tuple[Flow, Counters], ...] = ()
    ports: tuple[Port, ...] = ()

    def tables(self) -> list[int]:
        """The tables holding flows."""
        return sorted({f.table for f, _ in self.flows})

    def table(self, table: int) -> list[tuple[Flow, Counters]]:
        """The flows of ``table`` with their counters."""
        return [(f, c) for f, c in self.flows if f.table == table]

    def with_port(self, port: Port) -> NodeState:
        """The node state with ``port`` replaced."""
        others = tuple(p for p in self.ports if p.number != port.number)
        return replace(self, ports=tuple(sorted((*others, port), key=lambda p: p.number)))


def identify(
    entries: Iterable[tuple[Flow, Counters]], config: Iterable[Flow]
) -> tuple[tuple[Flow, Counters], ...]:
    """Switch entries named by the config flow with the same key, or ``#UF$TABLE*t-n``."""
    ids = {f.key: f.id for f in config}
    named: list[tuple[Flow, Counters]] = []
    unknown = 0
    for flow, counters in entries:
        flow_id = ids.get(flow.key)
        if flow_id is None:
            flow_id, unknown = f"#UF$TABLE*{flow.table}-{unknown + 1}", unknown + 1
        named.append((replace(flow, id=flow_id), counters))
    return tuple(named)
