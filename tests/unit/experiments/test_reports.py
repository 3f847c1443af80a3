"""The experiments' reports from made-up raw documents (no fabric): tables, plots, models."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from experiments.bandwidth_steering import BandwidthSteering, rate_around
from experiments.ost_vs_mbb import OstVsMbb
from experiments.ostbench import (
    lock_quantile,
    paired_lock_ms,
    parse_ping,
    rtt_summary,
    van_der_corput,
)
from experiments.rto_sweep import RtoSweep, backoff_ms, model_ms, recovery_ms
from tests.unit.experiments.helpers import opts, report_text


def raw(
    strategy: str, key: str, *, gap: float, lock: float = 600.0, **extra: Any
) -> dict[str, Any]:
    series = [100.0] * 20 + [0.0] * 8 + [100.0] * 30
    timing = {"new_path_ms": 40 + 25 + lock, "total_ms": 700.0, "switch_ms": 25.0,
              "lock_ms": lock, "dark_ms": 25.0 + lock, "overhead_ms": 15.0}  # fmt: skip
    return {
        "key": key,
        "strategy": strategy,
        "udp": {
            "sent": 20000,
            "lost": int(gap * 5),
            "reordered": 0,
            "longest_gap_ms": gap,
            "gap_at_ms": 40.0,
            "loss_pct": gap * 5 / 200,
        },
        "tcp": {
            "retransmits": 10,
            "interval_s": 0.1,
            "series_mbps": series,
            "median_mbps": 100.0,
            "min_mbps": 0.0,
            "dip_pct": 100.0,
            "stalled_ms": 800.0,
        },
        "timing": timing,
        "fabric_drops": 0,
        "tcp_offset_ms": 2000.0,
        "circuits_ms": 65.0,
        "probe_rate": {"bin_ms": 10.0, "request_ms": 800.0, "counts": [50] * 100 + [0] * 60},
        "rtt": {
            "before_median_ms": 1.0,
            "during_max_ms": 5.0,
            "during_median_ms": 1.0,
            "during_replies": 70,
            "expected_replies": 75,
        },
        "capture": capture(gap, retransmitted=10 if gap > 100 else 0),
        **extra,
    }


def capture(gap: float, *, retransmitted: int) -> dict[str, Any]:
    """What capture.analyse makes of a stream that stopped for ``gap`` ms at the request."""
    rx = [100.0] * 100 + [0.0] * int(gap // 10) + [100.0] * 200
    return {
        "segments_sent": 1000,
        "retransmitted": retransmitted,
        "retransmitted_pct": retransmitted / 10,
        "segments_received": 1000 - retransmitted,
        "lost": retransmitted,
        "lost_pct": retransmitted / 10,
        "sender_gap_ms": gap - 1.0,  # the sender's sniffer: a resend 1 ms before the end
        "longest_gap_ms": gap,
        "gap_at_ms": 20.0,
        "rtt_before_median_ms": 0.5,
        "rtt_during_max_ms": gap + 1,
        "rtt_samples": 900,
        "capture_dropped": {"sender": 0, "receiver": 0},
        "trace": {
            "bin_ms": 10.0,
            "request_ms": 1000.0,
            "rx_mbps": rx,
            "rtt_max_ms": [0.5] * 100 + [None] * int(gap // 10) + [gap + 1] + [0.5] * 199,
        },
    }


def test_ost_vs_mbb_report_has_its_tables_and_plots(tmp_path: Path) -> None:
    raws = {}
    for i in range(1, 4):
        raws[f"bbm-0{i}"] = raw("bbm", f"bbm-0{i}", gap=800.0 + i, lock=550.0 + 50 * i)
        raws[f"mbb-0{i}"] = raw("mbb", f"mbb-0{i}", gap=2.0 + i)
    text = report_text(OstVsMbb(), tmp_path, raws)
    # the seed's unavailability is the sender's gap; n = 3: the values, no interval
    unavailability = "| **TCP unavailability: longest gap at the sender, vm2 (ms)** [capture] |"
    assert f"{unavailability} 801.0 (values 800.0, 801.0, 802.0) |" in text
    assert "| 3 | 598 | 121 |" in text  # n and seed 003 beside each other
    receiver = "| TCP: longest gap in the data arriving at the receiver, vm3 (ms) [capture] |"
    assert f"{receiver} 802.0 (values 801.0, 802.0, 803.0) |" in text
    assert "| UDP probe: longest gap (ms) [ours] | 802.0" in text  # ours, the seed's in ()
    assert "| 3 | (598) | (121) |" in text
    assert "[" not in text.split("## Per run")[1].split("\n\n")[1].split("| 3 |")[1]
    assert "| p75 | 638 | 786 |" in text  # the lock times met vs Table 4.3
    assert "Make-before-break cut TCP's unavailability from 801 ms to 3 ms" in text
    assert "below 5 runs a cell gives the values, no interval" in text
    assert "*RTT max (ping)* counts answered pings only" in text  # the row that reads backwards
    assert "n < 10" in text
    for png in ("fig4_15_unavailability.png", "fig4_14_loss.png", "fig4_12_throughput.png",
                "fig4_13_rtt.png", "fig4_2_lock_times.png"):  # fmt: skip
        assert (tmp_path / png).stat().st_size > 10_000, png
        assert f"]({png})" in text


def test_ost_vs_mbb_interleaves_its_strategies() -> None:
    plan = OstVsMbb().plan(opts("ost-vs-mbb", quick=True))
    keys = [r.key for r in plan]
    assert keys == ["bbm-01", "mbb-01", "bbm-02", "mbb-02", "bbm-03", "mbb-03"]
    # a pair meets one lock time, drawn from Table 4.3 for its index whatever ran before
    assert plan[0].params["lock_ms"] == plan[1].params["lock_ms"] == paired_lock_ms(0, 1)
    assert plan[2].params["lock_ms"] != plan[0].params["lock_ms"]
    assert 529 <= paired_lock_ms(0, 1) <= 834
    assert len(OstVsMbb().plan(opts("ost-vs-mbb"))) == 40
    assert len(OstVsMbb().plan(opts("ost-vs-mbb", "runs=5", quick=True))) == 10
    fixed = OstVsMbb().plan(opts("ost-vs-mbb", "lock=700", quick=True))
    assert {r.params["lock_ms"] for r in fixed} == {700.0}


def test_ost_vs_mbb_backends_share_one_out_and_one_report(tmp_path: Path) -> None:
    """Each backend's runs keep their own keys in one ``--out``; the report reads them all
    from ``raw/`` and puts each backend's table and a side-by-side one in."""
    keys = [r.key for r in OstVsMbb().plan(opts("ost-vs-mbb", quick=True, backend="dpctl"))]
    assert keys[:2] == ["dpctl-bbm-01", "dpctl-mbb-01"]
    assert OstVsMbb().backends[0] == "ovs" and "p4runtime" in OstVsMbb().backends
    (tmp_path / "raw").mkdir()
    for backend, prefix, gap in (("ovs", "", 2.0), ("dpctl", "dpctl-", 9.0)):
        for i in (1, 2):
            for strategy, g in (("bbm", 700.0), ("mbb", gap)):
                key = f"{prefix}{strategy}-0{i}"
                doc = raw(strategy, key, gap=g + i, params={"pair": i}, backend=backend)
                (tmp_path / "raw" / f"{key}.json").write_text(json.dumps(doc))
    text = report_text(OstVsMbb(), tmp_path)
    assert "## Per run, BBM vs MBB: backend ovs (`topologies/ngncs-ost.yaml`)" in text
    assert "## Per run, BBM vs MBB: backend dpctl (`topologies/ngncs-ost-dpctl.yaml`)" in text
    side = text.split("## Backends side by side")[1]
    assert "| ovs | `ngncs-ost.yaml` | 2.5 (values 2.0, 3.0) (n = 2) |" in side
    assert "| dpctl | `ngncs-ost-dpctl.yaml` | 9.5 (values 9.0, 10.0) (n = 2) |" in side
    assert (tmp_path / "fig4_15_unavailability.png").stat().st_size > 10_000


