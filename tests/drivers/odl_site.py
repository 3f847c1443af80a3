"""The ODL northbound EMULATOR (``python -m fabric.odl``) as a test peer, and a private OVS
whose bridge it controls.

- ``Emulator``: the emulator in a subprocess (os-ken keeps global state: one per process),
  stopped with SIGTERM; its log is a file the tests can read.
- ``OdlSite``: one private OVS in network namespace ``NS`` with bridge ``brodl`` (datapath
  id 1, node ``openflow:1``, veth ports 1 and 2 whose far ends the tests take up and
  down), connected to an emulator. The emulator's OpenFlow listener binds the root end of
  a management veth (as in conftest.py: OVS in a namespace cannot reach the tests'
  127.0.0.1), and its northbound binds 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from fabric import daemons, mgmt, netns
from fabric.run import run
from fabric.vswitch import OvsInstance

NS = "rr-test-odl"
MGMT_HOST, MGMT_SWITCH = "rrodl-host", "rrodl-sw"
HOST_IP, SWITCH_IP = "169.254.214.1", "169.254.214.2"
BRIDGE, NODE = "brodl", "openflow:1"
STATS_INTERVAL_S = 0.2
AUTH = ("admin", "admin")
WAIT_S = 15.0
NODES = "/rests/data/opendaylight-inventory:nodes"
CONFIG_NODE = f"{NODES}/node=openflow%3A1"


@dataclass(frozen=True, slots=True, kw_only=True)
class Emulator:
    process: subprocess.Popen[bytes]
    base_url: str
    openflow_port: int
    log: Path

    @classmethod
    def start(cls, workdir: Path, *, openflow_host: str, stats_interval_s: float) -> Emulator:
        args = ["--listen", "127.0.0.1:0", "--openflow", f"{openflow_host}:0"]
        args += ["--stats-interval-s", str(stats_interval_s)]
        spawned = daemons.spawn(workdir, "odl", "fabric.odl", args, timeout=WAIT_S)
        ports = json.loads(spawned.ready)
        return cls(
            process=spawned.process,
            base_url=f"http://127.0.0.1:{ports['northbound']}",
            openflow_port=ports["openflow"],
            log=spawned.log,
        )

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, auth=AUTH, timeout=5.0)

    def stop(self) -> int:
        """SIGTERM; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(10)


@dataclass(frozen=True, slots=True, kw_only=True)
class OdlSite:
    ovs: OvsInstance
    emulator: Emulator

    def ofctl(self, *args: str) -> str:
        return self.ovs.ofctl("-O", "OpenFlow13", *args, self.ovs.mgmt(BRIDGE))

    def connect(self, emulator: Emulator) -> None:
        """Make ``emulator`` the bridge's controller; returns once it has the node."""
        target = f"tcp:{HOST_IP}:{emulator.openflow_port}"
        self.ovs.vsctl("set-controller", BRIDGE, target)
        self.ovs.vsctl("set", "controller", BRIDGE, "connection-mode=out-of-band")
        wait_for(lambda: _has_node(emulator), f"{NODE} connected to {emulator.base_url}")

    def reset(self) -> None:
        """No config flows, an empty table, no table limit, every port's link up."""
        self.cap_table(None)
        with self.emulator.http() as http:
            for table in _config_tables(http):
                http.delete(f"{CONFIG_NODE}/flow-node-inventory:table={table}")
        self.ofctl("del-flows")
        for port in (1, 2):
            self.set_link(port, up=True)
        wait_for(lambda: not _operational_flows(self.emulator), "an empty operational table")

    def cap_table(self, limit: int | None) -> None:
        """Refuse adds to table 0 beyond ``limit`` entries (None: no limit)."""
        self.ovs.cap_table(BRIDGE, limit)

    def set_link(self, port: int, *, up: bool) -> None:
        run(["ip", "link", "set", f"odl-{port}p", "up" if up else "down"], ns=NS)


def wait_for(check: object, what: str, timeout: float = WAIT_S) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:g} s")
        time.sleep(0.02)


def _has_node(emulator: Emulator) -> bool:
    with emulator.http() as http:
        return http.get(f"{CONFIG_NODE}?content=nonconfig").status_code == 200


def _config_tables(http: httpx.Client) -> list[int]:
    response = http.get(f"{CONFIG_NODE}?content=config")
    if response.status_code == 404:
        return []
    (node,) = response.json()["opendaylight-inventory:node"]
    return [t["id"] for t in node.get("flow-node-inventory:table", [])]


def _operational_flows(emulator: Emulator) -> list[object]:
    with emulator.http() as http:
        (node,) = http.get(f"{CONFIG_NODE}?content=nonconfig").json()["opendaylight-inventory:node"]
    return [f for t in node.get("flow-node-inventory:table", []) for f in t.get("flow", [])]


# --------------------------------------------------------------------------------------
# building it


def start_site(workdir: Path) -> OdlSite:
    """OVS in ``NS`` with ``brodl``, and an emulator controlling it (stop with stop_site)."""
    netns.delete(NS)  # a leftover of a crashed run (its veths go with it)
    ovs = OvsInstance(rundir=workdir / "ovs", netns=NS)
    netns.add(NS)
    _management_link()
    ovs.start()
    _bridge(ovs)
    emulator = Emulator.start(
        workdir / "emulator", openflow_host=HOST_IP, stats_interval_s=STATS_INTERVAL_S
    )
    site = OdlSite(ovs=ovs, emulator=emulator)
    site.connect(emulator)
    return site


def stop_site(workdir: Path, site: OdlSite | None) -> None:
    if site is not None:
        site.emulator.stop()
    OvsInstance(rundir=workdir / "ovs", netns=NS).stop()
    netns.delete(NS)
    run(["ip", "link", "del", MGMT_HOST], check=False)


def _management_link() -> None:
    run(["ip", "link", "del", MGMT_HOST], check=False)
    mgmt.link(NS, (MGMT_HOST, HOST_IP), (MGMT_SWITCH, SWITCH_IP))


def _bridge(ovs: OvsInstance) -> None:
    veths = [f"odl-{port}" for port in (1, 2)]
    batch = [f"link add {v} type veth peer name {v}p" for v in veths]
    batch += [f"link set {v}{end} up" for v in veths for end in ("", "p")]
    run(["ip", "-batch", "-"], ns=NS, stdin="\n".join(batch) + "\n")
    args = ["--", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev"]
    args += [
        "fail_mode=secure",
        "protocols=OpenFlow13",
        "other-config:datapath-id=0000000000000001",
    ]
    for number, veth in enumerate(veths, start=1):
        args += ["--", "add-port", BRIDGE, veth]
        args += ["--", "set", "interface", veth, f"ofport_request={number}"]
    ovs.vsctl(*args)


def is_root_with_ovs() -> bool:
    from shutil import which

    return os.geteuid() == 0 and which("ovs-vswitchd") is not None
