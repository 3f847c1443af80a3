"""A plan against what its devices declare (``drivers.base.Capabilities``): fitted, or
refused before anything moves. Pure.

- **Lock gates.** An optical plan waits for the new circuit's transceivers to lock: the
  packet-switch port that receives its light comes up (``port_state``: OpenFlow port
  status, or gNMI OpenConfig ``oper-status`` for a P4Runtime switch). The optical switch's
  power monitor is never the lock: it sees light arrive ~25 ms after the mirror settles,
  long before the transceivers lock (seed 003: 605 ms mean), so a switch that reports no
  port state refuses the plan: it would switch the circuit and move the flows onto a
  link that is still dark.
- **Read-back.** Plans are made on what the switches read back, and verified by reading
  back: a switch that declares no ``read_back`` cannot take part.

``atomic_batch``, ``self_undoing`` and ``max_batch`` are honoured by the executor
(``services.reroute.engine.guard``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from drivers.base import Capabilities
from services.reroute.errors import PlanError
from services.reroute.model.topology import Circuit, Topology
from services.reroute.planning.optical import lock_ports
from services.reroute.planning.plan import Phase, Plan, Step, StepKind

WRITES = (StepKind.INSTALL, StepKind.SHIFT, StepKind.REMOVE, StepKind.VERIFY)


def fit(plan: Plan, topo: Topology, caps: Mapping[str, Capabilities]) -> Plan:
    """``plan`` with its lock gates on signals the devices have (PlanError: none)."""
    for step in plan.steps():
        have = caps.get(step.device)
        if step.kind in WRITES and have is not None and not have.read_back:
            raise PlanError(
                f"refused, nothing changed: {step.device} declares no read-back, and "
                "reroutes are planned and verified on what switches read back"
            )
    phases = tuple(_fit_phase(p, topo, caps) for p in plan.phases)
    return replace(plan, phases=phases)


def _fit_phase(phase: Phase, topo: Topology, caps: Mapping[str, Capabilities]) -> Phase:
    if not any(s.kind is StepKind.AWAIT_LOCK for s in phase.steps):
        return phase
    steps = tuple(_gate(s, topo, caps) if s.kind is StepKind.AWAIT_LOCK else s for s in phase.steps)
    return replace(phase, steps=steps)


def _gate(step: Step, topo: Topology, caps: Mapping[str, Capabilities]) -> Step:
    """The step waiting on each circuit's receiving switch ports (PlanError: a switch that
    cannot report its ports' state)."""
    if not step.circuits:
        return step
    ports: dict[tuple[str, int], None] = {}
    for circuit in step.circuits:
        for device, port in lock_ports(topo, [circuit]):
            _check_signal(caps, circuit, device)
            ports[(device, port)] = None
    return replace(step, ports=tuple(ports))


def _check_signal(caps: Mapping[str, Capabilities], c: Circuit, device: str) -> None:
    switch = caps.get(device)
    if switch is None or switch.port_state:  # not ours to drive (a scope), or it reports
        return
    raise PlanError(
        f"refused, nothing changed: the lock of circuit {c.switch} {c.ingress}->{c.egress} "
        f"cannot be seen: {device} reports no port state. Give it a port-state source in "
        "the inventory (p4runtime: gnmi: HOST:PORT, its gNMI target, whose OpenConfig "
        "oper-status is subscribed; or ports: an OpenFlow target of the same switch), or "
        f"use a switch that reports port state. {c.switch}'s power monitors cannot stand "
        "in: they see light arrive, not the transceivers lock, and the flows would move "
        "onto a dark link"
    )
