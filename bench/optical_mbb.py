"""Optical MBB overhead over switching + lock: where the time goes besides the optics.

Run as root: ``.venv/bin/python bench/optical_mbb.py [--runs 3] [--steps] [--no-before]``.
It builds its own fabric (``bench-ost``, seed 003's testbed with its Polatis emulator) and
moves vm2<->vm3 between ``long`` and ``short`` by optical MBB via ``temporary``, no
traffic, alternating directions. Per run: request -> traffic on the new path (the last
shift done and the new circuit locked) minus the emulator's switching time and the lock
time it drew (``:EMUL:LOCK?``), i.e. what the engine adds. The baseline in the same run is
that switching + lock itself, and the same moves with the previous defaults: a fixed
50 ms drain and the lock gate polling port state every 2 ms (``--no-before`` leaves it
out), and the **floor**: the same moves on the same fabric by the least code that does
them safely (``floor``: the plan's rules and circuits, taken before its clock starts, as
raw OpenFlow bundles on one connection per bridge, the SCPI commands on one TCP
connection, PORT_STATUS on the raw connections, the drain waiting as the engine's does
(``services.reroute.engine.drain``: port and flow statistics on the raw connections, so the floor
is as safe as the engine under traffic); no journal, no verification, no planning), timed
the same way. Last line: ``overhead X ms, floor Y ms, Z.ZZx`` (medians).
Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drivers import foreign
from drivers.base import FlowChange, FlowOp
from drivers.gcpause import gc_paused
from drivers.ovs import ofp13
from drivers.ovs.driver import OvsDriver
from drivers.ovs.ofp13 import BundleCtrlType
from drivers.ovs.ofp13_flow import (
    FlowModCommand,
    decode_flow_stats,
    encode_flow_mod,
    encode_flow_stats_request,
)
from drivers.polatis_scpi import scpi as scpi_text
from emulators.polatis.emulator import EmulatorConfig
from experiments import measuring
from fabric import fabric
from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from fabric.kinds import optical_control
from fabric.kinds.polatis_scpi import scpi_port
from fabric.state import FabricState
from services.reroute.engine import drain
from services.reroute.engine.engine import plan_on_devices
from services.reroute.engine.executor import Executor, StepEvent, sleep_until
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology, load_topology
from services.reroute.planning.plan import Plan, Step, StepKind
from services.reroute.store.records import RerouteState, StepState
from services.reroute.store.sqlite import Journal

ROOT = Path(__file__).resolve().parents[1]
SWITCH_MS = EmulatorConfig().switch_ms
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
ALL_PORT_REASONS = 1 << ofp13.OFPPR_ADD | 1 << ofp13.OFPPR_DELETE | 1 << ofp13.OFPPR_MODIFY


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    name: str
    drain_s: float | None  # None: derived from the old path's delay
    lock_events: bool


VARIANTS = (
    Variant(name="now: derived drain, PORT_STATUS lock gate", drain_s=None, lock_events=True),
    Variant(name="before: 50 ms drain, lock polled every 2 ms", drain_s=0.05, lock_events=False),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    overhead_ms: float  # new path - (switching + drawn lock)
    before_circuits_ms: float  # request -> circuits command started
    lock_seen_ms: float  # circuits started -> lock step done, minus switching + drawn lock
    swap_ms: float  # lock step done -> last shift done
    optics_ms: float  # switching + drawn lock
    # under --traffic (the demo's: 5 kpps probe + 100 Mb/s TCP): what the move cost them
    lost: int = 0  # probe packets
    reordered: int = 0  # probe packets
    retransmits: int = 0  # TCP segments (iperf3's sender count)
    drops: int = 0  # packets the fabric's OVS dropped itself meanwhile (rx sockets)


async def one(
    topo: Topology, st: FabricState, to: str, variant: Variant, verbose: bool = False
) -> Run:
    ended: dict[int, float] = {}
    started: dict[int, float] = {}

    def on_event(event: StepEvent) -> None:
        stamp = {StepState.DONE: ended, StepState.STARTED: started}.get(event.state)
        if stamp is not None:
            stamp[event.index] = time.perf_counter()

    intent = Intent(flows=(FLOW,), to_path=to, via="temporary", drain_s=variant.drain_s)
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal(Path(tmp) / "j.sqlite")
        async with fabric_drivers(topo, st) as drivers:
            t0 = time.perf_counter()
            plan = await plan_on_devices(topo, drivers, intent)
            executor = Executor(
                drivers, journal, on_event=on_event, lock_events=variant.lock_events
            )
            outcome = await executor.run("bench", plan)
        journal.close()
    assert outcome.state is RerouteState.DONE, outcome.describe()
    steps = list(enumerate(plan.steps(), start=1))
    if verbose:  # a timeline: each step's start and end from the request (ms)
        print(f"engine -> {to}: plan {(started[1] - t0) * 1000:.1f} ms, then")
        for i, step in steps:
            begin, end = (started[i] - t0) * 1000, (ended[i] - t0) * 1000
            print(f"  {i:>3}. +{begin:7.1f} .. +{end:7.1f}  {step.describe()}")
    (circuits,) = [i for i, s in steps if s.kind is StepKind.CIRCUITS]
    (lock,) = [i for i, s in steps if s.kind is StepKind.AWAIT_LOCK]
    last_shift = max(ended[i] for i, s in steps if s.kind is StepKind.SHIFT)
    new_path = max(last_shift, ended[lock])
    drawn = max(optical_control(st, "ost1").drawn_locks().values())
    optics = SWITCH_MS + drawn
    return Run(
        overhead_ms=(new_path - t0) * 1000 - optics,
        before_circuits_ms=(started[circuits] - t0) * 1000,
        lock_seen_ms=(ended[lock] - started[circuits]) * 1000 - optics,
        swap_ms=(new_path - ended[lock]) * 1000,
        optics_ms=optics,
    )


# --------------------------------------------------------------------------------------
# the floor: the same moves by the least code that does them safely


class RawOpenFlow:
    """One OpenFlow 1.3 connection to a bridge, nothing else: HELLO, ECHO answered,
    replies by xid, an ERROR fails what waits, PORT_STATUS handed to ``on_port``."""

    def __init__(
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.name = name
        self.reader, self.writer = reader, writer
        self.xid = 1
        self.waiting: dict[int, asyncio.Future[bytes]] = {}
        self.on_port: Callable[[int, bool], None] = lambda port, up: None
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, name: str, target: str) -> RawOpenFlow:
        kind, _, where = target.partition(":")
        if kind == "unix":
            reader, writer = await asyncio.open_unix_connection(where)
        else:
            host, _, port = where.rpartition(":")
            reader, writer = await asyncio.open_connection(host, int(port))
        raw = cls(name, reader, writer)
        writer.write(ofp13.encode_hello(raw.next_xid()))
        head = await reader.readexactly(8)
        await reader.readexactly(ofp13.HEADER.unpack(head)[2] - 8)
        raw.task = asyncio.create_task(raw._read())
        return raw

    def next_xid(self) -> int:
        self.xid += 1
        return self.xid

    async def _read(self) -> None:
        while True:
            head = await self.reader.readexactly(8)
            _, kind, length, xid = ofp13.HEADER.unpack(head)
            body = await self.reader.readexactly(length - 8)
            if kind == ofp13.MsgType.ECHO_REQUEST:
                self.writer.write(ofp13.encode_echo_reply(xid, body))
            elif kind == ofp13.MsgType.PORT_STATUS:
                _, port = ofp13.parse_port_status(body)
                self.on_port(port.port_no, not port.link_down)
            elif kind == ofp13.MsgType.ERROR:
                for future in self.waiting.values():  # ordered: nothing after it is trusted
                    if not future.done():
                        future.set_exception(RuntimeError(f"OpenFlow error {body[:4].hex()}"))
            elif xid in self.waiting and not self.waiting[xid].done():
                self.waiting.pop(xid).set_result(body)

    async def ask(self, *msgs: bytes) -> bytes:
        """Send ``msgs`` in one write; the reply to the last one (its xid)."""
        xid = ofp13.HEADER.unpack_from(msgs[-1])[3]
        future = self.waiting[xid] = asyncio.get_running_loop().create_future()
        self.writer.write(b"".join(msgs))
        try:
            reply: bytes = await future
            return reply
        finally:
            self.waiting.pop(xid, None)

    async def bundle(self, changes: Sequence[FlowChange]) -> None:
        """OPEN, the flow-mods and a BARRIER in one write; at the barrier's reply (an
        error for any of them comes before it: OVS answers in order) the COMMIT. Not
        OPEN..COMMIT in one write: OVS drops a flow-mod it refuses at its ADD_MESSAGE
        and would commit the rest of the bundle."""
        if not changes:
            return
        flags = ofp13.OFPBF_ATOMIC | ofp13.OFPBF_ORDERED
        bundle = self.next_xid()
        open_ = ofp13.encode_bundle_ctrl(
            self.next_xid(), bundle, BundleCtrlType.OPEN_REQUEST, flags
        )
        msgs = [open_]
        for change in changes:
            command = (
                FlowModCommand.ADD if change.op is FlowOp.ADD else FlowModCommand.DELETE_STRICT
            )
            flow_mod = encode_flow_mod(change.rule, self.next_xid(), command)
            msgs.append(ofp13.encode_bundle_add(bundle, flags, flow_mod))
        msgs.append(ofp13.encode_barrier_request(self.next_xid()))
        await self.ask(*msgs)
        commit = BundleCtrlType.COMMIT_REQUEST
        await self.ask(ofp13.encode_bundle_ctrl(self.next_xid(), bundle, commit, flags))

    async def _stats(self, request: bytes) -> bytes:
        """One multipart reply's payload (the floor asks for a few entries: one part)."""
        reply = ofp13.parse_multipart_reply(await self.ask(request))
        if reply.more:
            raise RuntimeError(f"{self.name}: a statistics reply in several parts")
        return reply.body

    async def tx_packets(self, ports: Sequence[int] = ()) -> dict[int, int]:
        """Packets each port sent (PORT_STATS of every port): ``PortCounters``."""
        body = await self._stats(ofp13.encode_port_stats_request(self.next_xid()))
        return dict(ofp13.parse_port_tx_packets(body))

    async def flow_packets(self, cookie: int) -> int:
        """Packets the entries of exactly ``cookie`` matched: ``FlowCounters``."""
        request = encode_flow_stats_request(self.next_xid(), cookie, foreign.ALL_COOKIE_BITS)
        return sum(e.packet_count for e in decode_flow_stats(await self._stats(request)))

    async def subscribe_ports(self) -> dict[int, bool]:
        """PORT_STATUS from now on (SET_CONFIG + SET_ASYNC + BARRIER); the ports' state."""
        await self.ask(
            ofp13.encode_set_config(self.next_xid()),
            ofp13.encode_set_async(self.next_xid(), port_status=ALL_PORT_REASONS),
            ofp13.encode_barrier_request(self.next_xid()),
        )
        states: dict[int, bool] = {}
        body = await self.ask(ofp13.encode_port_desc_request(self.next_xid()))
        for port in ofp13.parse_port_desc(ofp13.parse_multipart_reply(body).body):
            states[port.port_no] = not port.link_down
        return states

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


