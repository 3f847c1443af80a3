"""One train of the impulse-response experiment (seed 000 V) on a running two-site fabric.

The two sites run as in :mod:`experiments.twosite`: each its own ``reroute serve`` (its own
border switch, its own journal) and its own ``reroute monitor rtt`` (h1 watches h2, h2 watches
h1), here without ``--once``: a monitor re-arms once the rtt is back under its clear threshold
and fails over again at the next degradation. An iperf3 TCP stream h1 -> h2 runs through the
whole train, reporting every 100 ms. Every ``period_s`` one degradation is injected:

- ``path``: the network diverts the connection (and the extra flows) onto the long-haul path
  (delay line, 15 ms each way), as the seed's external dpctl/ODL code did;
- ``rtt``:  the connection runs over the delay line at 0 ms (the seed's "ANUE at zero delay");
  the degradation raises it to 15 ms each way, as the seed's curl scripts did. Once both sites
  have failed over to standby, the delay goes back to 0 and the flows back onto the delay line,
  ready for the next degradation (the seed's "the original rtt is restored").

Both monitors fail over to ``standby``. The raw document keeps the throughput series, the
injection times and every monitor event, all in seconds from the stream's start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drivers.base import FlowChange, FlowOp, FlowProgrammer, FlowRule
from drivers.odl.spec import OdlSpec
from drivers.p4runtime.spec import P4RuntimeSpec
from drivers.spec import DeviceSpec
from experiments.twosite import CLI, ROOT, serve_sites, stop_processes
from fabric import fabric, longhaul
from fabric.errors import FabricError
from fabric.state import FabricState
from fabric.traffic.iperf import IperfResult, IperfServer, run_client
from services.reroute.engine.engine import Engine
from services.reroute.errors import RerouteError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.inventory import Inventory, load_inventory, open_drivers
from services.reroute.model.topology import Topology
from services.reroute.rules import path_rules
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal

DEGRADATIONS = ("path", "rtt")
INTERVAL_S = 0.1  # iperf3's reporting interval: the throughput samples
LEAD_S = 3.0  # before the first degradation: TCP up to speed, the baseline B measured
TAIL_S = 1.0
# The stream's socket buffers (iperf3 -w): an unbounded window fills the fabric's queues
# until the rtt alone crosses the monitors' 10 ms threshold. With 64 KiB the queue stays
# under ~3 ms, and the rate is window-bound on the long path (64 KiB / 30 ms ~ 17 Mbit/s),
# as the seed's 10 Gbit/s-tuned hosts were bound there by the rtt.
WINDOW_BYTES = 64 * 1024
LONG_MS = 15  # one way, on the long-haul path and as the rtt extension
TRIGGER_MS, CLEAR_MS = 10.0, 5.0  # rtt thresholds: 0.5 ms normal, 30 ms degraded
INJECTOR_ELECTION = 1000  # added to a P4Runtime device's election id (injector_inventory)


@dataclass(frozen=True, slots=True, kw_only=True)
class Train:
    degradation: str
    n: int
    period_s: float
    extra_flows: int = 0
    window_bytes: int = WINDOW_BYTES
    long_ms: float = LONG_MS
    trigger_ms: float = TRIGGER_MS
    clear_ms: float = CLEAR_MS
    odl_stats_s: float = 3.0  # the ODL emulator's statistics poll (its fabric's)
    congestion: str = "cubic"  # TCP's congestion control in the hosts (the seed's CUBIC)

    def flows(self, topo: Topology) -> list[str]:
        """The measured flow first, then the extra ones (never carrying traffic)."""
        extra = [f"10.10.{1 + i // 250}.{1 + i % 250}>10.20.{1 + i // 250}.{1 + i % 250}"
                 for i in range(self.extra_flows)]  # fmt: skip
        return [flow(topo), *extra]

    @property
    def duration_s(self) -> int:
        return int(LEAD_S + self.n * self.period_s + TAIL_S + 0.999)


def primary(topo: Topology) -> Any:
    """The measured connection's path: ``primary`` (h1 -> h2, or the controller hosts c1 ->
    c2 in ODL's local mode, seed 000 configuration B)."""
    return topo.paths["primary"]


