"""The full run in parts (``reroute experiment full --part K/N``): the partition, the train
split and its pooling, ``--only`` by backend, the pinned commit's checks, resuming from what
is committed and collecting a part. No fabric: the runs themselves are replaced."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from experiments import full, parts
from experiments import impulse_analysis as ia
from experiments.impulse_response import ImpulseResponse, by_config, train_sizes
from experiments.runner import Progress, raw_exists, write_raw
from services.reroute.errors import ConfigError
from tests.unit.experiments.helpers import opts, report_text
from tests.unit.experiments.test_impulse import _train

SHA = "a1b2c3d" + "0" * 33
OTHER = "f" * 40


@contextmanager
def _quiet(total: int, done: int) -> Iterator[Progress]:
    raise AssertionError("nothing runs in these tests")
    yield  # pragma: no cover


def _whole() -> list[full.Planned]:
    return full._planned(full.load_plan(), Path("/nonexistent"), quick=False, sets=[], seed=0)


# -- the partition ---------------------------------------------------------------------


def test_every_run_of_the_plan_is_in_exactly_one_part_of_at_most_1h40() -> None:
    pin = parts.load_pin(parts.ROOT / parts.PLAN_FILE)
    assert pin.max_part_s == 6000  # 1 h 40 min
    planned = _whole()
    cut = parts.plan_parts(full.load_plan(), pin)
    placed = [(u.index, k) for p in cut for u in p.units for k in u.keys]
    every = [(i, r.key) for i, p in enumerate(planned) for r in p.reps]
    assert sorted(placed) == sorted(every) and len(placed) == len(set(placed))
    assert all(p.estimate_s <= 6000 for p in cut)
    # the parts' estimates are the dry run's: repetitions plus a session per entry in a part
    for p in cut:
        for u in p.units:
            each = dict(zip((r.key for r in u.planned.reps), u.planned.seconds, strict=True))
            assert u.estimate_s == pytest.approx(sum(each[k] for k in u.keys) + full.SESSION_S)
    total = sum(p.estimate_s for p in planned)
    assert len(cut) <= total // 6000 + 2  # not wasteful: about the fewest parts
    assert [p.number for p in cut] == list(range(1, len(cut) + 1))


def test_a_repetition_longer_than_a_part_is_refused() -> None:
    planned = [p for p in _whole() if p.entry.experiment == "impulse-response"][:1]
    with pytest.raises(ConfigError, match=r"alone is estimated .* more than a part"):
        parts.partition(planned, 600)


def test_an_entry_may_continue_in_the_next_part_keys_kept_in_order() -> None:
    ost = [p for p in _whole() if p.entry.out == "ost-vs-mbb"]
    cut = parts.partition(ost, 400)  # about 40 repetitions a part
    assert len(cut) > 2
    keys = [k for p in cut for u in p.units for k in u.keys]
    assert keys == [r.key for r in ost[0].reps]


# -- impulse trains in pieces ----------------------------------------------------------


def test_long_trains_run_as_pieces_of_at_most_25() -> None:
    assert train_sizes(100, 25) == [25, 25, 25, 25]
    assert train_sizes(30, 25) == [15, 15] and train_sizes(10, 25) == [10]
    assert train_sizes(101, 25) == [21, 20, 20, 20, 20]
    trains = [
        r.params for p in _whole() if p.entry.experiment == "impulse-response" for r in p.reps
    ]
    assert max(t["n"] for t in trains) <= 25
    by = ImpulseResponse().plan(
        opts("impulse-response", "runs=2", "n_by_config={dpctl-path: 50}", backend="dpctl")
    )
    assert [(r.key, r.params["n"]) for r in by] == [
        ("dpctl-path-01", 25), ("dpctl-path-02", 25), ("dpctl-path-03", 25),
        ("dpctl-path-04", 25), ("dpctl-rtt-01", 10), ("dpctl-rtt-02", 10),
    ]  # fmt: skip


def _dips(n: int) -> list[tuple[float, float]]:
    return [(0.2 + 0.1 * (i % 7), 0.3 + 0.2 * (i % 3)) for i in range(n)]


def _table_rows(text: str) -> list[list[str]]:
    """The recovery table's row of dpctl-path, without its trains column."""
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| dpctl-path |")]
    return [r[:3] + r[4:] for r in rows]


