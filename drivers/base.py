"""The driver contract, as one import: ``from drivers.base import ...``.

By role, in three modules (this one only gathers them):

- ``drivers.values``: what the engine and every driver exchange (``FlowMatch``,
  ``FlowRule``, ``FlowChange``, ``ForeignEntry``, ``Survey``, ``PortState``), independent
  of any wire protocol;
- ``drivers.contract``: what a driver promises (``Capabilities`` as data, and one
  ``typing.Protocol`` per concern: ``FlowProgrammer``, ``PortMonitor``, ``PortEvents``,
  ``CrossConnectSwitch``, ``MasterElection``, ``FlowVerifier``; ``Session``);
- ``drivers.registry``: the kinds, each registered by its package with the model of its
  inventory entries; ``build`` makes a driver from an inventory entry.

Errors are the ``DriverError`` subtree of ``drivers.errors`` (re-exported here); a driver
translates its device's errors at its boundary and chains them with ``from``.
"""

from __future__ import annotations

from drivers.contract import (
    Capabilities,
    CrossConnectSwitch,
    Driver,
    FlowCounters,
    FlowProgrammer,
    FlowVerifier,
    Identity,
    MasterElection,
    PortCounters,
    PortEvents,
    PortListener,
    PortMonitor,
    Session,
)
from drivers.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
    UnknownDriver,
)
from drivers.registry import (
    Kind,
    broken,
    build,
    kind,
    kinds,
    load_all,
    lookup,
    register,
    registered,
)
from drivers.spec import (
    DeviceSpec,
    Expect,
)
from drivers.values import (
    ETH_IPV4,
    Action,
    FlowChange,
    FlowMatch,
    FlowOp,
    FlowRule,
    ForeignEntry,
    Output,
    PopVlan,
    PortState,
    Prefix,
    PushVlan,
    Survey,
    new_change,
    new_match,
    new_rule,
)

__all__ = [
    "ETH_IPV4",
    "Action",
    "Capabilities",
    "CrossConnectSwitch",
    "DeviceRejected",
    "DeviceSpec",
    "DeviceTimeout",
    "DeviceUnreachable",
    "Driver",
    "DriverError",
    "Expect",
    "FlowChange",
    "FlowCounters",
    "FlowMatch",
    "FlowOp",
    "FlowProgrammer",
    "FlowRule",
    "FlowVerifier",
    "ForeignEntry",
    "Identity",
    "Kind",
    "MasterElection",
    "Output",
    "PopVlan",
    "PortCounters",
    "PortEvents",
    "PortListener",
    "PortMonitor",
    "PortState",
    "Prefix",
    "ProtocolError",
    "PushVlan",
    "Session",
    "Survey",
    "UnknownDriver",
    "broken",
    "build",
    "kind",
    "kinds",
    "load_all",
    "lookup",
    "new_change",
    "new_match",
    "new_rule",
    "register",
    "registered",
]
