"""The one exception tree of reroute.

    RerouteError
    ├── TopologyError        a topology file is invalid (names the file and the node/link)
    ├── FabricError          the emulated fabric cannot be built, inspected or torn down
    └── DriverError          a device said no or did not answer (see drivers/base.py)

Every error raised across a module boundary is one of these, chained with ``from``.
"""

from __future__ import annotations

from pathlib import Path


class RerouteError(Exception):
    """Base of every error reroute raises on purpose."""


class TopologyError(RerouteError):
    """A topology file is invalid; ``where`` names the node, link or path at fault."""

    def __init__(self, file: Path | str, where: str, message: str) -> None:
        self.file = str(file)
        self.where = where
        self.message = message
        super().__init__(f"{file}: {where}: {message}" if where else f"{file}: {message}")


class FabricError(RerouteError):
    """The emulated fabric could not be brought up, inspected or torn down."""


class DriverError(RerouteError):
    """A device driver failed; subclasses say how."""
