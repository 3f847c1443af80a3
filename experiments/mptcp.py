"""``mptcp``: seed 002, one MPTCP connection over two disjoint paths vs plain TCP on one.

On seed 003's testbed (topologies/ngncs-ost.yaml), vm2 -> vm3 is first moved (MBB) onto the
short circuit br2 -> ost1 -> br3; a second address of vm2 (10.0.0.12) is put on the
temporary path br2 -> br1 -> br4 -> br3, which shares no link with it. The kernel's MPTCP
path manager (``ip mptcp endpoint ... subflow``) opens the second subflow from that
address, so the MPTCP connection has one subflow per path; plain TCP runs on the short path
only. The link br2 -> ost1 (the short path) then fails: (a) for 10 s (quick: 3 s), (b) for
100 ms; or (c) vm2 -> vm3 (the first subflow, or TCP) is moved by MBB to the long path.
Goodput is what the receiver reads (100 ms windows). The kernel must have MPTCP
(``net.mptcp.enabled``); where it has not, the experiment is skipped and says so.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from statistics import mean
from typing import Any

from experiments import demo, ostbench, plots
from experiments import markdown as md
from experiments.runner import Options, Raw, Rep, Say, Skipped
from fabric.fabric import push_flows, veth_name
from fabric.forwarding import ofctl_line
from fabric.run import in_netns
from fabric.run import run as run_cmd
from services.reroute.model import FlowSpec, Intent
from services.reroute.rules import path_rules
from services.reroute.topology import Endpoint

PROTOS = ("mptcp", "tcp")
SECOND_ADDRESS = "10.0.0.12"
FAILED = Endpoint(node="br2", port="p2")  # br2 -> ost1: on the short path only
RATE_MBPS = 40  # the sender's pace (the emulated fabric is one userspace OVS on 2 cores)
PORT = 5601
# case: (stream s, failure starts s, failure lasts s), full and quick
CASES: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "fail-10s": ((30.0, 10.0, 10.0), (9.0, 3.0, 3.0)),
    "fail-100ms": ((20.0, 10.0, 0.1), (6.0, 3.0, 0.1)),
    "mbb-reroute": ((20.0, 10.0, 0.0), (6.0, 3.0, 0.0)),  # (c): no link down; fail_s unused
}
FULL_RUNS, QUICK_RUNS = 3, 1
COLORS = {"mptcp": "tab:blue", "tcp": "tab:red"}


def mptcp_missing() -> str | None:
    """Why MPTCP cannot be used here, or None."""
    knob = Path("/proc/sys/net/mptcp/enabled")
    if not knob.exists():
        return "the kernel has no MPTCP (no /proc/sys/net/mptcp/enabled)"
    if knob.read_text().strip() != "1":
        return "MPTCP is disabled (sysctl net.mptcp.enabled = 0)"
    check = subprocess.run(_tool("check"), capture_output=True, text=True, check=False)
    if check.returncode != 0:
        return check.stderr.strip() or "an IPPROTO_MPTCP socket cannot be created"
    return None


def _tool(*args: str) -> list[str]:
    return [sys.executable, "-m", "experiments.mptcp_flow", *args]


class Mptcp:
    name = "mptcp"
    title = "MPTCP over two disjoint paths vs plain TCP on one, under link failures; seed 002"
    backends: tuple[str, ...] = ("ovs",)

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions: each case, ``runs`` times."""
        n = opts.runs or (QUICK_RUNS if opts.quick else FULL_RUNS)
        reps = []
        for case, (full, quick) in CASES.items():
            stream_s, fail_at, fail_s = quick if opts.quick else full
            for i in range(1, n + 1):
                for proto in PROTOS:
                    params = {
                        "case": case,
                        "kind": "reroute" if case == "mbb-reroute" else "link-down",
                        "proto": proto,
                        "stream_s": stream_s,
                        "fail_at_s": fail_at,
                        "fail_s": fail_s,
                    }
                    reps.append(Rep(key=f"{case}-{proto}-{i:02d}", params=params))
        return reps

    def session(
        self, opts: Options, say: Say, *, seed: int
    ) -> AbstractContextManager[ostbench.Bench]:
        """The demo fabric with vm2 -> vm3 on the short circuit, for every repetition."""
        why = mptcp_missing()
        if why is not None:
            raise Skipped(f"mptcp skipped: {why}")
        return _two_paths(say, seed)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One paced stream through a reconfiguration, for one case."""
        p = rep.params
        doc = _stream(
            session,
            str(p["kind"]),
            str(p["proto"]),
            float(p["stream_s"]),
            float(p["fail_at_s"]),
            float(p["fail_s"]),
        )
        say(
            f"{rep.key}: {doc['subflows']} subflow(s), during the failure"
            f" {phase_mbps(doc, 'during'):.1f} Mbit/s"
        )
        return doc

    def report(self, opts: Options, raws: Mapping[str, Raw], out: Path) -> str:
        """The report (Markdown, plots under ``out``)."""
        parts = [
            "vm2 -> vm3, a paced bulk stream (" + str(RATE_MBPS) + " Mbit/s) read by the"
            " receiver in 100 ms windows. MPTCP: one subflow on the short circuit br2 -> ost1"
            " -> br3, one (from vm2's second address) on the disjoint temporary path br2 ->"
            " br1 -> br4 -> br3. TCP: the short circuit only. The link br2 -> ost1 goes down"
            " (`ip link set down`) for the case's time; in *mbb-reroute* no link fails, vm2 ->"
            " vm3 (the first subflow, or TCP) is moved by MBB from the short circuit to the long"
            " path via the temporary one (ost1 reconfigured) and back after the run. *during*"
            " is the mean goodput while the link is down or the reroute runs (at least the"
            " second from its start), *after* from 1 s after it to the end.\n",
        ]
        for case in CASES:
            runs = [r for r in raws.values() if r["params"]["case"] == case]
            if not runs:
                continue
            parts += [f"## {case}\n", _table(runs), md.image(_plot(case, runs, out), case)]
        return "\n".join(parts)


@contextmanager
def _two_paths(say: Say, seed: int) -> Iterator[ostbench.Bench]:
    with ostbench.bench(say, seed=seed) as b:
        say("vm2 -> vm3 onto the short circuit (MBB via the temporary path)")
        _move(b, demo.SHORT)
        temporary = b.topo.paths[demo.TEMPORARY]
        src, dst = b.fab.host_ns(temporary.src), b.fab.host_ns(temporary.dst)
        mac = json.loads(run_cmd(["ip", "-j", "link", "show", "eth0"], ns=src))[0]["address"]
        run_cmd(["ip", "addr", "add", f"{SECOND_ADDRESS}/24", "dev", "eth0"], ns=src)
        run_cmd(["ip", "mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"], ns=src)
        run_cmd(
            ["ip", "mptcp", "endpoint", "add", SECOND_ADDRESS, "dev", "eth0", "subflow"], ns=src
        )
        run_cmd(["ip", "mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"], ns=dst)
        neigh = ["neigh", "replace", SECOND_ADDRESS, "lladdr", mac, "dev", "eth0"]
        run_cmd(["ip", *neigh, "nud", "permanent"], ns=dst)
        say(f"second subflow path: {SECOND_ADDRESS} -> {temporary.dst_ip} on {demo.TEMPORARY}")
        yield b


def _move(b: ostbench.Bench, to: str) -> None:
    """vm2 -> vm3 (subflow 1, or the TCP stream) moved by MBB via the temporary path; the
    second subflow's rules are written again after it (the engine owns the temporary path)."""
    move = Intent(flows=b.flows, to_path=to, via=demo.TEMPORARY, drain_s=demo.DRAIN_S)
    asyncio.run(demo.reroute(b.topo, b.inv, move))
    _second_subflow_rules(b)


