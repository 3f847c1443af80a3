"""The two-site failover of seeds 000/001, end to end on a running emulated fabric.

Each site runs its own ``reroute serve`` (managing only its border switch, its own journal)
and its own ``reroute monitor`` on its host (h1 watches h2, h2 watches h1). Nothing passes
between the sites. A degradation is injected:

- ``path``:   the network switches the connection onto the long-haul path (rtt 0.5 -> 30 ms)
- ``rtt``:    the current (long-haul) connection's delay grows 15 -> 40 ms each way, as the
              seeds did by changing the ANUE emulator's delay with curl
- ``oneway``: the same, in one direction only (sw1 -> sw2): the site that switches first
              makes its peer lose traffic, which makes the peer switch too (seed 000 III)

Both monitors trigger, each calls its own site's service, which moves the flow to the
standby connection. Measured per site from the monitors' event lines: the first bad
sample (threshold crossing), the trigger, and the service's answer (the reroute done, the
site's traffic on the standby path). Then traffic is checked end to end over standby.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabric import fabric, longhaul
from fabric.errors import FabricError
from fabric.kinds import odl as odlsite
from fabric.state import FabricState
from services.reroute.engine.engine import Engine
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.inventory import load_inventory, open_drivers
from services.reroute.model.topology import Topology
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "services.reroute.cli"]
FLOW = "10.10.0.1>10.10.0.2"
SITES = (("site1", "sw1", "h1", "10.10.0.2"), ("site2", "sw2", "h2", "10.10.0.1"))
# rtt thresholds (ms): trigger, clear -- above the current connection's normal rtt
THRESHOLDS = {"path": (10.0, 5.0), "rtt": (55.0, 40.0), "oneway": (45.0, 40.0)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteResult:
    site: str
    crossed_at: float  # the monitor's first bad sample of the run that fired
    triggered_at: float
    switched_at: float  # the service answered: the reroute is done
    state: str
    reroute: str
    api_ms: float  # the failover call, as the monitor saw it

    @property
    def detection_ms(self) -> float:
        """From the threshold crossing to the monitor's trigger, in ms."""
        return (self.triggered_at - self.crossed_at) * 1000

    @property
    def after_detection_ms(self) -> float:
        """From the trigger to the standby path, in ms."""
        return (self.switched_at - self.triggered_at) * 1000

    @property
    def crossing_to_standby_ms(self) -> float:
        """From the threshold crossing to the standby path, in ms."""
        return (self.switched_at - self.crossed_at) * 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class FailoverResult:
    degradation: str
    backend: str
    injected_at: float
    sites: tuple[SiteResult, ...]
    restored: bool  # both directions over standby afterwards
    rtt_after_ms: float

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return {
            "degradation": self.degradation,
            "backend": self.backend,
            "restored": self.restored,
            "rtt_after_ms": self.rtt_after_ms,
            "sites": [
                {
                    "site": s.site,
                    "state": s.state,
                    "reroute": s.reroute,
                    "detection_ms": round(s.detection_ms, 1),
                    "after_detection_ms": round(s.after_detection_ms, 1),
                    "crossing_to_standby_ms": round(s.crossing_to_standby_ms, 1),
                    "api_ms": round(s.api_ms, 1),
                    "trigger_after_injection_ms": round(
                        (s.triggered_at - self.injected_at) * 1000, 1
                    ),
                }
                for s in self.sites
            ],
        }


def run_failover(
    topo: Topology,
    degradation: str,
    *,
    timeout_s: float = 20.0,
    odl_stats_s: float = odlsite.STATS_INTERVAL_S,
) -> FailoverResult:
    """Bring the fabric up, run the scenario once, tear everything down. The sites' services
    and the path-switch injection reach the switches through the fabric's inventory.
    ``odl_stats_s``: the ODL emulator's statistics poll (ODL's default, 3 s)."""
    if degradation not in THRESHOLDS:
        raise FabricError(f"unknown degradation {degradation!r} ({', '.join(THRESHOLDS)})")
    fabric.down(topo.name)
    fab = fabric.up(topo, options={"odl_stats_s": odl_stats_s})
    procs: list[subprocess.Popen[str]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="reroute-2site-") as tmp:
            if degradation != "path":  # the current connection is the long-haul one
                asyncio.run(_switch_onto_longhaul(fab.state, topo))
            token = secrets.token_hex(16)
            urls = serve_sites(fab.state, topo, [s[:2] for s in SITES], token, Path(tmp), procs)
            monitors = [_monitor(fab.state, host, target, url, token, degradation, timeout_s)
                        for (_, _, host, target), url in zip(SITES, urls, strict=True)]  # fmt: skip
            procs += monitors
            time.sleep(1.0)  # the monitors see the normal rtt first
            injected = time.time()
            _inject(fab.state, topo, degradation)
            sites = tuple(
                _site_result(site, m, timeout_s)
                for (site, *_), m in zip(SITES, monitors, strict=True)
            )
            rtt = _rtt_ms(fab.state, "h1", "10.10.0.2")
            return FailoverResult(
                degradation=degradation,
                backend=_backend(topo),
                injected_at=injected,
                sites=sites,
                restored=rtt < 5.0,
                rtt_after_ms=rtt,
            )
    finally:
        stop_processes(procs)
        fabric.down(topo.name)


