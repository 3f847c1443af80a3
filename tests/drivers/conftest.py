"""The Open vSwitch peers of the driver conformance suite (and of test_hp_dpctl.py).

One private OVS (userspace datapath, own db and rundir) in network namespace ``NS`` with
two bridges, each with veth ports 1 and 2 whose far ends the tests take up and down:

- ``br13``: OpenFlow 1.3, reached at its unix management socket (kind ``ovs``);
- ``brhp``: plays an HP switch (``fabric.kinds.hp_dpctl.play_hp``: OpenFlow 1.0 only, a passive TCP
  listener, no controller) for kind ``hp_dpctl``.

Kind ``odl`` has its own OVS (namespace ``rr-test-odl``) controlled by the ODL northbound
EMULATOR: fixture ``odl_site``, built in ``odl_site.py``. Kind ``p4runtime`` has its own
OVS (namespace ``rr-test-p4rt``), the dataplane of the P4Runtime switch EMULATOR: fixture
``p4rt_site``, built in ``p4rt_site.py``. Kind ``ryu_rest`` has its own OVS (namespace
``rr-test-ryu``) controlled by the Ryu ofctl_rest EMULATOR: fixture ``ryu``, and another
(namespace ``rr-test-ryupeer``) controlled by real Ryu 4.34: fixture ``ryu_real``, both
built in ``ryu_site.py``.

Why a management veth: a ``ptcp:`` listener opens in the namespace ovs-vswitchd runs in,
so ``127.0.0.1`` there is not reachable from the test (and its ``ovs-ofctl``), which run
in the root namespace. OVS must stay in a namespace (two OVS in one namespace clash on
``ovs-netdev``; the fabric tests run theirs concurrently), so the listener binds to the
namespace end of a veth pair whose other end is in the root namespace: a management
network, as a real switch's listen-port sits on one. Deleting the namespace deletes both
ends. Unix sockets (``br13``) are files and need none of this.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from fabric import mgmt, netns
from fabric.kinds.hp_dpctl import play_hp
from fabric.run import run
from fabric.vswitch import OvsInstance
from tests import peers as need
from tests.drivers import p4rt_site, ryu_site
from tests.drivers.odl_site import OdlSite, is_root_with_ovs, start_site, stop_site
from tests.drivers.p4rt_site import P4rtSite
from tests.drivers.ryu_site import RyuSite

NS = "rr-test-conform"
MGMT_HOST, MGMT_SWITCH = "rrcf-host", "rrcf-sw"
HOST_IP, SWITCH_IP = "169.254.213.1", "169.254.213.2"
HP_PORT = 6633
BRIDGES = {"br13": "OpenFlow13", "brhp": "OpenFlow10"}  # bridge -> its OpenFlow version


@dataclass(frozen=True, slots=True, kw_only=True)
class OvsSite:
    ovs: OvsInstance
    hp_target: str

    def ofctl(self, bridge: str, *args: str) -> str:
        """ovs-ofctl on the bridge's management socket (in the bridge's OpenFlow version)."""
        return self.ovs.ofctl("-O", BRIDGES[bridge], *args, self.ovs.mgmt(bridge))

    def reset(self, bridge: str) -> None:
        """Empty table, no table limit, every port's link up."""
        self.cap_table(bridge, None)
        self.ofctl(bridge, "del-flows")
        for port in (1, 2):
            self.set_link(bridge, port, up=True)

    def cap_table(self, bridge: str, limit: int | None) -> None:
        """Refuse adds to table 0 beyond ``limit`` entries (None: no limit)."""
        self.ovs.cap_table(bridge, limit)

    def set_link(self, bridge: str, port: int, *, up: bool) -> None:
        far_end = f"{_veth(bridge, port)}p"
        run(["ip", "link", "set", far_end, "up" if up else "down"], ns=NS)


def _veth(bridge: str, port: int) -> str:
    return f"{bridge[2:]}-{port}"  # br13 port 1: "13-1" (its far end "13-1p")


