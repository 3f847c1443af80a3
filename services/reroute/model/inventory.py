"""The device inventory: how to reach each switching node of a topology.

The topology says what the network is; the inventory says, per switching node, which driver
programs it and how to reach it. Strict YAML: unknown keys, unknown driver kinds and
duplicate keys are errors naming the file and the device.

    # reroute inventory for topology ngncs-ost
    topology: ngncs-ost                 # the topology it belongs to (checked)
    state_dir: /var/lib/reroute/lab     # journal + device locks (default: see runtime.py)
    cookie_tag: 0                       # this deployment's cookies (default 0: see below)
    devices:
      br1: {driver: ovs, target: "tcp:192.0.2.11:6653"}
      ost1: {driver: polatis_scpi, target: "TCPIP0::192.0.2.30::5025::SOCKET", timeout_s: 3}

Each device entry is validated by the model its driver kind registered
(``drivers.<kind>.spec``); relative paths in it are taken from the inventory's directory.
``open_drivers`` builds the drivers through the registry and opens them, each within its
own timeout; the emulated fabric writes an inventory of its own devices (``fabric up``), so
tests take the same path as real equipment.

``cookie_tag`` (0..255, default 0) names this deployment's cookies
(``rules.CookieSpace``): two deployments of reroute on the same switches (a second lab, a
staging service) need different tags, and then each reads the other's entries as another
writer's. 0 is the cookies every fabric and journal had before the setting existed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from drivers import base
from drivers.base import DeviceSpec, Expect, Session
from drivers.errors import ConfigError, DeviceRejected, DeviceTimeout, DriverError
from services.reroute import runtime
from services.reroute.model.problems import Problem, dotted, nearest, report, validation_problems
from services.reroute.model.topology import OpticalSwitch, Switch, Topology
from services.reroute.model.yamlfile import (
    Document,
    Loc,
    YAMLError,
    strict_document,
    yaml_error_line,
    yaml_error_text,
)
from services.reroute.reach import DEVICE_TIMEOUT_S, Devices
from services.reroute.rules import DEFAULT_SPACE, MAX_COOKIE_TAG, CookieSpace

NODE = r"^[a-z][a-z0-9]{0,7}$"
PACKET = ("apply", "read", "survey")  # methods of FlowProgrammer
OPTICAL = ("connect", "disconnect", "connections")  # methods of CrossConnectSwitch


@dataclass(frozen=True, slots=True, kw_only=True)
class Inventory:
    """A loaded inventory: its file, the topology it is for, where state lives, devices."""

    file: Path
    topology: str
    state_dir: Path
    devices: Mapping[str, DeviceSpec]
    doc: Document | None = None  # the file as read: the lines errors name
    # the deadline of one device read while a reroute is planned (reach.py): a device that
    # does not answer within it is taken as hung
    device_timeout_s: float = DEVICE_TIMEOUT_S
    cookies: CookieSpace = DEFAULT_SPACE  # the file's cookie_tag

    def at(self, *loc: str) -> str:
        """``FILE:LINE`` of the key ``loc`` (``FILE`` when its line is unknown)."""
        line = self.doc.line(loc) if self.doc is not None else None
        return f"{self.file}:{line}" if line else str(self.file)

    @property
    def journal(self) -> Path:
        """The journal file under the inventory's state directory."""
        return runtime.journal_file(self.state_dir)

    @property
    def lock_dir(self) -> Path:
        """The device-lock directory under the inventory's state directory."""
        return runtime.lock_dir(self.state_dir)

    def where(self, device: str) -> str:
        """``FILE: device NAME (KIND TARGET)``, for errors."""
        spec = self.devices[device]
        return f"{self.file}: device {device} ({spec.driver} {spec.target})"


# --------------------------------------------------------------------------------------
# the file's model, made from the registry


def file_model() -> type[BaseModel]:
    """The model of a whole inventory file: its devices are the union of every registered
    kind's entry model, told apart by ``driver``."""
    specs = tuple(k.spec for k in base.kinds())
    device: Any = Annotated[Union[specs], Field(discriminator="driver")]  # noqa: UP007
    model: type[BaseModel] = create_model(
        "InventoryFile",
        __config__=ConfigDict(extra="forbid", frozen=True),
        topology=(str, Field(pattern=r"^[a-z][a-z0-9-]{0,15}$", description="topology name")),
        state_dir=(
            Path | None,
            Field(default=None, description="journal and device locks of engines using it"),
        ),
        cookie_tag=(
            int,
            Field(
                default=0,
                ge=0,
                le=MAX_COOKIE_TAG,
                description="this deployment's cookie namespace: deployments sharing switches "
                "need different tags (0: the cookies of deployments before the setting)",
            ),
        ),
        devices=(
            dict[Annotated[str, Field(pattern=NODE)], device],
            Field(description="switching node of the topology -> how to reach it"),
        ),
        device_timeout_s=(
            float,
            Field(
                default=DEVICE_TIMEOUT_S,
                gt=0,
                le=60,
                description="deadline of one device read while a reroute is planned: a "
                "device that does not answer within it is taken as hung, and a reroute "
                "that needs it is refused",
            ),
        ),
    )
    return model


