"""The exception tree as services see it: ``drivers.errors`` (the root ``RerouteError``,
the ``DriverError`` subtree, ``ConfigError``) re-exported, and the service layer's own
errors. The whole tree is drawn in ``drivers.errors``.

Every error raised across a module boundary is one of these, chained with ``from``.
"""

from __future__ import annotations

from pathlib import Path

from drivers.errors import (
    ConfigError,
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
    RerouteError,
    UnknownDriver,
)

__all__ = [
    "ApiError",
    "ConfigError",
    "DeviceRejected",
    "DeviceTimeout",
    "DeviceUnreachable",
    "DriverError",
    "HostError",
    "PlanError",
    "ProtocolError",
    "RerouteError",
    "TopologyError",
    "UnknownDriver",
]


class TopologyError(RerouteError):
    """A topology file is invalid; ``where`` names the node, link or path at fault and
    ``line`` its line (the first fault's, when ``text`` reports several)."""

    def __init__(
        self,
        file: Path | str,
        where: str,
        message: str,
        *,
        line: int | None = None,
        text: str | None = None,
    ) -> None:
        self.file = str(file)
        self.where = where
        self.message = message
        self.line = line
        at = f"{file}:{line}" if line else str(file)
        super().__init__(text or (f"{at}: {where}: {message}" if where else f"{at}: {message}"))


class HostError(RerouteError):
    """A facility of this host is missing: a network namespace, a raw socket (needs root),
    an interface's counters."""


class PlanError(RerouteError):
    """An intent cannot be planned (unknown path, flows not on the source path, ...)."""


class ApiError(RerouteError):
    """The reroute service answered an error: ``status`` (HTTP) and the server's ``message``
    (``status`` 0: no answer at all, after the client's retries)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}" if status else message)

    @property
    def is_plan_error(self) -> bool:
        """The intent cannot be planned or is malformed (nothing changed)."""
        return self.status == 422

    @property
    def is_conflict(self) -> bool:
        """An idempotency key reused with another body, or a reroute that cannot be cancelled."""
        return self.status == 409

    @property
    def is_auth_error(self) -> bool:
        """The service refused the caller's token (401) or role (403)."""
        return self.status in (401, 403)

    @property
    def is_unavailable(self) -> bool:
        """The service is shutting down, unreachable or failing: try again later."""
        return self.status == 0 or self.status >= 500
