"""The driver conformance suite: every registered driver kind against its real peer or emulator.

Each kind has a ``Harness`` (a registered kind without one fails the suite):

- ``ovs``: bridge ``br13`` of the private OVS (conftest.py), at its unix management socket;
- ``hp_dpctl``: bridge ``brhp`` of the same OVS, playing an HP switch (``fabric.kinds.hp_dpctl``);
- ``polatis_scpi``: the Polatis emulator on a loopback port, in a background thread;
- ``odl``: the ODL northbound EMULATOR controlling a private OVS bridge (conftest.py), once
  per northbound style (RFC 8040, draft RESTCONF, AD-SAL): a harness may run its kind in
  several ``variants``, each a set of driver options;
- ``p4runtime``: the P4Runtime switch EMULATOR (``emulators.p4rt``) whose dataplane is a
  private OVS bridge (conftest.py, p4rt_site.py);
- ``ryu_rest``: the Ryu ofctl_rest EMULATOR (``emulators.ryu``) controlling a private OVS
  bridge (conftest.py, ryu_site.py).

The checks are written once against a ``Side`` of the driver, one per interface it
implements: ``Flows`` (FlowProgrammer: apply/read) and ``Circuits`` (CrossConnectSwitch:
connect/disconnect/connections). Skips come only from what a driver declares: its
``Capabilities`` (no atomic batches, no port state) and the interfaces it implements.
A peer refuses a change because it must: a flow table limited in size (OVS
``flow_limit`` + ``overflow_policy=refuse``), an ingress port already connected (Polatis).
Timeouts and unreachable devices need no peer: a loopback port that accepts and never
answers, and one that refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import os
import re
import socket
import threading
import time
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Hashable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import httpx
import pytest

import drivers.hp_dpctl
import drivers.odl
import drivers.ovs
import drivers.p4runtime
import drivers.polatis_scpi
import drivers.ryu_rest
from drivers import matrix
from drivers.base import (
    Capabilities,
    CrossConnectSwitch,
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    Expect,
    FlowChange,
    FlowCounters,
    FlowMatch,
    FlowOp,
    FlowProgrammer,
    FlowRule,
    ForeignEntry,
    Output,
    PopVlan,
    PortCounters,
    PortMonitor,
    PortState,
    Prefix,
    PushVlan,
    Session,
    Survey,
    UnknownDriver,
    build,
    lookup,
    registered,
)
from drivers.base import kind as registry_kind
from drivers.p4runtime import P4RuntimeDriver
from drivers.polatis_scpi import socket_resource
from emulators.polatis import EmulatorConfig, EmulatorServer, FixedLock, serve
from fabric.vswitch import OvsInstance
from services.reroute.planning.foreign import overlaps
from tests import peers as need
from tests.drivers.conftest import BRIDGES, OvsSite
from tests.drivers.controller_site import wait_for
from tests.drivers.odl_site import CONFIG_NODE, STATS_INTERVAL_S, OdlSite
from tests.drivers.p4rt_site import P4rtSite
from tests.drivers.ryu_site import RyuSite

assert drivers.hp_dpctl and drivers.odl and drivers.ovs and drivers.polatis_scpi  # register
assert drivers.p4runtime and drivers.ryu_rest
T = TypeVar("T")
TIMEOUT = 5.0
SHORT = 0.3  # the driver timeout in the timeout tests
Batch = Literal["base", "drop_first", "refused", "midway", "big"]
State = frozenset[Hashable]


# --------------------------------------------------------------------------------------
# sides: the checks' view of a driver, one per interface


class Side(Protocol):
    async def run(self, batch: Batch) -> None: ...

    async def state(self) -> State: ...

    def expected(self, batch: Batch) -> State:
        """The state after ``base`` and then ``batch`` (``base``: after it alone)."""
        ...

    def limit(self, batch: Batch) -> int | None:
        """Table entries the peer may hold while ``batch`` runs (None: no limit needed)."""
        ...


def _rule(match: FlowMatch, priority: int, actions: tuple[Any, ...], cookie: int) -> FlowRule:
    return FlowRule(match=match, priority=priority, actions=actions, cookie=cookie)


def _hosts(count: int, cookie: int, second: int) -> list[FlowRule]:
    return [
        _rule(
            FlowMatch(
                in_port=1, eth_type=0x0800, ipv4_dst=Prefix.parse(f"10.{second}.{i >> 8}.{i & 255}")
            ),
            100, (Output(2),), cookie,
        )
        for i in range(count)
    ]  # fmt: skip


RULES = [
    _rule(
        FlowMatch(
            in_port=1, eth_type=0x0800, ipv4_src=Prefix.parse("10.0.0.0/24"),
            ipv4_dst=Prefix.parse("10.1.2.3"), ip_proto=6, l4_dst=80,
        ),
        200, (PushVlan(10), Output(2)), 0xC1,
    ),
    _rule(
        FlowMatch(vlan_vid=10, eth_type=0x0800, ip_proto=17, l4_src=53),
        100, (PopVlan(), Output(1)), 0xC2,
    ),
    _rule(FlowMatch(in_port=2), 1, (), 0xC3),
]  # fmt: skip
NEW = _hosts(3, 0xB0, 9)
BIG = _hosts(300, 0xB1, 8)


def adds(rules: Sequence[FlowRule]) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.ADD, rule=r) for r in rules]


def deletes(rules: Sequence[FlowRule]) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.DELETE, rule=r) for r in rules]


@dataclass(frozen=True, slots=True)
class Flows:
    """A FlowProgrammer. ``refused`` fails at its second add (the table is full),
    ``midway`` at its fourth change, after a delete and two adds."""

    driver: FlowProgrammer
    batches = {
        "base": adds(RULES),
        "drop_first": deletes(RULES[:1]),
        "refused": adds(NEW),
        "midway": [*deletes(RULES[:1]), *adds(NEW)],
        "big": adds(BIG),
    }
    after = {
        "base": frozenset(RULES),
        "drop_first": frozenset(RULES[1:]),
        "big": frozenset([*RULES, *BIG]),
    }

    async def run(self, batch: Batch) -> None:
        await self.driver.apply(self.batches[batch])

    async def state(self) -> State:
        return frozenset(await self.driver.read())

    def expected(self, batch: Batch) -> State:
        return self.after[batch]

    def limit(self, batch: Batch) -> int | None:
        return len(RULES) + 1 if batch in ("refused", "midway") else None


@dataclass(frozen=True, slots=True)
class Circuits:
    """A CrossConnectSwitch (16x16: ingress 1..16, egress 17..32). ``refused`` and
    ``midway`` name an ingress that ``base`` connected (second / third pair)."""

    driver: CrossConnectSwitch
    batches = {
        "base": [(1, 17), (2, 18), (3, 19)],
        "refused": [(4, 20), (2, 23)],
        "midway": [(4, 20), (5, 21), (1, 22)],
        "big": [(i, 16 + i) for i in range(5, 13)],
    }
    after = {
        "base": frozenset(batches["base"]),
        "drop_first": frozenset(batches["base"][1:]),
        "big": frozenset(batches["base"] + batches["big"]),
    }

    async def run(self, batch: Batch) -> None:
        if batch == "drop_first":
            await self.driver.disconnect([1])
        else:
            await self.driver.connect(self.batches[batch])

    async def state(self) -> State:
        return frozenset((await self.driver.connections()).items())

    def expected(self, batch: Batch) -> State:
        return self.after[batch]

    def limit(self, batch: Batch) -> int | None:
        return None


def sides(driver: object) -> list[Side]:
    found: list[Side] = []
    if isinstance(driver, FlowProgrammer):
        found.append(Flows(driver))
    if isinstance(driver, CrossConnectSwitch):
        found.append(Circuits(driver))
    return found


# --------------------------------------------------------------------------------------
# harnesses: each kind's peer


Options = Mapping[str, Any]


def make(
    kind: str, address: str, timeout: float = TIMEOUT, options: Options | None = None
) -> Session:
    """An unconnected driver of ``kind``, built as the engine builds every driver: from an
    inventory entry, through the registry; ``async with`` connects it."""
    base = harness(kind).options
    entry = {"driver": kind, "target": address, "timeout_s": timeout, **base, **(options or {})}
    spec = registry_kind(kind).spec.model_validate(entry)
    driver = build(f"dut-{kind}", spec, Expect())
    assert hasattr(driver, "__aenter__"), f"{kind}: a driver is an async context manager"
    return driver


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer:
    kind: str
    address: str
    cap_table: Callable[[int | None], None]  # refuse table entries beyond n (None: no limit)
    set_link: Callable[[int, bool], None]  # take a port's link up / down
    # another writer's entries, in the peer's own terms (its tool, its northbound): ``lab``
    # installs those a lab has (discovery traps, a table-miss, goto_table...) and returns
    # the (table, priority) of those the device lists; ``shadow`` one that shadows
    # RULES[0]; ``others`` counts the entries the device holds that the tests did not write
    lab: Callable[[], set[tuple[int, int]]] = lambda: set()
    shadow: Callable[[], object] = lambda: None
    others: Callable[[], int] = lambda: 0
    # the device itself sends n frames out of a port, or as if they came in on a port
    # through its table (packet-outs by the peer's own tool)
    emit: Callable[[int, int], None] = lambda port, n: None
    inject: Callable[[int, int], None] = lambda port, n: None
    options: Options = dataclasses.field(default_factory=dict)  # the variant's driver options

    def make(self) -> Session:
        return make(self.kind, self.address, options=self.options)

    def run(self, body: Callable[[Side, Session], Awaitable[T]]) -> list[T]:
        """``body`` on each side of a connected driver (at least one)."""

        driver = self.make()
        if not driver.capabilities.read_back:
            pytest.skip("declared: no read-back (every check here reads back)")

        async def main() -> list[T]:
            async with driver:
                found = sides(driver)
                assert found, f"{self.kind}: no FlowProgrammer, no CrossConnectSwitch"
                return [await body(side, driver) for side in found]

        return asyncio.run(main())

    @contextlib.contextmanager
    def limited(self, side: Side, batch: Batch) -> Iterator[None]:
        limit = side.limit(batch)
        if limit is not None:
            self.cap_table(limit)
        try:
            yield
        finally:
            if limit is not None:
                self.cap_table(None)


PeerFactory = Callable[[pytest.FixtureRequest, str], contextlib.AbstractContextManager[Peer]]


def no_options() -> Options:
    return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """One way to run a kind: its driver options (a function: a real peer's are found when
    a test needs them, or the test skips naming what is missing) and, when not the
    harness's, its own peer (a third-party implementation beside our emulator)."""

    options: Callable[[], Options] = no_options
    peer: PeerFactory | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Harness:
    address_of: Callable[[str, int], str]  # (host, port) -> the driver's address
    peer: PeerFactory
    fabric: bool  # needs root and Open vSwitch
    variants: Mapping[str, Variant] = dataclasses.field(default_factory=lambda: {"": Variant()})
    options: Options = dataclasses.field(default_factory=dict)  # every inventory entry's