def stop_processes(procs: Sequence[subprocess.Popen[str]]) -> None:
    """Terminate ``procs`` (services, monitors), killing any still running after 10 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def _backend(topo: Topology) -> str:
    return ",".join(sorted({s.driver for s in topo.switches}))


def serve_sites(
    state: FabricState,
    topo: Topology,
    sites: Sequence[tuple[str, str]],
    token: str,
    tmp: Path,
    procs: list[subprocess.Popen[str]],
) -> list[str]:
    """Each (site, switch)'s own ``reroute serve``, managing only that switch, all started
    at once (their start-ups overlap); their URLs, in ``sites``' order."""
    started = [
        _start_service(state, topo, site, switch, token, tmp, procs) for site, switch in sites
    ]
    return [_service_url(site, proc) for (site, _), proc in zip(sites, started, strict=True)]


def _start_service(
    state: FabricState,
    topo: Topology,
    site: str,
    switch: str,
    token: str,
    tmp: Path,
    procs: list[subprocess.Popen[str]],
) -> subprocess.Popen[str]:
    config = tmp / f"{site}.yaml"
    config.write_text(
        f"topology: {topo.file}\ninventory: {state.inventory}\nscope: [{switch}]\n"
        f"journal: {state.dir / f'journal-{site}.sqlite'}\nlisten: 127.0.0.1:0\n"
        f"tokens:\n  - {{token: {token}, role: operator}}\n"
    )
    proc = subprocess.Popen(
        [*CLI, "serve", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    procs.append(proc)
    return proc


def _service_url(site: str, proc: subprocess.Popen[str]) -> str:
    """The URL a started ``reroute serve`` prints once it listens."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        raise FabricError(f"reroute serve for {site} did not start: {line}{proc.stdout.read()}")
    return "http://" + line.split("http://")[1].split()[0]


def _monitor(
    state: FabricState,
    host: str,
    target: str,
    url: str,
    token: str,
    degradation: str,
    timeout_s: float,
) -> subprocess.Popen[str]:
    trigger, clear = THRESHOLDS[degradation]
    return subprocess.Popen(
        [
            *CLI, "monitor", "rtt", "--netns", state.host_ns[host], "--target", target,
            "--trigger", str(trigger), "--clear", str(clear), "--samples", "3",
            "--rate-hz", "50", "--timeout-ms", "150", "--api", url, "--token", token,
            "--flow", FLOW, "--to", "standby", "--once", "--duration-s", str(timeout_s),
            "--id", host, "--wait-s", "30",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def _inject(state: FabricState, topo: Topology, degradation: str) -> None:
    if degradation == "path":
        asyncio.run(_switch_onto_longhaul(state, topo))
    elif degradation == "rtt":
        longhaul.control(state, "lh1").set(delay_ms=40)
    else:
        longhaul.control(state, "lh1").set(a_to_b_ms=40)


async def _switch_onto_longhaul(state: FabricState, topo: Topology) -> None:
    """The network moves the connection onto the long-haul path (both switches at once, in a
    few ms, long before a monitor can see it: no race with the sites' failovers)."""
    inv = load_inventory(state.inventory)
    journal = Journal(inv.journal)
    try:
        async with open_drivers(inv, topo) as drivers:
            intent = Intent(flows=(FlowSpec.parse(FLOW),), to_path="longhaul", drain_s=0.0)
            _, outcome = await Engine.of(topo, inv, drivers, journal).apply(intent)
        if outcome.state is not RerouteState.DONE:
            raise FabricError(f"injecting the path switch failed: {outcome.error}")
    finally:
        journal.close()


def _site_result(site: str, proc: subprocess.Popen[str], timeout_s: float) -> SiteResult:
    try:
        out, err = proc.communicate(timeout=timeout_s + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    trigger = next((e for e in events if e["kind"] == "trigger"), None)
    done = next((e for e in events if e["kind"] in ("failover", "error")), None)
    if trigger is None or done is None:
        raise FabricError(f"{site}: the monitor never failed over: {out}{err}")
    if done["kind"] == "error":
        raise FabricError(f"{site}: the failover call failed: {done['error']}")
    return SiteResult(
        site=site,
        crossed_at=trigger["crossed_at"],
        triggered_at=trigger["t"],
        switched_at=done["t"],
        state=done["state"],
        reroute=done["reroute"],
        api_ms=done["api_ms"],
    )


def _rtt_ms(state: FabricState, host: str, target: str) -> float:
    out = subprocess.run(
        ["ip", "netns", "exec", state.host_ns[host], "ping", "-c", "10", "-i", "0.02", "-W", "1",
         target],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    rtts = sorted(float(x.split("time=")[1].split()[0]) for x in out.splitlines() if "time=" in x)
    return rtts[len(rtts) // 2] if len(rtts) == 10 else float("inf")
