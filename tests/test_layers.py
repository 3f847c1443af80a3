"""The layers import only downward (README's layout has the picture)::

    bench/ -> experiments/ -> fabric/ -> services/ -> drivers/ ---> protocols/
                                    \\-> emulators/ ----------------^

fabric/, experiments/ and bench/ may import services/, drivers/ and emulators/ (the fabric
starts the emulators); services/ may import drivers/; drivers/ and emulators/ are peers
that never import each other, and both may import protocols/, which imports nothing of ours
above it. An EMULATOR imports no driver (one process helper aside: ``NEUTRAL``), so it
never reuses the code of the driver it is tested against (``EMULATORS`` names those).

Inside services/reroute, the rooms import downward too: service/, cli/ and monitor/ may use
any room; engine/ (reroutes run) uses store/, planning/ and model/; store/ (journal and
locks) uses planning/ and model/; planning/ (pure) uses model/; model/ none (``ROOMS``).
The loose modules beside them (rules, tables, errors, reach, runtime, devicestate, ...) are
shared: any room may import them.

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
    "protocols": {"protocols"},
    "drivers": {"drivers", "protocols"},
    "emulators": {"emulators", "protocols"},
    "services": {"services", "drivers", "protocols"},
    "fabric": {"fabric", "emulators", "services", "drivers", "protocols"},
    "experiments": {"experiments", "fabric", "emulators", "services", "drivers", "protocols"},
    "bench": {"bench", "experiments", "fabric", "emulators", "services", "drivers", "protocols"},
}
OURS = set(ALLOWED) | {"tests"}
# modules of a package an importer may use although the package is not allowed to it
NEUTRAL = {"emulators": {"drivers.gcpause"}}  # the garbage collector paused; no driver code
# each EMULATOR -> the driver packages it is tested against (it imports none of them)
EMULATORS = {
    "emulators/p4rt": ("drivers.p4runtime",),
    "emulators/odl": ("drivers.odl",),
    "emulators/polatis": ("drivers.polatis_scpi",),
    "emulators/ryu": ("drivers.ryu_rest",),
    "emulators/delayline": ("fabric.delaycontrol",),  # the delay line's client is the fabric's
    "emulators/ofrelay.py": ("drivers.ovs", "drivers.hp_dpctl"),  # a switch without extensions
}
# services/reroute's rooms -> the rooms each may import (beside itself and loose modules)
ROOMS = {
    "engine": {"store", "planning", "model"},
    "store": {"planning", "model"},
    "planning": {"model"},
    "model": set(),
}
TOP_ROOMS = {"service", "cli", "monitor"}  # may import every room
# not emulators: their common parts (the daemon protocol, the write log)
SHARED = {"emulators/__init__.py", "emulators/daemon.py", "emulators/writelog.py"}


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file; ``from a import b`` is ``a.b``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def allowed(package: str, module: str) -> bool:
    top = module.split(".")[0]
    neutral = NEUTRAL.get(package, set())
    return (
        top not in OURS
        or top in ALLOWED[package]
        or any(module == n or module.startswith(n + ".") for n in neutral)
    )


def violations(package: str, root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted((root / package).rglob("*.py")):
        for line, module in imported(path):
            if not allowed(package, module):
                bad.append(f"{path.relative_to(root)}:{line} imports {module}")
    return bad


def room_violations(root: Path = ROOT) -> list[str]:
    """Imports by a room of services/reroute of a room it may not use (``ROOMS``)."""
    base = root / "services" / "reroute"
    rooms = set(ROOMS) | TOP_ROOMS
    bad = []
    for room, may in sorted(ROOMS.items()):
        for path in sorted((base / room).rglob("*.py")):
            for line, module in imported(path):
                parts = module.split(".")
                used = parts[2] if parts[:2] == ["services", "reroute"] and len(parts) > 2 else ""
                if used in rooms and used != room and used not in may:
                    bad.append(f"{path.relative_to(root)}:{line} imports {module}")
    return bad


def played(emulator: str, root: Path = ROOT) -> list[str]:
    """Imports in ``emulator`` of the driver packages it is tested against."""
    path = root / emulator
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    drivers = EMULATORS[emulator]
    return [
        f"{file.relative_to(root)}:{line} imports {module}"
        for file in files
        for line, module in imported(file)
        if any(module == d or module.startswith(d + ".") for d in drivers)
    ]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_go_only_downward(package: str) -> None:
    assert violations(package) == []


def test_the_services_rooms_import_downward() -> None:
    assert room_violations() == []
    present = {p.name for p in (ROOT / "services" / "reroute").iterdir() if p.is_dir()}
    assert set(ROOMS) | TOP_ROOMS <= present


@pytest.mark.parametrize("emulator", sorted(EMULATORS))
def test_emulators_do_not_import_their_driver(emulator: str) -> None:
    assert played(emulator) == []


def test_every_emulator_is_listed_with_its_driver() -> None:
    found = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "emulators").iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert found == set(EMULATORS) | SHARED


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    sneaky = tmp_path / "m.py"
    sneaky.write_text("def f():\n    from fabric import state\n    import experiments.demo\n")
    assert imported(sneaky) == [(2, "fabric.state"), (3, "experiments.demo")]


def test_the_checks_fail_on_a_bad_import(tmp_path: Path) -> None:
    """A tree with one wrong import per rule: each is found, and only those."""
    files = {
        "emulators/p4rt/m.py": "from drivers.p4runtime import rpc\nfrom drivers import gcpause\n",
        "emulators/odl/m.py": "import services.reroute.errors\nfrom protocols import openflow13\n",
        "emulators/polatis/m.py": "from fabric.daemons import start\n",
        "drivers/ovs/m.py": "from emulators.ofrelay import Relay\nfrom protocols import x\n",
        "protocols/openflow13/m.py": "from drivers.base import FlowRule\n",
        "services/m.py": "from emulators.p4rt import bridge\n",
        "services/reroute/store/m.py": "from services.reroute.engine import executor\n"
        "from services.reroute.model import topology\nfrom services.reroute import rules\n",
    }  # fmt: skip
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    bad = [v for package in ALLOWED for v in violations(package, tmp_path)]
    assert sorted(bad) == [
        "drivers/ovs/m.py:1 imports emulators.ofrelay.Relay",
        "emulators/odl/m.py:1 imports services.reroute.errors",
        "emulators/p4rt/m.py:1 imports drivers.p4runtime.rpc",
        "emulators/polatis/m.py:1 imports fabric.daemons.start",
        "protocols/openflow13/m.py:1 imports drivers.base.FlowRule",
        "services/m.py:1 imports emulators.p4rt.bridge",
    ]
    assert room_violations(tmp_path) == [
        "services/reroute/store/m.py:1 imports services.reroute.engine.executor"
    ]
    assert played("emulators/p4rt", tmp_path) == [
        "emulators/p4rt/m.py:1 imports drivers.p4runtime.rpc"
    ]