@contextlib.contextmanager
def ovs_peer(request: pytest.FixtureRequest, kind: str) -> Iterator[Peer]:
    site: OvsSite = request.getfixturevalue("ovs_site")
    bridge = "br13" if kind == "ovs" else "brhp"
    site.reset(bridge)
    address = site.ovs.mgmt(bridge) if kind == "ovs" else site.hp_target
    ofctl = functools.partial(site.ofctl, bridge)
    add = functools.partial(_add_flow, site.ovs, BRIDGES[bridge], site.ovs.mgmt(bridge))
    lab = OF13_LAB if kind == "ovs" else OF10_LAB
    yield Peer(
        kind=kind,
        address=address,
        cap_table=lambda limit: site.cap_table(bridge, limit),
        set_link=lambda port, up: site.set_link(bridge, port, up=up),
        lab=lambda: _add_flows(add, lab),
        shadow=lambda: _add_flows(add, [SHADOW]),
        others=lambda: _others(ofctl("dump-flows")),
        emit=lambda port, n: _out(site.ovs, BRIDGES[bridge], site.ovs.mgmt(bridge), port, n),
        inject=lambda port, n: _in(site.ovs, BRIDGES[bridge], site.ovs.mgmt(bridge), port, n),
    )
    site.reset(bridge)