def test_a_train_as_4_x_25_pools_to_the_report_of_one_100_train(tmp_path: Path) -> None:
    dips = _dips(100)
    one = _train(dips, n_samples=4100) | {"n": 100}
    pieces = []
    for i in range(4):
        doc = _train(dips[25 * i : 25 * (i + 1)], n_samples=1100)
        pieces.append(doc | {"params": {"n": 25, "piece_of": 100}})
    a, b = tmp_path / "one", tmp_path / "four"
    for d in (a, b):
        (d / "raw").mkdir(parents=True)
    write_raw(a, "dpctl-path-01", one)
    for i, doc in enumerate(pieces, start=1):
        write_raw(b, f"dpctl-path-{i:02d}", doc)
    whole = [ia.impulses(one)]
    split = [ia.impulses(d) for d in pieces]
    flat = [i for imps in split for i in imps]
    assert [i.recovery_s for i in flat] == [i.recovery_s for i in whole[0]]
    for x, y in zip(flat, whole[0], strict=True):  # the same samples (the synthetic ramp's
        assert x.times == y.times and x.r == pytest.approx(y.r, abs=1e-9)  # float aside)
    from experiments.runner import every_raw

    assert len(by_config(every_raw(b))["dpctl-path"]) == 4
    exp = ImpulseResponse()
    text_one, text_four = report_text(exp, a), report_text(exp, b)
    assert _table_rows(text_one) == _table_rows(text_four) != []
    assert "| dpctl-path | A | 1 | 100 |" in text_one
    assert "| dpctl-path | A | 4 | 100 |" in text_four
    assert "dpctl-path (4 trains, 100 impulses)" in text_four  # the report says it pooled
    assert "pooled" not in text_one
    assert text_one.split("\n\n")[0] == text_four.split("\n\n")[0]  # the same conclusions


# -- --only ----------------------------------------------------------------------------


def test_only_selects_a_backend_an_experiment_or_both() -> None:
    plan = full.load_plan()
    dpctl = full.select(plan, ["dpctl"])
    assert {e.experiment for e in dpctl} == {"ost-vs-mbb", "switching-delay", "impulse-response"}
    assert all(e.backend == "dpctl" for e in dpctl)
    odl = full.select(plan, ["impulse-response:odl"])
    assert [(e.experiment, e.backend) for e in odl] == [("impulse-response", "odl")]
    ovs = full.select(plan, ["ovs"])  # entries without a backend run on their default, ovs
    assert any(e.experiment == "mptcp" and e.backend is None for e in ovs)
    assert all(full.backend_of(e) == "ovs" for e in ovs)
    assert full.select(plan, ["mptcp", "ryu"]) == [
        e for e in plan if e.experiment == "mptcp" or e.backend == "ryu"
    ]
    assert [e.out for e in full.select(plan, ["ost-vs-mbb-backends:p4runtime"])] == [
        "ost-vs-mbb-backends"
    ]
    with pytest.raises(ConfigError, match="--only odl-path: no entry"):
        full.select(plan, ["odl-path"])


# -- one pinned commit -----------------------------------------------------------------


def _main(tmp_path: Path, commit: str = SHA, count: int | None = None) -> Path:
    """A main checkout: the plan file (pinned to ``commit``) and an empty results-full."""
    main = tmp_path / "main"
    (main / "experiments" / "results-full").mkdir(parents=True)
    text = (parts.ROOT / parts.PLAN_FILE).read_text()
    pin = parts.load_pin(parts.ROOT / parts.PLAN_FILE)
    path = main / parts.PLAN_FILE
    path.write_text(text)
    n = count or len(parts.plan_parts(full.load_plan(), pin))
    parts.write_pin(parts.load_pin(path), commit, n)
    return main


def _at(monkeypatch: pytest.MonkeyPatch, head: str, modified: list[str] | None = None) -> None:
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # run_part sets it
    monkeypatch.setattr(parts, "fabrics_up", lambda: [])  # other runs on this machine aside
    monkeypatch.setattr(parts, "git_state", lambda root=None: (head, modified or []))
    monkeypatch.setattr(full, "git_head", lambda: head[:7] + ("-dirty" if modified else ""))


