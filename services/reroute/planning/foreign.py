"""Other writers' entries against a plan: refused when one would shadow ours. Pure.

A switch shared with other software holds their entries beside ours (``ForeignEntry``, from
each driver's ``survey``). OpenFlow (and a P4 ternary table) hands a packet to the entry of
highest priority that matches it, and leaves equal priorities undefined. So an entry of
another writer in the same table whose match overlaps one of the rules the moved traffic
will meet, at a priority at or above that rule's, would take (some of) its packets, or
share them unpredictably. ``check`` refuses such a plan, naming the device, the entry (as
the device shows it) and our rule, before anything changes.

The rules the traffic meets (``relied_on``) are not only those the plan writes: the new
path's and the temporary (``via``) path's transit rules may already be on the devices
(shared with flows moved there before), and so may some moved flows' ingress rules; the
plan then writes none of them. They are computed from the topology (``rules.transit_rules``
and ``rules.ingress_rule``, both directions), so a ``drop`` an operator left above a shared
transit rule refuses the plan instead of a "done" over a black hole (VERIFY reads our
rules back, not what the traffic meets).

Overlap is decided on the fields ``FlowMatch`` can say: two matches overlap unless some
field both constrain has values no packet can have at once (an exact value, or prefixes
of which neither contains the other). An entry's other fields (``ForeignEntry.more``:
MAC addresses, say) constrain a field our rules never match, so they can narrow the
overlap but never remove it: the decision stands. Entries below our priority (a
table-miss ``NORMAL``, discovery traps at priority 0..199) and in other tables never
conflict.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from drivers.base import FlowMatch, FlowOp, FlowRule, ForeignEntry, Prefix
from services.reroute.errors import PlanError
from services.reroute.model.topology import Topology
from services.reroute.planning.plan import Plan, StepKind
from services.reroute.rules import (
    DEFAULT_SPACE,
    INGRESS_PRIORITY,
    ROLE_INGRESS,
    TRANSIT_PRIORITY,
    CookieSpace,
    cookie,
    directions,
    ingress_rule,
    path_tag,
    transit_rules,
)

SHOWN = 3  # conflicts named in the error
LOWEST = min(INGRESS_PRIORITY, TRANSIT_PRIORITY)  # an entry below every rule of ours: no conflict
_COOKIE = attrgetter("cookie")


@dataclass(frozen=True, slots=True, kw_only=True)
class Conflict:
    device: str
    entry: ForeignEntry
    rule: FlowRule

    def describe(self) -> str:
        """One line naming the device, the other writer's entry and our rule."""
        how = "shares the priority of" if self.entry.priority == self.rule.priority else "shadows"
        return (
            f"{self.device}: an entry of another writer (table {self.entry.table}, priority "
            f"{self.entry.priority}) {how} our rule ({self.rule}) on packets both match: "
            f"{self.entry.text}"
        )


def check(
    plan: Plan,
    foreign: Mapping[str, Sequence[ForeignEntry]],
    topo: Topology,
    space: CookieSpace = DEFAULT_SPACE,
) -> None:
    """PlanError when another writer's entry would shadow a rule the traffic of ``plan``
    meets (``relied_on``: written by the plan or already on the device)."""
    found = conflicts(plan, foreign, topo, space)
    if not found:
        return
    lines = [c.describe() for c in found[:SHOWN]]
    if len(found) > SHOWN:
        lines.append(f"... and {len(found) - SHOWN} more")
    raise PlanError(
        "refused, nothing changed: "
        + "; ".join(lines)
        + ". Remove that entry, give it a priority below ours, or move it to another table"
    )


def conflicts(
    plan: Plan,
    foreign: Mapping[str, Sequence[ForeignEntry]],
    topo: Topology,
    space: CookieSpace = DEFAULT_SPACE,
) -> list[Conflict]:
    """Every (device, entry, rule) where an entry of another writer would shadow a rule
    the plan's traffic meets, by device in plan order (one conflict per entry)."""
    found: list[Conflict] = []
    hot = {d for d, es in foreign.items() if any(e.priority >= LOWEST for e in es)}
    for device, rules in relied_on(plan, topo, space, hot).items():
        entries = foreign.get(device, ())
        lowest = min(r.priority for r in rules)
        for entry in entries:
            if entry.priority < lowest:
                continue
            rule = next(_shadowed(entry, rules), None)
            if rule is not None:
                found.append(Conflict(device=device, entry=entry, rule=rule))
    return found


def relied_on(
    plan: Plan,
    topo: Topology,
    space: CookieSpace = DEFAULT_SPACE,
    where: Collection[str] | None = None,
) -> dict[str, list[FlowRule]]:
    """The rules the moved traffic meets on the devices ``where`` (None: every device), by
    device, without repeats: the plan's adds (the new and temporary paths' missing transit
    rules, the ingress rules the shifts write), and every rule of the new and temporary
    paths for the moved flows, both directions, whether the plan writes it or finds it on
    the device (transit rules shared with other flows; ingress rules of flows already
    there). Only the devices asked for are computed: 100,000s of flows, few such devices."""
    rules: dict[str, dict[FlowRule, None]] = {}
    for step in plan.steps():
        wanted = where is None or step.device in where
        if wanted and step.kind in (StepKind.INSTALL, StepKind.SHIFT) and step.changes:
            mine = rules.setdefault(step.device, {})
            mine.update((c.rule, None) for c in step.changes if c.op is FlowOp.ADD)
    for name in _paths_met(plan, topo):
        tag = path_tag(topo, name)
        for d in directions(topo.paths[name]):
            for bridge, rule in transit_rules(d.hops, tag, space):
                if where is None or bridge in where:
                    rules.setdefault(bridge, {})[rule] = None
            entry = d.hops[0].node
            if where is None or entry in where:
                ingress = rules.setdefault(entry, {})
                if _written(ingress, cookie(tag, ROLE_INGRESS, space)) < len(plan.intent.flows):
                    flows = (f if d.forward else f.reverse() for f in plan.intent.flows)
                    ingress.update((ingress_rule(d.hops, tag, f, space), None) for f in flows)
    return {d: list(rs) for d, rs in rules.items() if rs}


def _written(rules: Mapping[FlowRule, None], ingress: int) -> int:
    """How many of ``rules`` are ingress rules of cookie ``ingress``: when the plan writes
    one per moved flow, the flows' ingress rules are all there already (not rebuilt)."""
    return list(map(_COOKIE, rules)).count(ingress)  # in C: 100,000s of rules


def _paths_met(plan: Plan, topo: Topology) -> list[str]:
    """The paths the moved flows travel after the plan or while it runs: the new one and
    the temporary one (``via``), those the topology has."""
    names = [plan.to_path, plan.intent.via]
    return list(dict.fromkeys(n for n in names if n is not None and n in topo.paths))


def _shadowed(entry: ForeignEntry, rules: Sequence[FlowRule]) -> Iterator[FlowRule]:
    for rule in rules:
        same = rule.table == entry.table and rule.priority <= entry.priority
        if same and overlaps(rule.match, entry.match):
            yield rule


def overlaps(a: FlowMatch, b: FlowMatch) -> bool:
    """Some packet matches both (on the fields FlowMatch says; None is any value)."""
    for name in FlowMatch.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None or x == y:
            continue
        if isinstance(x, Prefix) and isinstance(y, Prefix):
            if not _prefixes_meet(x, y):
                return False
        else:
            return False
    return True


def _prefixes_meet(x: Prefix, y: Prefix) -> bool:
    shorter = x if x.plen <= y.plen else y
    longer = y if shorter is x else x
    return shorter.contains(longer.addr)