class RawScpi:
    """One TCP connection to the optical switch (TCP_NODELAY), a line at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> RawScpi:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def change(self, command: str) -> None:
        """``command`` and ``SYST:ERR?`` in one write; raises unless the queue answers 0."""
        self.writer.write(f"{command}\nSYST:ERR?\n".encode())
        reply = (await self.reader.readline()).decode().strip()
        if not reply.startswith(("0,", "+0,")):
            raise RuntimeError(f"{command}: {reply}")

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


@dataclass(frozen=True, slots=True, kw_only=True)
class FloorMoves:
    """What the floor writes, taken from the engine's plan before its clock starts (the
    same rules and circuits): park, drain, circuits, the make during the lock, swap."""

    park_make: dict[str, tuple[FlowChange, ...]]
    park_shift: dict[str, tuple[FlowChange, ...]]
    drain: Step  # what the park's drain watches, and its margin
    optical: str
    remove: tuple[int, ...]  # ingress ports whose circuits go
    add: tuple[tuple[int, int], ...]
    during_lock: dict[str, tuple[FlowChange, ...]]  # old path removed, new path made
    lock_ports: tuple[tuple[str, int], ...]
    swap: dict[str, tuple[FlowChange, ...]]
    cleanup_drain_s: float
    cleanup: dict[str, tuple[FlowChange, ...]]


def floor_moves(plan: Plan) -> FloorMoves:
    """The plan's writes grouped by stage: one bundle per bridge per stage."""
    stage = "park_make"
    by_stage: dict[str, dict[str, list[FlowChange]]] = {}
    drains: list[Step] = []
    circuits = lock = None
    for step in plan.steps():
        kind = step.kind
        if kind is StepKind.SHIFT:
            stage = "park_shift" if circuits is None else "swap"
        elif kind is StepKind.DRAIN:
            drains.append(step)
            continue
        elif kind is StepKind.CIRCUITS:
            circuits, stage = step, "during_lock"
            continue
        elif kind is StepKind.AWAIT_LOCK:
            lock = step
            continue
        elif kind is StepKind.REMOVE and stage == "swap":
            stage = "cleanup"
        if kind is not StepKind.VERIFY:
            by_stage.setdefault(stage, {}).setdefault(step.device, []).extend(step.changes)
    assert circuits is not None and lock is not None and len(drains) == 2, plan.describe()

    def get(name: str) -> dict[str, tuple[FlowChange, ...]]:
        return {d: tuple(c) for d, c in by_stage.get(name, {}).items()}

    return FloorMoves(
        park_make=get("park_make"), park_shift=get("park_shift"), drain=drains[0],
        optical=circuits.device, remove=tuple(c.ingress for c in circuits.disconnect),
        add=tuple((c.ingress, c.egress) for c in circuits.connect),
        during_lock=get("during_lock"), lock_ports=lock.ports, swap=get("swap"),
        cleanup_drain_s=drains[1].duration_s, cleanup=get("cleanup"),
    )  # fmt: skip