def _run(main: Path, part: str, out: Path, **kw: Any) -> int:
    return parts.run_part(
        full.load_plan(), part_arg=part, main=main, out=out, only=kw.get("only"),
        dry_run=kw.get("dry_run", False), allow_dirty=False, progress=_quiet,
    )  # fmt: skip


def test_the_plan_file_is_pinned_and_a_placeholder_is_refused(tmp_path: Path) -> None:
    shipped = parts.load_pin(parts.ROOT / parts.PLAN_FILE)
    assert shipped.commit is not None and re.fullmatch(r"[0-9a-f]{40}", shipped.commit)
    assert shipped.parts is not None and shipped.parts > 0  # pinned once section 1 landed
    unpinned = tmp_path / "full-plan.yaml"
    text = (parts.ROOT / parts.PLAN_FILE).read_text()
    unpinned.write_text(re.sub(r"(?m)^commit: \S+", "commit: PLACEHOLDER", text))
    with pytest.raises(ConfigError, match=r"PLACEHOLDER: .* --pin"):
        parts.pinned(parts.load_pin(unpinned))
    main = _main(tmp_path)
    pin = parts.load_pin(main / parts.PLAN_FILE)
    assert pin.commit == SHA and pin.parts == len(parts.plan_parts(full.load_plan(), pin))
    assert "# how many parts" in (main / parts.PLAN_FILE).read_text()  # comments kept
    (main / parts.PLAN_FILE).write_text("commit: abc\n")
    with pytest.raises(ConfigError, match="not a full 40-hex commit"):
        parts.load_pin(main / parts.PLAN_FILE)


def test_pin_writes_head_and_the_parts_and_refuses_a_modified_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = _main(tmp_path, OTHER)
    _at(monkeypatch, SHA, ["experiments/full.py"])
    with pytest.raises(ConfigError, match=r"modified .*experiments/full\.py"):
        parts.pin_here(full.load_plan(), main)
    assert parts.load_pin(main / parts.PLAN_FILE).commit == OTHER  # nothing written
    _at(monkeypatch, SHA)
    assert parts.pin_here(full.load_plan(), main) == 0
    assert parts.load_pin(main / parts.PLAN_FILE).commit == SHA


def test_a_part_is_refused_from_another_commit_or_a_modified_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main, out = _main(tmp_path), tmp_path / "stage"
    n = parts.load_pin(main / parts.PLAN_FILE).parts
    _at(monkeypatch, OTHER)
    with pytest.raises(ConfigError, match=f"is at {OTHER}, the plan pins {SHA}: .*worktree"):
        _run(main, f"1/{n}", out)
    _at(monkeypatch, SHA, ["experiments/ostbench.py"])
    with pytest.raises(ConfigError, match=r"modified \(experiments/ostbench\.py\)"):
        _run(main, f"1/{n}", out)
    _at(monkeypatch, SHA)
    with pytest.raises(ConfigError, match=f"the plan makes {n} parts, not 99"):
        _run(main, "1/99", out)
    with pytest.raises(ConfigError, match="inside the tree"):
        _run(main, f"1/{n}", parts.ROOT / "results" / "part")
    # results of another commit committed under results-full: never mixed in
    first = parts.plan_parts(full.load_plan(), parts.load_pin(main / parts.PLAN_FILE))[0]
    u = first.units[0]
    (main / parts.RESULTS / u.out / "raw").mkdir(parents=True)
    write_raw(main / parts.RESULTS / u.out, u.keys[0], {"git": "0ld0ld0"})
    with pytest.raises(ConfigError, match="made by commit 0ld0ld0, not the pinned"):
        _run(main, f"1/{n}", out)
    assert not out.exists()  # nothing written by any refusal
    with pytest.raises(ConfigError, match="K/N"):
        parts.parse_part("0/3")


def test_an_unpinned_plan_runs_no_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main = _main(tmp_path)
    (main / parts.PLAN_FILE).write_text(
        re.sub(r"(?m)^commit: \S+", "commit: PLACEHOLDER", (main / parts.PLAN_FILE).read_text())
    )
    _at(monkeypatch, SHA)
    n = parts.load_pin(main / parts.PLAN_FILE).parts
    with pytest.raises(ConfigError, match="PLACEHOLDER"):
        _run(main, f"1/{n}", tmp_path / "stage")


