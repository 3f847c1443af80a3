"""HpDpctlDriver: the pure text and batch logic (with output recorded from the real
OpenFlow 1.0 reference dpctl), then the driver against OVS playing an HP switch (``brhp``
of the conftest's OVS), through ``ovs-ofctl`` and through the reference ``dpctl`` itself
(built once by ``fabric.peers``), which exits 0 whatever the switch answered.

What every driver must do is in test_conformance.py; this file covers what is particular
to OpenFlow 1.0 and to a tool run once per request.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from drivers import batch
from drivers.base import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    FlowChange,
    FlowMatch,
    FlowOp,
    FlowRule,
    Output,
    PopVlan,
    PortState,
    Prefix,
    ProtocolError,
    PushVlan,
    lookup,
)
from drivers.errors import ConfigError
from drivers.hp_dpctl import HpDpctlDriver, cookies, flowtext
from drivers.hp_dpctl.tool import Command, Dpctl, Ofctl, classify
from drivers.hp_dpctl.which import find_tool
from emulators.ofrelay import Relay, refuse_of10_port_desc
from tests import peers as need
from tests.drivers.conftest import OvsSite

T = TypeVar("T")
fabric = pytest.mark.fabric


def rule(
    priority: int = 100, cookie: int = 0, actions: tuple[object, ...] = (), **match: object
) -> FlowRule:
    return FlowRule(
        match=FlowMatch(**match),  # type: ignore[arg-type]
        priority=priority,
        actions=actions,  # type: ignore[arg-type]
        cookie=cookie,
    )


def adds(rules: Sequence[FlowRule]) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.ADD, rule=r) for r in rules]


def deletes(rules: Sequence[FlowRule]) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.DELETE, rule=r) for r in rules]


TCP = rule(
    200, 0x5252000000000101, (PushVlan(10), Output(2)),
    in_port=1, eth_type=0x0800, ipv4_src=Prefix.parse("10.0.0.0/24"),
    ipv4_dst=Prefix.parse("10.1.2.3"), ip_proto=6, l4_dst=80,
)  # fmt: skip
TRANSIT = rule(300, 0xC2, (PopVlan(), Output(1)), in_port=2, vlan_vid=10, eth_type=0x0800)
DROP = rule(1, 0, (), in_port=2)


def hosts(count: int, cookie: int = 0xB0) -> list[FlowRule]:
    return [
        rule(100, cookie, (Output(2),), in_port=1, eth_type=0x0800,
             ipv4_dst=Prefix.parse(f"10.9.{i >> 8}.{i & 255}"))
        for i in range(count)
    ]  # fmt: skip


# --------------------------------------------------------------------------------------
# flow text


def test_add_and_delete_lines() -> None:
    assert flowtext.add_line(TCP) == (
        "add cookie=0x5252000000000101,priority=200,idle_timeout=0,hard_timeout=0,"
        "in_port=1,dl_type=0x0800,nw_src=10.0.0.0/24,nw_dst=10.1.2.3,nw_proto=6,tp_dst=80,"
        "actions=mod_vlan_vid:10,output:2"
    )
    assert flowtext.add_line(TRANSIT).endswith(
        "in_port=2,dl_vlan=10,dl_type=0x0800,actions=strip_vlan,output:1"
    )
    assert flowtext.add_line(DROP) == (
        "add cookie=0x0,priority=1,idle_timeout=0,hard_timeout=0,in_port=2,actions="
    )  # no actions: drop, for both tools (the reference dpctl has no "drop" keyword)
    assert flowtext.delete_line(DROP) == "delete_strict priority=1,in_port=2"
    assert flowtext.add_line(rule(5, 0, (Output(1),))).endswith("hard_timeout=0,actions=output:1")


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            " cookie=0x5252000000000101, priority=200,tcp,in_port=1,nw_src=10.0.0.0/24,"
            "nw_dst=10.1.2.3,tp_dst=80 actions=mod_vlan_vid:10,output:2",
            TCP,
        ),
        (
            " cookie=0xc2, duration=1.2s, table=0, n_packets=3, n_bytes=180, idle_age=1, "
            "priority=300,ip,in_port=2,dl_vlan=10 actions=strip_vlan,output:1",
            TRANSIT,
        ),
        (" priority=1,in_port=2 actions=drop", DROP),  # cookie 0 left out
        (" actions=drop", rule(32768, 0, ())),  # the default priority left out
        (  # the reference dpctl's layout
            "  cookie=0, duration_sec=3s, duration_nsec=5000s, table_id=0, priority=1, "
            "n_packets=0, n_bytes=0, idle_timeout=0,hard_timeout=0,in_port=2,actions=drop",
            DROP,
        ),
        (
            " priority=7,udp,tp_src=53 actions=output:3",
            rule(7, 0, (Output(3),), eth_type=0x0800, ip_proto=17, l4_src=53),
        ),
    ],
)
def test_parse_flow(line: str, want: FlowRule) -> None:
    assert flowtext.parse_flow(line) == want


@pytest.mark.parametrize(
    "line",
    [
        " priority=1,dl_dst=aa:bb:cc:dd:ee:ff actions=drop",  # no FlowMatch field
        " priority=1,in_port=1 actions=mod_nw_src:10.0.0.1,output:2",  # no such action
        " priority=1,mpls actions=drop",  # unknown shorthand
        " priority=x,in_port=1 actions=drop",
        " priority=1,in_port=1",
    ],
)
def test_unreadable_flows(line: str) -> None:
    with pytest.raises(flowtext.FlowTextError):
        flowtext.parse_flow(line)


def test_parse_flows_yields_cookies_and_skips_headers() -> None:
    text = "OFPST_FLOW reply (xid=0x2):\n cookie=0x11, priority=2 actions=drop\n actions=drop\n"
    assert [c for c, _ in flowtext.parse_flows(text)] == [0x11, 0]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (FlowRule(match=FlowMatch(in_port=1), priority=1, actions=(), table=1), "one table"),
        (rule(1, 0, (), in_port=1, l4_dst=80), "ip_proto 6 or 17"),
        (rule(1, 0, (), in_port=1, eth_type=0x0800, l4_dst=80), "ip_proto 6 or 17"),
        (rule(1, 0, (), ipv4_dst=Prefix.parse("10.0.0.1")), "eth_type 0x0800"),
        (rule(1, 0, (), eth_type=0x0800, ipv4_dst=Prefix(0, 0)), "/0"),
        (rule(1, 0, (Output(70000),), in_port=1), "output port 70000"),
        (rule(1, 0, (PushVlan(20), Output(1)), vlan_vid=10), "tagged"),
        (rule(1, 0, (PushVlan(5000),), in_port=1), "1..4094"),
        (rule(70000, 0, (), in_port=1), "priority"),
        (rule(1, 0, (), in_port=0xFFFE), "in_port"),
    ],
)
def test_what_openflow_10_cannot_say(bad: FlowRule, why: str) -> None:
    found = flowtext.unsupported(bad)
    assert found is not None and why in found


def test_what_openflow_10_can_say() -> None:
    retag = rule(1, 0, (PopVlan(), PushVlan(20), Output(1)), vlan_vid=10)
    assert [flowtext.unsupported(r) for r in (TCP, TRANSIT, DROP, retag)] == [None] * 4


PORTS = """OFPST_PORT_DESC reply (xid=0x2):
 1(hp-1): addr:46:c9:89:a0:f1:7b
     config:     0
     state:      0
 2(hp-2): addr:32:15:fc:29:f2:24
     config:     0
     state:      LINK_DOWN
 3(hp-3): addr:32:15:fc:29:f2:25
     config:     PORT_DOWN
     state:      0
 LOCAL(brhp): addr:4e:0a:a6:85:2e:47
     config:     PORT_DOWN
     state:      LINK_DOWN
 4(x): addr:00:00:00:00:00:04
     config: 0x0
     state: 0x1