def test_tcp_backoff_model() -> None:
    assert backoff_ms(200, 829) == 1400  # 200 + 400 + 800
    assert backoff_ms(800, 829) == 2400  # once is not enough: 800 + 1600
    assert backoff_ms(900, 829) == 900
    assert backoff_ms(2000, 829) == 2000
    doc = raw("bbm", "x", gap=800, lock=804, rto_min_ms=900)
    assert model_ms(doc) == pytest.approx(65 - 25 + 900)
    assert model_ms(raw("mbb", "y", gap=3, rto_min_ms=200)) is None


def test_tcp_resumes_at_the_end_of_the_stall_the_reroute_began() -> None:
    # 20 good intervals, 8 slow ones (2.0 s .. 2.8 s of TCP), the request at 2.0 s
    assert recovery_ms(raw("bbm", "x", gap=800)) == pytest.approx(800)
    quiet = raw("mbb", "y", gap=2)
    quiet["tcp"]["series_mbps"] = [100.0] * 58
    assert recovery_ms(quiet) == 0
    # a dip 1 s after TCP came back (and 1.1 s after the 700 ms reroute ended) is not the
    # reroute's; a dip before its end is, with the good interval between
    later = raw("bbm", "z", gap=800)
    later["tcp"]["series_mbps"] = [100.0] * 20 + [0.0] * 8 + [100.0] * 10 + [10.0] + [100.0] * 19
    assert recovery_ms(later) == pytest.approx(800)
    quiet["tcp"]["series_mbps"] = [100.0] * 38 + [10.0] + [100.0] * 19
    assert recovery_ms(quiet) == 0
    quiet["tcp"]["series_mbps"] = [100.0] * 20 + [10.0, 100.0, 100.0, 10.0] + [100.0] * 34
    assert recovery_ms(quiet) == pytest.approx(400)


