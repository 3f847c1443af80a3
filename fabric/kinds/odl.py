"""Switches driven the seeds' "ODL method": the fabric's OpenDaylight-compatible northbound
EMULATOR (``emulators.odl``) controls them over OpenFlow 1.3 on the management link, and the
engine programs them through its RESTCONF northbound (``drivers.odl``).

The emulator polls switch statistics every ``STATS_INTERVAL_S`` (ODL's default, 3 s): its
operational datastore, which the driver verifies against, lags by up to that long.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import httpx

from drivers.base import FlowChange, FlowOp
from drivers.odl import OdlDriver
from fabric import daemons, mgmt
from fabric.errors import FabricError
from fabric.player import Build, Node, Option, PacketPlayer, Player, Started, recorded, switches
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import Switch, Topology
from services.reroute.rules import initial_rules

MODULE = "emulators.odl"
STATS_INTERVAL_S = 3.0


USER = "admin"


def password_file(state: FabricState) -> Path:
    """The emulator's password (random per fabric, mode 0600; the inventory names the file)."""
    return state.dir / "odl-password"


def start(
    state: FabricState,
    ovs: OvsInstance,
    switches: list[Switch],
    root_side: IPv4Address,
    *,
    stats_s: float = STATS_INTERVAL_S,
) -> dict[str, str]:
    """Start the emulator (statistics poll every ``stats_s``), connect the switches to it;
    returns each switch's driver target (``odl:http://127.0.0.1:PORT``) once the emulator
    reports them connected."""
    secret = password_file(state)
    secret.touch(mode=0o600)
    secret.write_text(secrets.token_urlsafe(18) + "\n")
    args = ["--listen", "127.0.0.1:0", "--openflow", f"{root_side}:0"]
    args += ["--user", USER, "--password-file", str(secret)]
    args += ["--stats-interval-s", f"{stats_s:g}"]
    ports = json.loads(daemons.start(state.dir, "odl", MODULE, args))
    for s in switches:
        ovs.vsctl(
            "--", "set", "bridge", s.name, "protocols=OpenFlow13",
            "--", "set-controller", s.name, f"tcp:{root_side}:{ports['openflow']}",
        )  # fmt: skip
    url = f"http://127.0.0.1:{ports['northbound']}"
    _wait_connected(url, [f"openflow:{s.dpid}" for s in switches], _password(state))
    return {s.name: f"odl:{url}" for s in switches}


def _password(state: FabricState) -> str:
    return password_file(state).read_text().splitlines()[0]


def install_baseline(
    state: FabricState, topo: Topology, switches: list[Switch], targets: dict[str, str]
) -> None:
    """The initial paths' rules of ODL-driven switches, pushed through the northbound as
    the seeds' ODL configuration did (the controller owns every flow of its switches;
    connecting it flushed what the bridge had)."""
    rules = initial_rules(topo)

    async def push() -> None:
        """Push every switch's initial rules through the ODL emulator."""
        for s in switches:
            url = targets[s.name].removeprefix("odl:")
            driver = OdlDriver(s.name, url, f"openflow:{s.dpid}", password=_password(state))
            await driver.open()
            try:
                await driver.apply([FlowChange(op=FlowOp.ADD, rule=r) for r in rules[s.name]])
            finally:
                await driver.close()

    asyncio.run(push())


def _wait_connected(url: str, nodes: list[str], password: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    path = "/rests/data/opendaylight-inventory:nodes?content=nonconfig"
    missing = nodes
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(url + path, auth=(USER, password), timeout=2.0)
            body = answer.json()
            listed = body.get("opendaylight-inventory:nodes") or body.get("nodes") or {}
            found = {n.get("id") for n in listed.get("node", [])}
            missing = [n for n in nodes if n not in found]
            if not missing:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    raise FabricError(f"switches never connected to the ODL emulator: {', '.join(missing)}")


STATS = Option(
    name="odl_stats_s",
    flag="--odl-stats-s",
    help="the OpenDaylight emulator's statistics poll, seconds (ODL's default: 3); its "
    "operational datastore, which the driver verifies against, lags by up to that long",
    default=STATS_INTERVAL_S,
)


class OdlPlayer(PacketPlayer):
    kind = "odl"
    plays = "an OVS bridge controlled by the OpenDaylight northbound EMULATOR"
    options: tuple[Option, ...] = (STATS,)
    controlled = True
    management = True

    def start(self, build: Build, nodes: list[Node]) -> Started:
        """The emulator, with the switches connected to it over the management link."""
        names = ", ".join(s.name for s in nodes)
        build.progress(f"OpenDaylight northbound emulator controlling {names}")
        root_side = mgmt.addresses(build.state.name)[0]
        stats_s = float(build.options[STATS.name])
        targets = start(build.state, build.ovs, switches(nodes), root_side, stats_s=stats_s)
        return Started(targets=targets, kept={STATS.name: stats_s})

    def install_baseline(self, build: Build, nodes: list[Node], targets: dict[str, str]) -> None:
        """Through the northbound."""
        build.progress("baseline flows of the ODL switches, through its northbound (~1 stats poll)")
        install_baseline(build.state, build.topo, switches(nodes), targets)

    def inventory_entry(
        self, node: Node, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """The northbound's URL, the node, the password file, the statistics poll."""
        assert isinstance(node, Switch)
        stats_s = state.kinds.get(self.kind, {}).get(STATS.name, STATS.default)
        return {
            "driver": self.kind,
            "target": recorded(node, target).removeprefix("odl:"),
            "api": "rfc8040",
            "node": f"openflow:{node.dpid}",
            "password": {"file": password_file(state).name},
            "timeout_s": 10.0,
            "stats_interval_s": stats_s,  # the emulator's poll, as started
        }


PLAYER: Player = OdlPlayer()