"""


def test_parse_ports() -> None:
    assert flowtext.parse_ports(PORTS) == {
        1: PortState.UP,
        2: PortState.DOWN,
        3: PortState.DOWN,
        4: PortState.DOWN,
    }


SHOW = """OFPT_FEATURES_REPLY (xid=0x2): dpid:00000000000000a1
n_tables:254, n_buffers:0
capabilities: FLOW_STATS TABLE_STATS PORT_STATS QUEUE_STATS ARP_MATCH_IP
actions: output enqueue set_vlan_vid set_vlan_pcp strip_vlan mod_dl_src mod_dl_dst
 1(hp-1): addr:46:c9:89:a0:f1:7b
     config:     0
     state:      0
     speed: 0 Mbps now, 0 Mbps max
 2(hp-2): addr:32:15:fc:29:f2:24
     config:     0
     state:      LINK_DOWN
     speed: 0 Mbps now, 0 Mbps max
 LOCAL(brhp): addr:4e:0a:a6:85:2e:47
     config:     PORT_DOWN
     state:      LINK_DOWN
OFPT_GET_CONFIG_REPLY (xid=0x4): frag=normal miss_send_len=0
"""


def test_show_gives_the_ports_and_the_datapath_id() -> None:
    assert flowtext.parse_ports(SHOW) == {1: PortState.UP, 2: PortState.DOWN}
    assert flowtext.parse_dpid(SHOW) == 0xA1
    assert flowtext.parse_dpid("features_reply (xid=0x1): ver:0x1, dpid:1\n") == 1
    assert flowtext.parse_dpid("nothing here") is None


# recorded from the OpenFlow 1.0 reference dpctl (fabric.peers) against OVS playing an HP
# switch: port 1 up, port 2's link down, port 3 administratively down (ofctl mod-port)
DPCTL_SHOW = """features_reply (xid=0xc7daeaa0): ver:0x1, dpid:a1
n_tables:254, n_buffers:0
features: capabilities:0xc7, actions:0xfff
 1(pp-1): addr:ca:e6:40:59:82:ed, config: 0, state:0
     current:    10GB-FD COPPER
 2(pp-2): addr:22:a8:64:04:dd:89, config: 0, state:0x1
     current:    10GB-FD COPPER
 3(pp-3): addr:2a:10:a0:80:a8:56, config: 0x1, state:0x1
     current:    10GB-FD COPPER
 LOCAL(brhp): addr:b6:28:35:50:43:42, config: 0x1, state:0x1
     current:    10GB-FD COPPER
