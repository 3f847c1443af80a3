"""The audit sample: captures kept headers only and compressed for the first repetitions of
each arm, and the capture numbers recomputed from them (no tcpdump, no fabric)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from experiments import audit, capture, tcpcap
from services.reroute.cli.main import main
from tests.unit.experiments.test_tcpcap import DST, SRC, _frame, _outage, _pcap


def test_only_the_first_three_repetitions_of_each_arm_are_sampled() -> None:
    keys = ["bbm-01", "mbb-03", "dpctl-bbm-02", "bbm-rto900-01", "rate0060-03", "lock00150-bbm-01"]
    assert all(audit.sampled(k) for k in keys)
    assert not any(audit.sampled(k) for k in ("bbm-04", "dpctl-mbb-10", "bbm-rto200-05", "x"))


def test_a_full_run_commits_three_captures_per_arm_a_sweep_s_values_spread() -> None:
    assert [audit.arm(k) for k in ("lock00100-bbm-01", "dpctl-mbb-02", "bbm-rto900-01",
                                   "rate0060-03", "odl-poll01.0-path-01")] == [
        "bbm", "dpctl-mbb", "bbm", "", "odl-path"]  # fmt: skip
    plain = [f"{s}-0{i}" for s in ("bbm", "mbb") for i in range(1, 6)]
    assert audit.committed(plain) == {f"{s}-0{i}" for s in ("bbm", "mbb") for i in (1, 2, 3)}
    sweep = [f"lock{v:05d}-{s}-0{i}" for v in (100, 300, 530, 800) for s in ("bbm", "mbb")
             for i in range(1, 6)]  # fmt: skip
    assert audit.committed(sweep) == {
        f"lock{v:05d}-{s}-01" for v in (100, 300, 530) for s in ("bbm", "mbb")
    }  # the first repetition of three values, not the first three of each value
    backends = ["dpctl-bbm-01", "dpctl-bbm-04", "p4runtime-bbm-02", "ryu-mbb-01"]
    assert audit.committed(backends) == {"dpctl-bbm-01", "p4runtime-bbm-02", "ryu-mbb-01"}


def test_headers_only_keeps_every_header_and_no_payload(tmp_path: Path) -> None:
    frame = _frame(SRC, DST, 40000, 5201, 1, 1, 1448)
    with_payload = _pcap(tmp_path / "in.pcap", [(1.5, frame + b"\x5a" * 30)])
    out = io.BytesIO()
    assert tcpcap.headers_only(with_payload, out) == 1
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(out.getvalue())
    assert cut.stat().st_size == with_payload.stat().st_size - 30  # the 30 payload bytes
    assert list(tcpcap.read_pcap(cut)) == list(tcpcap.read_pcap(with_payload))  # same packets


def test_the_numbers_of_a_sampled_repetition_are_recomputed_from_its_kept_captures(
    tmp_path: Path,
) -> None:
    tx, rx = _outage(tmp_path)
    out = tmp_path / "out"
    raws = {}
    for key in ("bbm-02", "bbm-04"):
        with audit.keeping(out, key):
            doc = capture.analyse(tx, rx, port=5201, request_t=100.045, rtt_window_s=1.0)
            kept = [audit.keep(tx, "vm2"), audit.keep(rx, "vm3")]
        if all(kept):
            doc["pcaps"] = kept
        raws[key] = {"capture": json.loads(json.dumps(doc))}  # as the raw file holds it
    assert raws["bbm-02"]["capture"]["pcaps"] == ["pcaps/bbm-02-vm2.pcap.gz",
                                                  "pcaps/bbm-02-vm3.pcap.gz"]  # fmt: skip
    assert sorted(p.name for p in (out / "pcaps").iterdir()) == [
        "bbm-02-vm2.pcap.gz",
        "bbm-02-vm3.pcap.gz",
    ]  # bbm-04 is not in the sample
    assert gzip.decompress((out / "pcaps" / "bbm-02-vm2.pcap.gz").read_bytes())[
        :4
    ] == bytes.fromhex("4d3cb2a1")  # a classic pcap, nanosecond timestamps
    assert audit.recheck(out, raws) == {"bbm-02": []}  # every number agrees with the packets
    # a number that does not come from the packets is found
    raws["bbm-02"]["capture"]["sender_gap_ms"] = 123.0
    raws["bbm-02"]["capture"]["retransmitted"] = 1
    found = audit.recheck(out, raws)["bbm-02"]
    assert [line.split(":")[0] for line in found] == ["retransmitted", "sender_gap_ms"]
    assert "raw 123.0, pcaps 400.0" in found[1]


def test_reroute_experiment_audit_says_which_repetitions_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tx, rx = _outage(tmp_path)
    out = tmp_path / "out"
    (out / "raw").mkdir(parents=True)
    for key in ("bbm-01", "mbb-01"):
        with audit.keeping(out, key):
            doc = capture.analyse(tx, rx, port=5201, request_t=100.045, rtt_window_s=1.0)
            doc["pcaps"] = [audit.keep(tx, "vm2"), audit.keep(rx, "vm3")]
        (out / "raw" / f"{key}.json").write_text(json.dumps({"key": key, "capture": doc}))
    assert main(["experiment", "audit", str(out)]) == 0
    assert "2 of 2 repetitions' capture numbers recomputed alike" in capsys.readouterr().out
    bad = json.loads((out / "raw" / "mbb-01.json").read_text())
    bad["capture"]["longest_gap_ms"] = 1.0
    (out / "raw" / "mbb-01.json").write_text(json.dumps(bad))
    assert main(["experiment", "audit", str(out)]) == 1
    said = capsys.readouterr().out
    assert "bbm-01: agrees with its captures" in said and "mbb-01: longest_gap_ms: raw 1.0" in said
    # a repetition whose captures were not committed (a full run keeps 3 per arm) is named
    # and left out, not failed
    bad["capture"]["longest_gap_ms"] = json.loads((out / "raw" / "bbm-01.json").read_text())[
        "capture"
    ]["longest_gap_ms"]
    (out / "raw" / "mbb-01.json").write_text(json.dumps(bad))
    for pcap in (out / "pcaps").glob("mbb-01-*"):
        pcap.unlink()
    assert main(["experiment", "audit", str(out)]) == 0
    said = capsys.readouterr().out
    assert "1 repetitions' captures are not under" in said and "not audited: mbb-01" in said
    assert "1 of 1 repetitions' capture numbers recomputed alike" in said
    empty = tmp_path / "none"
    (empty / "raw").mkdir(parents=True)
    assert main(["experiment", "audit", str(empty)]) == 1  # nothing kept: nothing audited
