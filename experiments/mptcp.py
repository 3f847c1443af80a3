"""``mptcp``: seed 002, one MPTCP connection over two disjoint paths vs plain TCP on one.

On seed 003's testbed (topologies/ngncs-ost.yaml), vm2 -> vm3 is first moved (MBB) onto the
short circuit br2 -> ost1 -> br3; a second address of vm2 (10.0.0.12) is put on the
temporary path br2 -> br1 -> br4 -> br3, which shares no link with it. The kernel's MPTCP
path manager (``ip mptcp endpoint ... subflow``) opens the second subflow from that
address, so the MPTCP connection has one subflow per path; plain TCP runs on the short path
only. The link br2 -> ost1 (the short path) then fails: (a) for 10 s (quick: 3 s), (b) for
100 ms; or (c) vm2 -> vm3 (the first subflow, or TCP) is moved by MBB to the long path.
Goodput is what the receiver reads (100 ms windows); the sender's congestion windows are
sampled with ``ss -ti`` (seed 002 Fig. 2, right). The kernel must have MPTCP
(``net.mptcp.enabled``); where it has not, the experiment is skipped and says so.
Parameters: ``experiments/configs/mptcp.yaml``. The large bandwidth-delay product of seed
002 Fig. 1 is :mod:`experiments.mptcp_bdp`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from statistics import mean
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from experiments import cwnd, measuring, ostbench, plots
from experiments import markdown as md
from experiments.config import Config, typed
from experiments.runner import Options, Raw, Rep, Say, SeedRow, Skipped, Written
from fabric.fabric import push_flows, veth_name
from fabric.forwarding import ofctl_line
from fabric.run import in_netns
from fabric.run import run as run_cmd
from services.reroute.errors import ConfigError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Endpoint
from services.reroute.rules import path_rules

PROTOS = ("mptcp", "tcp")
SECOND_ADDRESS = "10.0.0.12"
FAILED = Endpoint(node="br2", port="p2")  # br2 -> ost1: on the short path only
PORT = 5601
COLORS = {"mptcp": "tab:blue", "tcp": "tab:red"}


class Case(BaseModel):
    """One case: a stream of ``stream_s``; at ``fail_at_s`` the link fails for ``fail_s``
    (``reroute``: instead, the first subflow is moved by MBB)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stream_s: float = Field(gt=0)
    fail_at_s: float = Field(ge=0)
    fail_s: float = Field(0.0, ge=0)
    kind: str = Field("link-down", pattern="^(link-down|reroute)$")


class MptcpConfig(Config):
    rate_mbps: float = Field(40, ge=0, description="the sender's pace; 0: as fast as it can")
    line_mbps: int | None = Field(
        100, ge=1, description="the line rate: tbf on br3 -> vm3 (None: the fabric's own)"
    )
    cwnd_interval_s: float = Field(0.1, gt=0, description="ss -ti sampling")
    congestion: str = Field(
        "cubic", pattern=r"^[a-z0-9_]+$", description="the TCP senders' congestion control"
    )
    cases: dict[str, Case]
    only: list[str] = Field([], description="run only these cases (default: every one)")


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


def plan_cases(cases: Mapping[str, Case], runs: int, only: Sequence[str] = ()) -> list[Rep]:
    """Each case (of ``only``, if given), ``runs`` times, both protocols."""
    unknown = set(only) - set(cases)
    if unknown:
        raise ConfigError(f"only: no case {', '.join(sorted(unknown))} (cases: {', '.join(cases)})")
    reps = []
    for name, case in cases.items():
        if only and name not in only:
            continue
        for i in range(1, runs + 1):
            for proto in PROTOS:
                params = {"case": name, "proto": proto, **case.model_dump()}
                reps.append(Rep(key=f"{name}-{proto}-{i:02d}", params=params))
    return reps