def flow(topo: Topology) -> str:
    """The measured flow, client > server."""
    p = primary(topo)
    return f"{p.src_ip}>{p.dst_ip}"


def sites(topo: Topology) -> tuple[tuple[str, str, str, str], ...]:
    """(site, border switch, monitoring host, the host it watches) of each site."""
    p = primary(topo)
    return (("site1", "sw1", p.src, str(p.dst_ip)), ("site2", "sw2", p.dst, str(p.src_ip)))


def run_train(topo: Topology, train: Train, key: str) -> dict[str, Any]:
    """Bring the fabric up, run the train, tear everything down; the raw document."""
    if train.degradation not in DEGRADATIONS:
        raise FabricError(f"unknown degradation {train.degradation!r}")
    fabric.down(topo.name)
    fab = fabric.up(topo, options={"odl_stats_s": train.odl_stats_s})
    procs: list[subprocess.Popen[str]] = []
    try:
        _install_extra(fab, topo, train.flows(topo)[1:])
        with tempfile.TemporaryDirectory(prefix="reroute-impulse-") as tmp:
            doc = _train(fab.state, topo, train, key, Path(tmp), procs)
            return doc | {"congestion": train.congestion}
    finally:
        stop_processes(procs)
        fabric.down(topo.name)


def _train(
    state: FabricState,
    topo: Topology,
    train: Train,
    key: str,
    tmp: Path,
    procs: list[subprocess.Popen[str]],
) -> dict[str, Any]:
    flows = train.flows(topo)
    line = longhaul.control(state, "lh1")
    if train.degradation == "rtt":
        line.set(delay_ms=0)
        _move(state, topo, flows, "longhaul")
    token = secrets.token_hex(16)
    where = sites(topo)
    urls = serve_sites(state, topo, [w[:2] for w in where], token, tmp, procs)
    monitors = [
        _Monitor(state, host, target, url, token, train, f"{key}-{host}", topo)
        for (_, _, host, target), url in zip(where, urls, strict=True)
    ]
    procs += [m.proc for m in monitors]
    p = primary(topo)
    with IperfServer(bind=str(p.dst_ip), netns=state.host_ns[p.dst]) as server:
        stream = _Stream(state, train, p.src, str(p.dst_ip))
        time.sleep(0.2)  # the server has accepted; iperf3's first interval starts about now
        try:
            impulses = [_impulse(state, topo, train, flows, line, stream.t0, i, monitors)
                        for i in range(train.n)]  # fmt: skip
        except RerouteError as exc:
            seen = {m.host: m.events(stream.t0) for m in monitors}
            raise FabricError(f"{exc} (monitor events: {seen})") from exc
        result = stream.join()
        server.stop()
    events = {m.host: m.events(stream.t0) for m in monitors}
    return {
        "backend": ",".join(sorted({s.driver for s in topo.switches})),
        "topology": topo.name,
        "degradation": train.degradation,
        "extra_flows": train.extra_flows,
        "n": train.n,
        "period_s": train.period_s,
        "lead_s": LEAD_S,
        "interval_s": INTERVAL_S,
        "stream_start_s": round(stream.start_s, 4),
        "window_bytes": train.window_bytes,
        "hosts": [p.src, p.dst],
        "odl_stats_s": train.odl_stats_s,
        "series_mbps": [round(i.bits_per_second / 1e6, 3) for i in result.intervals],
        "retransmits": result.retransmits,
        "retransmits_series": [i.retransmits for i in result.intervals],  # per sample
        "impulses": impulses,
        "monitors": events,
    }


