"""Where reroute keeps runtime state by default (settings, not the fabric's business).

- ``$REROUTE_RUN_DIR`` (default ``/run/reroute``) / ``<topology name>`` /: what an emulated
  fabric of that name keeps, its ``inventory.yaml`` among it; the inventory's default.
- An inventory's ``state_dir`` holds the journal (``journal.sqlite``) and the device locks
  (``locks/``) of every engine driving its devices; without one,
  ``$REROUTE_STATE_DIR`` (default ``/var/lib/reroute``) / ``<topology name>``.
"""

from __future__ import annotations

import os
from pathlib import Path

INVENTORY = "inventory.yaml"


def run_dir() -> Path:
    """Where running fabrics and services keep their state (``$REROUTE_RUN_DIR``)."""
    return Path(os.environ.get("REROUTE_RUN_DIR", "/run/reroute"))


def fabric_dir(name: str) -> Path:
    """Where the emulated fabric ``name`` keeps its state."""
    return run_dir() / name


def default_inventory(topology: str) -> Path:
    """The inventory used when none is given: the one ``fabric up`` wrote for ``topology``."""
    return fabric_dir(topology) / INVENTORY


def default_state_dir(topology: str) -> Path:
    """The state directory of ``topology`` (``$REROUTE_STATE_DIR/<topology>``)."""
    return Path(os.environ.get("REROUTE_STATE_DIR", "/var/lib/reroute")) / topology


def journal_file(state_dir: Path) -> Path:
    """The journal file in ``state_dir``."""
    return state_dir / "journal.sqlite"


def lock_dir(state_dir: Path) -> Path:
    """The device-lock directory in ``state_dir``."""
    return state_dir / "locks"
