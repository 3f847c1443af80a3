"""The players' registry (``fabric.kinds``): found by scanning, one per driver kind, both
roles; what a topology needs of them checked before anything is built; their options."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fabric.kinds as kinds
from drivers import registry
from fabric.errors import FabricError
from fabric.fabric import choose_options
from fabric.player import Role
from services.reroute.model.topology import Topology, load_topology

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def rescanned() -> Iterator[None]:
    """``players()`` scanned again in the test, and again after it."""
    kinds.players.cache_clear()
    yield
    kinds.players.cache_clear()


def test_every_player_is_found_and_plays_a_registered_kind_of_its_role() -> None:
    found = kinds.players()
    here = {p.name.removesuffix(".py") for p in (ROOT / "fabric" / "kinds").iterdir()}
    assert set(found) == here - {"__init__", "__pycache__"}
    registry.load_all()
    for kind, played in found.items():
        factory = registry.lookup(kind)
        method = "connect" if played.role is Role.OPTICAL else "apply"
        assert callable(getattr(factory, method, None)), kind
    assert {p.role for p in found.values()} == set(Role)
    names = [o.name for p in found.values() for o in p.options]
    flags = [o.flag for p in found.values() for o in p.options]
    assert len(set(names)) == len(names) and len(set(flags)) == len(flags)


def test_a_module_added_to_the_package_is_a_player(tmp_path: Path, rescanned: None) -> None:
    """No hand list: a new kind's module is found where the others are."""
    (tmp_path / "made_up.py").write_text(
        "from fabric.kinds.ovs import OvsPlayer\n\n"
        "class MadeUp(OvsPlayer):\n    kind = 'made_up'\n\nPLAYER = MadeUp()\n"
    )
    kinds.__path__.append(str(tmp_path))
    try:
        assert kinds.players()["made_up"].kind == "made_up"
    finally:
        kinds.__path__.remove(str(tmp_path))
        sys.modules.pop("fabric.kinds.made_up", None)


def _topology(tmp_path: Path, switch: str, optical: str = "polatis_scpi") -> Topology:
    text = f"""\
name: tiny
topology:
  subnets: [10.0.0.0/24]
  nodes:
    a: {{kind: host, interfaces: {{eth0: 10.0.0.1/24}}}}
    s1: {switch}
    o1: {{kind: optical, driver: {optical}, size: 4x4}}
  links:
    - endpoints: ["a:eth0", "s1:p1"]
    - endpoints: ["s1:p2", "o1:p1"]
"""
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    return load_topology(path)


def test_each_node_is_played_by_its_drivers_player_packet_ones_first(tmp_path: Path) -> None:
    topo = _topology(tmp_path, "{kind: ovs, dpid: 1}")
    assert [(p.kind, [n.name for n in nodes]) for p, nodes in kinds.by_player(topo)] == [
        ("ovs", ["s1"]),
        ("polatis_scpi", ["o1"]),
    ]


def test_a_node_its_player_finds_wrong_is_refused_before_anything_is_built(
    tmp_path: Path,
) -> None:
    topo = _topology(tmp_path, "{kind: ovs, dpid: 1, driver: hp_dpctl}")
    with pytest.raises(FabricError, match="node s1: an hp_dpctl switch speaks OpenFlow10"):
        kinds.by_player(topo)
    speaks = _topology(tmp_path, "{kind: ovs, dpid: 1, driver: hp_dpctl, protocols: [OpenFlow10]}")
    assert [p.kind for p, _ in kinds.by_player(speaks)] == ["hp_dpctl", "polatis_scpi"]


def test_a_kind_no_player_plays_names_those_that_play_its_role() -> None:
    with pytest.raises(FabricError, match=r"cannot play packet switches of driver nope .*ovs"):
        kinds.player("nope", Role.PACKET)
    with pytest.raises(
        FabricError, match=r"cannot play optical switches of driver ovs .*polatis_scpi"
    ):
        kinds.player("ovs", Role.OPTICAL)


def test_options_are_the_players_parsed_or_their_defaults() -> None:
    chosen = choose_options({"hp_tool": "dpctl", "odl_stats_s": "0.5"})
    assert chosen["hp_tool"] == "dpctl" and chosen["odl_stats_s"] == 0.5
    assert chosen["ryu"] == "auto"  # a default
    with pytest.raises(FabricError, match="no player has option hp_tol"):
        choose_options({"hp_tol": "dpctl"})
    with pytest.raises(FabricError, match="--hp-tool 'dpct': expected one of auto, dpctl"):
        choose_options({"hp_tool": "dpct"})
    with pytest.raises(FabricError, match="--odl-stats-s '-1': expected a positive number"):
        choose_options({"odl_stats_s": "-1"})