class EmulatorThread:
    """A Polatis emulator serving from its own event loop thread, for the tests' drivers."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: EmulatorServer = self.call(serve(config))

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT)

    def execute(self, line: str) -> list[str]:
        return self.call(self.server.emulator.execute(line))

    def set_link(self, port: int, up: bool) -> None:
        """Port ``port`` is up when egress 16+port has light: connect it and release it."""
        egress = 16 + port
        if not up:
            self.execute(f":EMUL:HOLD (@{egress})")
            return
        if self.execute(f":OXC:SWIT:CONN:PORT? {port}") == ['""']:
            self.execute(f":OXC:SWIT:CONN:ADD (@{port}),(@{egress})")
        self.execute(f":EMUL:REL (@{egress})")

    def close(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT)
        self.loop.close()


@contextlib.contextmanager
def polatis_peer(request: pytest.FixtureRequest, kind: str) -> Iterator[Peer]:
    emulator = EmulatorThread(EmulatorConfig(lock=FixedLock(ms=0), switch_ms=0))
    try:
        yield Peer(
            kind=kind,
            address=socket_resource("127.0.0.1", emulator.server.port),
            cap_table=lambda limit: None,
            set_link=emulator.set_link,
        )
    finally:
        emulator.close()


def controller_peer(
    fixture: str,
) -> Callable[[pytest.FixtureRequest, str], contextlib.AbstractContextManager[Peer]]:
    """The peer of a controller's REST northbound: the emulator of the site ``fixture``
    builds (``controller_site``), reset before and after."""

    @contextlib.contextmanager
    def peer(request: pytest.FixtureRequest, kind: str) -> Iterator[Peer]:
        site: OdlSite | RyuSite = request.getfixturevalue(fixture)
        site.reset()
        lab = odl_lab if kind == "odl" else ryu_lab
        yield Peer(
            kind=kind,
            address=site.emulator.base_url,
            cap_table=site.cap_table,
            set_link=lambda port, up: site.set_link(port, up=up),
            lab=functools.partial(lab, site),
            shadow=lambda: _add_flows(_site_add(site), [SHADOW]),
            others=lambda: _others(site.ofctl("dump-flows")),
            emit=lambda port, n: _out(site.ovs, "OpenFlow13", _mgmt(site), port, n),
            inject=lambda port, n: _in(site.ovs, "OpenFlow13", _mgmt(site), port, n),
        )
        site.reset()

    return peer


odl_peer, ryu_peer = controller_peer("odl_site"), controller_peer("ryu")
real_ryu_peer = controller_peer(
    "ryu_real"
)  # Ryu 4.34 itself (fabric.peers, fabric.kinds.ryu_rest.peer)


@contextlib.contextmanager
def p4rt_peer(request: pytest.FixtureRequest, kind: str) -> Iterator[Peer]:
    site: P4rtSite = request.getfixturevalue("p4rt")
    site.reset()
    yield Peer(
        kind=kind,
        address=site.emulator.address,
        cap_table=site.cap_table,
        set_link=lambda port, up: None,  # no port state: P4Runtime has none
        lab=lambda: _p4_write(site, P4_LAB),
        shadow=lambda: _p4_write(site, [P4_SHADOW]),
        others=lambda: asyncio.run(_p4_others(site)),
    )
    site.reset()


# another writer's entries, as labs have them: discovery traps to the controller (LLDP,
# BDDP, ofctl_rest's ``dl_dst`` trap of issue 22), a table-miss NORMAL, ODL l2switch's MAC
# flows, a pipeline's goto_table and write-actions (OpenFlow 1.3 only)
OF10_LAB = [
    "cookie=0x1,priority=65535,dl_type=0x88cc,actions=CONTROLLER:65535",
    "cookie=0x1,priority=65535,dl_type=0x8942,actions=CONTROLLER:65535",
    "cookie=0x1,priority=5,dl_dst=01:80:c2:00:00:0e,actions=CONTROLLER:65535",
    "priority=0,actions=NORMAL",
    "cookie=0x2b00000000000001,priority=10,in_port=2,dl_src=00:00:00:00:00:01,"
    "dl_dst=00:00:00:00:00:02,actions=output:1",
]
OF13_LAB = [
    *OF10_LAB,
    "cookie=0x3,priority=20,in_port=2,actions=goto_table:1",
    "cookie=0x3,table=1,priority=5,actions=write_actions(output:1)",
]
# RULES[0] is in_port=1, 10.0.0.0/24 -> 10.1.2.3 tcp:80 at priority 200: this takes it
SHADOW = "cookie=0x4,priority=300,ip,in_port=1,nw_dst=10.1.2.0/24,dl_src=00:00:00:00:00:09,"
SHADOW += "actions=output:2"
OURS = range(0xB0, 0xD0)  # the cookies of the rules the tests write


def _lab_slots(lines: Sequence[str]) -> set[tuple[int, int]]:
    """(table, priority) of flow-text lines."""
    slots = set()
    for line in lines:
        fields = dict(f.partition("=")[::2] for f in line.split(","))
        slots.add((int(fields.get("table", "0")), int(fields["priority"])))
    return slots


def _add_flow(ovs: OvsInstance, version: str, target: str, line: str) -> None:
    ovs.ofctl("-O", version, "add-flow", target, line)


FRAME = "02000000000202000000000188b5" + "00" * 46  # 60 bytes, a local experimental type


def _out(ovs: OvsInstance, version: str, target: str, port: int, n: int) -> None:
    """The bridge sends ``n`` frames out of ``port`` (packet-outs from the controller port)."""
    for _ in range(n):
        ovs.ofctl("-O", version, "packet-out", target,
                  f"in_port=controller,packet={FRAME},actions=output:{port}")  # fmt: skip


def _in(ovs: OvsInstance, version: str, target: str, port: int, n: int) -> None:
    """``n`` frames through the bridge's table as if they came in on ``port``."""
    for _ in range(n):
        ovs.ofctl("-O", version, "packet-out", target,
                  f"in_port={port},packet={FRAME},actions=table")  # fmt: skip