# -- resuming from what is committed ---------------------------------------------------


def _commit_unit(results: Path, unit: parts.Unit, keys: tuple[str, ...] | None = None) -> None:
    (results / unit.out / "raw").mkdir(parents=True, exist_ok=True)
    for k in keys or unit.keys:
        write_raw(results / unit.out, k, {"git": SHA[:7], "key": k})


def test_resume_skips_committed_parts_and_repetitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    main, out = _main(tmp_path), tmp_path / "stage"
    results = main / parts.RESULTS
    cut = parts.plan_parts(full.load_plan(), parts.load_pin(main / parts.PLAN_FILE))
    n = len(cut)
    _at(monkeypatch, SHA)
    ran: list[list[tuple[str, set[str]]]] = []

    def fake_units(work: Any, out: Path, **kw: Any) -> int:
        ran.append([(p.entry.out, set(keys)) for p, keys in work])
        assert kw["what"] == f"part 1/{n}" and kw["log_extra"]["commit"] == SHA
        return 0

    monkeypatch.setattr(full, "run_units", fake_units)
    # part 1 entirely committed: next is part 2, and part 1 again runs nothing
    for u in cut[0].units:
        _commit_unit(results, u)
    assert parts.choose(cut, None, results).number == 2
    assert _run(main, f"1/{n}", out) == 0
    assert ran == [] and "nothing to run" in capsys.readouterr().out
    # part 2 half committed: only the rest runs
    second = cut[1].units[0]
    half = second.keys[: len(second.keys) // 2 or 1]
    _commit_unit(results, second, half)
    monkeypatch.setattr(full, "run_units", lambda work, out, **kw: ran.append(
        [(p.entry.out, set(keys)) for p, keys in work]) or 0)  # fmt: skip
    assert _run(main, "next", out) == 0
    assert not any(set(half) & keys for o, keys in ran[0] if o == second.out)
    planned = {k for u in cut[1].units for k in u.keys} - set(half)
    assert set().union(*(keys for _, keys in ran[0])) == planned
    doc = json.loads((out / parts.PART_FILE).read_text())
    assert doc["part"] == f"2/{n}" and doc["commit"] == SHA
    assert [u["keys"] for u in doc["units"]] == [list(u.keys) for u in cut[1].units]
    # the dry run says what is committed
    capsys.readouterr()
    parts.show(cut, results)
    said = capsys.readouterr().out
    assert f"part 1/{n}: about" in said and ", committed\n" in said
    assert f"{len(half)}/" in said
    for u in cut[2].units:
        assert f"{u.planned.entry.experiment} ({u.planned.backend}) -> {u.out}" in said
    for p in cut:
        assert re.search(rf"part {p.number}/{n}: about (1 h [0-3]\d min|\d+ min)", said)


# -- collecting a part into results-full -----------------------------------------------


def _staged(tmp_path: Path, commit: str = SHA, git: str = SHA[:7]) -> tuple[Path, list[str]]:
    return _staged_keys(tmp_path, ("bbm-01", "mbb-01"), commit, git)


def _staged_keys(
    tmp_path: Path, keys: tuple[str, ...], commit: str = SHA, git: str = SHA[:7]
) -> tuple[Path, list[str]]:
    stage = tmp_path / "stage"
    (stage / "ost-vs-mbb" / "raw").mkdir(parents=True)
    (stage / "ost-vs-mbb" / "pcaps").mkdir()
    for k in keys:
        write_raw(stage / "ost-vs-mbb", k, {"git": git, "key": k})
        (stage / "ost-vs-mbb" / "pcaps" / f"{k}-vm2.pcap.gz").write_bytes(b"pcap")
    env = {"sessions": [{"command": "reroute experiment run ost-vs-mbb", "git": git}]}
    (stage / "ost-vs-mbb" / "env.json").write_text(json.dumps(env))
    (stage / "full.json").write_text(json.dumps({"runs": [{"part": "1/5"}]}))
    units = [{"out": "ost-vs-mbb", "experiment": "ost-vs-mbb", "backend": "ovs", "keys": [*keys]}]
    doc = {"part": "1/5", "commit": commit, "units": units}
    (stage / parts.PART_FILE).write_text(json.dumps(doc))
    return stage, [*keys]


def _clean(monkeypatch: pytest.MonkeyPatch, pending: str = "") -> None:
    class Done:
        stdout = pending

    monkeypatch.setattr(parts.subprocess, "run", lambda *a, **k: Done())


def test_collect_copies_a_part_of_the_pinned_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    main = _main(tmp_path, count=5)
    stage, keys = _staged(tmp_path)
    _clean(monkeypatch)
    assert parts.collect(stage, main) == 0
    dest = main / parts.RESULTS / "ost-vs-mbb"
    assert all(raw_exists(dest, k) for k in keys)
    assert (dest / "pcaps" / "bbm-01-vm2.pcap.gz").read_bytes() == b"pcap"
    assert len(json.loads((dest / "env.json").read_text())["sessions"]) == 1
    assert json.loads((main / parts.RESULTS / "full.json").read_text())["runs"] == [{"part": "1/5"}]
    assert "git -C" in capsys.readouterr().out
    assert parts.collect(stage, main) == 0  # again: nothing new, nothing doubled
    assert len(json.loads((dest / "env.json").read_text())["sessions"]) == 1


def test_collect_commits_three_captures_per_arm_of_a_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = _main(tmp_path, count=5)
    keys = tuple(f"lock{v:05d}-bbm-0{i}" for v in (100, 300, 530, 800) for i in (1, 2))
    stage, _ = _staged_keys(tmp_path, keys)
    _clean(monkeypatch)
    assert parts.collect(stage, main) == 0
    dest = main / parts.RESULTS / "ost-vs-mbb"
    assert all(raw_exists(dest, k) for k in keys)  # every raw file, 3 repetitions' captures
    assert sorted(p.name for p in (dest / "pcaps").iterdir()) == [
        f"lock{v:05d}-bbm-01-vm2.pcap.gz" for v in (100, 300, 530)
    ]


@pytest.mark.parametrize(
    ("staged", "pending", "error"),
    [
        ({"commit": OTHER}, "", "is part 1/5 of commit f+, the plan pins"),
        ({"git": SHA[:7] + "-dirty"}, "", "bbm-01 was made by a1b2c3d-dirty"),
        ({"git": "0ld0ld0"}, "", "was made by 0ld0ld0"),
        ({}, " M experiments/results-full/x", "uncommitted changes"),
    ],
)
def test_collect_refuses_another_commit_a_dirty_tree_or_pending_changes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    staged: dict[str, str],
    pending: str,
    error: str,
) -> None:
    main = _main(tmp_path, count=5)
    stage, _ = _staged(tmp_path, **staged)
    _clean(monkeypatch, pending)
    with pytest.raises(ConfigError, match=error):
        parts.collect(stage, main)
    assert not (main / parts.RESULTS / "ost-vs-mbb").exists()  # nothing half-written