get_config_reply (xid=0x388203ae): miss_send_len=0
"""


def test_the_reference_dpctl_shows_each_port_on_one_line() -> None:
    assert flowtext.parse_ports(DPCTL_SHOW) == {
        1: PortState.UP,
        2: PortState.DOWN,
        3: PortState.DOWN,
    }
    assert flowtext.parse_dpid(DPCTL_SHOW) == 0xA1


# its dump-flows after `add-flows` of cookies 1381105921 (0x5252000000000101 folded),
# -2147483647 (0x8000000000000001 folded), 0x5252000000000202 (hexadecimal: atoi reads 0),
# 0 with no actions, and ovs-ofctl's add-flow of cookie=0x5252000000000102 beside it
DPCTL_DUMP = """stats_reply (xid=0x718fe304): flags=none type=1(flow)
  cookie=18446744071562067969, duration_sec=0s, duration_nsec=310000000s, table_id=0, \
priority=300, n_packets=0, n_bytes=0, idle_timeout=0,hard_timeout=0,ip,in_port=2,\
dl_vlan=0x0003,actions=strip_vlan,output:1
  cookie=1381105921, duration_sec=0s, duration_nsec=310000000s, table_id=0, priority=200, \
n_packets=0, n_bytes=0, idle_timeout=0,hard_timeout=0,tcp,in_port=1,nw_src=10.0.0.0/24,\
nw_dst=10.1.2.3,tp_dst=80,actions=mod_vlan_vid:10,output:2
  cookie=0, duration_sec=0s, duration_nsec=310000000s, table_id=0, priority=7, n_packets=0, \
n_bytes=0, idle_timeout=0,hard_timeout=0,udp,tp_src=53,actions=output:3
  cookie=0, duration_sec=0s, duration_nsec=310000000s, table_id=0, priority=1, n_packets=0, \
n_bytes=0, idle_timeout=0,hard_timeout=0,in_port=2,actions=
  cookie=5931803659200364802, duration_sec=0s, duration_nsec=303000000s, table_id=0, \
priority=5, n_packets=0, n_bytes=0, idle_timeout=0,hard_timeout=0,in_port=3,actions=output:1
"""


def test_the_reference_dpctls_table_reads_back_with_the_cookies_written() -> None:
    table = Dpctl(path="dpctl", timeout=1).table(DPCTL_DUMP)
    flows = [flowtext.parse_flow(line) for _, line in flowtext.parse_flows(table)]
    assert [f.cookie for f in flows] == [
        0x8000000000000001, 0x5252000000000101, 0, 0, 0x5252000000000102,
    ]  # fmt: skip
    assert flows[0] == rule(300, 0x8000000000000001, (PopVlan(), Output(1)),
                            in_port=2, vlan_vid=3, eth_type=0x0800)  # fmt: skip
    assert flows[1] == TCP and flows[3] == DROP
    assert flows[4].actions == (Output(1),) and flows[4].priority == 5


# the same table as ovs-ofctl -O OpenFlow10 prints it: the cookies the switch holds, in hex
OFCTL_DUMP = """\
 cookie=0xffffffff80000001, priority=300,ip,in_port=2,dl_vlan=3 actions=strip_vlan,output:1
 cookie=0x52520101, priority=200,tcp,in_port=1,nw_src=10.0.0.0/24,nw_dst=10.1.2.3,tp_dst=80 \
actions=mod_vlan_vid:10,output:2
 cookie=0x0, priority=7,udp,tp_src=53 actions=output:3
 priority=1,in_port=2 actions=drop
 cookie=0x5252000000000102, priority=5,in_port=3 actions=output:1
