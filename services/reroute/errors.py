"""The one exception tree of reroute.

    RerouteError
    ├── TopologyError        a topology file is invalid (names the file and the node/link)
    ├── FabricError          the emulated fabric cannot be built, inspected or torn down
    ├── DriverError          a device said no or did not answer
    │   ├── DeviceUnreachable    cannot connect / connection lost
    │   ├── DeviceTimeout        no answer within the step's timeout
    │   ├── DeviceRejected       the device refused a change (nothing of the batch applied)
    │   ├── ProtocolError        the device's reply could not be understood
    │   └── UnknownDriver        no driver registered for a kind (lists the known kinds)
    ├── PlanError            an intent cannot be planned on this topology and state
    ├── ConfigError          a service config file is invalid (names the file and the field)
    └── ApiError             the reroute service answered with an error (status, message)

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
    """A device driver failed; subclasses say how. ``device`` names the device."""

    def __init__(self, device: str, message: str) -> None:
        self.device = device
        super().__init__(f"{device}: {message}")


class DeviceUnreachable(DriverError):
    """The device cannot be reached, or the connection to it was lost."""


class DeviceTimeout(DriverError):
    """The device did not answer in time."""


class DeviceRejected(DriverError):
    """The device refused a change; ``code`` carries its error code when it gave one."""

    def __init__(self, device: str, message: str, code: str = "") -> None:
        self.code = code
        super().__init__(device, message)


class ProtocolError(DriverError):
    """The device answered something this driver cannot understand."""


class UnknownDriver(DriverError):
    """No driver is registered for a kind."""


class PlanError(RerouteError):
    """An intent cannot be planned (unknown path, flows not on the source path, ...)."""


class ConfigError(RerouteError):
    """A service config file is invalid; the message names the file and the field."""


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
        return self.status in (401, 403)

    @property
    def is_unavailable(self) -> bool:
        """The service is shutting down, unreachable or failing: try again later."""
        return self.status == 0 or self.status >= 500