def _mgmt(site: OdlSite | RyuSite) -> str:
    return site.ovs.mgmt(site.layout.bridge)


def _site_add(site: OdlSite | RyuSite) -> Callable[[str], None]:
    bridge = site.layout.bridge
    return functools.partial(_add_flow, site.ovs, "OpenFlow13", site.ovs.mgmt(bridge))


def _add_flows(add: Callable[[str], None], lines: Sequence[str]) -> set[tuple[int, int]]:
    for line in lines:
        add(line)
    return _lab_slots(lines)


def _others(dump: str) -> int:
    """Entries of a ``dump-flows`` whose cookie is not one of the tests' rules'."""
    cookies = [int(c, 0) for c in re.findall(r"\bcookie=(0x[0-9a-f]+|\d+)", dump)]
    entries = dump.count("actions=")
    return entries - sum(1 for c in cookies if c in OURS)


def ryu_lab(site: OdlSite | RyuSite) -> set[tuple[int, int]]:
    """The issue's ``dl_dst`` trap through ofctl_rest itself, the rest on the bridge."""
    lldp = {"dpid": 1, "priority": 5, "match": {"dl_dst": "01:80:c2:00:00:0e"},
            "actions": [{"type": "OUTPUT", "port": "CONTROLLER"}]}  # fmt: skip
    with httpx.Client(base_url=site.emulator.base_url, timeout=5.0) as http:  # or real Ryu
        assert http.post("/stats/flowentry/add", json=lldp).status_code == 200
    rest = [line for line in OF13_LAB if "dl_dst=01:80" not in line]
    slots = _add_flows(_site_add(site), rest) | {(0, 5)}
    wait_for(lambda: _others(site.ofctl("dump-flows")) == len(OF13_LAB), "the lab's flows")
    return slots


