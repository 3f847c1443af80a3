"""Where a fabric keeps its runtime state, so ``down`` can clean up even after a crash.

Layout: ``$REROUTE_RUN_DIR`` (default ``/run/reroute``) / ``<fabric name>`` / ``state.json``
and ``ovs/`` (the private OVS run directory). The state file is written before anything is
created and names every namespace the fabric will make.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fabric.errors import FabricError
from services.reroute.runtime import INVENTORY, run_dir


def fabric_ns(name: str) -> str:
    """The name of fabric ``name``'s namespace."""
    return f"rr-{name}"


def host_ns(name: str, host: str) -> str:
    """The name of ``host``'s namespace in fabric ``name``."""
    return f"rr-{name}.{host}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricState:
    name: str
    topology: str
    fabric_ns: str
    host_ns: dict[str, str]
    phase: str = "building"  # building | up
    delay: dict[str, int] = field(default_factory=dict)  # long-haul node -> control port
    targets: dict[str, str] = field(default_factory=dict)  # switch -> driver target (non-ovs)
    peers: dict[str, str] = field(default_factory=dict)  # driver kind -> what plays its peer
    # driver kind -> what its player keeps: its options as chosen, what it started
    # (``fabric.player``: each player reads its own)
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)
    builder_pid: int = field(default_factory=os.getpid)

    @property
    def dir(self) -> Path:
        """The fabric's run directory."""
        return run_dir() / self.name

    @property
    def inventory(self) -> Path:
        """The inventory of this fabric's devices (written by ``fabric up``)."""
        return self.dir / INVENTORY

    @property
    def ovs_dir(self) -> Path:
        """The run directory of the fabric's OVS."""
        return self.dir / "ovs"

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of the fabric."""
        return [self.fabric_ns, *self.host_ns.values()]

    def save(self) -> None:
        """Write the state atomically."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.dir / "state.json")

    def node_ns(self, node: str) -> str:
        """The namespace of ``node`` (switches live in the fabric's)."""
        return self.host_ns.get(node, self.fabric_ns)

    def remove(self) -> None:
        """Remove the run directory."""
        shutil.rmtree(self.dir, ignore_errors=True)


def load(name: str) -> FabricState | None:
    """The saved state of fabric ``name``, or None."""
    path = run_dir() / name / "state.json"
    try:
        data = json.loads(path.read_text())
        known = {f.name for f in fields(FabricState)}  # an older version's keys: `down` works
        return FabricState(**{k: v for k, v in data.items() if k in known})
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise FabricError(f"{path}: unreadable fabric state ({exc}); remove it by hand") from exc


def running() -> list[str]:
    """Names of the fabrics with a state directory."""
    base = run_dir()
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def pick(name: str | None) -> FabricState:
    """The fabric called ``name``, or the only one up when no name is given."""
    names = running()
    if name is None:
        if len(names) != 1:
            found = ", ".join(names) or "none"
            raise FabricError(f"name the fabric (running: {found})")
        name = names[0]
    state = load(name)
    if state is None:
        raise FabricError(f"no fabric named {name!r} is up (running: {', '.join(names) or 'none'})")
    return state
