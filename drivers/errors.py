"""The one exception tree of reroute, rooted here so every layer can raise it.

    RerouteError                 (drivers.errors)
    ├── DriverError              a device said no or did not answer
    │   ├── DeviceUnreachable        cannot connect / connection lost
    │   ├── DeviceTimeout            no answer within the step's timeout
    │   ├── DeviceRejected           the device refused a change (or is not the one expected)
    │   ├── ProtocolError            the device's reply could not be understood
    │   └── UnknownDriver            no driver registered for a kind (lists the known kinds)
    ├── ConfigError              a config file (service, inventory) is invalid: names file and field
    ├── TopologyError            (services.reroute.errors) a topology file is invalid
    ├── PlanError                (services.reroute.errors) an intent cannot be planned
    ├── HostError                (services.reroute.errors) a namespace or raw socket is missing
    ├── ApiError                 (services.reroute.errors) the service answered an error
    └── FabricError              (fabric.errors) the emulated fabric cannot be built or inspected

``services.reroute.errors`` re-exports everything defined here. Every error raised across a
module boundary is one of these, chained with ``from``.
"""

from __future__ import annotations


class RerouteError(Exception):
    """Base of every error reroute raises on purpose."""


class ConfigError(RerouteError):
    """A config file (service config, inventory) is invalid; the message names the file and
    the field or device at fault."""


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
    """The device refused a change (``code`` carries its error code when it gave one), or it
    is not the device the topology describes (another datapath id, size or pipeline)."""

    def __init__(self, device: str, message: str, code: str = "") -> None:
        self.code = code
        super().__init__(device, message)


class ProtocolError(DriverError):
    """The device answered something this driver cannot understand."""


class UnknownDriver(DriverError):
    """No driver is registered for a kind."""