L2SWITCH = {  # ODL l2switch's MAC flow, as written into config by an application
    "id": "L2switch-1", "table_id": 0, "priority": 10, "cookie": 0x2B00000000000002,
    "match": {"in-port": "openflow:1:1", "ethernet-match": {
        "ethernet-source": {"address": "00:00:00:00:00:02"},
        "ethernet-destination": {"address": "00:00:00:00:00:01"}}},
    "instructions": {"instruction": [{"order": 0, "apply-actions": {"action": [
        {"order": 0, "output-action": {"output-node-connector": "2", "max-length": 65535}}]}}]},
}  # fmt: skip


def odl_lab(site: OdlSite | RyuSite) -> set[tuple[int, int]]:
    """An l2switch flow in config (a writer through RESTCONF), the lab's flows on the
    switch (writers through ODL's RPCs, which never reach config: they show only in
    operational). The EMULATOR's operational lists no entry its model cannot say
    (goto_table, write-actions): only the others are expected."""
    path = f"{CONFIG_NODE}/flow-node-inventory:table=0/flow=L2switch-1"
    with site.emulator.http() as http:
        answer = http.put(path, json={"flow-node-inventory:flow": [L2SWITCH]})
        assert answer.status_code in (200, 201, 204), answer.text
    _add_flows(_site_add(site), OF10_LAB)
    wait_for(lambda: _others(site.ofctl("dump-flows")) == len(OF10_LAB) + 1, "the lab's flows")
    time.sleep(3 * STATS_INTERVAL_S)  # a statistics poll after them
    return _lab_slots(OF10_LAB) | {(0, 10)}


P4_LAB = [  # another controller's entries in our table (its own metadata), and one without
    _rule(FlowMatch(eth_type=0x0800, ip_proto=1), 10, (Output(2),), 0x1),
    _rule(FlowMatch(in_port=2), 2, (), 0),
]
P4_SHADOW = _rule(
    FlowMatch(in_port=1, eth_type=0x0800, ipv4_dst=Prefix.parse("10.1.2.0/24")),
    300, (Output(2),), 0x4,
)  # fmt: skip


async def _p4_others(site: P4rtSite) -> int:
    async with P4RuntimeDriver("lab", site.emulator.address, device_id=1) as other:
        return sum(1 for r in await other.read() if r.cookie not in OURS)


def _p4_write(site: P4rtSite, rules: Sequence[FlowRule]) -> set[tuple[int, int]]:
    async def write() -> None:
        async with P4RuntimeDriver("lab", site.emulator.address, device_id=1) as other:
            await other.apply(adds(rules))

    asyncio.run(write())
    return {(r.table, r.priority) for r in rules}


ODL = {  # the emulator polls statistics every 0.2 s here; its password is admin
    "operational_wait_s": 1.5,
    "node": "openflow:1",
    "password": {"env": "REROUTE_TEST_ODL_PASSWORD"},
}
os.environ.setdefault("REROUTE_TEST_ODL_PASSWORD", "admin")


def reference_dpctl() -> Options:
    """The OpenFlow 1.0 reference dpctl (``fabric.peers``, built once), or skip naming what
    is missing."""
    path = str(need.reference_dpctl())
    # dpctl never hears a refusal: a refused batch is known when its read-back gives up
    return {"tool": "dpctl", "tool_path": path, "verify_wait_s": 0.5}