class Mptcp:
    name = "mptcp"
    title = "MPTCP over two disjoint paths vs plain TCP on one, under link failures; seed 002"
    backends: tuple[str, ...] = ("ovs",)
    config_model: type[Config] = MptcpConfig

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions: each case, ``runs`` times, both protocols."""
        cfg = typed(opts.config, MptcpConfig)
        return plan_cases(cfg.cases, cfg.runs, cfg.only)

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        """The demo fabric with vm2 -> vm3 on the short circuit, for every repetition."""
        why = mptcp_missing()
        if why is not None:
            raise Skipped(f"mptcp skipped: {why}")
        return _two_paths(say, seed, typed(opts.config, MptcpConfig))

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One stream through a failure or a reroute, for one case."""
        b, cfg = session
        p = rep.params
        short = b.topo.paths[measuring.SHORT]
        spec = Stream(
            src_ns=b.fab.host_ns(short.src),
            dst_ns=b.fab.host_ns(short.dst),
            dst_ip=str(short.dst_ip),
            fabric_ns=b.fab.state.fabric_ns,
            link=veth_name(FAILED),
            proto=str(p["proto"]),
            case=Case.model_validate({k: p[k] for k in Case.model_fields}),
            rate_mbps=cfg.rate_mbps,
            cwnd_interval_s=cfg.cwnd_interval_s,
            congestion=cfg.congestion,
        )
        moves = (partial(_move, b, measuring.LONG), partial(_move, b, measuring.SHORT))
        doc = run_stream(spec, reroute=moves if spec.case.kind == "reroute" else None)
        say(
            f"{rep.key}: {doc['subflows']} subflow(s), during the failure"
            f" {phase_mbps(doc, 'during'):.1f} Mbit/s"
        )
        return doc

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        """The report (Markdown, plots under ``out``)."""
        cfg: dict[str, Any] = next(
            (r["config"] for r in reversed(list(raws.values())) if "config" in r), {}
        )
        pace = cfg.get("rate_mbps", 40)
        parts = [
            f"vm2 -> vm3, a bulk stream paced at {pace} Mbit/s read by the"
            " receiver in 100 ms windows. MPTCP: one subflow on the short circuit br2 -> ost1"
            " -> br3, one (from vm2's second address) on the disjoint temporary path br2 ->"
            " br1 -> br4 -> br3. TCP: the short circuit only. The link br2 -> ost1 goes down"
            " (`ip link set down`) for the case's time; in *mbb-reroute* no link fails, vm2 ->"
            " vm3 (the first subflow, or TCP) is moved by MBB from the short circuit to the long"
            " path via the temporary one (ost1 reconfigured) and back after the run. *during*"
            " is the mean goodput while the link is down or the reroute runs (at least the"
            " second from its start), *after* from 1 s after it to the end.\n",
        ]
        parts += case_sections(raws, out, "mptcp")
        return Written(conclusions=conclusions(raws), body="\n".join(parts))

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """Seed 002 Fig. 2 (a 100 ms failure, reduced BDP) gives no number, only which
        protocol did better: that beside ours, from the case's table."""
        runs = [r for r in raws.values() if r["params"]["case"] == "fail-100ms"]
        if not runs:
            return []
        rate = float(runs[0].get("rate_mbps") or 0)
        pace = f"paced at {rate:g} Mbit/s" if rate else "unpaced"
        metrics: list[tuple[str, Callable[[Raw], float], int]] = [
            ("goodput in the second from the failure (Mbit/s)", _during, 1),
            ("time below half the pace, from the failure on (ms)", stalled_ms, 0),
        ]
        rows = []
        for metric, get, digits in metrics:
            ours, n = versus(runs, get, digits)
            rows.append(
                SeedRow(
                    metric=f"fail-100ms: {metric}, MPTCP / TCP",
                    source="002 Fig. 2",
                    seed="no number: 'much better performance of MPTCP'",
                    seed_n="n not stated (a run of each shown)",
                    ours=ours,
                    ours_n=n,
                    note="the seed's TCP falls back to slow start, MPTCP recovers by fast"
                    f" recovery; ours {pace} on seed 003's testbed (a small BDP, as the seed's)",
                )
            )
        return rows