def schema() -> dict[str, Any]:
    """The JSON Schema of inventory files (``reroute inventory schema``)."""
    out = file_model().model_json_schema()
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["title"] = "reroute inventory"
    return out


# --------------------------------------------------------------------------------------
# loading


def load_inventory(file: Path | str) -> Inventory:
    """Read and validate an inventory file (ConfigError naming the file and the device)."""
    path = Path(file)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the inventory: {exc.strerror}") from exc
    return parse_inventory(text, path)


def parse_inventory(text: str, file: Path) -> Inventory:
    """Parse and validate an inventory document (``file`` names it in errors, each problem
    at its line, all of them at once)."""
    try:
        doc = strict_document(text)
    except YAMLError as exc:
        at = f"{file}:{line}" if (line := yaml_error_line(exc)) else f"{file}"
        raise ConfigError(f"{at}: not valid YAML: {yaml_error_text(exc)}") from exc
    raw = doc.data
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping (topology: NAME, devices: {{...}})")
    problems = _kind_problems(doc)
    model = file_model()
    try:
        parsed: Any = model.model_validate(raw)
    except ValidationError as exc:
        unknown = {p.where for p in problems}
        found = validation_problems(exc, model, doc, _place)
        problems += [p for p in found if p.where not in unknown]
    if problems:
        raise ConfigError(report(file, problems))
    here = file.resolve().parent
    devices = {name: _absolute(spec, here) for name, spec in parsed.devices.items()}
    state = parsed.state_dir
    return Inventory(
        file=file,
        topology=parsed.topology,
        state_dir=_rooted(state, here) if state else runtime.default_state_dir(parsed.topology),
        devices=devices,
        doc=doc,
        device_timeout_s=parsed.device_timeout_s,
        cookies=CookieSpace(tag=parsed.cookie_tag),
    )


def _kind_problems(doc: Document) -> list[Problem]:
    """A device without a driver, or of an unknown kind (listing the known ones, or the
    nearest): pydantic's error for these is cryptic."""
    devices = doc.data.get("devices") if isinstance(doc.data, dict) else None
    problems = []
    for name, entry in devices.items() if isinstance(devices, dict) else ():
        where, line = f"device {name}", doc.line(("devices", name, "driver"))
        if not isinstance(entry, dict) or "driver" not in entry:
            problems.append(
                Problem(line=line, where=where, message="give its driver: (and target:)")
            )
            continue
        kind = str(entry["driver"])
        try:
            base.kind(kind)
        except DriverError as exc:
            hint = nearest(kind, base.registered())
            close = "did you mean" in hint and "cannot be loaded" not in str(exc)
            message = f"no driver for kind {kind!r}{hint}" if close else _own(exc)
            problems.append(Problem(line=line, where=where, message=message))
    return problems


def _place(loc: Loc) -> tuple[str, str]:
    """A location as (place, key): ``device ost1`` and its key, or the top-level key."""
    if len(loc) >= 2 and loc[0] == "devices":
        return f"device {loc[1]}", ".".join(str(p) for p in loc[2:])
    return dotted(loc)


def _rooted(path: Path, here: Path) -> Path:
    return path if path.is_absolute() else here / path


def _absolute(model: Any, here: Path) -> Any:
    """``model`` with every relative Path (also in nested models) taken from ``here``."""
    updates: dict[str, Any] = {}
    for key in type(model).model_fields:
        value = getattr(model, key)
        if isinstance(value, Path):
            updates[key] = _rooted(value, here)
        elif isinstance(value, BaseModel):
            updates[key] = _absolute(value, here)
    return model.model_copy(update=updates) if updates else model


# --------------------------------------------------------------------------------------
# against a topology


def switching_nodes(topo: Topology, scope: Iterable[str] | None = None) -> list[str]:
    """The nodes a driver programs (packet and optical switches), within ``scope``."""
    names = [s.name for s in topo.switches] + [o.name for o in topo.optical_switches]
    wanted = None if scope is None else set(scope)
    return [n for n in names if wanted is None or n in wanted]


