"""``reroute fabric``: every command names its fabric (name or topology file); with several
up, a command that does not is refused and nothing is removed or run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fabric.cli import _exec_target, fabric_name
from fabric.errors import FabricError
from fabric.state import FabricState, running
from services.reroute.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
NGNCS = ROOT / "topologies" / "ngncs-ost.yaml"
TWO_SITE = ROOT / "topologies" / "two-site-longhaul.yaml"


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REROUTE_RUN_DIR", str(tmp_path))
    return tmp_path


def saved(name: str, topology: Path, hosts: tuple[str, ...]) -> None:
    FabricState(
        name=name,
        topology=str(topology),
        fabric_ns=f"rr-{name}",
        host_ns={h: f"rr-{name}.{h}" for h in hosts},
    ).save()


def two_up() -> None:
    saved("ngncs-ost", NGNCS, ("vm1", "vm2", "vm3", "vm4"))
    saved("two-site", TWO_SITE, ("h1", "h2"))


def test_a_fabric_is_named_by_its_name_or_its_topology_file() -> None:
    assert fabric_name("ngncs-ost") == "ngncs-ost"
    assert fabric_name(str(NGNCS)) == "ngncs-ost"
    assert fabric_name("topologies/two-site-longhaul.yaml") == "two-site"


def test_down_without_a_name_removes_nothing_and_says_how(
    capsys: pytest.CaptureFixture[str],
) -> None:
    two_up()
    assert main(["fabric", "down"]) == 1
    err = capsys.readouterr().err
    assert "say which fabric to remove: `reroute fabric down NAME` (up: ngncs-ost, two-site)" in err
    assert "`reroute fabric down --all` for every fabric" in err
    assert main(["fabric", "down", "--all", "ngncs-ost"]) == 1
    assert "or --all; not both" in capsys.readouterr().err
    assert running() == ["ngncs-ost", "two-site"]


def test_exec_names_fabric_then_node_also_by_file() -> None:
    two_up()
    st, node, cmd = _exec_target(None, ["two-site", "h1", "--", "ping", "-c1", "10.10.0.2"])
    assert (st.name, node, cmd) == ("two-site", "h1", ["ping", "-c1", "10.10.0.2"])
    st, node, cmd = _exec_target(None, [str(NGNCS), "br1", "--", "ovs-ofctl", "show", "br1"])
    assert (st.name, node, cmd) == ("ngncs-ost", "br1", ["ovs-ofctl", "show", "br1"])


def test_exec_without_a_fabric_is_refused_with_two_up_and_noted_with_one(
    capsys: pytest.CaptureFixture[str], run_dir: Path
) -> None:
    two_up()
    with pytest.raises(FabricError, match=r"name the fabric \(running: ngncs-ost, two-site\)"):
        _exec_target(None, ["vm2", "--", "true"])
    with pytest.raises(FabricError, match=r"no fabric named 'ngncs-os' is up"):
        _exec_target(None, ["ngncs-os", "vm2", "--", "true"])
    shutil.rmtree(run_dir / "two-site")
    st, node, cmd = _exec_target(None, ["vm2", "ping", "-c1", "10.0.0.3"])  # the old form
    assert (st.name, node, cmd) == ("ngncs-ost", "vm2", ["ping", "-c1", "10.0.0.3"])
    assert "name the fabric: `reroute fabric exec ngncs-ost vm2 -- ...`" in capsys.readouterr().err
    st, node, cmd = _exec_target("ngncs-ost", ["vm3", "--", "true"])  # the old --name
    assert (st.name, node, cmd) == ("ngncs-ost", "vm3", ["true"])
    assert "--name is deprecated: `reroute fabric exec ngncs-ost vm3 -- ...`" in (
        capsys.readouterr().err
    )


def test_status_of_a_fabric_not_up_lists_those_up(capsys: pytest.CaptureFixture[str]) -> None:
    two_up()
    assert main(["fabric", "status", "ngncs"]) == 1
    assert "no fabric named 'ngncs' is up (running: ngncs-ost, two-site)" in capsys.readouterr().err