async def floor(topo: Topology, st: FabricState, to: str, verbose: bool = False) -> Run:
    """One move by the floor: connections opened and PORT_STATUS asked for before the
    clock (a controller keeps them), then on the clock: park (make, then shift: bundles
    on every bridge at once), drain (until the shift's rules count and the old circuits'
    feeders are quiet, then its margin), SUB then ADD (each with ``SYST:ERR?``), the old path
    removed and the new one made while the transceivers lock, every lock port seen down
    then up by PORT_STATUS, swap shift. The cleanup (drain, remove the parking) after."""
    intent = Intent(flows=(FLOW,), to_path=to, via="temporary")
    async with fabric_drivers(topo, st) as drivers:
        plan = await plan_on_devices(topo, drivers, intent)
        targets = {n: d.target for n, d in drivers.items() if isinstance(d, OvsDriver)}
    moves = floor_moves(plan)
    if verbose:
        print(plan.describe())
    bridges = {n: await RawOpenFlow.open(n, t) for n, t in targets.items()}
    scpi = await RawScpi.open(scpi_port(st, moves.optical))
    try:
        waiting = set(moves.lock_ports)
        seen_down = set()
        locked = asyncio.get_running_loop().create_future()

        def on_port(device: str) -> Callable[[int, bool], None]:
            def note(port: int, up: bool) -> None:
                key = (device, port)
                if key not in waiting:
                    return
                if not up:
                    seen_down.add(key)
                elif key in seen_down:
                    waiting.discard(key)
                    if not waiting and not locked.done():
                        locked.set_result(time.perf_counter())

            return note

        for device in sorted({d for d, _ in moves.lock_ports}):
            states = await bridges[device].subscribe_ports()
            bridges[device].on_port = on_port(device)
            seen_down.update(
                (device, p) for d, p in moves.lock_ports if d == device and not states.get(p)
            )

        async def at_once(stage: dict[str, tuple[FlowChange, ...]]) -> None:
            await asyncio.gather(*(bridges[d].bundle(c) for d, c in stage.items()))

        stamps = {}
        with gc_paused():
            t0 = time.perf_counter()
            await at_once(moves.park_make)
            stamps["park made"] = time.perf_counter()
            await at_once(moves.park_shift)
            stamps["parked"] = time.perf_counter()
            # the engine's wait: the shift's rules counted, the old circuits' feeders quiet
            quiet = await drain.quiet(
                moves.drain, asyncio.get_running_loop().time(), bridges, bridges
            )
            await sleep_until(quiet + moves.drain.duration_s)
            stamps["drained"] = time.perf_counter()
            await scpi.change(scpi_text.sub_command(moves.remove))
            stamps["SUB"] = time.perf_counter()
            await scpi.change(scpi_text.add_command(moves.add))
            stamps["ADD"] = time.perf_counter()
            await at_once(moves.during_lock)
            stamps["new path made"] = time.perf_counter()
            lock_seen = await asyncio.wait_for(locked, 3.0)
            stamps["lock seen"] = lock_seen
            await at_once(moves.swap)
            stamps["swapped"] = done = time.perf_counter()
        await asyncio.sleep(moves.cleanup_drain_s)
        await at_once(moves.cleanup)
    finally:
        for raw in bridges.values():
            await raw.close()
        await scpi.close()
    drawn = max(optical_control(st, moves.optical).drawn_locks().values())
    optics = SWITCH_MS + drawn
    if verbose:
        marks = " ".join(f"{k} +{(v - t0) * 1000:.1f}" for k, v in stamps.items())
        print(f"floor: {marks} ms (switch + lock {optics:.1f} ms)")
    return Run(
        overhead_ms=(done - t0) * 1000 - optics,
        before_circuits_ms=(stamps["drained"] - t0) * 1000,
        lock_seen_ms=(lock_seen - stamps["drained"]) * 1000 - optics,
        swap_ms=(done - lock_seen) * 1000,
        optics_ms=optics,
    )