def check(inv: Inventory, topo: Topology, scope: Iterable[str] | None = None) -> None:
    """The inventory fits the topology: it is for this topology, names only its switching
    nodes, has a device for every one in ``scope``, each of a kind that can program it."""
    if inv.topology != topo.name:
        raise ConfigError(
            f"{inv.at('topology')}: it is the inventory of topology {inv.topology!r}, "
            f"not {topo.name!r}"
        )
    nodes = set(switching_nodes(topo))
    for name in inv.devices:
        if name not in nodes:
            hint = nearest(name, nodes)
            raise ConfigError(
                f"{inv.at('devices', name)}: device {name}: not a switching node of topology "
                f"{topo.name}{hint if 'did you mean' in hint else ''} (those are: "
                f"{', '.join(sorted(nodes))})"
            )
    wanted = list(switching_nodes(topo, scope))
    if missing := [name for name in wanted if name not in inv.devices]:
        some = "switch " if len(missing) == 1 else f"{len(missing)} switches "
        raise ConfigError(
            f"{inv.at('devices')}: {some}{', '.join(missing)} of topology {topo.name} "
            f"{'has' if len(missing) == 1 else 'have'} no device: say how to reach "
            f"{'it' if len(missing) == 1 else 'each'} (devices: {{{missing[0]}: "
            "{driver: ..., target: ...}, ...})"
        )
    for name in wanted:
        _check_role(inv, topo, name)


def _check_role(inv: Inventory, topo: Topology, name: str) -> None:
    node, spec = topo.nodes[name], inv.devices[name]
    factory = base.lookup(spec.driver)
    optical = isinstance(node, OpticalSwitch)
    need, what = (OPTICAL, "an optical") if optical else (PACKET, "a packet")
    if not all(callable(getattr(factory, m, None)) for m in need):
        raise ConfigError(
            f"{inv.at('devices', name)}: device {name} ({spec.driver} {spec.target}): {what} "
            "switch needs a driver that can program it; "
            f"{inv.devices[name].driver} cannot"
        )


def expectations(topo: Topology, name: str) -> Expect:
    """What the topology says device ``name`` is (checked by its driver when it opens)."""
    node = topo.nodes[name]
    if isinstance(node, Switch):
        return Expect(dpid=node.dpid)
    if isinstance(node, OpticalSwitch):
        return Expect(size=(node.ingress_count, node.egress_count))
    return Expect()


def build_drivers(
    inv: Inventory, topo: Topology, scope: Iterable[str] | None = None
) -> dict[str, Session]:
    """The drivers of the switching nodes in ``scope`` (checked, built, not yet opened)."""
    check(inv, topo, scope)
    drivers: dict[str, Session] = {}
    for name in switching_nodes(topo, scope):
        try:
            drivers[name] = base.build(name, inv.devices[name], expectations(topo, name))
        except ConfigError as exc:
            raise ConfigError(f"{inv.file}: {exc}") from exc
    return drivers


@asynccontextmanager
async def open_drivers(
    inv: Inventory,
    topo: Topology,
    scope: Iterable[str] | None = None,
    *,
    shared: bool = False,
    background: bool = False,
) -> AsyncIterator[Devices]:
    """The drivers of the switching nodes in ``scope``; each device is opened within its
    own ``timeout_s``. Nothing is changed on any device by opening.
    ``background``: a device that does not open is opened again in the background
    (``reach.Devices``) and the block runs without it; a call on it raises its error until
    it opens (the service, ``reroute apply``: a failover runs with devices down). Else any
    failure closes every driver opened and is raised, naming the inventory file and the
    device. ``shared``: one replica of several (etcd store): a device that elects its
    writer is opened without being taken (``MasterElection.share``); each reroute claims it."""
    drivers = build_drivers(inv, topo, scope)
    if shared:
        for driver in drivers.values():
            if isinstance(driver, base.MasterElection):
                driver.share()
    devices = Devices(drivers, lambda n, d: _open(inv, n, d))
    await devices.open_all(background=background, wait=inv.device_timeout_s)
    try:
        yield devices
    finally:
        await devices.close()


async def _open(inv: Inventory, name: str, driver: Session) -> None:
    timeout = inv.devices[name].timeout_s
    try:
        await asyncio.wait_for(driver.open(), timeout)
    except TimeoutError:
        raise DeviceTimeout(name, f"no answer in {timeout:g} s [{inv.where(name)}]") from None
    except DeviceRejected as exc:
        raise DeviceRejected(name, f"{_own(exc)} [{inv.where(name)}]", exc.code) from exc
    except DriverError as exc:
        raise type(exc)(name, f"{_own(exc)} [{inv.where(name)}]") from exc


def _own(exc: DriverError) -> str:
    """The error's message without the ``device:`` prefix DriverError adds."""
    return str(exc).removeprefix(f"{exc.device}: ")


def resolve(file: Path | None, topo: Topology) -> Inventory:
    """The inventory ``file``, or the running emulated fabric's for this topology."""
    path = file if file is not None else runtime.default_inventory(topo.name)
    if file is None and not path.exists():
        raise ConfigError(
            f"no inventory given and no emulated fabric {topo.name} is up ({path} is missing): "
            f"say --inventory FILE, or `reroute fabric up {topo.file}`"
        )
    return load_inventory(path)
