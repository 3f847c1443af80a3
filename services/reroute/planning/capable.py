"""A plan against what its devices declare (``drivers.base.Capabilities``): fitted, or
refused before anything moves. Pure.

- **Lock gates.** An optical plan waits for the new circuit's transceivers to lock: the
  packet-switch port that receives its light comes up (``port_state``). A switch that
  reports no port state (a P4Runtime target without a ``ports`` source) is replaced, per
  circuit, by the optical switch's own power monitor on the circuit's egress port
  (``optical_power``: a Polatis with monitors, whose ``port_states`` say a duplex port is
  up when light leaves its egress). When neither can be seen the plan is refused: it
  would switch the circuit, then fail waiting and roll back.
- **Read-back.** Plans are made on what the switches read back, and verified by reading
  back: a switch that declares no ``read_back`` cannot take part.

``atomic_batch``, ``self_undoing`` and ``max_batch`` are honoured by the executor
(``services.reroute.guard``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from drivers.base import Capabilities
from services.reroute.errors import PlanError
from services.reroute.planning.optical import lock_ports
from services.reroute.planning.plan import Phase, Plan, Step, StepKind
from services.reroute.topology import Circuit, OpticalSwitch, Topology

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
    """The step waiting on each circuit's receiving switch port, or on the optical
    switch's power monitor where that switch reports no port state."""
    if not step.circuits:
        return step
    ports: dict[tuple[str, int], None] = {}
    for circuit in step.circuits:
        for device, port in lock_ports(topo, [circuit]):
            ports[_signal(topo, caps, circuit, device, port)] = None
    return replace(step, ports=tuple(ports))


def _signal(
    topo: Topology, caps: Mapping[str, Capabilities], c: Circuit, device: str, port: int
) -> tuple[str, int]:
    switch = caps.get(device)
    if switch is None or switch.port_state:  # not ours to drive (a scope), or it reports
        return device, port
    optical = caps.get(c.switch)
    if optical is not None and optical.optical_power and optical.port_state:
        node = topo.nodes[c.switch]
        assert isinstance(node, OpticalSwitch)
        return c.switch, node.ingress_of(c.egress)
    raise PlanError(
        f"refused, nothing changed: the lock of circuit {c.switch} {c.ingress}->{c.egress} "
        f"cannot be seen: {device} reports no port state and {c.switch} has no power "
        "monitors. Give the switch a port-state source (p4runtime: ports: in the "
        "inventory) or use an optical switch with power monitors; the circuit would "
        "otherwise switch and the reroute roll back at the lock"
    )