def case_sections(raws: Mapping[str, Raw], out: Path, prefix: str) -> list[str]:
    """A table and a figure (goodput and congestion windows) per case."""
    parts = []
    for case in dict.fromkeys(r["params"]["case"] for r in raws.values()):
        runs = [r for r in raws.values() if r["params"]["case"] == case]
        parts += [
            md.table(*_table(runs), title=case, few=md.fewest(*_by_proto(runs).values())),
            md.image(_plot(case, runs, out, prefix), case),
        ]
    return parts


def conclusions(raws: Mapping[str, Raw]) -> str:
    """Two sentences: what MPTCP kept through the long failure, and the short one."""
    by = {
        c: [r for r in raws.values() if r["params"]["case"] == c]
        for c in dict.fromkeys(r["params"]["case"] for r in raws.values())
    }
    lines = []
    for case, runs in by.items():
        during = {
            p: md.values([r for r in runs if r["proto"] == p], partial(phase_mbps, phase="during"))
            for p in PROTOS
        }
        stall = {p: md.values([r for r in runs if r["proto"] == p], stalled_ms) for p in PROTOS}
        if all(during.values()) and all(stall.values()):
            lines.append(
                f"{case}: MPTCP {mean(during['mptcp']):.1f} Mbit/s during it against TCP's"
                f" {mean(during['tcp']):.1f}, below half pace {mean(stall['mptcp']):.0f} ms"
                f" against {mean(stall['tcp']):.0f} ms"
            )
    if not lines:
        return "Not enough runs of both protocols to conclude anything."
    return (
        "With a subflow on a disjoint path MPTCP carried on where single-path TCP stalled ("
        + "; ".join(lines)
        + "). Where the failure is short or the path is moved make-before-break, plain TCP"
        " loses little or nothing, so MPTCP's second path matters for failures longer than a"
        " retransmission timeout."
    )


@contextmanager
def _two_paths(say: Say, seed: int, cfg: MptcpConfig) -> Iterator[tuple[ostbench.Bench, Any]]:
    with ostbench.bench(say, seed=seed, congestion=cfg.congestion, line_mbps=cfg.line_mbps) as b:
        say("vm2 -> vm3 onto the short circuit (MBB via the temporary path)")
        _move(b, measuring.SHORT)
        temporary = b.topo.paths[measuring.TEMPORARY]
        src, dst = b.fab.host_ns(temporary.src), b.fab.host_ns(temporary.dst)
        second_address(src, dst, SECOND_ADDRESS)
        say(f"second subflow path: {SECOND_ADDRESS} -> {temporary.dst_ip} on {measuring.TEMPORARY}")
        yield b, cfg


def second_address(src: str, dst: str, address: str) -> None:
    """``address`` on the sender's eth0 as an MPTCP subflow endpoint, both ends allowing a
    second subflow, the receiver's neighbour entry for it."""
    mac = json.loads(run_cmd(["ip", "-j", "link", "show", "eth0"], ns=src))[0]["address"]
    run_cmd(["ip", "addr", "add", f"{address}/24", "dev", "eth0"], ns=src)
    run_cmd(["ip", "mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"], ns=src)
    run_cmd(["ip", "mptcp", "endpoint", "add", address, "dev", "eth0", "subflow"], ns=src)
    run_cmd(["ip", "mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"], ns=dst)
    neigh = ["neigh", "replace", address, "lladdr", mac, "dev", "eth0"]
    run_cmd(["ip", *neigh, "nud", "permanent"], ns=dst)


def _move(b: ostbench.Bench, to: str) -> None:
    """vm2 -> vm3 (subflow 1, or the TCP stream) moved by MBB via the temporary path; the
    second subflow's rules are written again after it (the engine owns the temporary path)."""
    move = Intent(flows=b.flows, to_path=to, via=measuring.TEMPORARY, drain_s=measuring.DRAIN_S)
    measuring.reroute(b.topo, b.inv, move)
    _second_subflow_rules(b)


