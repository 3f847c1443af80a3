"""Optical reconfiguration plans: seed 003's make-before-break (Table 4.7) and
break-before-make (Table 4.2) around an optical switch.

A target path that needs cross-connects not present means reconfiguring the switch: the
new circuits are added (and the circuits they collide with, same ingress or egress,
removed), then the new circuit is dark for the switching time plus the transceivers' lock
time. Ordering policy (the phases' order, concurrency and checkpoint are rows of
``planning.order``; this module computes their steps):

MBB from where the flows are (no ``intent.via``, or it names the path they are on: a
path the change does not cut, e.g. after a failover parked them there)
  circuits  one change per optical switch: remove colliding, add new
  staged    make and verify the target path while the transceivers lock
  lock      wait until the new circuit's switch ports are up (as below)
  move      shift the flows onto the target path, verify, drain, clean their old path
  A change that cuts the flows' path needs a park: ``via``, below (refused without it,
  naming the paths that survive).

MBB parked (``intent.via`` names an electrical temporary path that survives the change)
  park      make ``via``, verify, shift the flows onto it, verify       [checkpoint]
  drain     packets already on the old path arrive (its delay + margin)
  circuits  one change per optical switch: remove colliding, add new
  staged    while the transceivers lock (>= 0.5 s): remove the old path's rules, make
            and verify the target path (tagged rules no packet uses yet)
  lock      wait until the new circuit's switch ports are up (port-status events where
            the switch sends them; a timeout: expiry rolls back to the checkpoint and
            restores the circuits); a switch that reports no port state is replaced by
            the optical switch's power monitor on the circuit, or the plan refused, by
            ``capable.fit`` before anything moves
  swap      shift the flows onto the target path, verify, drain, clean ``via``

BBM
  circuits, then (``bbm_gap_s``, experiments) a wait that lengthens the outage, then the
  electronic move to the target at once (traffic is dropped until the transceivers lock),
  then await the lock to report when the path works.

Refused: reconfigurations that would cut a path still carrying flows not in the intent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from drivers.base import FlowOp
from services.reroute.errors import PlanError, option
from services.reroute.model.intent import DEFAULT_LOCK_TIMEOUT_S, FlowSpec, Intent, Strategy
from services.reroute.model.topology import Circuit, Endpoint, OpticalSwitch, Path, Topology
from services.reroute.planning.electronic import all_on, plan_electronic
from services.reroute.planning.order import Leg, Order
from services.reroute.planning.order import PhaseName as P
from services.reroute.planning.plan import (
    Disruption,
    Phase,
    Plan,
    Step,
    StepKind,
    as_leg,
    laid_out,
)
from services.reroute.rules import DEFAULT_SPACE, ROLE_INGRESS, CookieSpace, path_tag, tag_of
from services.reroute.tables import Tables


def plan_optical(
    topo: Topology,
    tables: Tables,
    optics: frozenset[Circuit],
    intent: Intent,
    now: float,
    space: CookieSpace = DEFAULT_SPACE,
) -> Plan:
    """The plan of a move that needs new cross-connects: MBB via a temporary path, or BBM."""
    to = topo.paths[intent.to_path]
    needed = to.circuits - optics
    removed = colliding(optics, needed)
    circuits = _circuit_steps(needed, removed)
    lock = Step(
        kind=StepKind.AWAIT_LOCK,
        device=",".join(sorted({c.switch for c in needed})),
        ports=lock_ports(topo, needed),
        circuits=tuple(sorted(needed)),
        duration_s=(
            DEFAULT_LOCK_TIMEOUT_S if intent.lock_timeout_s is None else intent.lock_timeout_s
        ),
    )
    if intent.strategy is Strategy.MBB:
        return _mbb(topo, tables, optics, intent, now, removed, circuits, lock, space)
    return _bbm(topo, tables, intent, now, removed, circuits, lock, space)


def colliding(optics: Iterable[Circuit], needed: Iterable[Circuit]) -> frozenset[Circuit]:
    """Present circuits sharing a switch and an ingress or egress port with a needed one."""
    ins = {(c.switch, c.ingress) for c in needed}
    outs = {(c.switch, c.egress) for c in needed}
    return frozenset(
        c for c in optics if (c.switch, c.ingress) in ins or (c.switch, c.egress) in outs
    )


def lock_ports(topo: Topology, circuits: Iterable[Circuit]) -> tuple[tuple[str, int], ...]:
    """The packet-switch ports that receive the light of ``circuits`` (they come up when
    their transceivers lock)."""
    return _attached(
        topo, ((c.switch, _optical(topo, c).ingress_of(c.egress)) for c in sorted(circuits))
    )


def feed_ports(topo: Topology, circuits: Iterable[Circuit]) -> tuple[tuple[str, int], ...]:
    """The packet-switch ports that send into ``circuits`` (their light's source): what
    goes out of them once a circuit is cut is lost."""
    return _attached(topo, ((c.switch, c.ingress) for c in sorted(circuits)))


def _optical(topo: Topology, c: Circuit) -> OpticalSwitch:
    node = topo.nodes[c.switch]
    assert isinstance(node, OpticalSwitch)
    return node


def _attached(topo: Topology, duplex: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """The packet-switch port linked to each (optical switch, duplex port), where one is."""
    switches = {s.name for s in topo.switches}
    ports = []
    for switch, port in duplex:
        peer = topo.peer(Endpoint(node=switch, port=f"p{port}"))
        if peer is not None and peer.node in switches:
            ports.append((peer.node, int(peer.port[1:])))
    return tuple(ports)


def _watching(drain: tuple[Step, ...], ports: tuple[tuple[str, int], ...]) -> tuple[Step, ...]:
    """The ``drain`` steps also watching ``ports`` (until they stop sending:
    ``services.reroute.engine.drain.quiet``); a drain of 0 stays one."""
    return tuple(replace(s, ports=ports) if s.duration_s > 0 else s for s in drain)


def _circuit_steps(needed: frozenset[Circuit], removed: frozenset[Circuit]) -> tuple[Step, ...]:
    switches = sorted({c.switch for c in needed | removed})
    return tuple(
        Step(
            kind=StepKind.CIRCUITS,
            device=sw,
            connect=tuple(sorted(c for c in needed if c.switch == sw)),
            disconnect=tuple(sorted(c for c in removed if c.switch == sw)),
        )
        for sw in switches
    )


def _mbb(
    topo: Topology,
    tables: Tables,
    optics: frozenset[Circuit],
    intent: Intent,
    now: float,
    removed: frozenset[Circuit],
    circuits: tuple[Step, ...],
    lock: Step,
    space: CookieSpace,
) -> Plan:
    via = None if intent.via is None else _path(topo, intent.via)
    if via is None or _all_on(topo, tables, via, intent.flows, space):
        return _from_here(topo, tables, optics, intent, now, removed, circuits, lock, space)
    if not via.circuits <= optics - removed:
        what = f"the reconfiguration cuts path {via.name}, named as {option('via')}"
        raise PlanError(_needs_parking(topo, optics, removed, intent, what))
    park = plan_electronic(
        topo, tables, Intent(flows=intent.flows, to_path=via.name, drain_s=intent.drain_s),
        now, partial_ok=True, space=space,
    )  # fmt: skip
    parked = _after(tables, park)
    _refuse_cut(topo, parked, removed, intent.flows, space)
    made = {s.device: s.changes for s in park.steps() if s.kind is StepKind.SHIFT}
    swap = plan_electronic(
        topo, parked, Intent(flows=intent.flows, to_path=intent.to_path, drain_s=intent.drain_s),
        now, partial_ok=False, made=made, space=space,
    )  # fmt: skip
    steps = {**as_leg(Leg.PARK, park), P.CIRCUITS: circuits, **as_leg(Leg.SWAP, swap),
             P.AWAIT_LOCK: (lock,)}  # fmt: skip
    # nothing goes into the circuits to cut once the park's drain ends
    steps[P.PARK_DRAIN] = _watching(steps.get(P.PARK_DRAIN, ()), feed_ports(topo, removed))
    # a checkpoint once the flows rest on ``via``: a later failure rolls back to there
    phases = laid_out(Order.OPTICAL_MBB_PARKED, steps, rest=((via.name, intent.flows),))
    return _optical_plan(intent, (park, swap), Disruption.HITLESS, phases, now)


def _from_here(
    topo: Topology,
    tables: Tables,
    optics: frozenset[Circuit],
    intent: Intent,
    now: float,
    removed: frozenset[Circuit],
    circuits: tuple[Step, ...],
    lock: Step,
    space: CookieSpace,
) -> Plan:
    """MBB from where the flows are: their paths survive the reconfiguration, so they stay
    there while the new circuit locks (no park), then move. Refused when it cuts them."""
    move = plan_electronic(
        topo, tables, Intent(flows=intent.flows, to_path=intent.to_path, drain_s=intent.drain_s),
        now, partial_ok=False, space=space,
    )  # fmt: skip
    cut = [p for p in move.from_paths if topo.paths[p].circuits & removed]
    if cut:
        what = f"the reconfiguration cuts path {', '.join(cut)}, where the flows are"
        raise PlanError(_needs_parking(topo, optics, removed, intent, what))
    _refuse_cut(topo, tables, removed, intent.flows, space)
    steps = {P.CIRCUITS: circuits, **as_leg(Leg.MOVE, move), P.AWAIT_LOCK: (lock,)}
    phases = laid_out(Order.OPTICAL_MBB_FROM_HERE, steps)
    return _optical_plan(intent, (move,), Disruption.HITLESS, phases, now)


def _all_on(
    topo: Topology, tables: Tables, path: Path, flows: tuple[FlowSpec, ...], space: CookieSpace
) -> bool:
    tag = path_tag(topo, path.name)
    return all(all_on(path, tables, f, tag, space=space) for f in flows)


def _needs_parking(
    topo: Topology, optics: frozenset[Circuit], removed: frozenset[Circuit], intent: Intent,
    what: str,
) -> str:  # fmt: skip
    """Why an MBB to ``intent.to_path`` needs the flows parked (``what``), and where they
    can be: the paths between the same ends that the reconfiguration leaves, or BBM."""
    to = topo.paths[intent.to_path]
    switches = ", ".join(sorted({c.switch for c in to.circuits - optics}))
    head = f"path {to.name} needs new cross-connects on {switches} and {what}: "
    bbm = option("strategy", Strategy.BBM.value)
    bbm += " moves them with an outage until the new circuit locks"
    left = [
        p.name
        for p in topo.paths.values()
        if p.name != to.name
        and {p.src, p.dst} == {to.src, to.dst}
        and p.circuits <= optics - removed
    ]
    if not left:
        return head + f"no other path between their ends survives it; {bbm}"
    parks = " or ".join(option("via", p) for p in left)
    park = f"make-before-break parks them meanwhile on a path that survives ({parks})"
    return f"{head}{park}; or {bbm}"


def _bbm(
    topo: Topology,
    tables: Tables,
    intent: Intent,
    now: float,
    removed: frozenset[Circuit],
    circuits: tuple[Step, ...],
    lock: Step,
    space: CookieSpace,
) -> Plan:
    _refuse_cut(topo, tables, removed, intent.flows, space)
    move = plan_electronic(
        topo, tables, Intent(flows=intent.flows, to_path=intent.to_path, drain_s=0.0),
        now, partial_ok=False, space=space,
    )  # fmt: skip
    gap = (Step(kind=StepKind.WAIT, duration_s=intent.bbm_gap_s),) if intent.bbm_gap_s else ()
    steps: dict[P, tuple[Step, ...]] = {P.CIRCUITS: circuits, P.GAP: gap}
    steps.update((p.name, p.steps) for p in move.phases if p.name != P.DRAIN)  # none: drain 0
    phases = laid_out(Order.OPTICAL_BBM, {**steps, P.AWAIT_LOCK: (lock,)})
    return _optical_plan(intent, (move,), Disruption.OUTAGE, phases, now)


def _optical_plan(
    intent: Intent,
    moves: tuple[Plan, ...],
    disruption: Disruption,
    phases: tuple[Phase, ...],
    now: float,
) -> Plan:
    """The plan of ``intent`` made of ``phases`` from the electronic ``moves``: the flows
    leave from where the first (which takes them off their paths) found them."""
    first = moves[0]
    return Plan(
        intent=intent,
        from_paths=first.from_paths,
        to_path=intent.to_path,
        disruption=disruption,
        phases=phases,
        planned_at=now,
        flow_count=len(intent.flows),
        origins=first.origins,
        undo_drain_s=max(m.undo_drain_s for m in moves),
    )


def _path(topo: Topology, name: str) -> Path:
    path_tag(topo, name)  # raises the PlanError naming the paths
    return topo.paths[name]


def _after(tables: Tables, p: Plan) -> Tables:
    """The tables once ``p`` has run (each table copied once, not once per step)."""
    out = {b: dict(t) for b, t in tables.items()}
    for step in p.steps():
        table = out.setdefault(step.device, {})
        for change in step.changes:
            if change.op is FlowOp.ADD:
                table[change.rule.key] = change.rule
            else:
                table.pop(change.rule.key, None)
    return out


def _refuse_cut(
    topo: Topology,
    tables: Tables,
    removed: frozenset[Circuit],
    moved: tuple[FlowSpec, ...],
    space: CookieSpace,
) -> None:
    """Refuse to cut a path whose ingress rules (other than the moved flows') are in use."""
    moved_here = {(f.src, f.dst, f.ip_proto, f.l4_src, f.l4_dst) for f in moved}
    moved_here |= {(f.dst, f.src, f.ip_proto, f.l4_dst, f.l4_src) for f in moved}
    for path in topo.paths.values():
        if not path.circuits & removed:
            continue
        tag = path_tag(topo, path.name)
        others = [
            rule
            for table in tables.values()
            for rule in table.values()
            if rule.cookie & 0xFF == ROLE_INGRESS
            and tag_of(rule, space) == tag
            and (rule.match.ipv4_src, rule.match.ipv4_dst, rule.match.ip_proto,
                 rule.match.l4_src, rule.match.l4_dst) not in moved_here
        ]  # fmt: skip
        if others:
            m = others[0].match
            assert m.ipv4_src is not None and m.ipv4_dst is not None  # an ingress rule's
            flow = FlowSpec(
                src=m.ipv4_src, dst=m.ipv4_dst, ip_proto=m.ip_proto, l4_src=m.l4_src,
                l4_dst=m.l4_dst,
            )  # fmt: skip
            raise PlanError(
                f"reconfiguring cuts path {path.name}, which still carries "
                f"{len(others)} ingress rule(s) of flows not in this reroute, e.g. {flow}: "
                f"move them too (add them to {option('flows')})"
            )