"""


def test_both_tools_read_the_folded_cookies_dpctl_wrote_alike() -> None:
    def read(table: str) -> list[FlowRule]:
        return [flowtext.parse_flow(line) for _, line in flowtext.parse_flows(table)]

    by_dpctl = read(Dpctl(path="dpctl", timeout=1).table(DPCTL_DUMP))
    by_ofctl = read(Ofctl(path="ovs-ofctl", timeout=1).table(OFCTL_DUMP))
    assert by_ofctl == by_dpctl and by_ofctl[1] == TCP


@pytest.mark.parametrize(
    ("cookie", "wire"),
    [
        (0, 0),
        (0xC2, 0xC2),
        (0x5252000000000101, 1381105921),  # the engine's cookies (services/reroute/rules.py)
        (0x5252000000000FF2, 0x52520FF2),
        (0x8000000000000001, -2147483647),  # an owner >= 0x8000: a negative int
        (0xFFFF00000000FFFE, -2),
    ],
)
def test_cookies_fold_into_what_atoi_reads_and_back(cookie: int, wire: int) -> None:
    assert cookies.fold(cookie) == wire
    printed = wire % (1 << 64)  # the switch keeps the int sign-extended; dump prints it
    assert cookies.unfold(printed) == cookie
    assert Dpctl(path="dpctl", timeout=1).cookie_text(cookie) == str(wire)


@pytest.mark.parametrize("cookie", [0x10000, 0x5252000000010001, 0xFFFF00000000FFFF, -1, 1 << 64])
def test_cookies_dpctl_cannot_carry_are_refused(cookie: int) -> None:
    assert cookies.fold(cookie) is None
    why = cookies.why_not(cookie)
    assert why is not None and "atoi" in why
    carried = FlowRule(match=FlowMatch(in_port=1), priority=1, actions=(), cookie=cookie)
    assert Dpctl(path="dpctl", timeout=1).cannot_carry(carried) == why
    if 0 <= cookie < 1 << 64:  # the 64 bits pass; only what would read back as another not
        refused = Ofctl(path="ovs-ofctl", timeout=1).cannot_carry(carried)
        assert (refused is None) is (cookies.unfold(cookie) == cookie), refused


def test_a_cookie_another_tool_wrote_with_64_bits_reads_as_written() -> None:
    assert cookies.unfold(0x5252000000000102) == 0x5252000000000102
    assert cookies.unfold((1 << 64) - (1 << 31) - 1) == (1 << 64) - (1 << 31) - 1


# --------------------------------------------------------------------------------------
# batches without bundles


def test_expected_follows_the_batch_in_order() -> None:
    a, b = hosts(2)
    moved = FlowRule(match=a.match, priority=a.priority, actions=(Output(3),), cookie=7)
    before = batch.index([a])
    changes = [*deletes([a]), *adds([b, moved])]
    assert batch.touched(changes) == [a.key, b.key]
    assert batch.expected(before, changes) == {a.key: moved, b.key: b}
    assert batch.mismatches({a.key: moved, b.key: b}, batch.index([a, b])) == [a.key]


def test_restore_walks_back_in_reverse_and_keeps_make_before_break() -> None:
    old, new1, new2, new3 = hosts(4)
    before = batch.index([old])
    keys = batch.touched([*adds([new1, new2, new3]), *deletes([old])])
    now = batch.index([old, new1, new2])  # failed at new3: old is still there
    assert batch.restore(before, now, keys) == deletes([new2, new1])
    now = batch.index([new1, new2, new3])  # failed after deleting old
    assert batch.restore(before, now, keys) == [*adds([old]), *deletes([new3, new2, new1])]
    assert batch.restore(before, before, keys) == []


# --------------------------------------------------------------------------------------
# the tools


def test_ofctl_commands() -> None:
    tool = Ofctl(path="ovs-ofctl", timeout=0.5)
    base = ("ovs-ofctl", "-O", "OpenFlow10", "-F", "OpenFlow10", "--timeout=2")
    [cmd] = tool.batch("tcp:h:6633", ["add a=1", "delete_strict b=2"])
    stdin = "add a=1\ndelete_strict b=2\n"
    assert cmd == Command(argv=(*base, "add-flows", "tcp:h:6633", "-"), stdin=stdin)
    assert tool.dump("t").argv == (*base, "--no-stats", "--no-names", "dump-flows", "t")
    assert tool.ports("t").argv == (*base, "--no-names", "show", "t")
    assert tool.waits


def test_dpctl_groups_adds_and_deletes_strictly_one_by_one() -> None:
    tool = Dpctl(path="/bin/dpctl", timeout=5)
    lines = ["add a=1", "add b=2", "delete_strict c=3", "delete_strict d=4", "add e=5"]
    got = [(c.argv[2:], c.stdin) for c in tool.batch("tcp:h:1", lines)]
    assert got == [
        (("add-flows", "tcp:h:1", "/dev/stdin"), "a=1\nb=2\n"),
        (("--strict", "del-flows", "tcp:h:1", "c=3"), None),
        (("--strict", "del-flows", "tcp:h:1", "d=4"), None),
        (("add-flows", "tcp:h:1", "/dev/stdin"), "e=5\n"),
    ]
    assert tool.ports("t").argv == ("/bin/dpctl", "--timeout=6", "show", "t")
    assert not tool.waits


def program(directory: Path, name: str, script: str) -> str:
    """An executable ``directory/name`` running the shell ``script``."""
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


OFSOFTSWITCH_DPCTL = "echo 'usage: dpctl [OPTIONS] SWITCH COMMAND [ARG...]'; echo ' flow-mod'"
OVS_OFCTL = "echo 'ovs-ofctl (Open vSwitch) 3.1.0'"


def on_path(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    monkeypatch.setenv("PATH", str(directory))


def test_auto_takes_the_reference_dpctl_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reference_dpctl: str
) -> None:
    (tmp_path / "dpctl").symlink_to(reference_dpctl)
    program(tmp_path, "ovs-ofctl", OVS_OFCTL)
    on_path(monkeypatch, tmp_path)
    assert find_tool(5.0) == Dpctl(path=str(tmp_path / "dpctl"), timeout=5.0)
    assert find_tool(5.0, kind="ovs-ofctl") == Ofctl(path=str(tmp_path / "ovs-ofctl"), timeout=5.0)


def test_auto_never_takes_a_dpctl_it_cannot_drive(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ofsoftswitch13's dpctl (OpenFlow 1.3, another syntax) is also called dpctl."""
    other = program(tmp_path, "dpctl", OFSOFTSWITCH_DPCTL)
    program(tmp_path, "ovs-ofctl", OVS_OFCTL)
    on_path(monkeypatch, tmp_path)
    assert find_tool(5.0) == Ofctl(path=str(tmp_path / "ovs-ofctl"), timeout=5.0)
    assert f"{other} is not a tool this driver speaks" in caplog.text
    with pytest.raises(ConfigError, match="usage: dpctl"):
        find_tool(5.0, kind="dpctl")
    with pytest.raises(ConfigError, match="not a tool this driver speaks"):
        find_tool(5.0, other)  # auto with a path: that program or nothing