def _second_subflow_rules(b: ostbench.Bench) -> None:
    temporary = b.topo.paths[measuring.TEMPORARY]
    second = FlowSpec.parse(f"{SECOND_ADDRESS}>{temporary.dst_ip}")
    for bridge, rules in path_rules(b.topo, temporary, [second]).items():
        push_flows(b.fab.ovs, bridge, [ofctl_line(r) for r in rules], "OpenFlow13")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stream:
    """One measured stream: where it runs, which link fails, the case."""

    src_ns: str
    dst_ns: str
    dst_ip: str
    fabric_ns: str
    link: str  # the fabric veth set down for the failure
    proto: str
    case: Case
    rate_mbps: float
    cwnd_interval_s: float
    congestion: str = "cubic"


def run_stream(
    spec: Stream,
    *,
    reroute: tuple[Callable[[], None], Callable[[], None]] | None = None,
    beside: AbstractContextManager[Any] | None = None,
) -> dict[str, Any]:
    """Run one stream through the case's failure (or ``reroute``: the move and the move
    back, after the stream), with ``beside`` (e.g. background traffic) running; the raw
    document."""
    case = spec.case
    recv = subprocess.Popen(
        in_netns(spec.dst_ns, _tool("recv", str(PORT), str(case.stream_s + 0.5), spec.proto)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(measuring.ROOT),
    )
    send: subprocess.Popen[bytes] | None = None
    marks: dict[str, float] = {}
    try:
        with ExitStack() as stack:
            if beside is not None:
                stack.enter_context(beside)
            trace = stack.enter_context(
                cwnd.CwndTrace(spec.src_ns, spec.dst_ip, spec.cwnd_interval_s)
            )
            assert recv.stderr is not None
            recv.stderr.readline()  # "listening"
            t0_wall = time.time()
            send = subprocess.Popen(
                in_netns(
                    spec.src_ns,
                    _tool(
                        "send",
                        spec.dst_ip,
                        str(PORT),
                        str(case.stream_s),
                        str(spec.rate_mbps),
                        spec.proto,
                        spec.congestion,
                    ),
                ),
                cwd=str(measuring.ROOT),
            )
            t0 = time.monotonic()
            time.sleep(max(0.0, case.fail_at_s - (time.monotonic() - t0)))
            marks["down_s"] = time.monotonic() - t0
            if reroute is not None:
                reroute[0]()
            else:
                run_cmd(["ip", "link", "set", spec.link, "down"], ns=spec.fabric_ns)
                time.sleep(max(0.0, case.fail_at_s + case.fail_s - (time.monotonic() - t0)))
                run_cmd(["ip", "link", "set", spec.link, "up"], ns=spec.fabric_ns)
            marks["up_s"] = time.monotonic() - t0
            send.wait(timeout=case.stream_s + 10)
            out, err = recv.communicate(timeout=case.stream_s + 10)
    finally:
        for proc in (recv, send):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        run_cmd(["ip", "link", "set", spec.link, "up"], ns=spec.fabric_ns)
        if reroute is not None:
            reroute[1]()  # back, without traffic
    got = json.loads(out.strip().splitlines()[-1])
    step = float(got["window_s"])
    return {
        "proto": spec.proto,
        "kind": case.kind,
        "subflows": got["subflows"],
        "rate_mbps": spec.rate_mbps,
        "window_s": step,
        "series_mbps": [n * 8 / step / 1e6 for n in got["bytes"]],
        "down_s": marks["down_s"],
        "up_s": marks["up_s"],
        "stream_s": case.stream_s,
        "congestion": spec.congestion,
        "cwnd": cwnd.this_connection(trace.series(t0_wall)),
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
    """Time (ms) from the failure's start to the sender's end with goodput below half of
    what it had before the failure (the pace, or the rate before when unpaced)."""
    step, series = float(r["window_s"]), r["series_mbps"]
    first, end = int(float(r["down_s"]) / step), int(float(r["stream_s"]) / step)
    level = float(r["rate_mbps"]) or phase_mbps(r, "before")
    slow = [v for v in series[first:end] if v < level / 2]
    return len(slow) * step * 1000


def delivered_mb(r: Raw) -> float:
    """Megabytes the receiver read over the whole stream."""
    return sum(r["series_mbps"]) * float(r["window_s"]) / 8


_during = partial(phase_mbps, phase="during")


def versus(runs: Sequence[Raw], get: Callable[[Raw], float], digits: int) -> tuple[str, str]:
    """``MPTCP cell / TCP cell`` and ``n / n`` of ``get`` over ``runs``, as a case's table
    gives them (mean [95 % CI], the values below 5 runs)."""
    vals = [md.values(runs_of, get) for runs_of in _by_proto(runs).values()]
    cells = [
        f"{p.upper()} {md.stat_cells(v, digits)[0]}" for p, v in zip(PROTOS, vals, strict=True)
    ]
    return " / ".join(cells), " / ".join(str(len(v)) for v in vals)


def _by_proto(runs: Sequence[Raw]) -> dict[str, list[Raw]]:
    return {p: [r for r in runs if r["proto"] == p] for p in PROTOS}


def _table(runs: Sequence[Raw]) -> tuple[list[str], list[list[str]]]:
    header = ["metric"]
    for proto in PROTOS:
        header += [f"{proto.upper()} mean [95 % CI]", "n"]
    rows = []
    mine = _by_proto(runs)
    getters: list[tuple[str, Callable[[Raw], float], int]] = [
        ("goodput before (Mbit/s)", partial(phase_mbps, phase="before"), 1),
        ("goodput during the failure (Mbit/s)", partial(phase_mbps, phase="during"), 1),
        ("goodput after (Mbit/s)", partial(phase_mbps, phase="after"), 1),
        ("delivered in the whole stream (MB)", delivered_mb, 1),
        ("time below half the rate before, from the failure on (ms)", stalled_ms, 0),
        ("subflows", lambda r: float(r["subflows"]), 0),
    ]
    for label, get, digits in getters:
        row = [label]
        for proto in PROTOS:
            cells = md.stat_cells(md.values(mine[proto], get), digits)
            row += [cells[0], cells[3]]
        rows.append(row)
    return header, rows


def _plot(case: str, runs: Sequence[Raw], out: Path, prefix: str) -> str:
    """Goodput (top) and the sender's congestion windows (bottom) of the first run of each
    protocol; seed 002 Figures 1 and 2."""
    fig = plots.figure(2, 1, size=(9, 6.4), seed="002 Fig. 1-2", title=f"{case}")
    top, bottom = plots.axes(fig)
    first = None
    for proto in PROTOS:
        mine = [r for r in runs if r["proto"] == proto]
        if not mine:
            continue
        run = mine[0]
        first = first or run
        step = run["window_s"]
        xs = [(i + 1) * step for i in range(len(run["series_mbps"]))]
        top.step(xs, run["series_mbps"], where="pre", lw=1, color=COLORS[proto], label=proto)
        for k, (sock, samples) in enumerate(sorted((run.get("cwnd") or {}).items())):
            bottom.plot(
                [s[0] for s in samples],
                [s[1] for s in samples],
                lw=1,
                color=COLORS[proto],
                ls=("-", "--", ":")[k % 3],
                label=f"{proto} {sock.split('>')[0]}",
            )
    if first is not None:
        what = "reroute (MBB)" if first.get("kind") == "reroute" else "link down"
        for ax in (top, bottom):
            ax.axvspan(
                first["down_s"],
                max(first["up_s"], first["down_s"] + 0.05),
                color="0.85",
                label=what,
            )
    line = (first or {}).get("config", {}).get("line_mbps")
    if line:
        top.axhline(line, color="k", ls=":", lw=0.8, label=f"line rate {line} Mbit/s")
    top.set_ylim(0, max(line or 0, *(max(r["series_mbps"], default=0) for r in runs), 1) * 1.1)
    top.set_ylabel("goodput (Mbit/s, 100 ms)")
    top.legend(fontsize=7)
    bottom.set_ylabel("cwnd (segments, ss -ti)")
    bottom.set_xlabel("s from the connection")
    bottom.legend(fontsize=6, ncol=2)
    return plots.save(fig, out / f"{prefix}_{case}.png")
