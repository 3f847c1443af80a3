"""fabric.peers (finding and building the third-party peers once, cached outside the
checkout), what the fabric makes of them (``--ryu``, ``--hp-tool``), and
fabric.kinds.ryu_rest.peer's reading of a process's listening ports. The builds here are
stand-in scripts beside a stand-in tarball: what is checked is where things are looked for,
what a missing piece says, that a build runs once per input and that a failed one leaves
nothing behind. The real builds run in tests/drivers and tests/e2e."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fabric import peers
from fabric.kinds import hp_dpctl as hp
from fabric.kinds import ryu_rest as ryusite
from fabric.kinds.ryu_rest import peer as ryupeer

BUILD_DPCTL = """#!/usr/bin/env bash
set -e
echo run >> "$(dirname "$0")/runs"
mkdir -p "$1"
printf '#!/bin/sh\\necho dpctl\\n' > "$1/dpctl"
chmod +x "$1/dpctl"
echo "$1/dpctl"
"""
RYU_VENV = """#!/usr/bin/env bash
set -e
echo "$PY39 $PIP_CONSTRAINT" >> "$(dirname "$0")/runs"
mkdir -p "$1/bin"
printf '#!/bin/sh\\n' > "$1/bin/ryu-manager"
chmod +x "$1/bin/ryu-manager"
"""


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A peers directory at ../shared/peers of a stand-in repository, and a cache."""
    repo = tmp_path / "work" / "checkout"
    src = tmp_path / "work" / "shared" / "peers"
    src.mkdir(parents=True)
    (src / peers.TARBALL).write_bytes(b"tarball v1")
    (src / "build-dpctl.sh").write_text(BUILD_DPCTL)
    (src / "ryu-venv.sh").write_text(RYU_VENV)
    (src / peers.RYU_FREEZE).write_text("ryu==4.34\n")
    monkeypatch.setattr(peers, "ROOT", repo)
    monkeypatch.setattr(peers, "FALLBACK", tmp_path / "nowhere")
    monkeypatch.delenv("REROUTE_PEERS", raising=False)
    monkeypatch.setenv("REROUTE_CACHE", str(tmp_path / "cache"))
    return src


def runs(src: Path) -> list[str]:
    path = src / "runs"
    return path.read_text().splitlines() if path.exists() else []


def test_the_peers_are_looked_for_in_the_env_then_beside_the_repository_then_the_default(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert peers.source_dir() == shared
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "build-dpctl.sh").write_text(BUILD_DPCTL)
    monkeypatch.setenv("REROUTE_PEERS", str(elsewhere))
    assert peers.source_dir() == elsewhere
    assert [how for how, _ in peers.candidates()] == [
        "$REROUTE_PEERS", "../shared/peers from the repository root", "the default",
    ]  # fmt: skip


def test_no_peers_anywhere_names_every_place_looked_at(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers, "ROOT", tmp_path / "lonely" / "checkout")
    monkeypatch.setenv("REROUTE_PEERS", str(tmp_path / "unset"))
    with pytest.raises(peers.PeerMissing) as info:
        peers.dpctl()
    text = str(info.value)
    assert str(tmp_path / "unset") in text and str(tmp_path / "lonely" / "shared" / "peers") in text
    assert str(tmp_path / "nowhere") in text


def test_the_cache_is_outside_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REROUTE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/x")
    assert peers.cache_dir() == Path("/var/cache/x/reroute")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert peers.cache_dir() == Path.home() / ".cache" / "reroute"


def test_dpctl_is_built_once_per_tarball(shared: Path) -> None:
    first = peers.dpctl()
    assert first.is_file() and peers.dpctl() == first
    assert runs(shared) == ["run"]  # the second call found it
    assert first.parent.parent == peers.cache_dir()
    (shared / peers.TARBALL).write_bytes(b"tarball v2")
    second = peers.dpctl()
    assert second != first and second.is_file() and runs(shared) == ["run", "run"]


def test_no_compiler_is_a_missing_peer_naming_it(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_which = peers.shutil.which
    monkeypatch.setattr(peers.shutil, "which", lambda p: None if p == "gcc" else real_which(p))
    with pytest.raises(peers.PeerMissing, match="gcc not on PATH"):
        peers.dpctl()
    assert runs(shared) == []


def test_a_failed_build_is_an_error_and_leaves_nothing(shared: Path) -> None:
    (shared / "build-dpctl.sh").write_text("#!/bin/sh\necho 'cc: internal error' >&2\nexit 2\n")
    with pytest.raises(peers.PeerBuildError, match="cc: internal error"):
        peers.dpctl()
    assert [p.name for p in peers.cache_dir().iterdir() if not p.name.endswith(".lock")] == []


def test_ryu_is_built_with_the_python_39_and_the_known_good_freeze(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    py = tmp_path / "python3.9"
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    monkeypatch.setenv("PY39", str(py))
    manager = peers.ryu_manager()
    assert manager.name == "ryu-manager" and manager.is_file()
    assert runs(shared) == [f"{py} {shared / peers.RYU_FREEZE}"]
    assert peers.ryu_manager() == manager and len(runs(shared)) == 1
    (manager.parent.parent / ".complete").unlink()  # a build cut short: made again
    assert peers.ryu_manager() == manager and len(runs(shared)) == 2


def test_no_python_39_is_a_missing_peer_naming_where_it_looked(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PY39", raising=False)
    monkeypatch.setattr(peers.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(peers.shutil, "which", lambda name: None)
    with pytest.raises(peers.PeerMissing) as info:
        peers.ryu_manager()
    assert "no Python 3.9" in str(info.value) and "pyenv" in str(info.value)
    assert "$PY39" in str(info.value) and "python3.9 on PATH" in str(info.value)


def test_the_fabric_takes_real_ryu_where_it_can_be_had(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Path:
        raise peers.PeerMissing("no Python 3.9 (looked at X)")

    assert ryusite.choose("emulator") == (False, ryusite.EMULATOR)
    monkeypatch.setattr(peers, "ryu_manager", lambda: Path("/x/ryu-manager"))
    assert ryusite.choose("auto") == (True, ryupeer.NAME)
    assert ryusite.choose("real") == (True, ryupeer.NAME)
    monkeypatch.setattr(peers, "ryu_manager", missing)
    real, why = ryusite.choose("auto")
    assert not real and "EMULATOR" in why and "no Python 3.9 (looked at X)" in why
    with pytest.raises(peers.PeerMissing, match="looked at X"):
        ryusite.choose("real")


def test_the_hp_tool_the_fabric_gives_its_inventory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "dpctl", lambda: Path("/cache/dpctl-1/dpctl"))
    assert hp.hp_tool("dpctl") == {"tool": "dpctl", "tool_path": "/cache/dpctl-1/dpctl"}
    assert hp.hp_tool("ovs-ofctl") == {"tool": "ovs-ofctl"}
    assert hp.hp_tool("auto") == {}


def test_a_process_s_listening_ports_are_read_from_proc() -> None:
    with socket.socket() as listener, socket.socket() as idle:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        idle.bind(("127.0.0.1", 0))  # bound, not listening
        ports = ryupeer.listening_ports(os.getpid())
        assert listener.getsockname()[1] in ports
        assert idle.getsockname()[1] not in ports
    assert ryupeer.listening_ports(2**22 + 7) == []  # no such process