HARNESSES = {
    "ovs": Harness(address_of=lambda h, p: f"tcp:{h}:{p}", peer=ovs_peer, fabric=True),
    "hp_dpctl": Harness(
        address_of=lambda h, p: f"tcp:{h}:{p}",
        peer=ovs_peer,
        fabric=True,
        variants={  # the same switch, through each tool the driver drives
            "ovs-ofctl": Variant(options=functools.partial(dict, tool="ovs-ofctl")),
            "dpctl": Variant(options=reference_dpctl),
        },
    ),
    "polatis_scpi": Harness(address_of=socket_resource, peer=polatis_peer, fabric=False),
    "odl": Harness(
        address_of=lambda h, p: f"http://{h}:{p}",
        peer=odl_peer,
        fabric=True,
        variants={
            s: Variant(options=functools.partial(dict, api=s))
            for s in ("rfc8040", "restconf", "adsal")
        },
        options=ODL,
    ),
    "p4runtime": Harness(
        address_of=lambda h, p: f"{h}:{p}",
        peer=p4rt_peer,
        fabric=True,
        options={"device_id": 1},  # the emulator's, as it was started (p4rt_site.py)
    ),
    "ryu_rest": Harness(
        address_of=lambda h, p: f"http://{h}:{p}",
        peer=ryu_peer,
        fabric=True,
        variants={"emulator": Variant(), "ryu-4.34": Variant(peer=real_ryu_peer)},
        options={"dpid": 1, "verify_wait_s": 0.5},  # a refused flow waits this long
    ),
}
KINDS = registered()


def _params(*, peer_marks: bool) -> list[Any]:
    """(kind, variant) of every kind's every variant; ``peer_marks``: marked ``fabric``
    where the harness's peers need it."""
    params = []
    for kind in KINDS:
        found = HARNESSES.get(kind)
        marks = [pytest.mark.fabric] if peer_marks and found and found.fabric else []
        for variant in found.variants if found else [""]:
            name = f"{kind}-{variant}" if variant else kind
            params.append(pytest.param((kind, variant), id=name, marks=marks))
    return params


PEER_KINDS, VARIANTS = _params(peer_marks=True), _params(peer_marks=False)


def harness(kind: str) -> Harness:
    if kind not in HARNESSES:
        pytest.fail(f"driver kind {kind!r} has no harness in the conformance suite: add one")
    return HARNESSES[kind]


def variant_options(kind: str, variant: str) -> Options:
    """The driver options of ``kind``'s ``variant`` (skips when its peer cannot be had)."""
    return harness(kind).variants[variant].options() if variant else {}


@pytest.fixture(params=PEER_KINDS)
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    kind, name = request.param
    found = harness(kind)
    variant = found.variants[name]
    options = variant.options()
    with (variant.peer or found.peer)(request, kind) as made:
        yield dataclasses.replace(made, options={**made.options, **options})


# --------------------------------------------------------------------------------------
# the registry and the matrix


def test_an_unknown_kind_is_an_error_naming_the_known_kinds() -> None:
    with pytest.raises(UnknownDriver) as info:
        lookup("nope")
    assert "nope" in str(info.value)
    assert all(kind in str(info.value) for kind in registered())


def test_every_driver_package_is_registered_and_has_a_harness() -> None:
    assert matrix.load_drivers() == KINDS
    assert set(KINDS) == set(HARNESSES)


def test_the_capability_matrix_is_current() -> None:
    assert matrix.DOC.read_text() == matrix.render(), "run `python -m drivers.matrix`"


# --------------------------------------------------------------------------------------
# the contract (no peer needed)


@pytest.mark.parametrize("kind", KINDS)
def test_the_driver_implements_the_contract(kind: str) -> None:
    driver = make(kind, harness(kind).address_of("127.0.0.1", 9))
    caps = driver.capabilities
    assert driver.name == f"dut-{kind}"
    assert isinstance(caps, Capabilities)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.atomic_batch = not caps.atomic_batch  # type: ignore[misc]
    assert sides(driver), "implements FlowProgrammer or CrossConnectSwitch"
    assert caps.port_state == isinstance(driver, PortMonitor)
    assert caps.max_batch >= 0 and caps.notes
    for interface in (i for i in matrix.INTERFACES if isinstance(driver, i)):
        for method in matrix.methods(interface):
            assert inspect.iscoroutinefunction(getattr(driver, method)), f"{method} is async"
    assert isinstance(driver, Session), "one session shape: open / close / async with"


