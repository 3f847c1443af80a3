"""The layers import only downward: fabric/, experiments/, bench/ -> services/ -> drivers/.

Every ``import`` and ``from ... import`` in the source tree is read (with ``ast``, so an
import inside a function counts too) and checked against the allowed direction.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> the top-level packages of ours it may import
ALLOWED = {
    "drivers": {"drivers"},
    "services": {"services", "drivers"},
    "fabric": {"fabric", "services", "drivers"},
    "experiments": {"experiments", "fabric", "services", "drivers"},
    "bench": {"bench", "fabric", "services", "drivers", "experiments"},
}
OURS = set(ALLOWED) | {"tests"}


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def violations(package: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, top in imported(path):
            if top in OURS and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {top}")
    return bad


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_go_only_downward(package: str) -> None:
    assert violations(package) == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    sneaky = tmp_path / "m.py"
    sneaky.write_text("def f():\n    from fabric import state\n    import experiments.demo\n")
    assert imported(sneaky) == [(2, "fabric"), (3, "experiments")]


EMULATORS = {  # an EMULATOR never reuses the code of the driver it is tested against
    "emulators/p4rt": "drivers.p4runtime",
    "emulators/odl": "drivers.odl",
    "emulators/polatis": "drivers.polatis_scpi",
}


@pytest.mark.parametrize("emulator", sorted(EMULATORS))
def test_emulators_do_not_import_their_driver(emulator: str) -> None:
    driver = EMULATORS[emulator]
    bad = []
    for path in sorted((ROOT / emulator).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names
                    if n == driver or n.startswith(driver + ".")]  # fmt: skip
    assert bad == []
