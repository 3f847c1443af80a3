"""Which fabric a command means (``fabric.state.pick``): named, or the only one up."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabric.errors import FabricError
from fabric.state import FabricState, pick, running


def saved(name: str) -> FabricState:
    st = FabricState(name=name, topology=f"/t/{name}.yaml", fabric_ns=f"rr-{name}", host_ns={})
    st.save()
    return st


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REROUTE_RUN_DIR", str(tmp_path))
    return tmp_path


def test_no_fabric_up_names_none() -> None:
    with pytest.raises(FabricError, match=r"name the fabric \(running: none\)"):
        pick(None)


def test_the_only_fabric_up_is_picked_without_a_name() -> None:
    saved("a")
    assert pick(None).name == "a"


def test_two_up_need_a_name_and_the_error_lists_both() -> None:
    saved("a")
    saved("b")
    with pytest.raises(FabricError, match="running: a, b"):
        pick(None)
    assert pick("b").topology == "/t/b.yaml"
    assert running() == ["a", "b"]


def test_a_name_not_up_is_refused_with_what_is() -> None:
    saved("a")
    with pytest.raises(FabricError, match=r"no fabric named 'x' is up \(running: a\)"):
        pick("x")