@pytest.mark.parametrize("kind_variant", VARIANTS)
def test_a_device_that_does_not_answer_times_out(kind_variant: tuple[str, str]) -> None:
    kind, variant = kind_variant
    options = variant_options(kind, variant)

    async def main() -> tuple[DeviceTimeout, float]:
        server = await asyncio.start_server(_hold, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        start = time.monotonic()
        address = harness(kind).address_of("127.0.0.1", port)
        async with server:
            with pytest.raises(DeviceTimeout) as info:
                async with make(kind, address, SHORT, options) as d:
                    await sides(d)[0].state()
            return info.value, time.monotonic() - start

    error, took = asyncio.run(main())
    assert error.device == f"dut-{kind}"
    assert took < SHORT + 2.0


async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accept and never answer (until the client hangs up)."""
    with contextlib.suppress(ConnectionError):
        await reader.read()
    writer.close()


@pytest.mark.parametrize("kind_variant", VARIANTS)
def test_nothing_listening_is_unreachable(kind_variant: tuple[str, str]) -> None:
    kind, variant = kind_variant
    options = variant_options(kind, variant)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the driver connects

    async def main() -> DeviceUnreachable:
        with pytest.raises(DeviceUnreachable) as info:
            async with make(kind, harness(kind).address_of("127.0.0.1", port), SHORT, options) as d:
                await sides(d)[0].state()
        return info.value

    assert asyncio.run(main()).device == f"dut-{kind}"


# --------------------------------------------------------------------------------------
# against the peer


def test_apply_then_read_back(peer: Peer) -> None:
    async def body(side: Side, _: Session) -> tuple[State, ...]:
        await side.run("base")
        return await side.state(), side.expected("base")

    for got, want in peer.run(body):
        assert got == want


def test_read_filters_by_cookie(peer: Peer) -> None:
    async def body(side: Side, driver: Session) -> tuple[list[FlowRule], list[FlowRule]]:
        if not isinstance(driver, FlowProgrammer):
            pytest.skip("implements no FlowProgrammer")
        await side.run("base")
        return await driver.read(cookie=0xC2), await driver.read(cookie=0xC0, cookie_mask=0xF0)

    for exact, masked in peer.run(body):
        assert exact == [RULES[1]]
        assert set(masked) == set(RULES)


def test_reapplying_a_batch_leaves_the_same_state(peer: Peer) -> None:
    async def body(side: Side, _: Session) -> list[tuple[State, State]]:
        checks: list[tuple[State, State]] = []
        batches: tuple[Batch, ...] = ("base", "drop_first")
        for batch in batches:  # an addition, then a removal, each twice
            await side.run(batch)
            await side.run(batch)
            checks.append((await side.state(), side.expected(batch)))
        return checks

    for checks in peer.run(body):
        for got, want in checks:
            assert got == want


def test_a_rejected_batch_surfaces_as_device_rejected_and_changes_nothing(peer: Peer) -> None:
    async def body(side: Side, _: Session) -> tuple[DeviceRejected, State, State]:
        await side.run("base")
        with peer.limited(side, "refused"), pytest.raises(DeviceRejected) as info:
            await side.run("refused")
        return info.value, await side.state(), side.expected("base")

    for error, state, before in peer.run(body):
        assert error.code, "the device's error code is kept"
        assert error.device == f"dut-{peer.kind}"
        assert state == before


def test_a_batch_failing_midway_leaves_the_state_before_it(peer: Peer) -> None:
    async def body(side: Side, _: Session) -> tuple[State, State]:
        await side.run("base")
        before = await side.state()
        with peer.limited(side, "midway"), pytest.raises(DeviceRejected):
            await side.run("midway")
        return before, await side.state()

    for before, after in peer.run(body):
        assert after == before


def test_an_atomic_batch_is_never_seen_half_applied(peer: Peer) -> None:
    """Another session reads while the batch is applied: all of it or none of it."""

    async def body(side: Side, driver: Session) -> tuple[set[int], int, bool]:
        if not driver.capabilities.atomic_batch:
            pytest.skip("declared: no atomic batches")
        await side.run("base")
        batch = side.expected("big") - side.expected("base")
        seen: set[int] = set()
        async with peer.make() as other:
            watcher = next(s for s in sides(other) if type(s) is type(side))
            task = asyncio.create_task(side.run("big"))
            while not task.done():
                seen.add(len(await watcher.state() & batch))
            await task
        return seen, len(batch), await side.state() == side.expected("big")

    for seen, size, complete in peer.run(body):
        assert seen <= {0, size}, f"a reader saw {seen} of the {size} entries of the batch"
        assert complete


def test_port_state_follows_the_link(peer: Peer) -> None:
    async def body(side: Side, driver: Session) -> list[PortState]:
        if not driver.capabilities.port_state:
            pytest.skip("declared: no port state")
        assert isinstance(driver, PortMonitor)
        states = []
        for up in (True, False, True):
            peer.set_link(1, up)
            states.append(await _until(driver, 1, PortState.UP if up else PortState.DOWN))
        return states

    for states in peer.run(body):
        assert states == [PortState.UP, PortState.DOWN, PortState.UP]


async def _until(driver: PortMonitor, port: int, state: PortState) -> PortState:
    deadline = time.monotonic() + TIMEOUT
    while (states := await driver.port_states()).get(port) != state:
        assert all(isinstance(p, int) and isinstance(s, PortState) for p, s in states.items())
        assert time.monotonic() < deadline, f"port {port} still not {state}: {states}"
        await asyncio.sleep(0.02)
    return state


# --------------------------------------------------------------------------------------
# other writers' entries (issue 22): read around, never fatal, named when they shadow ours


def test_port_counters_count_what_the_port_sent(peer: Peer) -> None:
    """``tx_packets`` read right after the device sent 5 frames out of port 1 counts them,
    and nothing on port 2 (the table is empty: nothing else goes out); port 1 asked for
    alone reads the same."""

    async def body(side: Side, driver: Session) -> tuple[dict[int, int], ...]:
        if not isinstance(driver, PortCounters):
            pytest.skip("implements no PortCounters")
        before = await driver.tx_packets()
        await asyncio.to_thread(peer.emit, 1, 5)
        return before, await driver.tx_packets(), await driver.tx_packets([1])

    for before, after, alone in peer.run(body):
        assert after[1] - before[1] == 5 and after[2] == before[2], (before, after)
        assert alone[1] == after[1], alone


def test_flow_counters_count_what_a_rule_matched(peer: Peer) -> None:
    """``flow_packets`` of a rule's cookie after 4 frames through the table matched it."""
    counted = FlowRule(match=FlowMatch(in_port=1), priority=300, actions=(Output(2),),
                       cookie=0xF10)  # fmt: skip

    async def body(side: Side, driver: Session) -> tuple[int, int]:
        if not isinstance(driver, FlowCounters):
            pytest.skip("implements no FlowCounters")
        await _flows_only(driver).apply([FlowChange(op=FlowOp.ADD, rule=counted)])
        before = await driver.flow_packets(counted.cookie)
        await asyncio.to_thread(peer.inject, 1, 4)
        return before, await driver.flow_packets(counted.cookie)

    for before, after in peer.run(body):
        assert (before, after) == (0, 4)


def _flows_only(driver: Session) -> FlowProgrammer:
    if not isinstance(driver, FlowProgrammer):
        pytest.skip("implements no FlowProgrammer")
    return driver


def test_other_writers_entries_never_break_reads_or_batches(peer: Peer) -> None:
    """With a lab's entries on the device: our batches apply and read back, filtered reads
    show only ours, an unfiltered read does not fail, and their entries stay as they were."""
    peer.lab()
    theirs = peer.others()

    async def body(side: Side, driver: Session) -> tuple[set[FlowRule], ...]:
        flows = _flows_only(driver)
        await side.run("base")
        await side.run("drop_first")
        after_drop = set(await flows.read(cookie=0xC0, cookie_mask=0xF0))
        await side.run("base")
        everything = set(await flows.read())
        return set(await flows.read(cookie=0xC0, cookie_mask=0xF0)), after_drop, everything

    for ours, after_drop, everything in peer.run(body):
        assert ours == set(RULES)
        assert after_drop == set(RULES[1:])
        assert set(RULES) <= everything
    assert peer.others() == theirs, "an entry of another writer was changed"


def test_a_survey_tells_our_entries_from_other_writers(peer: Peer) -> None:
    slots = peer.lab()

    async def body(side: Side, driver: Session) -> Survey:
        flows = _flows_only(driver)
        await side.run("base")
        return await flows.survey(0xC0, 0xF0)

    for survey in peer.run(body):
        assert set(survey.ours) == set(RULES)
        found = {(e.table, e.priority) for e in survey.foreign}
        assert slots <= found, f"missing {slots - found} among {survey.foreign}"
        assert all(e.text.strip() for e in survey.foreign)
        assert not any(e.match == r.match and e.priority == r.priority for e in
                       survey.foreign for r in RULES)  # fmt: skip


def test_an_entry_that_shadows_ours_is_seen_by_the_plan_check(peer: Peer) -> None:
    """Another writer's entry above RULES[0], overlapping it: the survey gives the plan
    check (``planning.foreign``) what it needs to name it."""

    async def base(side: Side, driver: Session) -> None:
        _flows_only(driver)
        await side.run("base")

    async def body(side: Side, driver: Session) -> list[ForeignEntry]:
        survey = await _flows_only(driver).survey(0xC0, 0xF0)
        rule = RULES[0]
        return [
            e for e in survey.foreign
            if e.table == rule.table and e.priority >= rule.priority
            and overlaps(e.match, rule.match)
        ]  # fmt: skip

    peer.run(base)
    peer.shadow()  # by another writer, between our sessions (P4Runtime: one primary)
    if peer.kind == "odl":
        time.sleep(3 * STATS_INTERVAL_S)  # a statistics poll after it
    for shadowing in peer.run(body):
        assert [e.priority for e in shadowing] == [300], shadowing
        assert "300" in shadowing[0].text
