"""The three ODL northbound URL styles: where a flow is written, where the operational
(and config) datastore is read, and what the operational node says.

- ``rfc8040`` (Oxygen on; the only form from Chlorine)::

      PUT/DELETE /rests/data/opendaylight-inventory:nodes/node=openflow%3A1/
                 flow-node-inventory:table=0/flow=ID
      GET        /rests/data/opendaylight-inventory:nodes/node=openflow%3A1?content=nonconfig

- ``restconf`` (the older draft, Lithium..Sulfur)::

      PUT/DELETE /restconf/config/opendaylight-inventory:nodes/node/openflow:1/
                 flow-node-inventory:table/0/flow/ID
      GET        /restconf/operational/opendaylight-inventory:nodes/node/openflow:1

- ``adsal`` (Hydrogen's flowprogrammer; one table)::

      PUT/DELETE /controller/nb/v2/flowprogrammer/default/node/OF/00:00:00:00:00:00:00:01/
                 staticFlow/ID

      GET        /controller/nb/v2/statistics/default/flow/node/OF/00:00:00:00:00:00:00:01
                 -> {"node": {...}, "flowStatistic": [{"flow": {...}, "tableId": 0, ...}]}

  Flows are read back through AD-SAL's own statistics northbound (the flows the switch
  reported at the controller's last poll), not the RESTCONF operational datastore, which
  need not hold AD-SAL's static flows. Port state still comes from the draft RESTCONF
  operational node (unverified on a real Hydrogen: its switchmanager northbound is the
  AD-SAL way).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any
from urllib.parse import quote

from drivers.base import FlowRule, PortState
from drivers.odl import mapping
from drivers.odl.mapping import Json, MappingError


class Style(StrEnum):
    RFC8040 = "rfc8040"
    RESTCONF = "restconf"
    ADSAL = "adsal"


def flow_path(style: Style, node: str, rule: FlowRule) -> str:
    """Where ``rule`` is written (PUT) or removed (DELETE)."""
    flow = quote(mapping.flow_id(rule), safe="")
    if style is Style.RFC8040:
        return (
            f"/rests/data/opendaylight-inventory:nodes/node={quote(node, safe='')}"
            f"/flow-node-inventory:table={rule.table}/flow={flow}"
        )
    if style is Style.RESTCONF:
        return (
            f"/restconf/config/opendaylight-inventory:nodes/node/{node}"
            f"/flow-node-inventory:table/{rule.table}/flow/{flow}"
        )
    adsal = mapping.adsal_node(mapping.dpid_of(node))
    return f"/controller/nb/v2/flowprogrammer/default/node/OF/{adsal}/staticFlow/{flow}"


def flow_body(style: Style, node: str, rule: FlowRule) -> Json:
    """The JSON body of ``rule`` on ``node`` in ``style`` (AD-SAL or MD-SAL RESTCONF)."""
    dpid = mapping.dpid_of(node)
    if style is Style.ADSAL:
        return mapping.flow_config(rule, dpid)
    return {"flow-node-inventory:flow": [mapping.flow_json(rule, dpid)]}


def flows_path(style: Style, node: str) -> str | None:
    """Where the node's flows are listed, when not in its operational node (AD-SAL)."""
    if style is Style.ADSAL:
        adsal = mapping.adsal_node(mapping.dpid_of(node))
        return f"/controller/nb/v2/statistics/default/flow/node/OF/{adsal}"
    return None


def statistics_flows(body: object) -> list[FlowRule]:
    """The flows of an AD-SAL statistics answer ``{"node": ..., "flowStatistic": [...]}``
    (``flowStat`` in pre-Hydrogen builds)."""
    return [mapping.parse_flow_statistic(i) for i in statistics_entries(body)]


def statistics_entries(body: object) -> list[Json]:
    """The entries of an AD-SAL statistics answer, unparsed (see ``statistics_flows``)."""
    if not isinstance(body, dict):
        raise MappingError("expected a FlowStatistics object")
    items = body.get("flowStatistic", body.get("flowStat", []))
    if isinstance(items, dict):  # one entry, as some JAXB JSON writers give it
        items = [items]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise MappingError("flowStatistic: expected a list of objects")
    return items


def operational_path(style: Style, node: str) -> str:
    """Where the node's operational state (flows and ports) is read."""
    if style is Style.RFC8040:
        node_key = quote(node, safe="")
        return f"/rests/data/opendaylight-inventory:nodes/node={node_key}?content=nonconfig"
    return f"/restconf/operational/opendaylight-inventory:nodes/node/{node}"


def config_path(style: Style, node: str) -> str:
    """Where the node's config (the flows the controller was asked for) is read; 404 while
    it has none. RESTCONF styles only (AD-SAL keeps static flows elsewhere)."""
    if style is Style.RFC8040:
        node_key = quote(node, safe="")
        return f"/rests/data/opendaylight-inventory:nodes/node={node_key}?content=config"
    if style is Style.RESTCONF:
        return f"/restconf/config/opendaylight-inventory:nodes/node/{node}"
    raise ValueError("AD-SAL has no RESTCONF config datastore for flows")


# --------------------------------------------------------------------------------------
# the operational node


def node_of(body: object) -> Json:
    """The node object of ``{"opendaylight-inventory:node": [{...}]}`` (or ``"node"``)."""
    if not isinstance(body, dict) or len(body) != 1:
        raise MappingError("expected one member, the node")
    (nodes,) = body.values()
    if not isinstance(nodes, list) or len(nodes) != 1 or not isinstance(nodes[0], dict):
        raise MappingError("expected a list of one node")
    node: Json = nodes[0]
    return node


def node_flows(node: Json) -> list[FlowRule]:
    """Every flow of every table of the node."""
    return [mapping.parse_flow(f) for f in node_flow_objects(node)]


def node_flow_objects(node: Json) -> list[Json]:
    """Every flow of every table of the node, unparsed."""
    tables: list[Any] = node.get("flow-node-inventory:table", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise MappingError("flow-node-inventory:table: expected a list of objects")
    flows = [f for t in tables for f in t.get("flow", [])]
    if not all(isinstance(f, dict) for f in flows):
        raise MappingError("flow: expected a list of objects")
    return flows


def node_ports(node: Json) -> dict[int, PortState]:
    """Link state of the numbered node connectors (LOCAL left out); DOWN when the link is
    down or the port is administratively down."""
    states: dict[int, PortState] = {}
    for connector in node.get("node-connector", []):
        number = str(connector.get("id", "")).rsplit(":", 1)[-1]
        if not number.isdigit():
            continue
        state = connector.get("flow-node-inventory:state", {})
        config = str(connector.get("flow-node-inventory:configuration", ""))
        down = bool(state.get("link-down")) or "PORT-DOWN" in config
        states[int(number)] = PortState.DOWN if down else PortState.UP
    return states
