"""The seeds' numbers beside ours (``reroute experiment seeds``) from made-up raw documents:
each row's numbers, computed as the experiment's report computes them, and the command."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from experiments import catalog
from experiments.impulse_response import ImpulseResponse
from experiments.lock_sweep import LockSweep
from experiments.mptcp_bdp import MptcpBdp
from experiments.odl_poll_sweep import OdlPollSweep
from experiments.ost_vs_mbb import OstVsMbb
from experiments.rto_sweep import RtoSweep
from experiments.runner import SeedRow, write_raw
from experiments.seed_table import BEGIN, END, Seeded
from experiments.switching_delay import SwitchingDelay
from services.reroute.cli.main import main
from tests.unit.experiments.helpers import report_text
from tests.unit.experiments.test_impulse import _train
from tests.unit.experiments.test_mptcp import _raw as _stream
from tests.unit.experiments.test_reports import raw
from tests.unit.experiments.test_rerender import FIXTURES


def _row(rows: Sequence[SeedRow], *words: str) -> SeedRow:
    """The one row whose metric has every one of ``words``."""
    found = [r for r in rows if all(w in r.metric for w in words)]
    assert len(found) == 1, [r.metric for r in rows]
    return found[0]


def _ost_raws(backend: str | None = None) -> dict[str, Any]:
    """5 BBM runs (sender's gap 800..804 ms, 1 % retransmitted) and 5 MBB runs (sender's
    gap 9, 19, 29, 39, 49 ms, nothing retransmitted)."""
    prefix = f"{backend}-" if backend else ""
    raws = {}
    for i in range(1, 6):
        for s, gap in (("bbm", 800.0 + i), ("mbb", 10.0 * i)):
            key = f"{prefix}{s}-{i:02d}"
            raws[key] = raw(s, key, gap=gap) | ({"backend": backend} if backend else {})
    return raws


def test_every_experiment_sets_its_seed_numbers_beside_its_own() -> None:
    assert all(isinstance(e, Seeded) for e in catalog.EXPERIMENTS.values())


def test_ost_vs_mbb_rows_are_the_seeds_metrics_as_its_report_computes_them(
    tmp_path: Path,
) -> None:
    raws = _ost_raws()
    rows = OstVsMbb().seed_rows(raws)
    gap = _row(rows, "BBM", "unavailability: longest gap at the sender")
    assert (gap.seed, gap.ours_n, gap.source) == ("598", "5", "003 ch. 5; 4.2.4")
    assert gap.seed_n.startswith("50") and gap.ours.startswith("802.0 [")  # n = 5: an interval
    mbb = _row(rows, "MBB: TCP unavailability")
    assert (mbb.seed, mbb.ours_n) == ("121", "5") and mbb.ours.startswith("29.0 [")
    loss = _row(rows, "BBM", "retransmitted / sent")
    assert (loss.seed, loss.ours) == ("2.8", "1.00 [1.00, 1.00]")
    assert "an average of 2 %" in loss.note and "ours 7 s at 100 Mbit/s" in loss.note
    assert _row(rows, "MBB: TCP loss").seed == "0.93"
    quantiles = _row(rows, "below 20 / 200 ms")
    assert (quantiles.seed, quantiles.ours, quantiles.ours_n) == ("50 / 75", "40 / 100", "5")
    rtt = _row(rows, "BBM", "RTT max")
    assert rtt.seed == "hundreds" and rtt.ours.startswith("804.0 [")  # capture: gap + 1
    assert rtt.seed_n.startswith("n not stated")
    dip = _row(rows, "BBM", "dip")
    assert (dip.seed, dip.seed_n[0]) == ("60 (6 of 10 Gbit/s)", "1")
    assert "not the same measurement" in dip.note
    # the very cells of the report's table
    text = report_text(OstVsMbb(), tmp_path, raws)
    for r in (gap, mbb, loss, rtt, dip):
        assert f"| {r.ours} |" in text, r.metric


def test_ost_vs_mbb_names_each_backend_and_keeps_only_the_headline_rows() -> None:
    rows = OstVsMbb().seed_rows(_ost_raws() | _ost_raws("ryu"))
    assert len(rows) == 2 * 4  # unavailability and loss, BBM and MBB, per backend
    ryu = [r for r in rows if r.note.startswith("backend ryu")]
    assert len(ryu) == 4 and _row(ryu, "MBB: TCP unavailability").ours.startswith("29.0 [")


def test_rto_sweep_rows_at_the_seeds_rto_min_only() -> None:
    raws = {}
    for i, resumed in enumerate((800, 800, 800, 2400, 2400), start=1):
        doc = raw("bbm", f"bbm-rto800-{i:02d}", gap=800.0, rto_min_ms=800, recovery_ms=resumed)
        raws[doc["key"]] = doc
    raws["bbm-rto200-01"] = raw("bbm", "bbm-rto200-01", gap=800.0, rto_min_ms=200, recovery_ms=1)
    (row,) = RtoSweep().seed_rows(raws)  # none at 900 and 2000: not run; 200: not Figs 4.8-4.10
    assert row.metric == "BBM, rto_min 800 ms: request -> TCP resumes (ms)"
    assert (row.source, row.seed, row.seed_n) == (
        "003 4.2.2, Figure 4.8",
        "800 (3/5) or 2400 (2/5)",
        "5",
    )
    assert row.ours.startswith("1440 [") and row.ours_n == "5"
    assert "timeouts (model): 1: 5/5" in row.note  # dark 625 ms < one rto_min of 800


def test_switching_delay_rows_per_backend_for_the_seeds_flow_update() -> None:
    raws = {
        f"{b}-{s}-{i:02d}": {"backend": b, "strategy": s, "switching_ms": v + later}
        for b, later in (("ovs", 0.0), ("ryu", 5.0))
        for s in ("bbm", "mbb")
        for i, v in enumerate((10.0, 11.0, 12.0, 13.0, 20.0), start=1)
    }
    rows = SwitchingDelay().seed_rows(raws)
    assert len(rows) == 4  # mean and median, BBM only (MBB is not the seed's), per backend
    ovs = [r for r in rows if r.note.startswith("backend ovs;")]
    mean, median = _row(ovs, "mean"), _row(ovs, "p50")
    assert (mean.seed, mean.seed_n, mean.source) == ("17.5", "50", "003 4.1.4, Table 4.5")
    assert mean.ours.startswith("13.2 [") and mean.ours_n == "5"
    assert (median.seed, median.ours) == ("12.7", "12.0")
    ryu = [r for r in rows if r.note.startswith("backend ryu")]
    assert _row(ryu, "p50").ours == "17.0" and "seed 003's controller" in ryu[0].note


def _trains(zero_s: float, key: str, **extra: Any) -> dict[str, Any]:
    """5 impulses, each with nothing through for ``zero_s``: recovery zero_s + 0.05 s."""
    return _train([(zero_s, 0.0)] * 5, n_samples=240) | {"key": key, **extra}


def test_odl_against_dpctl_beside_seed_000_figure_10b() -> None:
    raws = {"dpctl-path-01": _trains(0.5, "dpctl-path-01"), "odl-path-01": _trains(2.0, "odl")}
    (row,) = ImpulseResponse().seed_rows(raws)
    assert row.metric == "recovery to 90 % of B, odl-path (C) - dpctl-path (A) (s)"
    assert (row.source, row.seed) == ("000 Figure 10b", "2-3 s in the majority of cases")
    assert row.seed_n == "100 + 100 path degradations, T = 50 s"
    assert (row.ours, row.ours_n) == ("+1.50 [+1.50, +1.50]", "5 / 5 impulses")
    assert "median / p95 1.50 / 1.50 s" in row.note and "T = 4 s" in row.note
    poll = {
        "dpctl-path-01": _trains(0.5, "dpctl-path-01", stats_s=None),
        "odl-poll03.0-path-01": _trains(2.0, "odl-poll03.0-path-01", stats_s=3.0),
        "odl-poll01.0-path-01": _trains(1.0, "odl-poll01.0-path-01", stats_s=1.0),
    }
    one, three = OdlPollSweep().seed_rows(poll)
    assert one.metric == "recovery to 90 % of B, ODL with a 1 s poll - dpctl (s)"
    assert (one.ours, three.ours) == ("+0.50 [+0.50, +0.50]", "+1.50 [+1.50, +1.50]")
    assert "ODL's default" in three.note and "ODL's default" not in one.note


def test_mptcp_bdp_sets_seed_002s_words_beside_both_protocols() -> None:
    case = "bdp-udp-fail-10s"
    more = {"udp_mbps": 40.0, "rtt_ms": 50.0, "path_mbps": 100}
    raws = {
        f"{case}-{p}-01": _stream(case, p, during) | more
        for p, during in (("mptcp", 30.0), ("tcp", 0.0))
    }
    goodput, delivered = MptcpBdp().seed_rows(raws)  # the case without background: not run
    assert goodput.metric == f"{case}: goodput during the failure (Mbit/s), MPTCP / TCP"
    assert goodput.ours == "MPTCP 30.0 (values 30.0) / TCP 0.0 (values 0.0)"
    assert (goodput.ours_n, goodput.seed_n) == ("1 / 1", "2 (Exp#1, Exp#2)")
    assert goodput.seed == "no number: 'MPTCP outperforms single TCP'"
    assert "the seed's 200 Mbit/s, ours 40" in goodput.note and "50.0 ms" in goodput.note
    assert delivered.ours == "MPTCP 28.8 (values 28.8) / TCP 25.0 (values 25.0)"


def _entry(root: Path, name: str, raws: dict[str, Any]) -> Path:
    out = root / name
    (out / "raw").mkdir(parents=True)
    for key, doc in raws.items():
        write_raw(out, key, doc)
    return out


def test_the_command_writes_one_table_and_lists_what_has_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    made = {"experiment": "ost-vs-mbb", "git": "f50dd97"}
    docs = {k: v | made for k, v in _ost_raws().items()}
    ost = _entry(tmp_path, "ost-vs-mbb", docs)
    lock = _entry(tmp_path, "lock-sweep", {"lock00530-bbm-01": {"experiment": "lock-sweep"}})
    waiting = _entry(tmp_path, "rto-sweep", {})
    out = tmp_path / "seeds.md"
    assert main(["experiment", "seeds", str(ost), str(lock), str(waiting), "--out", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out.split(f"written: {out}")[0].removesuffix("\n")
    assert text.startswith("# The seeds' numbers beside ours\n")
    assert "The raw data are of commit f50dd97.\n" in text
    assert "| entry | metric | seed | seed's value | seed's n | ours | our n | note |" in text
    gap = "BBM (seed 003: OST): TCP unavailability: longest gap at the sender (ms)"
    seed = "003 ch. 5; 4.2.4 | 598 | 50 (4.2.4: fifty runs of each)"
    assert f"| ost-vs-mbb | {gap} | {seed} | 802.0 [" in text
    assert "**Not yet run** (no raw data): `rto-sweep` (rto-sweep)." in text
    assert "**`lock-sweep`** (1 repetitions): none of its numbers is one a seed states" in text
    assert LockSweep().seed_rows({}) == []


def test_a_directory_that_is_no_experiments_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _entry(tmp_path, "lock-sweep", {})
    stranger = _entry(tmp_path, "holiday-photos", {"a": {"what": "a beach"}})
    out = tmp_path / "seeds.md"
    assert main(["experiment", "seeds", str(good), str(stranger), "--out", str(out)]) == 1
    assert "holiday-photos: not an experiment's results" in capsys.readouterr().err
    assert not out.exists()
    assert main(["experiment", "seeds", str(tmp_path / "ost-vs-mbb"), "--out", str(out)]) == 1
    assert "no such directory" in capsys.readouterr().err and not out.exists()
    both = {"a": {"experiment": "lock-sweep"}, "b": {"experiment": "rto-sweep"}}
    mixed = _entry(tmp_path, "mixed", both)
    assert main(["experiment", "seeds", str(mixed), "--out", str(out)]) == 1
    assert "holds runs of several experiments (lock-sweep, rto-sweep)" in capsys.readouterr().err
    assert not out.exists()


def test_every_experiment_fixture_gives_its_rows(tmp_path: Path) -> None:
    """The raw documents quick runs on the fabric made (fixtures/), one per experiment."""
    out = tmp_path / "seeds.md"
    dirs = [str(FIXTURES / name) for name in catalog.EXPERIMENTS]
    assert main(["experiment", "seeds", *dirs, "--out", str(out)]) == 0
    text = out.read_text()
    for name in catalog.EXPERIMENTS:
        assert f"| {name} |" in text or f"**`{name}`**" in text, name
    assert "Not yet run" not in text


def _reported(tmp_path: Path, *names: str) -> list[Path]:
    """Copies of the fixtures ``names`` under tmp_path/results, each with its report."""
    dirs = []
    for name in names:
        d = tmp_path / "results" / name
        shutil.copytree(FIXTURES / name, d)
        assert main(["experiment", "report", str(d)]) == 0
        dirs.append(d)
    return dirs


def test_the_readme_gets_the_table_and_each_reports_conclusions_between_its_markers(
    tmp_path: Path,
) -> None:
    rto, odl = _reported(tmp_path, "rto-sweep", "odl-poll-sweep")
    readme = tmp_path / "README.md"
    before, after = "# Experiments\n\nIntro.\n\n", "\n## Later\n\nMore.\n"
    readme.write_text(f"{before}{BEGIN}\nold results\n{END}\n{after}")
    out = tmp_path / "seeds.md"
    args = ["experiment", "seeds", str(rto), str(odl), "--out", str(out), "--readme", str(readme)]
    assert main(args) == 0
    text = readme.read_text()
    assert text.startswith(before + BEGIN) and text.endswith(f"{END}\n{after}")
    assert "old results" not in text
    assert "### The seeds' numbers beside ours\n" in text and "| rto-sweep | " in text
    table = out.read_text().split("\n", 1)[1]  # seeds.md but its title
    assert table in text
    for d in (rto, odl):
        report = (d / "report.md").read_text()
        said = report.split("**Conclusions.** ")[1].split("\n\nMade by ")[0]
        n = len(list((d / "raw").glob("*.json.gz")))
        link = f"[report](results/{d.name}/report.md)"
        assert f"\n\n{said}\n\nFrom {n} repetitions: {link}.\n" in text, d.name
    assert main(args) == 0 and readme.read_text() == text  # again: the same


def test_a_stale_report_or_a_readme_without_markers_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (rto,) = _reported(tmp_path, "rto-sweep")
    readme = tmp_path / "README.md"
    readme.write_text("# Experiments\n\nNo place for results.\n")
    out = tmp_path / "seeds.md"
    args = ["experiment", "seeds", str(rto), "--out", str(out), "--readme", str(readme)]
    assert main(args) == 1
    assert "needs one line" in capsys.readouterr().err
    assert not out.exists() and readme.read_text() == "# Experiments\n\nNo place for results.\n"
    marked = f"# Experiments\n\n{BEGIN}\nold\n{END}\n"
    readme.write_text(marked)
    sorted((rto / "raw").glob("*.json.gz"))[-1].unlink()  # the report now counts one too many
    assert main(args) == 1
    assert "not the report of the" in capsys.readouterr().err
    assert not out.exists() and readme.read_text() == marked
    (rto / "report.md").unlink()
    assert main(args) == 1
    assert "no report.md" in capsys.readouterr().err
    assert not out.exists() and readme.read_text() == marked