def test_collect_refuses_to_mix_in_a_previous_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = _main(tmp_path, count=5)
    stage, _ = _staged(tmp_path)
    old = main / parts.RESULTS / "ost-vs-mbb"
    old.mkdir()
    (old / "env.json").write_text(json.dumps({"sessions": [{"git": "b75fbdb"}]}))
    _clean(monkeypatch)
    with pytest.raises(ConfigError, match=r"holds another run \(sessions of b75fbdb\)"):
        parts.collect(stage, main)
    assert not (old / "raw").exists()


def test_collect_refuses_an_incomplete_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = _main(tmp_path, count=5)
    stage, keys = _staged(tmp_path)
    (stage / "ost-vs-mbb" / "raw" / f"{keys[1]}.json.gz").unlink()
    _clean(monkeypatch)
    with pytest.raises(ConfigError, match="nothing was copied: ost-vs-mbb/mbb-01 was not run"):
        parts.collect(stage, main)
    assert not (main / parts.RESULTS / "ost-vs-mbb").exists()


def test_same_commit_reads_git_describe() -> None:
    assert parts.same_commit("a1b2c3d", SHA)
    assert parts.same_commit("v1.0-3-ga1b2c3d", SHA)
    assert not parts.same_commit("a1b2c3d-dirty", SHA)
    assert not parts.same_commit("deadbee", SHA) and not parts.same_commit(None, SHA)