def _second_subflow_rules(b: ostbench.Bench) -> None:
    temporary = b.topo.paths[demo.TEMPORARY]
    second = FlowSpec.parse(f"{SECOND_ADDRESS}>{temporary.dst_ip}")
    for bridge, rules in path_rules(b.topo, temporary, [second]).items():
        push_flows(b.fab.ovs, bridge, [ofctl_line(r) for r in rules], "OpenFlow13")


def _stream(
    b: ostbench.Bench, kind: str, proto: str, stream_s: float, fail_at: float, fail_s: float
) -> dict[str, Any]:
    short = b.topo.paths[demo.SHORT]
    src, dst = b.fab.host_ns(short.src), b.fab.host_ns(short.dst)
    link = veth_name(FAILED)
    fabric_ns = b.fab.state.fabric_ns
    cwd = str(demo.ROOT)
    recv = subprocess.Popen(
        in_netns(dst, _tool("recv", str(PORT), str(stream_s + 0.5), proto)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    send: subprocess.Popen[bytes] | None = None
    try:
        assert recv.stderr is not None
        recv.stderr.readline()  # "listening"
        send = subprocess.Popen(
            in_netns(
                src,
                _tool("send", str(short.dst_ip), str(PORT), str(stream_s), str(RATE_MBPS), proto),
            ),
            cwd=cwd,
        )
        t0 = time.monotonic()
        marks: dict[str, float] = {}

        if kind == "reroute":  # (c): subflow 1's path (short) moved by MBB to long
            time.sleep(max(0.0, fail_at - (time.monotonic() - t0)))
            marks["down_s"] = time.monotonic() - t0
            _move(b, demo.LONG)
            marks["up_s"] = time.monotonic() - t0
        else:
            time.sleep(max(0.0, fail_at - (time.monotonic() - t0)))
            run_cmd(["ip", "link", "set", link, "down"], ns=fabric_ns)
            marks["down_s"] = time.monotonic() - t0
            time.sleep(max(0.0, fail_at + fail_s - (time.monotonic() - t0)))
            run_cmd(["ip", "link", "set", link, "up"], ns=fabric_ns)
            marks["up_s"] = time.monotonic() - t0
        send.wait(timeout=stream_s + 10)
        out, err = recv.communicate(timeout=stream_s + 10)
    finally:
        for proc in (recv, send):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        run_cmd(["ip", "link", "set", link, "up"], ns=fabric_ns)
        if kind == "reroute":
            _move(b, demo.SHORT)  # back, without traffic
    got = json.loads(out.strip().splitlines()[-1])
    step = float(got["window_s"])
    series = [n * 8 / step / 1e6 for n in got["bytes"]]
    return {
        "proto": proto,
        "subflows": got["subflows"],
        "rate_mbps": RATE_MBPS,
        "window_s": step,
        "series_mbps": series,
        "down_s": marks["down_s"],
        "up_s": marks["up_s"],
        "stream_s": stream_s,
        "recv_stderr": err[-2000:],
    }


def phase_mbps(r: Raw, phase: str) -> float:
    """Mean goodput (Mbit/s) before, during or after the failure."""
    step, series = float(r["window_s"]), r["series_mbps"]
    down, up = float(r["down_s"]), float(r["up_s"])
    if phase == "before":
        lo, hi = 1.0, down
    elif phase == "during":
        lo, hi = down, max(up, down + 1.0)
    else:
        lo, hi = up + 1.0, float(r["stream_s"])
    inside = [v for i, v in enumerate(series) if lo <= i * step and (i + 1) * step <= hi]
    return mean(inside) if inside else 0.0


def stalled_ms(r: Raw) -> float:
    """Time (ms) from the failure's start to the sender's end with goodput below half the
    sender's pace."""
    step, series = float(r["window_s"]), r["series_mbps"]
    first, end = int(float(r["down_s"]) / step), int(float(r["stream_s"]) / step)
    slow = [v for v in series[first:end] if v < float(r["rate_mbps"]) / 2]
    return len(slow) * step * 1000


def _table(runs: Sequence[Raw]) -> str:
    header = ["metric"]
    for proto in PROTOS:
        header += [f"{proto.upper()} mean [95 % CI]", "n"]
    rows = []
    for label, phase in (
        ("goodput before (Mbit/s)", "before"),
        ("goodput during the failure (Mbit/s)", "during"),
        ("goodput after (Mbit/s)", "after"),
    ):
        row = [label]
        for proto in PROTOS:
            mine = [r for r in runs if r["proto"] == proto]
            cells = md.stat_cells(md.values(mine, partial(phase_mbps, phase=phase)), 1)
            row += [cells[0], cells[3]]
        rows.append(row)
    for label, get in (
        ("time below half the pace from the failure on (ms)", stalled_ms),
        ("subflows", lambda r: float(r["subflows"])),
    ):
        row = [label]
        for proto in PROTOS:
            mine = [r for r in runs if r["proto"] == proto]
            cells = md.stat_cells(md.values(mine, get), 0)
            row += [cells[0], cells[3]]
        rows.append(row)
    return md.table(header, rows)


def _plot(case: str, runs: Sequence[Raw], out: Path) -> str:
    fig = plots.figure(1, 1, size=(9, 3.8))
    ax = plots.axes(fig)[0]
    first = None
    for proto in PROTOS:
        mine = [r for r in runs if r["proto"] == proto]
        if not mine:
            continue
        run = mine[0]
        first = first or run
        step = run["window_s"]
        xs = [(i + 1) * step for i in range(len(run["series_mbps"]))]
        ax.step(xs, run["series_mbps"], where="pre", lw=1, color=COLORS[proto], label=proto)
    if first is not None:
        ax.axvspan(first["down_s"], first["up_s"], color="0.85", label="link down")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{case}: goodput of the first run of each")
    ax.set_xlabel("s from the connection")
    ax.set_ylabel("Mbit/s")
    ax.legend(fontsize=7)
    return plots.save(fig, out / f"mptcp_{case}.png")
