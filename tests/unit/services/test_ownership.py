"""Device groups and their balance among replicas (services/reroute/store/ownership.py): pure."""

from __future__ import annotations

from collections import Counter

from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.topology import parse_topology
from services.reroute.store.ownership import assign, coordinator, device_groups, groups_of

TOPO = parse_topology(to_yaml(leaf_spine(racks=12, spines=1, ocs=3)))
SWITCHES = [n for n in TOPO.nodes if n.startswith(("leaf", "spine"))]


def test_a_rack_pair_s_leaves_are_one_group_and_a_spine_in_none() -> None:
    groups = device_groups(TOPO, SWITCHES)
    assert groups["leaf1"] == groups["leaf2"] == "leaf1"
    assert groups["leaf11"] == groups["leaf12"] == "leaf11"
    assert len(set(groups.values())) == 6  # 6 pairs
    assert "spine1" not in groups and "ocs1" not in groups  # shared: their locks only


def test_a_reroute_is_run_by_the_master_of_its_first_group() -> None:
    groups = device_groups(TOPO, SWITCHES)
    pair = {"leaf3", "leaf4", "ocs1/in3", "ocs3/out16"}
    assert coordinator(pair, groups) == "leaf3"
    assert coordinator(pair | {"spine1", "leaf1"}, groups) == "leaf1"  # spanning: one
    assert coordinator({"ocs1/in3"}, groups) is None  # optical only: anyone
    assert groups_of({"*"}, groups) == sorted(set(groups.values()))


def test_groups_are_balanced_and_computed_alike_everywhere() -> None:
    groups = [f"g{i}" for i in range(7)]
    three = assign(groups, ["r-a", "r-b", "r-c"])
    assert sorted(Counter(three.values()).values()) == [2, 2, 3]
    assert assign(groups, ["r-c", "r-a", "r-b"]) == three  # every replica computes the same
    assert sorted(Counter(assign(groups, ["r-a", "r-b"]).values()).values()) == [3, 4]
    assert set(assign(groups[:2], ["r-a", "r-b", "r-c"]).values()) < {"r-a", "r-b", "r-c"}
    assert assign(groups, []) == {}
