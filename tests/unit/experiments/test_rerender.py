"""Reports rendered again from raw data alone: ``reroute experiment report`` and ``export``
on small raw files committed under fixtures/ (made by quick runs on the fabric, one per
experiment), without root or a fabric."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import pytest

from experiments import catalog
from experiments.runner import every_raw
from services.reroute.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("name", list(catalog.EXPERIMENTS))
def test_every_experiment_renders_its_report_from_raw_alone(name: str, tmp_path: Path) -> None:
    raw = FIXTURES / name
    assert sorted((raw / "raw").glob("*.json.gz")), f"no fixture for {name}"
    before = sorted(p.name for p in raw.rglob("*"))
    assert main(["experiment", "report", str(raw), "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in raw.rglob("*")) == before  # the fixture is left alone
    text = (tmp_path / "report.md").read_text()
    exp = catalog.get(name)
    assert text.startswith(f"# {name}: {exp.title}\n\n**Conclusions.** ")
    conclusions = text.split("**Conclusions.** ")[1].split("\n\n")[0]
    assert conclusions.count(". ") >= 1 and "Not enough" not in conclusions, conclusions
    assert "Load average (1 min) during the repetitions" in text
    assert f"{len(every_raw(raw))} repetitions in `raw/`" in text
    images = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert images, "no figure"
    for png in images:
        assert (tmp_path / png).stat().st_size > 5_000, png
    tables = sorted((tmp_path / "tables").glob("*.csv"))
    assert tables
    with tables[0].open() as f:
        header, *rows = list(csv.reader(f))
    assert rows and all(len(r) == len(header) for r in rows)


def test_a_report_written_into_its_own_directory_and_again_is_the_same(tmp_path: Path) -> None:
    work = tmp_path / "ost"
    shutil.copytree(FIXTURES / "ost-vs-mbb", work)
    assert main(["experiment", "report", str(work)]) == 0
    first = (work / "report.md").read_text()
    assert main(["experiment", "report", str(work)]) == 0
    assert (work / "report.md").read_text() == first  # deterministic bootstrap


def test_export_writes_a_row_per_repetition_and_the_traces(tmp_path: Path) -> None:
    raw = FIXTURES / "impulse-response"
    assert main(["experiment", "export", str(raw), "--csv", "--out", str(tmp_path)]) == 0
    with (tmp_path / "repetitions.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(every_raw(raw)) and "period_s" in rows[0]
    with (tmp_path / "impulses.csv").open() as f:
        impulses = list(csv.DictReader(f))
    assert impulses and {"key", "index", "at_s"} <= set(impulses[0])
    with (tmp_path / "series.csv").open() as f:
        names = {r["name"] for r in csv.DictReader(f)}
    assert "series_mbps" in names


def test_what_is_not_a_results_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["experiment", "report", str(tmp_path)]) == 1
    assert "no raw/ directory" in capsys.readouterr().err
    (tmp_path / "raw").mkdir()
    assert main(["experiment", "report", str(tmp_path)]) == 1
    assert "cannot tell which experiment" in capsys.readouterr().err
