"""Topology generators: ``reroute topo generate leaf-spine --racks R --spines S --ocs O``.

A leaf-spine fabric with optical circuit switches (OCS) beside the spines:

- rack r: host ``h<r>`` (10.0.x.y/16) on port 1 of leaf switch ``leaf<r>``;
- every leaf reaches every spine ``spine<s>`` (leaf port 100+s, spine port r);
- every leaf reaches every OCS ``ocs<o>`` (leaf port 200+o, OCS duplex port r, egress R+r),
  an R x R optical switch (of the one registered driver kind that makes cross-connects,
  unless ``optical_driver`` names one) whose initial cross-connects pair the racks (1-2,
  3-4, ... shifted by o-1 on ocs<o>, so each OCS joins other racks);
- paths between the hosts of each rack pair (1-2, 3-4, ...): ``r<a>-<b>-s<s>`` over each
  spine and ``r<a>-<b>-o<o>`` over each OCS (a circuit path: it needs that OCS's
  cross-connects between the two leaves); the first spine path is ``initial``.

The result is an ordinary topology file (validated on load), for benches and tests of
scale: planning and applying MBB moves of many flows over many switches.
"""

from __future__ import annotations

from typing import Any

import yaml

from drivers import registry

MAX_RACKS = 250  # an OCS of R x R ports; leaf port numbers 1, 100+s, 200+o


def leaf_spine(
    racks: int, spines: int, ocs: int, name: str = "", optical_driver: str | None = None
) -> dict[str, Any]:
    """The topology file (as data) of a leaf-spine fabric with OCS (module docstring)."""
    if not 2 <= racks <= MAX_RACKS or racks % 2:
        raise ValueError(f"racks must be even, 2..{MAX_RACKS}: {racks}")
    if not 1 <= spines <= 99 or not 0 <= ocs <= 50:
        raise ValueError(f"spines must be 1..99 and ocs 0..50: {spines}, {ocs}")
    nodes: dict[str, Any] = {}
    links: list[dict[str, list[str]]] = []
    for r in range(1, racks + 1):
        nodes[f"h{r}"] = {"kind": "host", "interfaces": {"eth0": f"{_address(r)}/16"}}
        nodes[f"leaf{r}"] = {"kind": "ovs", "dpid": 0x1000 + r}
        links.append({"endpoints": [f"h{r}:eth0", f"leaf{r}:p1"]})
    for s in range(1, spines + 1):
        nodes[f"spine{s}"] = {"kind": "ovs", "dpid": 0x2000 + s}
        links += [{"endpoints": [f"leaf{r}:p{100 + s}", f"spine{s}:p{r}"]} for r in _racks(racks)]
    driver = (optical_driver or cross_connect_kind()) if ocs else ""
    for o in range(1, ocs + 1):
        pairs = _ocs_pairs(racks, o)
        connects = [[a, racks + b] for a, b in pairs] + [[b, racks + a] for a, b in pairs]
        nodes[f"ocs{o}"] = {
            "kind": "optical",
            "driver": driver,
            "size": f"{racks}x{racks}",
            "cross_connects": sorted(connects),
        }
        links += [{"endpoints": [f"leaf{r}:p{200 + o}", f"ocs{o}:p{r}"]} for r in _racks(racks)]
    return {
        "name": name or f"ls-r{racks}s{spines}o{ocs}",
        "topology": {
            "subnets": ["10.0.0.0/16"],
            "kinds": {"ovs": {"protocols": ["OpenFlow13"]}},
            "nodes": nodes,
            "links": links,
            "paths": _paths(racks, spines, ocs),
        },
    }


def cross_connect_kind() -> str:
    """The one registered driver kind that makes cross-connects (ValueError when there are
    none or several: name one)."""
    registry.load_all()
    kinds = [k.name for k in registry.kinds() if callable(getattr(k.factory, "connect", None))]
    if len(kinds) != 1:
        raise ValueError(
            f"the optical switches need a driver kind: registered kinds that make "
            f"cross-connects: {', '.join(kinds) or 'none'}; name one"
        )
    return kinds[0]


def to_yaml(topology: dict[str, Any]) -> str:
    """The topology file as YAML, with the schema comment editors read."""
    head = (
        "# yaml-language-server: $schema=topology.schema.json\n# generated: reroute topo generate\n"
    )
    return head + yaml.safe_dump(topology, sort_keys=False, default_flow_style=None, width=100)


def _address(rack: int) -> str:
    return f"10.0.{rack // 250}.{rack % 250 + 1}"


def _racks(racks: int) -> range:
    return range(1, racks + 1)


def _ocs_pairs(racks: int, o: int) -> list[tuple[int, int]]:
    """Rack pairs ``ocs<o>`` joins: (1,2), (3,4), ... with every rack shifted by o-1."""
    shift = o - 1
    return [(1 + (a - 1 + shift) % racks, 1 + (a + shift) % racks) for a in range(1, racks + 1, 2)]


def _paths(racks: int, spines: int, ocs: int) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for a in range(1, racks + 1, 2):
        b = a + 1
        ends = {"src": f"h{a}", "dst": f"h{b}"}
        for s in range(1, spines + 1):
            via = [f"leaf{a}:p{100 + s}", f"spine{s}:p{b}", f"leaf{b}:p1"]
            paths[f"r{a}-{b}-s{s}"] = {**ends, "via": via, "initial": s == 1}
        for o in range(1, ocs + 1):  # any OCS can be switched to join the two racks
            via = [f"leaf{a}:p{200 + o}", f"ocs{o}:p{racks + b}", f"leaf{b}:p1"]
            paths[f"r{a}-{b}-o{o}"] = {**ends, "via": via}
    return paths