@pytest.fixture(scope="session")
def ovs_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvsSite]:
    if os.geteuid() != 0 or shutil.which("ovs-vswitchd") is None:
        pytest.fail("these driver tests need root and Open vSwitch; deselect with -m 'not fabric'")
    netns.delete(NS)  # a leftover of a crashed run (its veths go with it)
    ovs = OvsInstance(rundir=tmp_path_factory.mktemp("ovs-conform"), netns=NS)
    try:
        netns.add(NS)
        _management_link()
        ovs.start()
        for bridge, version in BRIDGES.items():
            _bridge(ovs, bridge, version)
        target = play_hp(ovs, "brhp", HP_PORT, address=SWITCH_IP)
        yield OvsSite(ovs=ovs, hp_target=target)
    finally:
        ovs.stop()
        netns.delete(NS)


def _management_link() -> None:
    run(["ip", "link", "del", MGMT_HOST], check=False)
    mgmt.link(NS, (MGMT_HOST, HOST_IP), (MGMT_SWITCH, SWITCH_IP))


def _bridge(ovs: OvsInstance, bridge: str, version: str) -> None:
    veths = [_veth(bridge, port) for port in (1, 2)]
    batch = [f"link add {v} type veth peer name {v}p" for v in veths]
    batch += [f"link set {v}{end} up" for v in veths for end in ("", "p")]
    run(["ip", "-batch", "-"], ns=NS, stdin="\n".join(batch) + "\n")
    args = ["--", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev"]
    args += ["fail_mode=secure", f"protocols={version}"]
    for number, veth in enumerate(veths, start=1):
        args += ["--", "add-port", bridge, veth]
        args += ["--", "set", "interface", veth, f"ofport_request={number}"]
    ovs.vsctl(*args)


@pytest.fixture(scope="session")
def odl_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OdlSite]:
    if not is_root_with_ovs():
        pytest.fail("these driver tests need root and Open vSwitch; deselect with -m 'not fabric'")
    workdir = tmp_path_factory.mktemp("odl-site")
    site = None
    try:
        site = start_site(workdir)
        yield site
    finally:
        stop_site(workdir, site)


@pytest.fixture(scope="session")
def p4rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[P4rtSite]:
    """The P4Runtime switch EMULATOR on its private OVS (session-wide; reset it per test)."""
    if not is_root_with_ovs():
        pytest.fail("these driver tests need root and Open vSwitch; deselect with -m 'not fabric'")
    workdir = tmp_path_factory.mktemp("p4rt-site")
    site = None
    try:
        site = p4rt_site.start_site(workdir)
        yield site
    finally:
        p4rt_site.stop_site(workdir, site)


@pytest.fixture(scope="session")
def ryu_real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RyuSite]:
    """Real Ryu 4.34 (ofctl_rest) controlling a private OVS bridge (session-wide); skips
    naming what is missing where Ryu cannot be had (no Python 3.9, no peers directory)."""
    if not is_root_with_ovs():
        pytest.fail("these driver tests need root and Open vSwitch; deselect with -m 'not fabric'")
    need.ryu_manager()
    workdir = tmp_path_factory.mktemp("ryu-real-site")
    site = None
    try:
        site = ryu_site.start_real_site(workdir)
        yield site
    finally:
        ryu_site.stop_real_site(workdir, site)


@pytest.fixture(scope="session")
def ryu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RyuSite]:
    """The Ryu ofctl_rest EMULATOR controlling a private OVS bridge (session-wide)."""
    if not is_root_with_ovs():
        pytest.fail("these driver tests need root and Open vSwitch; deselect with -m 'not fabric'")
    workdir = tmp_path_factory.mktemp("ryu-site")
    site = None
    try:
        site = ryu_site.start_site(workdir)
        yield site
    finally:
        ryu_site.stop_site(workdir, site)