def test_rto_sweep_report(tmp_path: Path) -> None:
    raws = {}
    for s, rto in (("bbm", 200), ("bbm", 800), ("bbm", 900), ("bbm", 2000), ("mbb", 200)):
        doc = raw(s, f"{s}-{rto}", gap=800.0, rto_min_ms=rto)
        raws[doc["key"]] = doc | {"recovery_ms": recovery_ms(doc)}
    text = report_text(RtoSweep(), tmp_path, raws)
    assert "| BBM rto_min 900 | 800 (values 800) | 800 / 800 | 0 | 1 | 940 | 1: 1/1 |" in text
    assert "| BBM rto_min 200 |" in text.split("| BBM rto_min 800 |")[0]  # by rto_min
    assert (tmp_path / "rto_resume.png").exists() and (tmp_path / "rto_throughput.png").exists()
    assert [r.key for r in RtoSweep().plan(opts("rto-sweep", quick=True))][:2] == [
        "bbm-rto200-01",
        "bbm-rto800-01",
    ]
    seeds = RtoSweep().plan(opts("rto-sweep", "runs_at={900: 10}"))
    per = {c: sum(r.params["rto_min_ms"] == c[1] and r.params["strategy"] == c[0] for r in seeds)
           for c in (("bbm", 800), ("bbm", 900), ("bbm", 2000), ("mbb", 200))}  # fmt: skip
    assert per == {("bbm", 800): 5, ("bbm", 900): 10, ("bbm", 2000): 5, ("mbb", 200): 5}


PING = """\
PING 10.0.0.3 (10.0.0.3) 56(84) bytes of data.
[1000.000100] 64 bytes from 10.0.0.3: icmp_seq=1 ttl=64 time=0.300 ms
[1000.020100] 64 bytes from 10.0.0.3: icmp_seq=2 ttl=64 time=0.100 ms
[1000.900000] 64 bytes from 10.0.0.3: icmp_seq=3 ttl=64 time=850 ms
[1000.910000] 64 bytes from 10.0.0.3: icmp_seq=40 ttl=64 time=2.00 ms

--- 10.0.0.3 ping statistics ---
"""


