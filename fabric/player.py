"""How the fabric plays one kind of packet switch: the ``Player`` of a driver kind.

One module per kind (``ovssite``, ``hp``, ``odlsite``, ``ryusite``, ``p4rtsite``) defines
a ``PLAYER``; ``fabric.kinds`` finds them by kind. The fabric builder asks the players of
the kinds a topology uses, so it never names a kind itself:

- ``plays``: what plays a switch of the kind (``fabric up`` lists them for a kind it lacks);
- ``controlled``: its flows go through its controller or agent, the baseline too (the
  fabric pushes every other bridge's baseline with ovs-ofctl);
- ``management``: its driver reaches it over the management link (root namespace <->
  fabric namespace), which the fabric then makes before ``start``;
- ``on_site``: ``reroute fabric site`` can play it on one machine of a site;
- ``start``: what the kind needs (an emulator, a listener); the switches' driver targets,
  and what plays the kind's third-party peer, if it has one;
- ``install_baseline``: a controlled kind's initial paths, through its driver;
- ``inventory_entry``: a switch's entry in the fabric's inventory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fabric.errors import FabricError
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import Switch, Topology


@dataclass(frozen=True, slots=True, kw_only=True)
class Peers:
    """What plays the devices that have a real third-party implementation (``fabric.peers``):

    - ``ryu``: ``auto`` (real Ryu 4.34 where it can be had, else the emulator, saying
      why), ``real`` or ``emulator``: the controller of ``ryu_rest`` switches;
    - ``hp_tool``: the tool the inventory gives ``hp_dpctl`` switches: ``auto`` (the
      driver's choice: a reference dpctl on PATH, else ovs-ofctl), ``dpctl`` (the OpenFlow
      1.0 reference, built from the peers) or ``ovs-ofctl``.
    """

    ryu: str = "auto"
    hp_tool: str = "auto"


@dataclass(frozen=True, slots=True, kw_only=True)
class Build:
    """The fabric being built, as a player sees it."""

    topo: Topology
    state: FabricState
    ovs: OvsInstance
    progress: Callable[[str], None]
    peers: Peers
    odl_stats_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Started:
    """What ``start`` made: the switches' driver targets, and what plays the kind's
    third-party peer (None: it has none)."""

    targets: dict[str, str] = field(default_factory=dict)
    played: str | None = None


class Player(Protocol):
    kind: str
    plays: str
    controlled: bool
    management: bool
    on_site: bool

    def start(self, build: Build, switches: list[Switch]) -> Started:
        """Make what the switches need; their driver targets."""
        ...

    def install_baseline(
        self, build: Build, switches: list[Switch], targets: dict[str, str]
    ) -> None:
        """A controlled kind's initial paths, through its driver (others: nothing)."""
        ...

    def inventory_entry(
        self, switch: Switch, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """The switch's inventory entry (``target``: what ``start`` gave it)."""
        ...


def recorded(switch: Switch, target: str | None) -> str:
    """The target ``start`` recorded for ``switch`` (FabricError if none)."""
    if target is None:
        raise FabricError(f"{switch.name}: the fabric made no {switch.driver} target for it")
    return target
