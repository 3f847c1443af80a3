"""The Ryu ofctl_rest EMULATOR (``python -m fabric.ryu``) as a test peer, and a private OVS
whose bridge it controls.

- ``Emulator``: the emulator in a subprocess (os-ken keeps global state: one per process),
  stopped with SIGTERM; its log is a file the tests can read.
- ``RyuSite``: one private OVS in network namespace ``NS`` with bridge ``brryu`` (datapath
  id 1, OpenFlow 1.3 only, veth ports 1 and 2 whose far ends the tests take up and down),
  connected to an emulator over a management veth (see odl_site.py for why).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from fabric import daemons, mgmt, netns
from fabric.run import run
from fabric.vswitch import OvsInstance

NS = "rr-test-ryu"
MGMT_HOST, MGMT_SWITCH = "rrryu-host", "rrryu-sw"
HOST_IP, SWITCH_IP = "169.254.215.1", "169.254.215.2"
BRIDGE, DPID = "brryu", 1
WAIT_S = 15.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Emulator:
    process: subprocess.Popen[bytes]
    base_url: str
    openflow_port: int
    log: Path

    @classmethod
    def start(cls, workdir: Path, *, openflow_host: str) -> Emulator:
        args = ["--listen", "127.0.0.1:0", "--openflow", f"{openflow_host}:0"]
        spawned = daemons.spawn(workdir, "ryu", "fabric.ryu", args, timeout=WAIT_S)
        ports = json.loads(spawned.ready)
        return cls(
            process=spawned.process,
            base_url=f"http://127.0.0.1:{ports['rest']}",
            openflow_port=ports["openflow"],
            log=spawned.log,
        )

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=5.0)

    def stop(self) -> int:
        """SIGTERM; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(10)


@dataclass(frozen=True, slots=True, kw_only=True)
class RyuSite:
    ovs: OvsInstance
    emulator: Emulator

    def ofctl(self, *args: str) -> str:
        return self.ovs.ofctl("-O", "OpenFlow13", *args, self.ovs.mgmt(BRIDGE))

    def reset(self) -> None:
        """An empty table, no table limit, every port's link up."""
        self.cap_table(None)
        self.ofctl("del-flows")
        for port in (1, 2):
            self.set_link(port, up=True)

    def cap_table(self, limit: int | None) -> None:
        """Refuse adds to table 0 beyond ``limit`` entries (None: no limit)."""
        self.ovs.cap_table(BRIDGE, limit)

    def set_link(self, port: int, *, up: bool) -> None:
        run(["ip", "link", "set", f"ryu-{port}p", "up" if up else "down"], ns=NS)


def wait_for(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:g} s")
        time.sleep(0.02)


def _connected(emulator: Emulator) -> bool:
    with emulator.http() as http:
        return DPID in http.get("/stats/switches").json()


def start_site(workdir: Path) -> RyuSite:
    """OVS in ``NS`` with ``brryu``, and an emulator controlling it (stop with stop_site)."""
    netns.delete(NS)  # a leftover of a crashed run (its veths go with it)
    ovs = OvsInstance(rundir=workdir / "ovs", netns=NS)
    netns.add(NS)
    run(["ip", "link", "del", MGMT_HOST], check=False)
    mgmt.link(NS, (MGMT_HOST, HOST_IP), (MGMT_SWITCH, SWITCH_IP))
    ovs.start()
    _bridge(ovs)
    emulator = Emulator.start(workdir / "emulator", openflow_host=HOST_IP)
    ovs.vsctl("set-controller", BRIDGE, f"tcp:{HOST_IP}:{emulator.openflow_port}")
    ovs.vsctl("set", "controller", BRIDGE, "connection-mode=out-of-band")
    wait_for(lambda: _connected(emulator), f"datapath {DPID} at {emulator.base_url}")
    return RyuSite(ovs=ovs, emulator=emulator)


def stop_site(workdir: Path, site: RyuSite | None) -> None:
    if site is not None:
        site.emulator.stop()
    OvsInstance(rundir=workdir / "ovs", netns=NS).stop()
    netns.delete(NS)
    run(["ip", "link", "del", MGMT_HOST], check=False)


def _bridge(ovs: OvsInstance) -> None:
    veths = [f"ryu-{port}" for port in (1, 2)]
    batch = [f"link add {v} type veth peer name {v}p" for v in veths]
    batch += [f"link set {v}{end} up" for v in veths for end in ("", "p")]
    run(["ip", "-batch", "-"], ns=NS, stdin="\n".join(batch) + "\n")
    args = ["--", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev"]
    args += [
        "fail_mode=secure",
        "protocols=OpenFlow13",
        f"other-config:datapath-id={DPID:016x}",
    ]
    for number, veth in enumerate(veths, start=1):
        args += ["--", "add-port", BRIDGE, veth]
        args += ["--", "set", "interface", veth, f"ofport_request={number}"]
    ovs.vsctl(*args)