def test_ping_rtt_during_the_switch_counts_replies_by_their_send_time() -> None:
    replies = parse_ping(PING)
    assert replies[2] == (1000.9, 3, 850.0)
    rtt = rtt_summary(replies, request_wall=1000.06)
    assert rtt["before_median_ms"] == pytest.approx(0.2)
    assert rtt["during_max_ms"] == 2.0  # seq 3 was sent before the request
    assert rtt["during_replies"] == 1
    assert rtt_summary(replies, request_wall=1000.01)["during_max_ms"] == 850


def test_bandwidth_steering_report_shows_both_streams(tmp_path: Path) -> None:
    raws = {}
    for s, gap in (("bbm", 800.0), ("mbb", 3.0)):
        doc = raw(s, f"{s}-01", gap=gap, tcp_loss_pct=1.0)
        bystander = {"tcp": dict(doc["tcp"]), "tcp_loss_pct": 3.0, "tcp_offset_ms": 2000.0}
        raws[doc["key"]] = doc | {"bystander": bystander}
    text = report_text(BandwidthSteering(), tmp_path, raws)
    # the seed's steered-stream numbers beside the steered stream's, from the capture
    steered = "| **steered: retransmitted / sent (%)** [capture] | 1.00 (values 1.00) | 1 |"
    assert f"{steered} 0.00 (values 0.00) | 1 | 1.28 | 0.44 |" in text
    assert (
        "| both streams' mean retransmitted / sent (%) [iperf3] | 2.00 (values 2.00) | 1 |" in text
    )
    assert "| not steered: Mbit/s before | 100 (values 100) | 1 |" in text
    assert (tmp_path / "steering_throughput.png").stat().st_size > 10_000


def test_rate_around_the_request() -> None:
    stream = raw("bbm", "x", gap=800)  # 2 s at 100, 0.8 s at 0, then 100; request at 2 s
    assert rate_around(stream, -1000, 0) == 100
    assert rate_around(stream, 0, 800) == 0
    assert rate_around(stream, 5000, 6000) is None


@pytest.mark.parametrize(
    ("counts", "said"),
    [
        ([0, 0, 0], "none of its 3 runs retransmitted anything"),
        ([2, 5, 1], "each of its 3 runs retransmitted a little (median 2 packets)"),
        ([0, 4, 0], "2 of its 3 runs retransmitted nothing, the other 1 a little (median 4"),
    ],
)
def test_mbb_retransmissions_are_said_as_they_are(counts: list[int], said: str) -> None:
    from experiments.ost_vs_mbb import _retransmitted

    assert _retransmitted([{"capture": {"retransmitted": c}} for c in counts]).startswith(said)


def test_lock_times_are_stratified_over_table_4_3_so_n_pairs_cover_it() -> None:
    """The old independent draws put 19 of 40 in Table 4.3's upper mode (above its p75,
    786 ms) where the table says a quarter; stratified, n pairs meet each part of the
    distribution in proportion, whatever the seed."""
    for seed in range(20):
        qs = [lock_quantile(seed, pair) for pair in range(1, 41)]
        assert all(0 <= q < 1 for q in qs)
        for k in (1, 2, 3, 4, 5):  # pairs 1..2^k: one in each 1/2^k of the distribution
            first = qs[: 2**k]
            assert sorted(int(q * 2**k) for q in first) == list(range(2**k)), (seed, k)
        upper = [paired_lock_ms(seed, pair) for pair in range(1, 41)]
        assert 9 <= sum(ms > 786 for ms in upper) <= 11, seed  # 25 % of 40, within one
        for n in range(1, 41):  # any n pairs: n / 4 of them in the upper quarter, within one
            assert abs(sum(q >= 0.75 for q in qs[:n]) - n / 4) <= 1, (seed, n)
        assert abs(statistics.fmean(upper) - 605) < 25, seed  # Table 4.3's mean, 605 ms
    # every pair alone is still a uniform draw: over many seeds pair 1 covers [0, 1)
    firsts = [lock_quantile(seed, 1) for seed in range(400)]
    assert 80 <= sum(q >= 0.75 for q in firsts) <= 120
    assert van_der_corput(0) == 0 and van_der_corput(1) == 0.5 and van_der_corput(6) == 0.375
