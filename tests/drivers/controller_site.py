"""A controller EMULATOR (``python -m emulators.odl`` or ``emulators.ryu``) as a test peer, and a
private OVS whose bridge it controls: what ``odl_site.py`` and ``ryu_site.py`` share.

- ``Emulator``: the emulator in a subprocess (os-ken keeps global state: one per process),
  stopped with SIGTERM; its log is a file the tests can read.
- ``ControllerSite``: one private OVS in its own network namespace with one bridge
  (datapath id 1, OpenFlow 1.3 only, veth ports 1 and 2 whose far ends the tests take up
  and down), connected to an emulator, or to a real controller (``ryu_site``: Ryu 4.34).
  The controller's OpenFlow listener binds the root end of a management veth (as in
  conftest.py: OVS in a namespace cannot reach the tests' 127.0.0.1), and its REST side
  binds 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import httpx

from fabric import daemons, mgmt, netns
from fabric.run import run
from fabric.vswitch import OvsInstance

WAIT_S = 15.0
DPID = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Where one kind of site lives and which emulator controls it."""

    kind: str  # the emulator's module under emulators/ (odl, ryu); also the veths' prefix
    ns: str
    bridge: str
    mgmt_host: str
    mgmt_switch: str
    host_ip: str
    switch_ip: str
    rest: str  # the key of the REST port in the emulator's ready file
    auth: tuple[str, str] | None = None

    def veth(self, port: int) -> str:
        """The bridge's port ``port`` (its far end: the same name + ``p``)."""
        return f"{self.kind}-{port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Emulator:
    process: subprocess.Popen[bytes]
    base_url: str
    openflow_port: int
    log: Path
    auth: tuple[str, str] | None = None

    @classmethod
    def spawn(
        cls, layout: Layout, workdir: Path, *, openflow_host: str, args: Sequence[str] = ()
    ) -> Emulator:
        """The emulator of ``layout`` listening for switches on ``openflow_host`` (the
        management address, for the site's OVS)."""
        argv = ["--listen", "127.0.0.1:0", "--openflow", f"{openflow_host}:0", *args]
        spawned = daemons.spawn(workdir, layout.kind, f"emulators.{layout.kind}", argv, WAIT_S)
        ports = json.loads(spawned.ready)
        return cls(
            process=spawned.process,
            base_url=f"http://127.0.0.1:{ports[layout.rest]}",
            openflow_port=ports["openflow"],
            log=spawned.log,
            auth=layout.auth,
        )

    def http(self) -> httpx.Client:
        """A client of the emulator's REST side."""
        return httpx.Client(base_url=self.base_url, auth=self.auth, timeout=5.0)

    def stop(self) -> int:
        """SIGTERM; the exit status."""
        return daemons.sigterm(self.process)


class Controller(Protocol):
    """What a site needs of its controller: an emulator, or a real one
    (fabric.kinds.ryu_rest.peer)."""

    @property
    def base_url(self) -> str: ...

    @property
    def openflow_port(self) -> int: ...

    def stop(self) -> int:
        """Stop it; its exit status."""
        ...


C = TypeVar("C", bound=Controller)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerSite:
    layout: Layout
    ovs: OvsInstance
    emulator: Controller  # the controller: an emulator, or real Ryu (ryu_site.start_real_site)

    def ofctl(self, *args: str) -> str:
        """ovs-ofctl (OpenFlow 1.3) on the bridge's management socket."""
        return self.ovs.ofctl("-O", "OpenFlow13", *args, self.ovs.mgmt(self.layout.bridge))

    def reset_bridge(self) -> None:
        """An empty table, no table limit, every port's link up."""
        self.cap_table(None)
        self.ofctl("del-flows")
        for port in (1, 2):
            self.set_link(port, up=True)

    def cap_table(self, limit: int | None) -> None:
        """Refuse adds to table 0 beyond ``limit`` entries (None: no limit)."""
        self.ovs.cap_table(self.layout.bridge, limit)

    def set_link(self, port: int, *, up: bool) -> None:
        """Take the far end of port ``port`` up or down (its link state on the bridge)."""
        state = "up" if up else "down"
        run(["ip", "link", "set", f"{self.layout.veth(port)}p", state], ns=self.layout.ns)

    def connect(self, emulator: C, connected: Callable[[C], bool]) -> None:
        """Make ``emulator`` the bridge's controller; returns once ``connected`` says so."""
        bridge = self.layout.bridge
        self.ovs.vsctl(
            "set-controller", bridge, f"tcp:{self.layout.host_ip}:{emulator.openflow_port}"
        )
        self.ovs.vsctl("set", "controller", bridge, "connection-mode=out-of-band")
        wait_for(lambda: connected(emulator), f"datapath {DPID} at {emulator.base_url}")


def wait_for(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Until ``check()``; TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:g} s")
        time.sleep(0.02)


def build(layout: Layout, workdir: Path) -> OvsInstance:
    """The namespace, management veth, OVS and bridge of ``layout`` (a crashed run's first
    removed)."""
    netns.delete(layout.ns)  # a leftover of a crashed run (its veths go with it)
    ovs = OvsInstance(rundir=workdir / "ovs", netns=layout.ns)
    netns.add(layout.ns)
    run(["ip", "link", "del", layout.mgmt_host], check=False)
    mgmt.link(layout.ns, (layout.mgmt_host, layout.host_ip), (layout.mgmt_switch, layout.switch_ip))
    ovs.start()
    _bridge(layout, ovs)
    return ovs


def tear_down(layout: Layout, workdir: Path, emulator: Controller | None) -> None:
    """Stop the controller, the OVS, and remove the namespace and management veth."""
    if emulator is not None:
        emulator.stop()
    OvsInstance(rundir=workdir / "ovs", netns=layout.ns).stop()
    netns.delete(layout.ns)
    run(["ip", "link", "del", layout.mgmt_host], check=False)


def _bridge(layout: Layout, ovs: OvsInstance) -> None:
    veths = [layout.veth(port) for port in (1, 2)]
    batch = [f"link add {v} type veth peer name {v}p" for v in veths]
    batch += [f"link set {v}{end} up" for v in veths for end in ("", "p")]
    run(["ip", "-batch", "-"], ns=layout.ns, stdin="\n".join(batch) + "\n")
    bridge = layout.bridge
    args = ["--", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev"]
    args += ["fail_mode=secure", "protocols=OpenFlow13", f"other-config:datapath-id={DPID:016x}"]
    for number, veth in enumerate(veths, start=1):
        args += ["--", "add-port", bridge, veth]
        args += ["--", "set", "interface", veth, f"ofport_request={number}"]
    ovs.vsctl(*args)