def test_a_long_repetition_shows_its_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []

    class Bar:
        def advance(self, key: str) -> None:
            said.append(f"advanced {key}")

        def say(self, message: str) -> None:
            said.append(message)

    @contextmanager
    def bar(total: int, done: int) -> Iterator[Progress]:
        yield Bar()

    monkeypatch.setattr(full, "BEAT_S", 0.05)
    import time

    each = {"dpctl-path-01": 1262.0, "dpctl-path-02": 1262.0}
    beat = full.beating(bar, each, what="part 2/6", left_s=600.0, started=time.monotonic())
    with beat(2, 0) as progress:
        time.sleep(0.2)
        progress.advance("dpctl-path-01")
        time.sleep(0.12)
    lines = [line for line in said if line.startswith("dpctl-path-0")]
    assert lines and "advanced dpctl-path-01" in said
    assert lines[0].startswith("dpctl-path-01: 0 s of about 21 min 02 s; 0 s into the part 2/6")
    assert "about 52 min 04 s left in it" in lines[0]  # 2 x 1262 s + 600 s
    assert lines[-1].startswith("dpctl-path-02: ")


def test_a_part_runs_collects_and_resumes_end_to_end_without_a_fabric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ODL trains of their part (``--only impulse-response:odl``) through the real runner,
    each train replaced by a synthetic one; collected into main; then nothing left to run,
    and the report of what is committed pools the pieces of configuration C."""
    from contextlib import nullcontext

    from experiments import runner
    from experiments.runner import every_raw, render

    main, out = _main(tmp_path), tmp_path / "stage"
    plan = full.load_plan()
    cut = parts.plan_parts(plan, parts.load_pin(main / parts.PLAN_FILE))
    only = full.select(plan, ["impulse-response:odl"])
    part = next(p for p in cut if any(u.planned.entry in only for u in p.units))
    _at(monkeypatch, SHA)
    monkeypatch.setattr(runner, "git_head", lambda: SHA[:7])
    monkeypatch.setattr(runner, "environment", lambda: {"cores": 2, "git": SHA[:7]})
    monkeypatch.setattr(ImpulseResponse, "session", lambda self, o, say, seed: nullcontext(None))
    made: list[str] = []

    def fake_train(self: Any, session: Any, rep: Any, say: Any) -> dict[str, Any]:
        made.append(rep.key)
        return _train(_dips(int(rep.params["n"])), n_samples=40 * int(rep.params["n"]) + 60)

    monkeypatch.setattr(ImpulseResponse, "run", fake_train)

    @contextmanager
    def plain(total: int, done: int) -> Iterator[Progress]:
        class Bar:
            def advance(self, key: str) -> None: ...
            def say(self, message: str) -> None: ...

        yield Bar()

    def go() -> int:
        k = f"{part.number}/{len(cut)}"
        return parts.run_part(plan, part_arg=k, main=main, out=out, only=only, dry_run=False,
                              allow_dirty=False, progress=plain)  # fmt: skip

    assert go() == 0
    assert made == ["odl-path-01", "odl-path-02", "odl-path-03", "odl-path-04", "odl-rtt-01"]
    _clean(monkeypatch)
    assert parts.collect(out, main) == 0
    committed_dir = main / parts.RESULTS / "impulse-response"
    assert sorted(every_raw(committed_dir)) == sorted(made)
    assert all(r["git"] == SHA[:7] for r in every_raw(committed_dir).values())
    log = json.loads((main / parts.RESULTS / "full.json").read_text())["runs"]
    assert log[0]["part"] == f"{part.number}/{len(cut)}" and log[0]["commit"] == SHA
    made.clear()
    capsys.readouterr()
    assert go() == 0 and made == []  # resumed from what is committed: nothing runs again
    assert "nothing to run" in capsys.readouterr().out
    text = render(ImpulseResponse(), committed_dir).read_text()
    assert "| odl-path | C | 4 | 100 |" in text and "odl-path (4 trains, 100 impulses)" in text


def test_check_tree_reads_git_itself(tmp_path: Path) -> None:
    """The commit and the modified files come from git, not from a raw file's description."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip

    git("init", "-q")
    (tmp_path / "a.py").write_text("1\n")
    git("add", "a.py")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    parts.check_tree(first, tmp_path)
    (tmp_path / "a.py").write_text("2\n")
    with pytest.raises(ConfigError, match=r"modified \(a\.py\)"):
        parts.check_tree(first, tmp_path)
    git("commit", "-qam", "two")
    with pytest.raises(ConfigError, match=f"the plan pins {first}"):
        parts.check_tree(first, tmp_path)


