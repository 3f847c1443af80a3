"""docker/host-mirror.sh: the base image's Debian mirror is the one the host's apt uses."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "docker" / "host-mirror.sh"


def _mirror(apt: Path, suite: str = "bookworm") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), suite], env={"APT_DIR": str(apt), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True,
    )  # fmt: skip


def test_one_line_sources_list(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb http://sec.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main\n"
    )
    assert _mirror(tmp_path).stdout.strip() == "http://mirror.example/debian"


def test_deb822_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "a.sources").write_text(
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n"
    )
    (tmp_path / "sources.list.d" / "b.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://deb822.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert _mirror(tmp_path).stdout.strip() == "http://deb822.example/debian"


def test_no_source_for_the_suite_fails_naming_it(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb http://m.example/debian trixie main\n")
    out = _mirror(tmp_path)
    assert out.returncode == 1 and "bookworm" in out.stderr and not out.stdout
