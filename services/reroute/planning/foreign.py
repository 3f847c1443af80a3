"""Other writers' entries against a plan: refused when one would shadow ours. Pure.

A switch shared with other software holds their entries beside ours (``ForeignEntry``, from
each driver's ``survey``). OpenFlow (and a P4 ternary table) hands a packet to the entry of
highest priority that matches it, and leaves equal priorities undefined. So an entry of
another writer in the same table whose match overlaps one of the rules a plan writes, at
a priority at or above that rule's, would take (some of) the plan's packets, or share
them unpredictably. ``check`` refuses such a plan, naming the device, the entry (as the
device shows it) and our rule, before anything changes.

Overlap is decided on the fields ``FlowMatch`` can say: two matches overlap unless some
field both constrain has values no packet can have at once (an exact value, or prefixes
of which neither contains the other). An entry's other fields (``ForeignEntry.more``:
MAC addresses, say) constrain a field our rules never match, so they can narrow the
overlap but never remove it: the decision stands. Entries below our priority (a
table-miss ``NORMAL``, discovery traps at priority 0..199) and in other tables never
conflict.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from drivers.base import FlowMatch, FlowOp, FlowRule, ForeignEntry, Prefix
from services.reroute.errors import PlanError
from services.reroute.planning.plan import Plan, StepKind

SHOWN = 3  # conflicts named in the error


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


def check(plan: Plan, foreign: Mapping[str, Sequence[ForeignEntry]]) -> None:
    """PlanError when another writer's entry would shadow a rule ``plan`` writes."""
    found = conflicts(plan, foreign)
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


def conflicts(plan: Plan, foreign: Mapping[str, Sequence[ForeignEntry]]) -> list[Conflict]:
    """Every (device, entry, rule) where an entry of another writer would shadow a rule
    the plan adds, by device in plan order (one conflict per entry)."""
    found: list[Conflict] = []
    for device, rules in _writes(plan).items():
        entries = foreign.get(device, ())
        if not entries:
            continue
        lowest = min(r.priority for r in rules)
        for entry in entries:
            if entry.priority < lowest:
                continue
            rule = next(_shadowed(entry, rules), None)
            if rule is not None:
                found.append(Conflict(device=device, entry=entry, rule=rule))
    return found


def _writes(plan: Plan) -> dict[str, list[FlowRule]]:
    """The rules each device gets from the plan (its adds), without repeats."""
    writes: dict[str, dict[FlowRule, None]] = {}
    for step in plan.steps():
        if step.kind in (StepKind.INSTALL, StepKind.SHIFT) and step.changes:
            rules = writes.setdefault(step.device, {})
            rules.update((c.rule, None) for c in step.changes if c.op is FlowOp.ADD)
    return {d: list(rules) for d, rules in writes.items() if rules}


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
