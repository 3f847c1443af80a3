"""The mptcp experiment's plan, goodput phases, report and skip, without a fabric (the
fabric run is tests/e2e/test_experiments.py::test_mptcp_quick)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from experiments import cwnd, mptcp, mptcp_bdp
from experiments.config import resolve
from experiments.mptcp import Mptcp, phase_mbps, stalled_ms
from experiments.runner import Skipped, every_raw
from services.reroute.model.topology import load_topology
from tests.unit.experiments.helpers import opts, report_text
from tests.unit.experiments.test_rerender import FIXTURES


def _raw(case: str, proto: str, during: float) -> dict[str, Any]:
    # 6 s at 100 ms: 40 Mbit/s, `during` from 3.0 to 4.0 s, 40 again from 4.0 s
    series = [40.0] * 30 + [during] * 10 + [40.0] * 20
    return {
        "key": f"{case}-{proto}-01",
        "params": {"case": case, "proto": proto},
        "proto": proto,
        "subflows": 2 if proto == "mptcp" else 1,
        "rate_mbps": 40,
        "window_s": 0.1,
        "series_mbps": series,
        "down_s": 3.0,
        "up_s": 4.0,
        "stream_s": 6.0,
        "kind": "reroute" if case == "mbb-reroute" else "link-down",
        "cwnd": {"10.0.0.2:40000>10.0.0.3:5601": [[0.1, 10, 0.5], [3.5, 2, 200.0]]},
    }


def test_plan_has_every_case_for_both_protocols() -> None:
    keys = [r.key for r in Mptcp().plan(opts("mptcp", quick=True))]
    assert keys == [
        f"{c}-{p}-01" for c in ("fail-10s", "fail-100ms", "mbb-reroute") for p in ("mptcp", "tcp")
    ]
    full = Mptcp().plan(opts("mptcp"))
    assert len(full) == 3 * 2 * 3
    assert {r.params["stream_s"] for r in full if r.params["case"] == "fail-10s"} == {30.0}
    quick = Mptcp().plan(opts("mptcp", quick=True))  # quick merges into the full case
    assert {r.params["fail_s"] for r in quick if r.params["case"] == "fail-100ms"} == {0.1}


def test_goodput_phases() -> None:
    r = _raw("fail-10s", "mptcp", 12.0)
    assert phase_mbps(r, "before") == pytest.approx(40.0)
    assert phase_mbps(r, "during") == pytest.approx(12.0)
    assert phase_mbps(r, "after") == pytest.approx(40.0)
    assert stalled_ms(r) == pytest.approx(1000.0)
    assert stalled_ms(_raw("fail-10s", "mptcp", 25.0)) == 0.0


def test_report_has_a_table_and_plot_per_case(tmp_path: Path) -> None:
    raws = {
        f"{c}-{p}-01": _raw(c, p, 20.0 if p == "mptcp" else 0.0)
        for c in ("fail-10s", "fail-100ms", "mbb-reroute")
        for p in ("mptcp", "tcp")
    }
    text = report_text(Mptcp(), tmp_path, raws)
    for case in ("fail-10s", "fail-100ms", "mbb-reroute"):
        assert f"## {case}" in text and (tmp_path / f"mptcp_{case}.png").exists()
    assert "goodput during the failure (Mbit/s)" in text
    assert "MPTCP carried on where single-path TCP stalled" in text


def test_congestion_windows_from_ss() -> None:
    out = [
        "@@ 1000.50",
        "ESTAB 0 0 10.0.0.2:40000 10.0.0.3:5601",
        "\t cubic wscale:7,7 rto:204 rtt:0.41/0.1 mss:1448 cwnd:10 bytes_sent:100",
        "0 0 10.0.0.12:40001 10.0.0.3:5601",
        "\t cubic rto:204 rtt:1.5/0.3 cwnd:4 ssthresh:7",
        "@@ 1000.60",
        "ESTAB 0 0 10.0.0.2:40000 10.0.0.3:5601",
        "\t cubic rto:408 rtt:2/1 cwnd:1",
    ]
    series = cwnd.parse(out, 1000.0)
    assert series == {
        "10.0.0.2:40000>10.0.0.3:5601": [[0.5, 10, 0.41], [0.6, 1, 2.0]],
        "10.0.0.12:40001>10.0.0.3:5601": [[0.5, 4, 1.5]],
    }
    # a previous run's connection still closing when this one's sender started is not its
    closing = cwnd.parse(["@@ 999.97", "FIN-WAIT-1 0 0 10.0.0.2:39000 10.0.0.3:5601",
                          "\t cubic rtt:50/1 cwnd:193"], 1000.0)  # fmt: skip
    assert cwnd.this_connection(series | closing) == series


def test_without_mptcp_the_session_is_skipped_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mptcp, "mptcp_missing", lambda: "the kernel has no MPTCP")
    with pytest.raises(Skipped, match="the kernel has no MPTCP"):
        Mptcp().session(opts("mptcp", quick=True), print, seed=0)


def test_mptcp_bdp_gives_both_protocols_the_same_capacity_at_a_large_bdp(tmp_path: Path) -> None:
    """Seed 002 Fig. 1 compares the protocols, not one path against two: h2's access link,
    which every path crosses, is capped like each path, so MPTCP's two subflows together
    get what TCP's one gets; and the BDP is large (the old 50 Mbit/s x 20 ms was 125 kB)."""
    topo = load_topology(mptcp_bdp.TOPOLOGY)
    cfg = resolve("mptcp-bdp", mptcp_bdp.BdpConfig)
    assert mptcp_bdp.ACCESS in mptcp_bdp.CAPPED
    for name in ("a", "b"):  # both paths leave s2 on the capped access link to h2
        hops = topo.paths[name].hops
        assert (hops[-1].node, hops[-1].out_port) == ("s2", 1), topo.paths[name].describe()
    assert cfg.path_mbps == 100 and topo.paths["a"].delay_ms == topo.paths["b"].delay_ms == 25
    assert mptcp_bdp.bdp_kb(topo, cfg.path_mbps) == pytest.approx(625)
    # a report of runs made before says that their MPTCP had twice TCP's capacity
    text = report_text(mptcp_bdp.MptcpBdp(), tmp_path, dict(every_raw(FIXTURES / "mptcp-bdp")))
    assert "MPTCP had twice TCP's capacity in these runs" in text
    assert "20 ms = 125 kB" in text and "states neither its RTT nor its link rate" in text