def test_with_no_tool_it_can_drive_the_driver_is_not_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    program(tmp_path, "dpctl", OFSOFTSWITCH_DPCTL)
    on_path(monkeypatch, tmp_path)
    with pytest.raises(ConfigError) as info:
        find_tool(5.0)
    assert "no ovs-ofctl on PATH" in str(info.value) and "dpctl" in str(info.value)
    with pytest.raises(ConfigError, match="cannot be run"):
        find_tool(5.0, str(tmp_path / "nothing-here"), kind="dpctl")
    ofctl = program(tmp_path, "ovs-ofctl", OVS_OFCTL)
    with pytest.raises(ConfigError, match="not dpctl"):
        find_tool(5.0, ofctl, kind="dpctl")


CMD = Command(argv=("ovs-ofctl", "add-flows", "t", "-"))
REFUSED = "ovs-ofctl: connecting to tcp:127.0.0.1:1 (Connection refused)\n"
ALARM = "x|fatal_signal|WARN|terminating with signal 14 (Alarm clock)\n"
FULL = "OFPT_ERROR (xid=0xa): OFPFMFC_TABLE_FULL\nOFPT_FLOW_MOD (xid=0xa): ADD in_port=3\n"
BAD_PORT = "OFPT_ERROR (xid=0x2): OFPBAC_BAD_OUT_PORT\n"
VERSION = "t: version negotiation failed (we support version 0x01, peer supports 0x04)\n"


@pytest.mark.parametrize(
    ("code", "stderr", "kind", "device_code"),
    [
        (1, REFUSED, DeviceUnreachable, None),
        (-14, ALARM, DeviceTimeout, None),
        (1, FULL, DeviceRejected, "OFPFMFC_TABLE_FULL"),
        (0, BAD_PORT, DeviceRejected, "OFPBAC_BAD_OUT_PORT"),  # dpctl-like: exit 0
        (1, VERSION, ProtocolError, None),
        (1, "ovs-ofctl: unknown keyword frob\n", DeviceRejected, "BAD_REQUEST"),
    ],
)
def test_classify(code: int, stderr: str, kind: type[DriverError], device_code: str | None) -> None:
    error = classify("hp1", CMD, code, stderr)
    assert type(error) is kind and error.device == "hp1"
    if device_code is not None:
        assert isinstance(error, DeviceRejected) and error.code == device_code
    assert classify("hp1", CMD, 0, "") is None


# --------------------------------------------------------------------------------------
# against OVS playing an HP switch


@pytest.fixture(scope="session")
def reference_dpctl() -> str:
    """The OpenFlow 1.0 reference dpctl (built once, cached; skip naming what is missing)."""
    return str(need.reference_dpctl())


@pytest.fixture
def hp(ovs_site: OvsSite) -> Iterator[OvsSite]:
    ovs_site.reset("brhp")
    yield ovs_site
    ovs_site.reset("brhp")


def with_driver(
    site: OvsSite, body: Callable[[HpDpctlDriver], Awaitable[T]], **options: object
) -> T:
    async def main() -> T:
        async with HpDpctlDriver("hp1", site.hp_target, **options) as driver:  # type: ignore[arg-type]
            return await body(driver)

    return asyncio.run(main())


@fabric
def test_the_switch_speaks_only_openflow_10(hp: OvsSite) -> None:
    assert lookup("hp_dpctl") is HpDpctlDriver
    proc = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "--timeout=5", "show", hp.hp_target],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "version negotiation failed" in proc.stderr


@fabric
def test_every_command_is_in_the_wire_log(hp: OvsSite, caplog: pytest.LogCaptureFixture) -> None:
    async def body(d: HpDpctlDriver) -> list[FlowRule]:
        await d.apply(adds([TCP]))
        await d.apply(adds([DROP]))
        return await d.read()

    with caplog.at_level(logging.DEBUG, logger="reroute.wire.hp_dpctl.hp1"):
        table = with_driver(hp, body)
    assert set(table) == {TCP, DROP}
    wire = [r.getMessage() for r in caplog.records if r.name == "reroute.wire.hp_dpctl.hp1"]
    commands = [m for m in wire if m.startswith("$ ")]
    assert all("-O OpenFlow10 -F OpenFlow10" in c and hp.hp_target in c for c in commands)
    verbs = [
        next(w for w in c.split() if w.startswith(("dump-", "add-", "show"))) for c in commands
    ]
    # connect; per batch the dpid (each run is a new connection), then (first) the undo
    # point and the batch (ovs-ofctl waits for the switch: its exit is the check); the next
    # batch's undo point is the table the first left; the test's read
    assert verbs == [
        "show", "show", "dump-flows", "add-flows", "show", "add-flows", "dump-flows",
    ]  # fmt: skip
    assert f"> {flowtext.add_line(TCP)}" in wire
    assert any(m.startswith("< ") and "mod_vlan_vid:10" in m for m in wire)


