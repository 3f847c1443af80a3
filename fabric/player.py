"""How the fabric plays one driver kind: its ``Player``, packet switch or optical switch.

One module (or package) per driver kind under ``fabric/kinds/``, named after the kind,
defines a ``PLAYER``; ``fabric.kinds`` finds them by scanning, so the fabric builder, the
inventory writer, ``status`` and ``restart`` ask the player of a node's ``driver:`` and
never name a kind themselves:

- ``role``: which nodes it plays (``packet``: switches; ``optical``: optical switches);
- ``plays``: what plays a node of the kind (``fabric up`` lists them for a kind it lacks);
- ``options``: its settings, chosen at ``fabric up`` (each a flag of its own) and kept in
  the fabric's state (``FabricState.kinds[kind]``) with what ``start`` kept;
- ``controlled``: its flows go through its controller or agent, the baseline too (the
  fabric pushes every other bridge's baseline with ovs-ofctl);
- ``management``: its driver reaches it over the management link (root namespace <->
  fabric namespace), which the fabric then makes before ``start``;
- ``on_site``: ``reroute fabric site`` can play it on one machine of a site;
- ``check``: what is wrong with a node of the topology for this kind (None: nothing);
- ``start``: what the kind needs (an emulator, a listener); the nodes' driver targets,
  what plays the kind's third-party peer, if it has one, and what it keeps;
- ``install_baseline``: a controlled kind's initial paths, through its driver;
- ``inventory_entry``: a node's entry in the fabric's inventory;
- ``control`` (optical players): the emulator-control client of one optical switch: its
  cross-connects as the emulator holds them, and its lock-time model (experiments, bench,
  status, restart).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from fabric.errors import FabricError
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import OpticalSwitch, Switch, Topology

Node = Switch | OpticalSwitch
Value = str | float


class Role(StrEnum):
    PACKET = "packet"
    OPTICAL = "optical"


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """A setting of one kind's player: ``fabric up --FLAG`` (``fabric.up(options=)`` by
    ``name``), kept in the fabric's state under the kind."""

    name: str  # the key, unique among all players' options
    flag: str  # the fabric up flag, e.g. --hp-tool
    help: str
    default: Value
    choices: tuple[str, ...] = ()  # a choice among these; none: a positive number

    def parse(self, value: object) -> Value:
        """``value`` as this option takes it (FabricError naming what it takes)."""
        if self.choices:
            if value not in self.choices:
                raise FabricError(
                    f"{self.flag} {value!r}: expected one of {', '.join(self.choices)}"
                )
            return str(value)
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            number = -1.0
        if not number > 0:
            raise FabricError(f"{self.flag} {value!r}: expected a positive number")
        return number


@dataclass(frozen=True, slots=True, kw_only=True)
class Build:
    """The fabric being built, as a player sees it."""

    topo: Topology
    state: FabricState
    ovs: OvsInstance
    progress: Callable[[str], None]
    options: Mapping[str, Value]  # every player's options, chosen or default
    seed: int = 0  # the optical emulators' lock-time draws


@dataclass(frozen=True, slots=True, kw_only=True)
class Started:
    """What ``start`` made: the nodes' driver targets, what plays the kind's third-party
    peer (None: it has none), and what the kind keeps in the fabric's state."""

    targets: dict[str, str] = field(default_factory=dict)
    played: str | None = None
    kept: dict[str, Any] = field(default_factory=dict)


class OpticalControl(Protocol):
    """An optical switch emulator's own control: what the fabric, the experiments and
    the benches need beside the driver (which is the service's road to the switch)."""

    def connections(self) -> dict[int, int]:
        """ingress -> egress of every cross-connect the emulator holds."""
        ...

    def drawn_locks(self) -> dict[int, float]:
        """The lock time (ms) the emulator last drew, by egress port (``inf``: never)."""
        ...

    def set_lock(self, lock_ms: float | None) -> None:
        """Every lock ``lock_ms`` from now on; None: each drawn from its model again."""
        ...


class Player(Protocol):
    kind: str
    role: Role
    plays: str
    options: tuple[Option, ...]
    controlled: bool
    management: bool
    on_site: bool

    def check(self, node: Node) -> str | None:
        """What is wrong with ``node`` for this kind (None: nothing)."""
        ...

    def start(self, build: Build, nodes: list[Node]) -> Started:
        """Make what the nodes need; their driver targets."""
        ...

    def install_baseline(self, build: Build, nodes: list[Node], targets: dict[str, str]) -> None:
        """A controlled kind's initial paths, through its driver (others: nothing)."""
        ...

    def inventory_entry(
        self, node: Node, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """The node's inventory entry (``target``: what ``start`` gave it)."""
        ...

    def control(self, state: FabricState, node: OpticalSwitch) -> OpticalControl:
        """The emulator control of optical switch ``node`` (FabricError: a packet kind)."""
        ...


def recorded(node: Node, target: str | None) -> str:
    """The target ``start`` recorded for ``node`` (FabricError if none)."""
    if target is None:
        raise FabricError(f"{node.name}: the fabric made no {node.driver} target for it")
    return target


def switches(nodes: list[Node]) -> list[Switch]:
    """The packet switches of ``nodes`` (a packet player's)."""
    return [n for n in nodes if isinstance(n, Switch)]


def optical(nodes: list[Node]) -> list[OpticalSwitch]:
    """The optical switches of ``nodes`` (an optical player's)."""
    return [n for n in nodes if isinstance(n, OpticalSwitch)]


class PacketPlayer:
    """What a packet switch's player does not do itself: no check, no baseline of its own
    (the fabric pushed it), no optical control, no options."""

    role = Role.PACKET
    options: tuple[Option, ...] = ()
    controlled = False
    management = False
    on_site = False
    kind = ""

    def check(self, node: Node) -> str | None:
        """Nothing to check."""
        return None

    def install_baseline(self, build: Build, nodes: list[Node], targets: dict[str, str]) -> None:
        """Nothing: the fabric pushed it with the bridges' flows."""

    def control(self, state: FabricState, node: OpticalSwitch) -> OpticalControl:
        """A packet switch has none."""
        raise FabricError(f"{node.name}: {self.kind} plays packet switches, not optical ones")
