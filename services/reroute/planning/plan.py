"""What a planner returns: a ``Plan`` of ``Phase``s of typed ``Step``s, and its ``Disruption``.

Plans are data: the executor runs them, ``reroute plan`` prints them, the tests walk them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from operator import attrgetter

from drivers.base import FlowChange, FlowOp, FlowRule
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Circuit
from services.reroute.planning.order import ORDER, Leg, Order, PhaseName, leg_phase

Rest = tuple[tuple[str, tuple[FlowSpec, ...]], ...]  # (path, forward flows) on each path


class StepKind(StrEnum):
    INSTALL = "install"
    VERIFY = "verify"
    SHIFT = "shift"
    REMOVE = "remove"
    DRAIN = "drain"
    WAIT = "wait"
    CIRCUITS = "circuits"  # optical switch: remove ``disconnect``, then add ``connect``
    AWAIT_LOCK = "await-lock"  # until every port in ``ports`` is up, at most ``duration_s``


class Disruption(StrEnum):
    HITLESS = "hitless"  # every prefix keeps every moved flow on a working path
    OUTAGE = "outage"  # traffic of moved flows is dropped between break and make


_OP = attrgetter("op")


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    kind: StepKind
    device: str = ""
    changes: tuple[FlowChange, ...] = ()
    undo: tuple[FlowChange, ...] = ()
    expect: tuple[FlowRule, ...] = ()  # VERIFY: rules that must read back
    duration_s: float = 0.0  # DRAIN / WAIT; AWAIT_LOCK: the timeout
    connect: tuple[Circuit, ...] = ()  # CIRCUITS
    disconnect: tuple[Circuit, ...] = ()  # CIRCUITS
    # AWAIT_LOCK: (switch, port) that must come up; DRAIN: that must stop sending first
    ports: tuple[tuple[str, int], ...] = ()
    # DRAIN: (switch, cookie) of the rules the shift before it added: they must have
    # matched packets first (the data plane forwards by them)
    seen_on: tuple[tuple[str, int], ...] = ()
    circuits: tuple[Circuit, ...] = ()  # AWAIT_LOCK: the new circuits whose lock it awaits

    def describe(self) -> str:
        """The step as one line, as ``reroute plan`` prints it."""
        if self.kind is StepKind.DRAIN and (self.ports or self.seen_on):
            ports = " ".join(f"{d}:p{p}" for d, p in self.ports) or "nothing"
            seen = " ".join(sorted({d for d, _ in self.seen_on}))
            on = f", the moved flows counted on {seen}" if seen else ""
            return f"{self.kind} {self.duration_s * 1000:.0f} ms after {ports} stop sending{on}"
        if self.kind in (StepKind.DRAIN, StepKind.WAIT):
            return f"{self.kind} {self.duration_s * 1000:.0f} ms"
        if self.kind is StepKind.CIRCUITS:
            gone = " ".join(f"{c.ingress}->{c.egress}" for c in self.disconnect) or "none"
            new = " ".join(f"{c.ingress}->{c.egress}" for c in self.connect) or "none"
            return f"circuits {self.device}: remove {gone}; add {new}"
        if self.kind is StepKind.AWAIT_LOCK:
            ports = " ".join(f"{d}:p{p}" for d, p in self.ports)
            return f"await lock: {ports} up (timeout {self.duration_s * 1000:.0f} ms)"
        if self.kind is StepKind.VERIFY:
            return f"verify {self.device}: {len(self.expect)} rules read back"
        adds = list(map(_OP, self.changes)).count(FlowOp.ADD)  # in C: 100,000s of changes
        dels = len(self.changes) - adds
        return f"{self.kind} {self.device}: +{adds} -{dels} (one batch)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    """Steps run in order; ``concurrent`` phases run their steps at once (any subset of a
    concurrent phase may have happened when something fails: the tests check them all)."""

    name: PhaseName
    steps: tuple[Step, ...]
    concurrent: bool = False
    # a checkpoint: after this phase every flow rests on a working path, placed like this
    # (path, forward flows); a later failure rolls back to here, not to the start
    rest: Rest = ()


def laid_out(
    order: Order, steps: Mapping[PhaseName, Sequence[Step]], rest: Rest = ()
) -> tuple[Phase, ...]:
    """``steps`` as the phases of ``order`` (``planning.order.ORDER``): in its rows' order,
    concurrent where a row says, a phase with no step left out. ``rest`` goes to the
    checkpoint row, or to the phase before it when it has no step (nothing ran between).
    A phase the order has no row for is a ValueError (a planner's bug)."""
    rows = ORDER[order]
    stray = sorted(set(steps) - {r.phase for r in rows})
    if stray:
        raise ValueError(f"the {order} order has no phase {', '.join(stray)}")
    out: list[Phase] = []
    for row in rows:
        got = tuple(steps.get(row.phase, ()))
        if got:
            out.append(Phase(name=row.phase, steps=got, concurrent=row.concurrent))
        if row.checkpoint and rest and out:
            out[-1] = replace(out[-1], rest=rest)
    return tuple(out)


def as_leg(leg: Leg, plan: Plan) -> dict[PhaseName, tuple[Step, ...]]:
    """The steps of ``plan`` (an electronic MBB) by phase, as phases of ``leg``."""
    return {leg_phase(leg, p.name): p.steps for p in plan.phases}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    intent: Intent
    from_paths: tuple[str, ...]
    to_path: str
    disruption: Disruption
    phases: tuple[Phase, ...]
    planned_at: float
    flow_count: int = field(default=0)
    # where the moved flows were: (path, forward flows) -- what recovery restores
    origins: tuple[tuple[str, tuple[FlowSpec, ...]], ...] = ()
    # a rollback that undoes a shift waits this long before undoing what came before it
    # (the make of the path the traffic just left: its packets in flight arrive first)
    undo_drain_s: float = 0.0
    # devices only on the paths left that did not answer (the failure routed around): their
    # rules of those paths stay until they come back, then are removed (``Engine.settle``)
    debt: tuple[str, ...] = ()

    def steps(self) -> list[Step]:
        """Every step, in plan order."""
        return [s for p in self.phases for s in p.steps]

    def describe(self) -> str:
        """The plan as text: a head line, then phases and their numbered steps."""
        head = (
            f"{self.intent.strategy.value.upper()}: {self.flow_count} flow(s) "
            f"{','.join(self.from_paths)} -> {self.to_path} ({self.disruption})"
        )
        lines = [head]
        n = 0
        for phase in self.phases:
            tags = " (concurrent)" if phase.concurrent else ""
            tags += " [checkpoint]" if phase.rest else ""
            lines.append(f"  phase {phase.name}{tags}")
            for step in phase.steps:
                n += 1
                lines.append(f"    {n:>2}. {step.describe()}")
        if self.debt:
            lines.append(
                f"  cleanup pending on {', '.join(self.debt)} (not answering): its rules of "
                f"{','.join(self.from_paths)} are removed when it returns"
            )
        return "\n".join(lines)
