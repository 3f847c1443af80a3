"""The experiment runner with a fake experiment (no fabric): raw files, resume after an
interruption without repeating anything, env.json, the report."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from experiments.backends import BACKENDS
from experiments.catalog import EXPERIMENTS
from experiments.config import Config
from experiments.runner import Options, Raw, Rep, Say, Written, read_raw, run
from services.reroute.errors import ConfigError


class _Bar:
    def __init__(self) -> None:
        self.advanced: list[str] = []

    def advance(self, key: str) -> None:
        self.advanced.append(key)

    def say(self, message: str) -> None:
        pass


class Fake:
    """Repetitions that record that they ran; one of them can be interrupted (Ctrl-C)."""

    name = "fake"
    title = "a fake"
    backends: tuple[str, ...] = ("ovs",)
    config_model: type[Config] = Config

    def __init__(self, interrupt_at: str | None = None) -> None:
        self.interrupt_at = interrupt_at
        self.ran: list[str] = []
        self.sessions: list[tuple[str, int]] = []

    def plan(self, opts: Options) -> list[Rep]:
        n = opts.config.runs
        return [Rep(key=f"{s}-{i:02d}", params={"s": s}) for i in range(1, n + 1) for s in "ab"]

    @contextmanager
    def _session(self, seed: int) -> Iterator[str]:
        self.sessions.append(("up", seed))
        try:
            yield "session"
        finally:
            self.sessions.append(("down", seed))

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[str]:
        return self._session(seed)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        if rep.key == self.interrupt_at:
            raise KeyboardInterrupt
        self.ran.append(rep.key)
        return {"value": len(self.ran)}

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        (out / "plot.png").write_bytes(b"png")
        body = "".join(f"- {k}: {r['value']}\n" for k, r in raws.items())
        return Written(conclusions="Fakes ran.", body=body)


@contextmanager
def _progress(total: int, done: int) -> Iterator[_Bar]:
    yield _Bar()


def test_every_repetition_leaves_a_raw_file_and_the_report_names_them(tmp_path: Path) -> None:
    fake = Fake()
    outcome = run(fake, Options(config=Config(runs=2)), tmp_path, _progress, argv=["reroute", "x"])
    assert (outcome.planned, outcome.ran, outcome.kept, outcome.interrupted) == (4, 4, 4, False)
    raws = sorted(p.name for p in (tmp_path / "raw").iterdir())
    assert raws == ["a-01.json.gz", "a-02.json.gz", "b-01.json.gz", "b-02.json.gz"]
    doc = read_raw(tmp_path / "raw" / "b-01.json.gz")
    assert {k: doc[k] for k in ("key", "params", "value", "experiment", "config")} == {
        "key": "b-01",
        "params": {"s": "b"},
        "value": 2,
        "experiment": "fake",
        "config": {"runs": 2},
    }
    assert doc["wall_s"] >= 0 and len(doc["loadavg"]) == 2  # when and how loaded
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# fake: a fake\n\n**Conclusions.** Fakes ran.")
    assert "`reroute x`" in report and "- b-02: 4" in report
    assert "Load average (1 min) during the repetitions" in report
    env = json.loads((tmp_path / "env.json").read_text())["sessions"]
    assert len(env) == 1 and env[0]["cores"] >= 1 and "kernel" in env[0]
    assert fake.sessions == [("up", 0), ("down", 0)]


def test_an_interrupted_run_keeps_what_it_did_and_resumes_without_repeating(
    tmp_path: Path,
) -> None:
    first = Fake(interrupt_at="a-02")
    outcome = run(first, Options(config=Config(runs=2)), tmp_path, _progress)
    assert outcome.interrupted and outcome.kept == 2 and outcome.report is None
    assert first.ran == ["a-01", "b-01"]
    assert first.sessions == [("up", 0), ("down", 0)]  # the session was left cleanly

    second = Fake()
    outcome = run(second, Options(config=Config(runs=2), seed=1), tmp_path, _progress)
    assert second.ran == ["a-02", "b-02"]  # only the missing ones
    assert (outcome.ran, outcome.kept, outcome.interrupted) == (2, 4, False)
    assert second.sessions[0] == ("up", 1002)  # fresh random draws for the rest
    assert len(json.loads((tmp_path / "env.json").read_text())["sessions"]) == 2

    third = Fake()
    outcome = run(third, Options(config=Config(runs=2)), tmp_path, _progress)
    assert third.ran == [] and third.sessions == [] and outcome.kept == 4
    assert (tmp_path / "report.md").exists()


def test_a_half_written_raw_file_is_never_left(tmp_path: Path) -> None:
    class Broken(Fake):
        def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
            if rep.key == "b-01":
                return {"value": object()}  # not JSON
            return super().run(session, rep, say)

    with pytest.raises(TypeError):
        run(Broken(), Options(config=Config(runs=1)), tmp_path, _progress)
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["a-01.json.gz"]


def test_the_command_line_offers_every_experiments_backends_and_no_other() -> None:
    """``--backend``'s choices are the backends table (experiments/backends.py: the command
    line reads it without importing the experiments); every one of them is run by some
    experiment, and no experiment runs one the table lacks."""
    offered = set(BACKENDS)
    run_on = {b for exp in EXPERIMENTS.values() for b in exp.backends}
    assert offered == run_on, (offered - run_on, run_on - offered)


def test_a_resumed_run_with_other_parameters_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    class Other(Config):
        rate: int = 1

    class Fake2(Fake):
        config_model: type[Config] = Other

    run(Fake2(), Options(config=Other(runs=1)), tmp_path, _progress)
    again = Fake2()
    with pytest.raises(ConfigError, match="rate differ"):
        run(again, Options(config=Other(runs=2, rate=5)), tmp_path, _progress)
    assert again.ran == []
    run(again, Options(config=Other(runs=2)), tmp_path, _progress)  # the same ones: fine
    assert again.ran == ["a-02", "b-02"]
