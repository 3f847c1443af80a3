"""``reroute experiment run`` end to end at quick scale, one test per experiment: the real
command line on the real fabric, judged by its raw files, its report and the numbers in them.
ost-vs-mbb is also interrupted (SIGINT) after its first repetition and resumed, and its
report written again from raw/ alone. Each runs no more repetitions, cases or stream than
its assertions need (``--runs``, ``--set``): the quick configurations themselves are the
smoke run's (``make experiments-quick``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from experiments import impulse_analysis as ia
from experiments.audit import recheck
from experiments.bandwidth_steering import rate_around
from experiments.mptcp import mptcp_missing, phase_mbps, stalled_ms
from experiments.runner import every_raw
from tests.e2e.conftest import ROOT, leftovers, reroute
from tests.unit.experiments.test_reports import raw as made_up

CLI = [sys.executable, "-m", "services.reroute.cli"]
# the quick 7 s TCP stream cut to 5 s: the switch 1 s into it, BBM's stall over by 2.5 s (a
# 200 ms rto_min's third timeout), the capture's 3 s window after the request inside it
SHORT_STREAM = ("--set", "tcp_s=5")
# The unsteered stream's rate is read until 2.5 s after the request, which comes 0.8 s after
# the probe started: 2.2-2.5 s into the streams here, later when the machine starts the
# probe slowly. A 5 s stream left CI's request (stop 49) no second after 1.5 s to read.
STEERED_STREAM = ("--set", "tcp_s=8")
# The hitless checks run without the line-rate cap: the probe's losses are then held to
# OVS's socket drops alone, where under the cap the line's drops (TCP's, mostly) would
# loosen the bound. The cap's own uncounted losses are found and gone (OVS's one send socket
# filled by the line's queue, stop 46; a tail-dropping queue failing OVS's send, which then
# dropped the rest of its batch, stop 48: fabric.lines, tests/e2e/test_lines.py).
UNCAPPED = ("--set", "line_mbps=null")


def _raws(out: Path) -> dict[str, dict[str, Any]]:
    return {k: dict(v) for k, v in every_raw(out).items()}


def _interrupt_after_first(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [*CLI, "experiment", "run", *args, "--out", str(out)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    deadline = time.monotonic() + 120
    while not list((out / "raw").glob("*.json.gz")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)  # into the second repetition
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


@pytest.mark.fabric
@pytest.mark.timeout(480)
def test_ost_vs_mbb_quick_interrupted_and_resumed(tmp_path: Path) -> None:
    out = tmp_path / "ost"
    args = ("ost-vs-mbb", "--quick", "--runs", "2", *SHORT_STREAM, *UNCAPPED)  # two pairs
    first = _interrupt_after_first(out, *args)
    assert leftovers("ngncs-ost") == []  # Ctrl-C brought the fabric down
    assert first.returncode == 130, f"{first.stdout}\n{first.stderr}"
    assert "runs the rest" in first.stderr
    kept = _raws(out)
    assert list(kept) == ["bbm-01"]
    assert not (out / "report.md").exists()

    second = reroute("experiment", "run", *args, "--out", str(out), timeout=400)
    assert leftovers("ngncs-ost") == []
    assert "4/4 repetitions (3 run now)" in second.stdout, second.stdout
    raws = _raws(out)
    assert sorted(raws) == ["bbm-01", "bbm-02", "mbb-01", "mbb-02"]
    assert raws["bbm-01"] == kept["bbm-01"]  # not run again
    assert len(json.loads((out / "env.json").read_text())["sessions"]) == 2

    bbm = [r for r in raws.values() if r["strategy"] == "bbm"]
    mbb = [r for r in raws.values() if r["strategy"] == "mbb"]
    for r in bbm:  # dark for switching + lock; TCP stalls at least as long
        assert r["timing"]["dark_ms"] - 5 <= r["udp"]["longest_gap_ms"], r["udp"]
        assert r["udp"]["lost"] > 0 and r["tcp"]["stalled_ms"] >= 500, r["tcp"]
        cap = r["capture"]  # the seed's metrics, from the packets: no data, then resent
        assert cap["longest_gap_ms"] >= r["timing"]["dark_ms"] - 5, cap
        assert cap["retransmitted"] > 0 and cap["rtt_during_max_ms"] > 300, cap
        # the seed's unavailability, at the sender: its resends into the dark break the
        # silence, so it is at least one RTO (200 ms) and no longer than the receiver's gap
        assert 190 <= cap["sender_gap_ms"] <= cap["longest_gap_ms"] + 20, cap
    # no send of OVS's failed for want of buffer (which loses packets on every port
    # uncounted: fabric.lines)
    assert all(r["send_failures"] == 0 for r in raws.values()), raws
    for r in mbb:  # hitless but for what the busy fabric dropped by itself: OVS's receive
        # sockets, and the capped line's queue when TCP's slow start overfills it (every
        # other drop counter that moved names where the rest went: fabric.drops)
        assert r["udp"]["lost"] <= r["fabric_drops"] + r["line_drops"], (r["udp"], r["other_drops"])
        assert r["timing"]["new_path_ms"] >= r["timing"]["dark_ms"], r["timing"]
        cap = {k: v for k, v in r["capture"].items() if k != "trace"}
        # a resent segment is either one the fabric dropped or one that had arrived: a busy
        # machine's late ACKs time the sender out (spurious), no packet meets a dark fibre
        needed = cap["retransmitted"] - cap["duplicates"]
        assert needed <= r["fabric_drops"] + r["line_drops"], (r["other_drops"], cap)
        assert cap["longest_gap_ms"] < 200 and cap["sender_gap_ms"] < 200, cap
    for i in (1, 2):  # a pair meets one lock time
        assert raws[f"bbm-0{i}"]["timing"]["lock_ms"] == raws[f"mbb-0{i}"]["timing"]["lock_ms"]
    assert max(r["udp"]["longest_gap_ms"] for r in mbb) < min(
        r["udp"]["longest_gap_ms"] for r in bbm
    )
    report = (out / "report.md").read_text()
    assert "TCP unavailability: longest gap at the sender, vm2 (ms)** [capture] |" in report
    assert "(values " in report and "below 5 runs a cell gives the values" in report  # n = 2
    assert "| 2 | 598 | 121 |" in report
    for png in ("fig4_15_unavailability.png", "fig4_12_throughput.png", "fig4_2_lock_times.png"):
        assert (out / png).stat().st_size > 10_000

    # the audit sample: both captures of the first 3 runs of each arm, headers only,
    # compressed; a run's capture numbers recomputed from them alike (one run: each costs
    # its analysis again; `reroute experiment audit` over a whole directory is unit-tested)
    kept = sorted(p.name for p in (out / "pcaps").iterdir())
    assert kept == [f"{k}-{h}.pcap.gz" for k in sorted(raws) for h in ("vm2", "vm3")], kept
    assert all(r["capture"]["pcaps"] for r in raws.values())
    assert recheck(out, {"bbm-02": raws["bbm-02"]}) == {"bbm-02": []}

    # the report again from raw/ alone, elsewhere, without a fabric: the same tables
    again = reroute("experiment", "report", str(out), "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    redone = (tmp_path / "again" / "report.md").read_text()
    assert redone.split("## Per run")[1] == report.split("## Per run")[1]
    assert (tmp_path / "again" / "tables" / "01-per-run-bbm-vs-mbb.csv").exists()


@pytest.mark.fabric
@pytest.mark.timeout(300)
def test_ost_vs_mbb_through_dpctl_switches_beside_the_ovs_runs(tmp_path: Path) -> None:
    """``--backend dpctl`` (the testbed's packet switches driven OpenFlow 1.0, no
    controller) at quick scale into an ``--out`` that holds an ovs run: its own raw files,
    the same verdict (MBB's gap below BBM's, MBB loses no more than the fabric dropped),
    and one report with both backends side by side."""
    out = tmp_path / "ost"
    (out / "raw").mkdir(parents=True)
    ovs = made_up("mbb", "mbb-01", gap=3.0, params={"strategy": "mbb", "backend": "ovs"})
    (out / "raw" / "mbb-01.json").write_text(json.dumps(ovs))  # as an earlier ovs run left
    done = reroute(
        "experiment", "run", "ost-vs-mbb", "--quick", "--runs", "1", *SHORT_STREAM, *UNCAPPED,
        "--backend", "dpctl", "--out", str(out), timeout=240,
    )  # fmt: skip
    assert leftovers("ngncs-ost-dpctl") == []
    assert "2/2 repetitions (2 run now)" in done.stdout, done.stdout
    raws = _raws(out)
    assert sorted(raws) == ["dpctl-bbm-01", "dpctl-mbb-01", "mbb-01"]
    bbm, mbb = raws["dpctl-bbm-01"], raws["dpctl-mbb-01"]
    assert bbm["backend"] == mbb["backend"] == "dpctl"
    assert bbm["params"]["lock_ms"] == mbb["params"]["lock_ms"]  # the pair met one lock time
    assert mbb["udp"]["lost"] <= mbb["fabric_drops"] + mbb["line_drops"], (
        mbb["udp"],
        mbb["other_drops"],
    )
    assert bbm["send_failures"] == mbb["send_failures"] == 0, (bbm, mbb)
    assert mbb["udp"]["longest_gap_ms"] < bbm["udp"]["longest_gap_ms"], (mbb["udp"], bbm["udp"])
    report = (out / "report.md").read_text()
    assert "## Per run, BBM vs MBB: backend dpctl" in report
    assert "| dpctl | `ngncs-ost-dpctl.yaml` |" in report and "| ovs | `ngncs-ost.yaml` |" in report


@pytest.mark.fabric
@pytest.mark.timeout(400)
def test_rto_sweep_quick(tmp_path: Path) -> None:
    out = tmp_path / "rto"
    proc = reroute(
        "experiment", "run", "rto-sweep", "--quick", "--set", "rto_min_ms=[200, 2000]",
        "--out", str(out), timeout=360,
    )  # fmt: skip
    assert leftovers("ngncs-ost") == []
    assert "3/3 repetitions" in proc.stdout, proc.stdout
    raws = _raws(out)
    assert sorted(raws) == ["bbm-rto200-01", "bbm-rto2000-01", "mbb-rto200-01"]
    assert "rto_min lock 2s" in raws["bbm-rto2000-01"]["route"]
    assert "rto_min lock 200ms" in raws["bbm-rto200-01"]["route"]
    resumes = {k: r["recovery_ms"] for k, r in raws.items()}
    # the stall follows rto_min: one 2 s timeout takes longer than the 200 ms backoff
    assert resumes["bbm-rto2000-01"] >= 1800, resumes
    assert resumes["bbm-rto2000-01"] > resumes["bbm-rto200-01"], resumes
    assert resumes["bbm-rto200-01"] >= raws["bbm-rto200-01"]["udp"]["longest_gap_ms"], resumes
    assert resumes["mbb-rto200-01"] < resumes["bbm-rto200-01"], resumes
    assert "## TCP stall against rto_min" in (out / "report.md").read_text()
    assert (out / "rto_resume.png").exists() and (out / "rto_throughput.png").exists()


@pytest.mark.fabric
@pytest.mark.timeout(400)
def test_bandwidth_steering_quick(tmp_path: Path) -> None:
    out = tmp_path / "steer"
    proc = reroute(
        "experiment", "run", "bandwidth-steering", "--quick", "--runs", "1", *STEERED_STREAM,
        "--out", str(out), timeout=360,
    )  # fmt: skip
    assert leftovers("ngncs-ost") == []
    assert "2/2 repetitions" in proc.stdout, proc.stdout
    raws = _raws(out)
    bbm = [r for r in raws.values() if r["strategy"] == "bbm"]
    mbb = [r for r in raws.values() if r["strategy"] == "mbb"]
    assert max(r["udp"]["longest_gap_ms"] for r in mbb) < min(
        r["udp"]["longest_gap_ms"] for r in bbm
    )
    for r in raws.values():
        assert r["bystander"]["path"] == "direct" and r["bystander"]["tcp"]["median_mbps"] > 0
    # the unsteered stream has the bottleneck to itself once the other one left it
    before = [rate_around(r["bystander"], -1000, 0) for r in raws.values()]
    after = [rate_around(r["bystander"], 1500, 2500) for r in raws.values()]
    offsets = [r["bystander"]["tcp_offset_ms"] for r in raws.values()]
    assert None not in before + after, ("a window outside the stream", before, after, offsets)
    assert sum(filter(None, after)) > sum(filter(None, before)), (before, after)
    assert "## Both streams, BBM vs MBB" in (out / "report.md").read_text()


# the quick cases with each failure 1 s earlier (``phase_mbps`` "before" averages from 1 s
# to the failure) and 1-2 s less stream after it (fail-10s still down 3 s, 2 s after that)
SHORT_MPTCP_CASES = (
    "cases={fail-10s: {stream_s: 7, fail_at_s: 2, fail_s: 3},"
    " fail-100ms: {stream_s: 5, fail_at_s: 2, fail_s: 0.1},"
    " mbb-reroute: {stream_s: 5, fail_at_s: 2, kind: reroute}}"
)


@pytest.mark.fabric
@pytest.mark.timeout(240)
def test_mptcp_quick(tmp_path: Path) -> None:
    why = mptcp_missing()
    if why is not None:
        pytest.skip(why)
    out = tmp_path / "mptcp"
    proc = reroute(
        "experiment", "run", "mptcp", "--quick", "--set", SHORT_MPTCP_CASES, "--out", str(out),
        timeout=200,
    )  # fmt: skip
    assert leftovers("ngncs-ost") == []
    assert "6/6 repetitions" in proc.stdout, proc.stdout
    raws = _raws(out)
    cases = ("fail-10s", "fail-100ms", "mbb-reroute")
    assert set(raws) == {f"{c}-{p}-01" for c in cases for p in ("mptcp", "tcp")}
    for r in raws.values():
        assert phase_mbps(r, "before") > 0, r["series_mbps"]
        assert r["subflows"] == (2 if r["proto"] == "mptcp" else 1)
        assert len(r["cwnd"]) == r["subflows"], r["cwnd"].keys()  # ss -ti of each subflow
    # the second subflow's path stays up: MPTCP carries on through the failure, TCP stalls
    mptcp, tcp = raws["fail-10s-mptcp-01"], raws["fail-10s-tcp-01"]
    assert phase_mbps(mptcp, "during") > 0, mptcp["series_mbps"]
    assert phase_mbps(mptcp, "during") > phase_mbps(tcp, "during")
    assert stalled_ms(mptcp) < stalled_ms(tcp)
    report = (out / "report.md").read_text()
    for case in cases:
        assert f"## {case}" in report and (out / f"mptcp_{case}.png").exists()


@pytest.mark.fabric
@pytest.mark.timeout(300)
def test_impulse_response_quick(tmp_path: Path) -> None:
    out = tmp_path / "impulse"
    proc = reroute(
        "experiment", "run", "impulse-response", "--quick", "--out", str(out), timeout=280
    )
    assert leftovers("two-site") == []
    assert "2/2 repetitions" in proc.stdout, proc.stdout
    raws = _raws(out)
    assert sorted(raws) == ["ovs-path-01", "ovs-rtt-01"]
    for key, raw in raws.items():
        assert len(raw["impulses"]) == 3 and raw["period_s"] == 4.0, raw["impulses"]
        assert not any("inject_error" in i for i in raw["impulses"]), raw["impulses"]
        for host, events in raw["monitors"].items():  # each site failed over every time
            assert [e["state"] for e in events if e["kind"] == "failover"] == ["done"] * 3, host
        assert ia.baseline_mbps(raw) > 10, raw["series_mbps"]
        # iperf3's retransmissions per sample, which say what a dip between impulses was
        assert len(raw["retransmits_series"]) == len(raw["series_mbps"]), raw.keys()
        imps = ia.impulses(raw)
        n = ia.common_length(imps)
        mean = [sum(i.r[k] for i in imps) / len(imps) for k in range(n)]
        times = imps[0].times[:n]
        dip = max(v for t, v in zip(times, mean, strict=True) if 0 <= t < 1.0)
        tail = [v for t, v in zip(times, mean, strict=True) if t >= 3.0]
        assert dip > 0.2, (key, mean)  # the degradation shows in the throughput ...
        assert sum(tail) / len(tail) < 0.15, (key, mean)  # ... and the response returns to 0
        recovery = ia.recovery_s(times, mean)
        assert recovery is not None and 0 < recovery < 4.0, (key, mean)
        assert all(i.failover_s is not None and i.failover_s > 0 for i in imps), imps
    report = (out / "report.md").read_text()
    assert "| ovs-path | - | 1 | 3 | 4 |" in report and "| ovs-rtt | - | 1 | 3 | 4 |" in report
    assert "dips outside the responses (with retransmissions)" in report
    for png in ("impulse_single.png", "impulse_means.png"):
        assert (out / png).stat().st_size > 10_000
