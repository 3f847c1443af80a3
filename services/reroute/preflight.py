"""Preflight: connect to every device of an inventory and say whether reroutes can run.

Per device: reachable (opened within its own timeout; opening also checks the identity the
topology gives, such as the datapath id or the optical switch's size), what it says it is
(``identify``), and whether it is ready: the device's own problems, every port the
topology links on it present on the device (where it reports port state), and a packet
switch's read-back. Nothing is changed on any device.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from drivers.base import DeviceSpec, FlowProgrammer, PortMonitor, Session
from drivers.errors import ConfigError, DriverError
from services.reroute.model.inventory import Inventory, build_drivers
from services.reroute.model.topology import OpticalSwitch, Switch, Topology


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceReport:
    name: str
    driver: str
    target: str
    reachable: bool
    identity: str
    problems: tuple[str, ...]
    ms: float

    @property
    def ok(self) -> bool:
        """The device answered and showed no problem."""
        return self.reachable and not self.problems


async def check_devices(
    inv: Inventory, topo: Topology, scope: Iterable[str] | None = None
) -> list[DeviceReport]:
    """One report per device in scope, checked at the same time (ConfigError first when
    the inventory does not fit the topology)."""
    drivers = build_drivers(inv, topo, scope)
    return list(await asyncio.gather(*(_check(inv, topo, n, d) for n, d in drivers.items())))


async def _check(inv: Inventory, topo: Topology, name: str, driver: Session) -> DeviceReport:
    spec = inv.devices[name]
    started = time.perf_counter()
    reachable, identity = False, "-"
    problems: list[str] = missing_files(spec)
    try:
        if problems:  # not even tried: the driver would fail on them without naming them
            return _report(name, spec, reachable, identity, problems, started)
        await asyncio.wait_for(driver.open(), spec.timeout_s)
        reachable = True
        found = await asyncio.wait_for(driver.identify(), spec.timeout_s)
        identity = found.summary
        problems = [*found.problems, *await _ports(topo, name, driver, spec.timeout_s)]
        if isinstance(driver, FlowProgrammer) and not driver.capabilities.read_back:
            problems.append("declares no read-back: reroutes plan and verify on read-backs")
    except TimeoutError:
        problems = [f"no answer in {spec.timeout_s:g} s"]
    except DriverError as exc:
        problems = [str(exc).removeprefix(f"{exc.device}: ")]
    except ConfigError as exc:  # the device's entry cannot be used: its row says why
        problems = [str(exc).removeprefix(f"{name}: ")]
    finally:
        await driver.close()
    return _report(name, spec, reachable, identity, problems, started)


def _report(
    name: str, spec: DeviceSpec, reachable: bool, identity: str, problems: list[str], t0: float
) -> DeviceReport:
    return DeviceReport(
        name=name,
        driver=spec.driver,
        target=spec.target,
        reachable=reachable,
        identity=identity,
        problems=tuple(problems),
        ms=(time.perf_counter() - t0) * 1000,
    )


def missing_files(spec: BaseModel, prefix: str = "") -> list[str]:
    """The files a device entry names (its Path keys, nested ones too) that do not exist."""
    missing = []
    for key in type(spec).model_fields:
        value = getattr(spec, key)
        if isinstance(value, Path) and not value.exists():
            missing.append(f"{prefix}{key}: {value} does not exist")
        elif isinstance(value, BaseModel):
            missing += missing_files(value, f"{prefix}{key}.")
    return missing


async def _ports(topo: Topology, name: str, driver: Session, timeout: float) -> list[str]:
    """The ports the topology links on this switch, missing on the device."""
    node = topo.nodes[name]
    if not isinstance(driver, PortMonitor) or not driver.capabilities.port_state:
        return []
    if isinstance(node, Switch):
        wanted = set(node.ports)
    elif isinstance(node, OpticalSwitch):
        wanted = set(node.attachments)  # duplex ports, as port_states() numbers them
    else:
        return []
    states = await asyncio.wait_for(driver.port_states(), timeout)
    missing = sorted(wanted - set(states))
    if not missing:
        return []
    return [f"ports the topology links are missing: {', '.join(map(str, missing))}"]


def table(reports: list[DeviceReport]) -> str:
    """The reports as a fixed-width table, one line per device."""
    head = ("DEVICE", "DRIVER", "TARGET", "REACHABLE", "MS", "IDENTITY", "READY")
    rows = [head] + [
        (
            r.name,
            r.driver,
            r.target,
            "yes" if r.reachable else "NO",
            f"{r.ms:.0f}",
            r.identity,
            "ok" if r.ok else "NO: " + "; ".join(r.problems),
        )
        for r in reports
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    )