def test_a_part_runs_the_pinned_trees_code_and_passes_it_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=f"imports services from .*, not from {tmp_path}"):
        parts.check_imports(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    parts.check_imports()
    assert os.environ["PYTHONPATH"] == f"{parts.ROOT}{os.pathsep}/elsewhere"


def test_a_part_waits_for_an_idle_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main = _main(tmp_path)
    n = parts.load_pin(main / parts.PLAN_FILE).parts
    _at(monkeypatch, SHA)
    monkeypatch.setattr(parts, "fabrics_up", lambda: ["ngncs-ost"])
    with pytest.raises(ConfigError, match=r"fabric\(s\) ngncs-ost are up: .*idle machine"):
        _run(main, f"1/{n}", tmp_path / "stage")
    assert not (tmp_path / "stage").exists()


def test_a_report_that_fails_on_a_share_of_an_entry_does_not_stop_the_part(
    tmp_path: Path,
) -> None:
    class Broken(ImpulseResponse):
        def report(self, raws: Any, out: Path) -> Any:
            raise KeyError("mbb")

    written = full.Subset(Broken(), frozenset()).report({}, tmp_path)
    assert "No report of this share" in written.conclusions and "KeyError" in written.conclusions


def test_next_with_only_and_a_drifted_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = full.load_plan()
    pin = parts.load_pin(parts.ROOT / parts.PLAN_FILE)
    cut = parts.plan_parts(plan, pin)
    only = full.select(plan, ["impulse-response:odl"])
    chosen = parts.choose(cut, None, tmp_path, only)
    assert any(u.planned.entry in only for u in chosen.units)
    main = _main(tmp_path, count=len(cut) + 1)  # pinned by code that cut the plan otherwise
    _at(monkeypatch, SHA)
    with pytest.raises(ConfigError, match=f"makes {len(cut) + 1} parts, this code makes"):
        _run(main, "next", tmp_path / "stage")
    assert _run(main, "next", tmp_path / "stage", dry_run=True) == 0  # shown, with a warning
    assert "warning: " in capsys.readouterr().out


# -- a re-run of some entries from a later commit (the line cap's) ---------------------

CAP = Path("experiments/full-plan-cap.yaml")


def _rerun(main: Path, commit: str = OTHER, *, text: str | None = None) -> Path:
    """The shipped re-run's pin file in ``main``, pinned to ``commit``."""
    path = main / CAP
    path.write_text(text or (parts.ROOT / CAP).read_text())
    pin, plan = parts.load_run(path)
    parts.write_pin(pin, commit, len(parts.plan_parts(plan, pin)))
    return path


def test_the_cap_rerun_is_the_full_runs_entries_at_the_same_scale() -> None:
    pin, plan = parts.load_run(parts.ROOT / CAP)
    assert pin.results == Path("experiments/results-full-cap") and pin.seed == 0
    whole = {(e.out, e.experiment, e.backend): e for e in full.load_plan()}
    assert {e.out for e in plan} == {
        "ost-vs-mbb", "rto-sweep", "lock-sweep", "bandwidth-steering", "ost-vs-mbb-backends"
    }  # fmt: skip
    for e in plan:  # the same entry as the full run's: nothing but the commit differs
        assert whole[(e.out, e.experiment, e.backend)] == e
    cut = parts.plan_parts(plan, pin)
    assert pin.parts in (None, len(cut)) and all(p.estimate_s <= pin.max_part_s for p in cut)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("results: /tmp/x", "must be a relative path"),
        ("results: experiments/../x", "must be a relative path"),
        ("results: experiments/other", "not experiments/results-full or"),
        ("results: experiments/results-fullX", "not experiments/results-full or"),
        ("results: experiments/results-full-cap/sub", "not experiments/results-full or"),
        ("plan: ../full.yaml", "must be a relative path"),
        ("colour: blue", "unknown key"),
    ],
)
def test_a_pin_file_names_its_plan_and_results_inside_the_checkout(
    tmp_path: Path, line: str, error: str
) -> None:
    path = tmp_path / "full-plan-x.yaml"
    path.write_text(f"commit: PLACEHOLDER\n{line}\n")
    with pytest.raises(ConfigError, match=error):
        parts.load_pin(path)
    with pytest.raises(ConfigError, match="no such pin file"):
        parts.load_pin(tmp_path / "nothing.yaml")


