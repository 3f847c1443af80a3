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
    └── PlanError            an intent cannot be planned on this topology and state

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