def commands_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The tool runs the driver logged (its wire log's ``$`` lines)."""
    wire = [r.getMessage() for r in caplog.records if r.name == "reroute.wire.hp_dpctl.hp1"]
    return [m for m in wire if m.startswith("$ ")]


@fabric
def test_verify_after_confirmed_batches_needs_no_tool_run(
    hp: OvsSite, caplog: pytest.LogCaptureFixture
) -> None:
    """VERIFY (``missing``) after batches ovs-ofctl confirmed is answered from the table
    they left: no dump. The answer is the switch's: what the table lacks is reported, as a
    read shows."""

    async def body(d: HpDpctlDriver) -> tuple[list[FlowRule], list[FlowRule], list[FlowRule]]:
        await d.read()  # the plan's read
        await d.apply(adds([TCP, TRANSIT]))
        await d.apply(deletes([TRANSIT]))
        with caplog.at_level(logging.DEBUG, logger="reroute.wire.hp_dpctl.hp1"):
            gone = await d.missing([TCP, TRANSIT, DROP], TCP.cookie)
        return gone, await d.read(), await d.missing([TCP], TCP.cookie)

    gone, table, none = with_driver(hp, body)
    assert commands_in(caplog) == []  # answered without a tool run
    assert gone == [TRANSIT, DROP] and none == []
    assert table == [TCP]  # what the switch holds: the answer was right


@fabric
def test_verify_through_dpctl_reads_back(
    hp: OvsSite, reference_dpctl: str, caplog: pytest.LogCaptureFixture
) -> None:
    """dpctl sends no barrier: VERIFY reads the table back, and sees a change made beside
    the driver (through ovs-ofctl on the switch's own socket)."""

    async def body(d: HpDpctlDriver) -> tuple[list[FlowRule], list[FlowRule]]:
        await d.apply(adds([TCP, DROP]))
        spec = flowtext.flow_spec(flowtext.delete_line(DROP))  # beside the driver:
        hp.ovs.ofctl("-O", "OpenFlow10", "--strict", "del-flows", hp.ovs.mgmt("brhp"), spec)
        with caplog.at_level(logging.DEBUG, logger="reroute.wire.hp_dpctl.hp1"):
            return await d.missing([DROP], DROP.cookie), await d.missing([TCP], TCP.cookie)

    assert with_driver(hp, body, dpctl=reference_dpctl) == ([DROP], [])
    commands = commands_in(caplog)
    assert len(commands) == 2 and all(" dump-flows " in c for c in commands), commands


@fabric
def test_an_add_replaces_the_entry_and_a_strict_delete_only_its_own(hp: OvsSite) -> None:
    first = TCP
    replaced = FlowRule(match=first.match, priority=200, actions=(Output(1),), cookie=0x99)
    other_priority = FlowRule(match=first.match, priority=150, actions=(Output(2),))

    async def body(d: HpDpctlDriver) -> tuple[list[FlowRule], list[FlowRule]]:
        await d.apply(adds([first, other_priority]))
        await d.apply(adds([replaced]))
        table = await d.read()
        await d.apply(deletes([first]))
        return table, await d.read()

    replaced_table, after_delete = with_driver(hp, body)
    assert set(replaced_table) == {replaced, other_priority}
    assert after_delete == [other_priority]


@fabric
def test_a_change_openflow_10_cannot_say_is_refused_before_anything_is_sent(hp: OvsSite) -> None:
    no_proto = rule(5, 0, (Output(2),), in_port=1, eth_type=0x0800, l4_dst=80)

    async def body(d: HpDpctlDriver) -> tuple[DeviceRejected, list[FlowRule]]:
        with pytest.raises(DeviceRejected) as info:
            await d.apply(adds([*hosts(2), no_proto]))
        return info.value, await d.read()

    error, table = with_driver(hp, body)
    assert error.code == "UNSUPPORTED" and "#2" in str(error)
    assert table == []


@fabric
def test_through_dpctl_a_batch_is_applied_and_read_back(hp: OvsSite, reference_dpctl: str) -> None:
    async def body(d: HpDpctlDriver) -> tuple[list[FlowRule], dict[int, PortState]]:
        await d.apply(adds([TCP, TRANSIT, DROP]))
        await d.apply(deletes([TRANSIT]))
        return await d.read(), await d.port_states()

    table, ports = with_driver(hp, body, dpctl=reference_dpctl)
    assert set(table) == {TCP, DROP}
    assert ports == {1: PortState.UP, 2: PortState.UP}


@fabric
def test_through_dpctl_a_refused_change_is_found_by_reading_back_and_undone(
    hp: OvsSite, reference_dpctl: str
) -> None:
    async def body(d: HpDpctlDriver) -> tuple[DeviceRejected, list[FlowRule]]:
        await d.apply(adds([TCP]))
        hp.cap_table("brhp", 2)
        with pytest.raises(DeviceRejected) as info:
            await d.apply(adds(hosts(3)))  # the second add does not fit; dpctl exits 0
        return info.value, await d.read()

    error, table = with_driver(hp, body, dpctl=reference_dpctl, timeout=0.5)
    assert error.code == "NOT_APPLIED" and "change #1" in str(error)
    assert table == [TCP]


@fabric
def test_through_dpctl_the_engines_cookies_pass_folded(hp: OvsSite, reference_dpctl: str) -> None:
    """The switch holds the folded cookie (what dpctl's atoi made of it); the driver reads
    back the cookie it was given, and filters by it."""
    foreign = rule(5, 0x5252000000000102, (Output(1),), in_port=2)
    spec = flowtext.flow_spec(flowtext.add_line(foreign))  # beside the driver, 64 bits:
    hp.ovs.ofctl("-O", "OpenFlow10", "add-flow", hp.ovs.mgmt("brhp"), spec)

    async def body(d: HpDpctlDriver) -> tuple[list[FlowRule], list[FlowRule]]:
        await d.apply(adds([TCP, DROP]))
        return await d.read(), await d.read(cookie=0x5252 << 48, cookie_mask=0xFFFF << 48)

    table, ours = with_driver(hp, body, dpctl=reference_dpctl)
    assert set(table) == {TCP, DROP, foreign}
    assert set(ours) == {TCP, foreign}
    held = hp.ofctl("brhp", "dump-flows")
    assert "cookie=0x52520101," in held and "cookie=0x5252000000000102," in held


@fabric
def test_through_dpctl_a_cookie_it_cannot_carry_is_refused_before_anything_is_sent(
    hp: OvsSite, reference_dpctl: str
) -> None:
    wide = rule(9, 0x5252000000010001, (Output(2),), in_port=1)

    async def body(d: HpDpctlDriver) -> tuple[DeviceRejected, list[FlowRule]]:
        with pytest.raises(DeviceRejected) as info:
            await d.apply(adds([TCP, wide]))
        return info.value, await d.read()

    error, table = with_driver(hp, body, dpctl=reference_dpctl)
    assert error.code == "UNSUPPORTED" and "change #1" in str(error) and "atoi" in str(error)
    assert table == []


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokenBatches:
    """ovs-ofctl, except that batches after the first ``good`` ones run ``argv`` instead."""

    inner: Ofctl
    argv: tuple[str, ...]
    good: int
    calls: list[int]

    @property
    def waits(self) -> bool:
        return True

    def batch(self, target: str, lines: Sequence[str]) -> list[Command]:
        self.calls.append(len(lines))
        if len(self.calls) <= self.good:
            return self.inner.batch(target, lines)
        return [Command(argv=self.argv)]

    def dump(self, target: str) -> Command:
        return self.inner.dump(target)

    def ports(self, target: str) -> Command:
        return self.inner.ports(target)

    def cookie_text(self, cookie: int) -> str:
        return self.inner.cookie_text(cookie)

    def table(self, text: str) -> str:
        return self.inner.table(text)

    def cannot_carry(self, rule: FlowRule) -> str | None:
        return self.inner.cannot_carry(rule)


def broken(driver: HpDpctlDriver, argv: Sequence[str], good: int) -> BrokenBatches:
    assert isinstance(driver.tool, Ofctl)
    tool = BrokenBatches(inner=driver.tool, argv=tuple(argv), good=good, calls=[])
    driver.tool = tool
    return tool


@fabric
def test_a_failed_undo_says_the_table_state_is_unknown(hp: OvsSite) -> None:
    refused = ["sh", "-c", "echo 'ovs-ofctl: connecting to x (Connection refused)' >&2; exit 1"]

    async def body(d: HpDpctlDriver) -> tuple[DriverError, list[int]]:
        tool = broken(d, refused, good=2)
        await d.apply(adds([TCP]))
        hp.cap_table("brhp", 2)
        with pytest.raises(DriverError) as info:
            await d.apply(adds(hosts(2)))  # the second does not fit; the undo is refused
        return info.value, tool.calls

    error, calls = with_driver(hp, body)
    assert type(error) is DriverError
    assert "unknown state" in str(error) and "OFPFMFC_TABLE_FULL" in str(error)
    assert isinstance(error.__cause__, DeviceUnreachable)
    assert calls == [1, 2, 1]  # the batch, the refused batch, the undo


@fabric
def test_a_tool_that_hangs_is_killed_and_its_batch_undone(hp: OvsSite) -> None:
    marker = "7.3183"  # a sleep this long is ours

    async def body(d: HpDpctlDriver) -> tuple[DeviceTimeout, list[FlowRule]]:
        await d.apply(adds([TCP]))
        broken(d, ["sleep", marker], good=0)
        with pytest.raises(DeviceTimeout) as info:
            await d.apply([*deletes([TCP]), *adds(hosts(1))])
        return info.value, await d.read()

    error, table = with_driver(hp, body, timeout=0.3)
    assert "within 0.3 s" in str(error)
    assert table == [TCP]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"sleep {marker}" not in ps


# --------------------------------------------------------------------------------------
# what a real HP answers: no port-description stats on OpenFlow 1.0


def behind_hp_relay(site: OvsSite, body: Callable[[HpDpctlDriver, Relay], Awaitable[T]]) -> T:
    """The driver reaches the HP bridge through a relay that answers OpenFlow 1.0 port
    description requests (stats type 13, an OVS extension) with BAD_STAT, as an HP does."""

    async def main() -> T:
        relay = Relay(upstream=site.hp_target, refuse=refuse_of10_port_desc)
        target = await relay.start()
        try:
            async with HpDpctlDriver("hp1", target) as driver:
                return await body(driver, relay)
        finally:
            await relay.stop()

    return asyncio.run(main())


@fabric
def test_a_switch_refusing_port_description_stats_opens_and_reports_ports(hp: OvsSite) -> None:
    async def body(d: HpDpctlDriver, relay: Relay) -> tuple[dict[int, PortState], int]:
        hp.set_link("brhp", 2, up=False)
        await d.apply(adds([TCP]))
        return await d.port_states(), relay.refused

    (ports, refused) = behind_hp_relay(hp, body)
    assert ports[1] is PortState.UP and ports[2] is PortState.DOWN
    assert refused == 0  # the driver never asked for what a real HP refuses


@fabric
def test_the_relay_answers_port_description_with_bad_stat(hp: OvsSite) -> None:
    async def main() -> subprocess.CompletedProcess[str]:
        relay = Relay(upstream=hp.hp_target, refuse=refuse_of10_port_desc)
        target = await relay.start()
        try:
            proc = await asyncio.create_subprocess_exec(
                "ovs-ofctl", "-O", "OpenFlow10", "--timeout=5", "dump-ports-desc", target,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            out, err = await proc.communicate()
            return subprocess.CompletedProcess([], proc.returncode or 0, out.decode(), err.decode())
        finally:
            await relay.stop()

    proc = asyncio.run(main())
    # ovs-ofctl prints the error on stdout and exits 0 here: the old dump-ports-desc read
    # would have seen a switch without ports
    assert "OFPT_ERROR" in proc.stdout and "OFPBRC_BAD_STAT" in proc.stdout, proc


@fabric
def test_a_switch_with_another_dpid_is_refused_before_any_change(hp: OvsSite) -> None:
    async def body(d: HpDpctlDriver) -> int | None:
        return d.datapath_id

    dpid = with_driver(hp, body)
    assert dpid is not None

    async def main() -> DeviceRejected:
        driver = HpDpctlDriver("hp1", hp.hp_target, dpid=dpid + 1)
        with pytest.raises(DeviceRejected) as info:
            await driver.open()
        return info.value

    error = asyncio.run(main())
    assert error.code == "DPID_MISMATCH" and f"{dpid:016x}" in str(error)
    assert hp.ofctl("brhp", "dump-flows").strip().splitlines()[1:] == []


def _beside(site: OvsSite, entry: FlowRule) -> None:
    """Add ``entry`` beside the driver (ovs-ofctl on the switch's own socket, 64 bits)."""
    spec = flowtext.flow_spec(flowtext.add_line(entry))
    site.ovs.ofctl("-O", "OpenFlow10", "add-flow", site.ovs.mgmt("brhp"), spec)


@fabric
def test_a_table_dpctl_wrote_reads_the_same_through_ovs_ofctl(
    hp: OvsSite, reference_dpctl: str
) -> None:
    """The switch holds dpctl's folded cookies; a driver whose tool is ovs-ofctl (the
    inventory changed, dpctl gone from PATH) reads the rules as ours, as dpctl's does."""
    other = rule(5, 0x2B00000000000001, (Output(1),), in_port=2)  # another writer's
    _beside(hp, other)

    async def written(d: HpDpctlDriver) -> None:
        await d.apply(adds([TCP, TRANSIT]))

    async def reads(d: HpDpctlDriver) -> tuple[set[FlowRule], set[FlowRule], int]:
        survey = await d.survey(0x5252 << 48, 0xFFFF << 48)
        return set(await d.read()), set(survey.ours), len(survey.foreign)

    with_driver(hp, written, dpctl=reference_dpctl)
    assert "cookie=0x52520101," in hp.ofctl("brhp", "dump-flows")  # folded on the switch
    by_dpctl = with_driver(hp, reads, dpctl=reference_dpctl)
    by_ofctl = with_driver(hp, reads)
    assert by_ofctl == by_dpctl == ({TCP, TRANSIT, other}, {TCP}, 2)


@fabric
def test_every_survey_refreshes_the_undo_point(hp: OvsSite) -> None:
    """The table changed beside the driver after its last batch; the plan's survey saw the
    change: a failed batch is undone to what the survey saw, not to the older table."""
    changed = FlowRule(
        match=TCP.match, priority=TCP.priority, actions=(Output(1),), cookie=TCP.cookie
    )
    again = FlowRule(
        match=TCP.match, priority=TCP.priority, actions=(Output(2),), cookie=TCP.cookie
    )

    async def body(d: HpDpctlDriver) -> tuple[DriverError, list[FlowRule]]:
        await d.apply(adds([TCP]))
        _beside(hp, changed)
        await d.survey(0x5252 << 48, 0xFFFF << 48)
        hp.cap_table("brhp", 2)
        with pytest.raises(DriverError) as info:
            await d.apply(adds([again, *hosts(2)]))  # the second host does not fit
        return info.value, await d.read()

    error, table = with_driver(hp, body)
    assert isinstance(error, DeviceRejected) and error.code != "DPID_MISMATCH", error
    assert table == [changed]


@fabric
def test_the_dpid_is_checked_again_before_every_write_and_survey(hp: OvsSite) -> None:
    """Each tool run is a new connection: another switch behind the same address (here:
    the same bridge given another datapath id) is refused before anything changes."""

    async def body(d: HpDpctlDriver) -> tuple[DeviceRejected, DeviceRejected, list[FlowRule]]:
        await d.apply(adds([TCP]))
        hp.ovs.vsctl("set", "bridge", "brhp", "other-config:datapath-id=00000000000000aa")
        try:
            with pytest.raises(DeviceRejected) as write:
                await d.apply(adds([TRANSIT]))
            with pytest.raises(DeviceRejected) as survey:
                await d.survey(0x5252 << 48, 0xFFFF << 48)
        finally:
            hp.ovs.vsctl("remove", "bridge", "brhp", "other-config", "datapath-id")
        return write.value, survey.value, await d.read()

    write, survey, table = with_driver(hp, body)
    assert write.code == survey.code == "DPID_MISMATCH" and "00000000000000aa" in str(write)
    assert table == [TCP]
