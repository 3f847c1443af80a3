"""The topology loader: shipped files load, each kind of bad file gets a clear error."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml

from services.reroute.cli.topo import SCHEMA_FILE, json_schema
from services.reroute.errors import TopologyError
from services.reroute.model.topology import Circuit, Hop, load_topology, parse_topology

TOPOLOGIES = sorted(Path(__file__).resolve().parents[4].glob("topologies/*.yaml"))

GOOD = """
name: tiny
topology:
  subnets: [10.0.0.0/24]
  nodes:
    a: {kind: host, interfaces: {eth0: 10.0.0.1/24}}
    b: {kind: host, interfaces: {eth0: 10.0.0.2/24}}
    s1: {kind: ovs, dpid: 1}
    s2: {kind: ovs, dpid: 2}
    o1: {kind: optical, driver: polatis_scpi, size: 4x4, cross_connects: [[1, 6], [2, 5]]}
  links:
    - endpoints: ["a:eth0", "s1:p1"]
    - endpoints: ["b:eth0", "s2:p1"]
    - endpoints: ["s1:p2", "o1:p1"]
    - endpoints: ["s2:p2", "o1:p6"]
  paths:
    opt: {src: a, dst: b, via: ["s1:p2", "o1:p6", "s2:p1"], initial: true}
"""


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def test_shipped_topologies_load() -> None:
    assert {p.name for p in TOPOLOGIES} >= {"ngncs-ost.yaml", "two-site-longhaul.yaml"}
    for path in TOPOLOGIES:
        topo = load_topology(path)
        assert topo.paths and topo.hosts and topo.switches


def test_ngncs_paths_resolve_to_the_seed_routes() -> None:
    topo = load_topology(Path("topologies/ngncs-ost.yaml"))
    long, short = topo.paths["long"], topo.paths["short"]
    assert [h.node for h in long.hops] == ["br2", "br1", "br4", "br3"]
    assert [h.node for h in short.hops] == ["br2", "br3"]
    assert [h.node for h in topo.paths["temporary"].hops] == ["br2", "br1", "br4", "br3"]
    assert long.circuits <= topo.nodes["ost1"].cross_connects  # type: ignore[union-attr]
    assert short.circuits == {
        Circuit(switch="ost1", ingress=2, egress=19),
        Circuit(switch="ost1", ingress=3, egress=18),
    }
    assert short.reverse_hops == (
        Hop(node="br3", in_port=1, out_port=2),
        Hop(node="br2", in_port=2, out_port=1),
    )


def test_schema_file_is_current_and_validates_shipped_files() -> None:
    assert SCHEMA_FILE.read_text() == json_schema(), "run `reroute topo schema --write`"
    schema = json.loads(SCHEMA_FILE.read_text())
    for path in TOPOLOGIES:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_optical_ports_accept_ingress_or_egress_names() -> None:
    topo = parse_topology(GOOD)
    assert topo.paths["opt"].circuits == {
        Circuit(switch="o1", ingress=1, egress=6),
        Circuit(switch="o1", ingress=2, egress=5),
    }


BAD = [
    ("unknown root key", ("name: tiny", "name: tiny\nowner: me"), "", "owner"),
    ("unknown node key", ("dpid: 1}", "dpid: 1, colour: red}"), "node s1", "colour"),
    (
        "unknown link key",
        ('["a:eth0", "s1:p1"]', '["a:eth0", "s1:p1"]\n      mtu: 9000'),
        "link 1",
        "mtu",
    ),
    ("unknown kind", ("kind: ovs, dpid: 2", "kind: cisco, dpid: 2"), "node s2", "known"),
    ("dangling endpoint", ('"b:eth0", "s2:p1"', '"b:eth0", "s9:p1"'), "link 2", "names no node"),
    ("port used twice", ('"s2:p2", "o1:p6"', '"s1:p1", "o1:p6"'), "link 4", "already used"),
    ("duplex used twice", ('"s2:p2", "o1:p6"', '"s2:p2", "o1:p5"'), "link 4", "already used"),
    ("outside subnet", ("10.0.0.2/24", "10.0.9.2/24"), "node b", "outside every subnet"),
    ("prefix mismatch", ("10.0.0.2/24", "10.0.0.2/16"), "node b", "does not match"),
    ("same address", ("10.0.0.2/24", "10.0.0.1/24"), "node b", "already used"),
    ("bad host port", ('"a:eth0", "s1:p1"', '"a:eth1", "s1:p1"'), "link 1", "no interface"),
    ("bad switch port", ('"b:eth0", "s2:p1"', '"b:eth0", "s2:x1"'), "link 2", "p<number>"),
    ("optical range", ('"s2:p2", "o1:p6"', '"s2:p2", "o1:p9"'), "link 4", "outside 1..8"),
    ("xc range", ("[[1, 6], [2, 5]]", "[[1, 6], [2, 3]]"), "node o1", "egress outside"),
    ("xc twice", ("[[1, 6], [2, 5]]", "[[1, 6], [1, 5]]"), "node o1", "connected twice"),
    ("dpid twice", ("dpid: 2", "dpid: 1"), "node s2", "already used"),
    ("path wrong node", ('"o1:p6", "s2:p1"', '"o1:p6", "s1:p1"'), "path opt", "arrives at"),
    ("path short via", ('"o1:p6", "s2:p1"]', '"o1:p6"]'), "path opt", "via ends"),
    ("path src not host", ("src: a,", "src: s1,"), "path opt", "must be a host"),
    ("initial needs xc", ("[[1, 6], [2, 5]]", "[[1, 7], [2, 5]]"), "path opt", "needs cross"),
    (
        "duplicate node",
        ("    s2: {kind: ovs", "    s1: {kind: ovs, dpid: 3}\n    s2: {kind: ovs"),
        "",
        "duplicate key 's1'",
    ),
    ("bad yaml", ("nodes:", "nodes: ["), "", "not valid YAML"),
    ("bad node name", ("    a: {kind", "    A: {kind"), "node A", "should match pattern"),
]


@pytest.mark.parametrize(("case", "change", "where", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_files_get_clear_errors(
    tmp_path: Path, case: str, change: tuple[str, str], where: str, message: str
) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(edit(GOOD, *change))
    with pytest.raises(TopologyError) as info:
        load_topology(file)
    err = info.value
    assert err.file == str(file), case
    assert where in err.where, f"{case}: {err}"
    assert message in str(err), f"{case}: {err}"


def test_missing_file() -> None:
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology("/nonexistent/topology.yaml")


def test_kind_defaults_apply_and_node_keys_win() -> None:
    text = textwrap.dedent(GOOD).replace(
        "  nodes:", "  kinds:\n    ovs: {protocols: [OpenFlow10]}\n  nodes:"
    )
    text = text.replace(
        "s2: {kind: ovs, dpid: 2}", "s2: {kind: ovs, dpid: 2, protocols: [OpenFlow13]}"
    )
    topo = parse_topology(text)
    assert topo.nodes["s1"].protocols == ("OpenFlow10",)  # type: ignore[union-attr]
    assert topo.nodes["s2"].protocols == ("OpenFlow13",)  # type: ignore[union-attr]