def _impulse(
    state: FabricState,
    topo: Topology,
    train: Train,
    flows: Sequence[str],
    line: Any,
    t0: float,
    i: int,
    monitors: Sequence[_Monitor],
) -> dict[str, Any]:
    at = t0 + LEAD_S + i * train.period_s
    time.sleep(max(0.0, at - time.time()))
    start = time.time()
    doc: dict[str, Any] = {"at_s": round(start - t0, 4)}
    if train.degradation == "path":
        try:
            _move(state, topo, flows, "longhaul")
        except RerouteError as exc:  # a site did not fail over the last time: said, kept on
            doc["inject_error"] = str(exc)
    else:
        line.set(delay_ms=train.long_ms)
    doc["inject_ms"] = round((time.time() - start) * 1e3, 1)
    if train.degradation == "rtt":  # back onto the delay line at 0 ms once both failed over
        deadline = start + 0.8 * train.period_s
        while time.time() < deadline and not all(m.failed_over_since(start) for m in monitors):
            time.sleep(0.05)
        time.sleep(0.3)
        reset = time.time()
        line.set(delay_ms=0)
        _move(state, topo, flows, "longhaul")
        doc["reset_s"] = [round(reset - t0, 4), round(time.time() - t0, 4)]
    return doc


def _install_extra(fab: fabric.Fabric, topo: Topology, flows: Sequence[str]) -> None:
    """The extra flows on the initial path, written through each switch's own driver (on
    two-site-dpctl the hp_dpctl driver, OpenFlow 1.0: the seed's "dpctl method"), and read
    back to confirm every one is there."""
    if flows:
        asyncio.run(install_rules(fab.state, topo, extra_rules(topo, flows)))


def extra_rules(topo: Topology, flows: Sequence[str]) -> dict[str, list[FlowRule]]:
    """The rules that put ``flows`` on the initial h1 -> h2 path, by switch (its transit
    rules are the baseline's already: writing them again changes nothing)."""
    path = primary(topo)
    specs = [FlowSpec.parse(f) for f in flows]
    return path_rules(topo, path, specs)


async def install_rules(
    state: FabricState, topo: Topology, rules: Mapping[str, Sequence[FlowRule]]
) -> None:
    inv = load_inventory(state.inventory)
    async with open_drivers(inv, topo, rules) as drivers:
        for bridge, rs in rules.items():
            driver = drivers[bridge]
            if not isinstance(driver, FlowProgrammer):
                raise FabricError(f"{bridge} takes no flow rules")
            await driver.apply([FlowChange(op=FlowOp.ADD, rule=r) for r in rs])
            missing = missing_rules(rs, await driver.read())
            if missing:
                raise FabricError(f"{bridge}: {len(missing)} extra rules not read back")


def missing_rules(want: Sequence[FlowRule], have: Sequence[FlowRule]) -> list[FlowRule]:
    """The rules of ``want`` with no entry of the same key (table, priority, match) in
    ``have`` (a driver may spell the actions its own way, e.g. OpenFlow 1.0's VLAN ones)."""
    found = {r.key for r in have}
    return [r for r in want if r.key not in found]


def _move(state: FabricState, topo: Topology, flows: Sequence[str], to_path: str) -> None:
    asyncio.run(_move_async(state, topo, flows, to_path))


async def _move_async(
    state: FabricState, topo: Topology, flows: Sequence[str], to_path: str
) -> None:
    """The network (not a site) moves the flows, both switches at once."""
    inv = injector_inventory(load_inventory(state.inventory))
    journal = Journal(inv.journal)
    try:
        async with open_drivers(inv, topo) as drivers:
            specs = tuple(FlowSpec.parse(f) for f in flows)
            intent = Intent(flows=specs, to_path=to_path, drain_s=0.0)
            _, outcome = await Engine.of(topo, inv, drivers, journal).apply(intent)
        if outcome.state is not RerouteState.DONE:
            raise FabricError(f"moving the flows onto {to_path} failed: {outcome.error}")
    finally:
        journal.close()


