"""``FabricError``: the emulated fabric cannot be built, inspected or torn down (a
``RerouteError``, see ``drivers.errors`` for the whole tree)."""

from __future__ import annotations

from drivers.errors import RerouteError


class FabricError(RerouteError):
    """The emulated fabric could not be brought up, inspected or torn down."""