FLOOR = "floor: raw bundles + SCPI + PORT_STATUS"


def under_traffic(fab: Fabric, topo: Topology, move: Callable[[], Run]) -> Run:
    """``move`` under the demo's traffic (the probe at 5 kpps, iperf3 TCP at 100 Mb/s,
    vm2 -> vm3, ``experiments.measuring.Traffic``), started ``BASELINE_S`` before it; the
    run with the probe's loss and reordering, TCP's retransmissions and the fabric's own
    drops over the traffic's whole time."""
    drops = measuring.fabric_drops(fab)
    with measuring.Traffic(fab, topo.paths["long"], rate=5000, tcp_mbps=100) as traffic:
        time.sleep(measuring.BASELINE_S)
        run = move()
        probe, tcp = traffic.results()
    return replace(
        run,
        lost=int(probe["lost"]),
        reordered=int(probe["reordered"]),
        retransmits=tcp.retransmits or 0,
        drops=measuring.fabric_drops(fab) - drops,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="round trips per variant")
    parser.add_argument("--steps", action="store_true", help="print each move's step timings")
    parser.add_argument(
        "--no-before", action="store_true", help="leave out the previous defaults' variant"
    )
    parser.add_argument(
        "--traffic",
        action="store_true",
        help="each move under the demo's traffic (5 kpps probe + 100 Mb/s TCP; ~6 s a move)",
    )
    args = parser.parse_args()
    topo = replace(load_topology(ROOT / "topologies" / "ngncs-ost.yaml"), name="bench-ost")
    variants = VARIANTS[:1] if args.no_before else VARIANTS
    fabric.down(topo.name)
    fab = fabric.up(topo)
    results: dict[str, list[Run]] = {v.name: [] for v in variants}
    results[FLOOR] = []
    try:
        for _ in range(args.runs):  # interleaved: every variant sees the same machine
            for variant in variants:
                for to in ("short", "long"):

                    def move(to: str = to, variant: Variant = variant) -> Run:
                        return asyncio.run(one(topo, fab.state, to, variant, args.steps))

                    run = under_traffic(fab, topo, move) if args.traffic else move()
                    results[variant.name].append(run)
            for to in ("short", "long"):

                def lowest(to: str = to) -> Run:
                    return asyncio.run(floor(topo, fab.state, to, args.steps))

                results[FLOOR].append(
                    under_traffic(fab, topo, lowest) if args.traffic else lowest()
                )
    finally:
        fabric.down(topo.name)
    print(
        f"{'variant':<46} {'overhead':>9} {'->circuits':>11} {'lock seen':>10} "
        f"{'swap':>6} {'switch+lock':>12}   (ms, median of {2 * args.runs} moves)"
    )
    medians: dict[str, float] = {}
    for name, runs in results.items():

        def med(field: str, runs: list[Run] = runs) -> float:
            return float(statistics.median(getattr(r, field) for r in runs))

        medians[name] = med("overhead_ms")
        print(
            f"{name:<46} {med('overhead_ms'):>9.1f} {med('before_circuits_ms'):>11.1f} "
            f"{med('lock_seen_ms'):>10.1f} {med('swap_ms'):>6.1f} {med('optics_ms'):>12.1f}"
        )
    if args.traffic:
        print(
            f"\n{'variant (sums over the moves)':<46} {'lost':>6} {'fabric drops':>13} "
            f"{'reordered':>10} {'TCP retransmits':>16}"
        )
        for name, runs in results.items():
            print(
                f"{name:<46} {sum(r.lost for r in runs):>6} {sum(r.drops for r in runs):>13} "
                f"{sum(r.reordered for r in runs):>10} {sum(r.retransmits for r in runs):>16}"
            )
    now, low = medians[VARIANTS[0].name], medians[FLOOR]
    print(f"overhead {now:.1f} ms, floor {low:.1f} ms, {now / low:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