def injector_inventory(inv: Inventory) -> Inventory:
    """The inventory as the network's own client uses it.

    P4Runtime: a site's ``reroute serve`` holds its switch open for its whole life, and a
    second client needs an election id of its own: a higher one, so that it is the primary
    (the only writer) while it moves the flows, and the site's service is the primary again
    once it has closed. ODL: the injector trusts the controller, as the seed's external ODL
    code did (``read_back: config``): the flows move as soon as the controller has them, not
    once its next statistics poll shows them, so a path-switching degradation starts
    sharply (configuration C)."""
    devices = {name: _injector_spec(spec) for name, spec in inv.devices.items()}
    return dataclasses.replace(inv, devices=devices)


def _injector_spec(spec: DeviceSpec) -> DeviceSpec:
    if isinstance(spec, P4RuntimeSpec):
        return spec.model_copy(update={"election_id": spec.election_id + INJECTOR_ELECTION})
    if isinstance(spec, OdlSpec):
        return spec.model_copy(update={"read_back": "config"})
    return spec


class _Stream:
    """iperf3 TCP client -> server in a thread; ``t0`` is when the client started."""

    def __init__(self, state: FabricState, train: Train, client: str, server: str) -> None:
        self.result: IperfResult | None = None
        self.error: BaseException | None = None
        self.duration_s = train.duration_s
        self.server, self.window, self.congestion = server, train.window_bytes, train.congestion
        self.t0 = self.ended = time.time()
        self.thread = threading.Thread(
            target=self._run, args=(state.host_ns[client], self.duration_s), daemon=True
        )
        self.thread.start()

    def _run(self, ns: str, duration_s: int) -> None:
        try:
            self.result = run_client(
                self.server,
                duration_s=duration_s,
                interval_s=INTERVAL_S,
                netns=ns,
                window_bytes=self.window,
                congestion=self.congestion,
            )
        except BaseException as exc:  # handed to join()
            self.error = exc
        self.ended = time.time()

    @property
    def start_s(self) -> float:
        """When iperf3's first interval began, from ``t0``: its end less its duration (it
        starts after its control exchange, some 10s of ms after the process)."""
        return max(0.0, self.ended - self.t0 - self.duration_s)

    def join(self) -> IperfResult:
        self.thread.join()
        if self.result is None:
            raise FabricError(f"the TCP stream failed: {self.error}")
        return self.result


class _Monitor:
    """``reroute monitor rtt`` on one site, failing over to standby at every degradation;
    its event lines are read as they come (the rtt train waits for the failovers)."""

    def __init__(
        self,
        state: FabricState,
        host: str,
        target: str,
        url: str,
        token: str,
        train: Train,
        run_id: str,
        topo: Topology,
    ) -> None:
        self.host = host
        flows = [a for f in train.flows(topo) for a in ("--flow", f)]
        # re-armed soon: a spurious trigger (the busy userspace delay line stalls now and
        # then) must not hide the next degradation
        hold = min(1.0, train.period_s / 4)
        self.proc = subprocess.Popen(
            [
                *CLI, "monitor", "rtt", "--netns", state.host_ns[host], "--target", target,
                "--trigger", str(train.trigger_ms), "--clear", str(train.clear_ms),
                "--samples", "3",
                "--rate-hz", "50", "--timeout-ms", "150", "--api", url, "--token", token,
                *flows, "--to", "standby", "--duration-s", str(train.duration_s + 15),
                "--hold-down-s", str(hold), "--id", run_id, "--wait-s", "30",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        )  # fmt: skip
        self._events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._events.append(json.loads(line))

    def failed_over_since(self, t: float) -> bool:
        return any(e["kind"] in ("failover", "error") and e["t"] >= t for e in list(self._events))

    def events(self, t0: float) -> list[dict[str, Any]]:
        """Triggers, failovers and errors, times in seconds from ``t0``."""
        out = []
        for e in list(self._events):
            doc = {"kind": e["kind"], "t_s": round(e["t"] - t0, 4)}
            if e.get("crossed_at") is not None:
                doc["crossed_s"] = round(e["crossed_at"] - t0, 4)
            for k in ("state", "api_ms", "error"):
                if e.get(k) is not None:
                    doc[k] = e[k]
            out.append(doc)
        return out
