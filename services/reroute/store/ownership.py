"""Device ownership among replicas, as ONOS masters devices: which packet switches go
together (a *group*), and which live replica should master each group. Pure: etcd's side
(terms elected, handed over, watched) is ``etcd/terms.py``.

**Groups.** A reroute writes the packet switches at its paths' ends (and those between);
groups are chosen so that most reroutes stay inside one: the first and last switch of each
path of the topology are joined (union-find). A switch at no path's end (a spine, a core
hop) and an optical switch belong to no group: they are shared by the reroutes of many
groups and stay coordinated by their locks alone (an optical switch by its ports'). A
group is named after its first member (sorted). On a leaf-spine fabric whose flows run
rack pair to rack pair, each pair's two leaves are one group; on seed 003's testbed, the
two edge switches are one.

**Who runs a reroute.** Its *coordinating group* is the first (sorted) group its
resources touch (``EVERYTHING``: every group); the master of that group runs it. One that
touches several groups (*spanning*: rare by the choice of groups) is run the same way, by
the master of its first group: it takes the other groups' devices by their locks, as any
reroute does, so the other masters wait for it as for any overlapping reroute. A reroute
that touches no group (optical ports only) may be run by any replica.

**Balance** (``assign``): rendezvous hashing with bounded loads. Each group goes, in
name order, to the replica that scores highest for it (a hash of both names) among those
that may take one more: every replica masters ``floor`` or ``ceil`` of ``groups /
replicas`` (only ``groups mod replicas`` of them ``ceil``), and a replica joining or
leaving moves few groups.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from services.reroute.model.topology import Topology
from services.reroute.planning.resources import EVERYTHING


def device_groups(topo: Topology, switches: Iterable[str]) -> dict[str, str]:
    """Each of ``switches`` at a path's end -> the name of its group (module docstring)."""
    names = sorted(switches)
    parent = {s: s for s in names}

    def root(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    edges: set[str] = set()
    for path in topo.paths.values():
        ends = [h.node for h in (path.hops[:1] + path.hops[-1:]) if h.node in parent]
        edges.update(ends)
        for a, b in itertools.pairwise(ends):
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)  # the group's name: its first member
    return {s: root(s) for s in names if s in edges}


def groups_of(keys: Iterable[str], group_of: Mapping[str, str]) -> list[str]:
    """The groups lock keys touch, sorted (``EVERYTHING``: all; optical ports: none)."""
    keys = set(keys)
    if EVERYTHING in keys:
        return sorted(set(group_of.values()))
    return sorted({group_of[k] for k in keys if k in group_of})


def coordinator(keys: Iterable[str], group_of: Mapping[str, str]) -> str | None:
    """The group whose master runs a reroute holding ``keys`` (None: any replica)."""
    groups = groups_of(keys, group_of)
    return groups[0] if groups else None


def _score(group: str, replica: str) -> int:
    digest = hashlib.blake2b(f"{group}\0{replica}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(groups: Iterable[str], replicas: Sequence[str]) -> dict[str, str]:
    """Each group -> the replica that should master it (module docstring); {} with no
    replica."""
    names = sorted(set(groups))
    if not replicas:
        return {}
    base, extra = divmod(len(names), len(replicas))
    load: Counter[str] = Counter()
    out: dict[str, str] = {}
    for group in names:
        full = sum(n > base for n in load.values())  # replicas at base + 1 already
        ranked = sorted(((_score(group, r), r) for r in replicas), reverse=True)
        room = [r for _, r in ranked if load[r] < base or (load[r] == base and full < extra)]
        chosen = room[0]
        out[group] = chosen
        load[chosen] += 1
    return out
