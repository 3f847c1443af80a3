"""What a reroute holds while it runs: its *resources*, as lock keys. Pure.

A key is a device name (``leaf1``: the whole device) or a port of an optical switch
(``ocs2/in3``, ``ocs2/out19``: one ingress or egress port). A whole device overlaps each of
its ports; two reroutes whose keys do not overlap share no device, port or flow and run
at once; overlapping ones run one after the other.

A plan holds (``plan_resources``):

- every device a step writes, verifies or awaits ports of;
- the ingress and egress ports of every circuit it removes or adds;
- every packet switch on the paths it leaves, takes or waits on (``from_paths``,
  ``to_path``, ``via``): the planner's decisions read their rules (which flows still use
  an old path, which rules of the new one are missing), and recovery writes there;
- the ports of every circuit those paths need: a reroute moving flows onto a circuit and
  one removing that circuit must not run at once.

The planner reads the tables of other devices too, but decides nothing on them, so a
reroute may plan while others change them. ``EVERYTHING`` (``*``) stands for every device:
what a reroute whose plan cannot be made yet holds (it is planned alone, then holds what
its plan needs).
"""

from __future__ import annotations

from collections.abc import Iterable

from services.reroute.model.topology import Circuit, Topology
from services.reroute.planning.plan import Plan, StepKind

EVERYTHING = "*"
Keys = frozenset[str]


def port_keys(circuits: Iterable[Circuit]) -> set[str]:
    """The keys of the ingress and egress ports of ``circuits``."""
    out: set[str] = set()
    for c in circuits:
        out |= {f"{c.switch}/in{c.ingress}", f"{c.switch}/out{c.egress}"}
    return out


def plan_resources(topo: Topology, plan: Plan) -> Keys:
    """The keys ``plan`` holds while it runs (module docstring)."""
    keys: set[str] = set()
    for step in plan.steps():
        if step.kind is StepKind.CIRCUITS:
            keys |= port_keys((*step.connect, *step.disconnect))
        elif step.kind is StepKind.AWAIT_LOCK:
            keys |= {device for device, _ in step.ports}
        elif step.device:
            keys.add(step.device)
    names = {*plan.from_paths, plan.to_path, plan.intent.via or ""}
    for path in (topo.paths[n] for n in names if n in topo.paths):
        keys |= {h.node for h in path.hops}
        keys |= port_keys(path.circuits)
    return frozenset(keys)


def device_of(key: str) -> str:
    """The device a key belongs to (``ocs2/in3`` -> ``ocs2``)."""
    return key.partition("/")[0]


def overlap(a: Iterable[str], b: Iterable[str]) -> bool:
    """Some key of ``a`` overlaps some key of ``b`` (the same key, a device and one of its
    ports, or ``EVERYTHING`` and anything)."""
    left, right = set(a), set(b)
    if not left or not right:
        return False
    if EVERYTHING in left or EVERYTHING in right or left & right:
        return True
    whole_left = {k for k in left if "/" not in k}
    whole_right = {k for k in right if "/" not in k}
    return any(device_of(k) in whole_right for k in left) or any(
        device_of(k) in whole_left for k in right
    )


def covers(held: Iterable[str], needed: Iterable[str]) -> bool:
    """Holding ``held`` includes holding every key of ``needed``."""
    have = set(held)
    if EVERYTHING in have:
        return True
    return all(k in have or device_of(k) in have for k in needed)


def expand(keys: Iterable[str], devices: Iterable[str]) -> Keys:
    """``keys`` with ``EVERYTHING`` replaced by every one of ``devices`` (whole)."""
    out = set(keys)
    if EVERYTHING in out:
        out.discard(EVERYTHING)
        out |= set(devices)
    return frozenset(out)