def test_published_takes_an_entry_from_a_rerun_once_all_of_it_is_committed(
    tmp_path: Path,
) -> None:
    main = _main(tmp_path)
    assert parts.published(main)[0][0] == main / parts.RESULTS / "ost-vs-mbb"  # no re-run
    pin, plan = parts.load_run(_rerun(main))
    results = main / pin.results
    units = [u for p in parts.plan_parts(plan, pin) for u in p.units if u.out == "rto-sweep"]
    _commit_unit(results, units[0], units[0].keys[:-1])  # all but one repetition
    dirs, said = parts.published(main)
    assert main / parts.RESULTS / "rto-sweep" in dirs
    assert "rto-sweep: full-plan.yaml's run (full-plan-cap.yaml has 29 of 30" in "\n".join(said)
    for u in units:
        _commit_unit(results, u)
    dirs, said = parts.published(main)
    assert results / "rto-sweep" in dirs and main / parts.RESULTS / "ost-vs-mbb" in dirs
    assert len(dirs) == len({e.out for e in full.load_plan()})  # one per entry, plan order
    assert "rto-sweep: the re-run of full-plan-cap.yaml (30 repetitions)" in said


def test_published_refuses_an_entry_rerun_twice_or_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = _main(tmp_path)
    _rerun(main)
    (main / "experiments" / "full-plan-twice.yaml").write_text((main / CAP).read_text())
    with pytest.raises(ConfigError, match="ost-vs-mbb is re-run by both"):
        parts.published(main)
    (main / "experiments" / "full-plan-twice.yaml").unlink()
    load_run = parts.load_run
    elsewhere = full.Entry(experiment="ost-vs-mbb", out="elsewhere")

    def renamed(path: Path) -> tuple[parts.Pin, list[full.Entry]]:
        pin, plan = load_run(path)
        return pin, [elsewhere] if path.name == CAP.name else plan

    monkeypatch.setattr(parts, "load_run", renamed)
    with pytest.raises(ConfigError, match="elsewhere is no entry of the full plan"):
        parts.published(main)


def test_a_rerun_runs_and_collects_its_own_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    main = _main(tmp_path)
    pin, plan = parts.load_run(_rerun(main, SHA))
    _at(monkeypatch, SHA)
    ran: list[Any] = []

    def run_units(work: Any, out: Path, **kw: Any) -> int:
        ran.append(work)
        return 0

    monkeypatch.setattr(full, "run_units", run_units)
    out = tmp_path / "stage"
    code = parts.run_part(
        plan, part_arg=f"1/{pin.parts}", main=main, out=out, only=None, dry_run=False,
        allow_dirty=False, progress=_quiet, pin_file=CAP,
    )  # fmt: skip
    assert code == 0 and ran and ran[0][0][0].entry.out == "ost-vs-mbb"  # the re-run's plan
    doc = json.loads((out / parts.PART_FILE).read_text())
    assert doc["run"] == str(CAP) and doc["commit"] == SHA
    assert f"--pin-file {CAP} --collect" in capsys.readouterr().out
    # a part of one run is never collected into the other
    stage, _ = _staged(tmp_path / "x")
    _clean(monkeypatch)
    with pytest.raises(ConfigError, match=f"collect it with --pin-file {parts.PLAN_FILE}"):
        parts.collect(stage, main, CAP)
    doc = json.loads((stage / parts.PART_FILE).read_text()) | {"run": str(CAP)}
    (stage / parts.PART_FILE).write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=f"not of {parts.PLAN_FILE}"):
        parts.collect(stage, main)
    assert parts.collect(stage, main, CAP) == 0
    assert raw_exists(main / pin.results / "ost-vs-mbb", "bbm-01")
    assert not (main / parts.RESULTS / "ost-vs-mbb").exists()
