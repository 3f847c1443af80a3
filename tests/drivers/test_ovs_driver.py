"""OvsDriver against a real ovs-vswitchd (userspace datapath) in a private network namespace.

The switch tests share one OVS (module fixture) and start from an empty flow table. The
codec and connection-failure tests need no switch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pytest

from drivers.base import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    FlowChange,
    FlowMatch,
    FlowOp,
    FlowProgrammer,
    FlowRule,
    FlowVerifier,
    Output,
    PopVlan,
    PortEvents,
    PortMonitor,
    PortState,
    Prefix,
    PushVlan,
    lookup,
)
from drivers.ovs import OvsDriver, ofp13
from drivers.ovs.channel import Channel
from drivers.ovs.driver import _CHUNK
from drivers.ovs.ofp13_flow import (
    FlowModCommand,
    decode_flow_mod,
    encode_flow_mod,
    encode_flow_stats_request,
    entry_key,
    flow_entry_keys,
)
from fabric import netns
from fabric.run import run
from fabric.vswitch import OvsInstance
from protocols.openflow13.errors import ONF_EXPERIMENTER, error_name

NS = "rr-test-ovsdrv"
BRIDGE = "br0"
VETHS = (("v1", "v2"), ("v3", "v4"))  # OpenFlow ports 1, 2 and 3, 4
T = TypeVar("T")


def net(text: str) -> Prefix:
    return Prefix.parse(text)


def adds(rules: Sequence[FlowRule]) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.ADD, rule=r) for r in rules]


def deletes(rules: Sequence[FlowRule]) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.DELETE, rule=r) for r in rules]


RULES = [
    FlowRule(
        match=FlowMatch(
            in_port=1, eth_type=0x0800, ipv4_src=net("10.0.0.0/24"),
            ipv4_dst=net("10.1.2.3/32"), ip_proto=6, l4_dst=80,
        ),
        priority=200, actions=(PushVlan(10), Output(2)), cookie=0x11,
    ),
    FlowRule(
        match=FlowMatch(vlan_vid=10, eth_type=0x0800, ip_proto=17, l4_src=53),
        priority=100, actions=(PopVlan(), Output(3)), cookie=0x12, table=1,
    ),
    FlowRule(match=FlowMatch(in_port=4), priority=1, actions=(), cookie=0x13),
]  # fmt: skip

OFCTL_DUMP = {  # RULES as `ovs-ofctl -O OpenFlow13 dump-flows` prints them (counters removed)
    "cookie=0x11, table=0, priority=200,tcp,in_port=1,nw_src=10.0.0.0/24,nw_dst=10.1.2.3,"
    "tp_dst=80 actions=push_vlan:0x8100,set_field:4106->vlan_vid,output:2",
    "cookie=0x12, table=1, priority=100,udp,dl_vlan=10,tp_src=53 actions=pop_vlan,output:3",
    "cookie=0x13, table=0, priority=1,in_port=4 actions=drop",
}


def host_rules(count: int, cookie: int = 0xBE) -> list[FlowRule]:
    return [
        FlowRule(
            match=FlowMatch(
                in_port=1, eth_type=0x0800, ipv4_dst=net(f"10.{i >> 8}.{i & 255}.1/32")
            ),
            priority=100,
            actions=(Output(2),),
            cookie=cookie,
        )
        for i in range(count)
    ]


# --------------------------------------------------------------------------------------
# a private Open vSwitch


@dataclass(frozen=True, slots=True)
class Switch:
    ovs: OvsInstance
    target: str

    def ofctl(self, *args: str) -> str:
        return self.ovs.ofctl("-O", "OpenFlow13", *args, self.target)

    def with_driver(self, body: Callable[[OvsDriver], Awaitable[T]], timeout: float = 5.0) -> T:
        async def main() -> T:
            async with OvsDriver(BRIDGE, self.target, timeout=timeout) as driver:
                return await body(driver)

        return asyncio.run(main())


@pytest.fixture(scope="module")
def switch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Switch]:
    if os.geteuid() != 0 or shutil.which("ovs-vswitchd") is None:
        pytest.fail("OVS driver tests need root and Open vSwitch; deselect with -m 'not fabric'")
    netns.delete(NS)  # a leftover of a crashed run
    ovs = OvsInstance(rundir=tmp_path_factory.mktemp("ovs"), netns=NS)
    try:
        netns.add(NS)
        ovs.start()
        _make_ports(ovs)
        yield Switch(ovs=ovs, target=ovs.mgmt(BRIDGE))
    finally:
        ovs.stop()
        netns.delete(NS)


def _make_ports(ovs: OvsInstance) -> None:
    batch = [f"link add {a} type veth peer name {b}" for a, b in VETHS]
    batch += [f"link set {v} up" for pair in VETHS for v in pair]
    run(["ip", "-batch", "-"], ns=NS, stdin="\n".join(batch) + "\n")
    args = ["--", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev"]
    args += ["fail_mode=secure", "protocols=OpenFlow13"]
    for number, veth in enumerate((v for pair in VETHS for v in pair), start=1):
        args += ["--", "add-port", BRIDGE, veth]
        args += ["--", "set", "interface", veth, f"ofport_request={number}"]
    ovs.vsctl(*args)


@pytest.fixture
def sw(switch: Switch) -> Switch:
    """The shared switch with an empty flow table."""
    switch.ofctl("del-flows")
    return switch


# --------------------------------------------------------------------------------------
# against the switch

fabric = pytest.mark.fabric


@fabric
def test_the_kind_is_registered_and_implements_the_contract(sw: Switch) -> None:
    assert lookup("ovs") is OvsDriver
    driver = OvsDriver(BRIDGE, sw.target)
    assert isinstance(driver, FlowProgrammer) and isinstance(driver, PortMonitor)
    assert driver.capabilities.atomic_batch and driver.capabilities.port_state


@fabric
def test_apply_then_read_back_gives_the_rules_applied(
    sw: Switch, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(d: OvsDriver) -> list[FlowRule]:
        await d.apply(adds(RULES))
        return await d.read()

    with caplog.at_level(logging.DEBUG, logger=f"reroute.wire.{BRIDGE}"):
        table = sw.with_driver(body)

    assert sorted(table, key=str) == sorted(RULES, key=str)
    dumped = {
        re.sub(r" duration=[^,]*,| n_packets=\d+,| n_bytes=\d+,", "", line).strip()
        for line in sw.ofctl("dump-flows").splitlines()[1:]
    }
    assert dumped == OFCTL_DUMP
    sent = [r.getMessage() for r in caplog.records if r.name == f"reroute.wire.{BRIDGE}"]
    assert sum("send ONFT_BUNDLE_ADD_MESSAGE" in m for m in sent) == len(RULES)


@fabric
def test_read_filters_by_cookie(sw: Switch) -> None:
    async def body(d: OvsDriver) -> tuple[list[FlowRule], list[FlowRule]]:
        await d.apply(adds(RULES))
        return await d.read(cookie=0x12), await d.read(cookie=0x10, cookie_mask=0xF0)

    exact, masked = sw.with_driver(body)
    assert exact == [RULES[1]]
    assert sorted(masked, key=str) == sorted(RULES, key=str)


@fabric
def test_reapplying_a_batch_leaves_the_same_table(sw: Switch) -> None:
    async def body(d: OvsDriver) -> tuple[list[FlowRule], list[FlowRule]]:
        await d.apply(adds(RULES))
        first = await d.read()
        await d.apply(adds(RULES))
        return first, await d.read()

    first, second = sw.with_driver(body)
    assert len(second) == len(RULES)
    assert set(second) == set(first) == set(RULES)


@fabric
def test_delete_strict_removes_exactly_that_entry(sw: Switch) -> None:
    base = RULES[0]
    same_match = FlowRule(match=base.match, priority=150, actions=(Output(3),), cookie=0x11)
    wider = FlowRule(
        match=FlowMatch(in_port=1, eth_type=0x0800), priority=200, actions=(Output(4),)
    )

    async def body(d: OvsDriver) -> list[FlowRule]:
        await d.apply(adds([base, same_match, wider]))
        await d.apply(deletes([base]))
        return await d.read()

    assert set(sw.with_driver(body)) == {same_match, wider}


@fabric
def test_a_batch_is_applied_in_order(sw: Switch) -> None:
    first, second = host_rules(2)

    async def body(d: OvsDriver) -> list[FlowRule]:
        await d.apply([*adds([first]), *deletes([first]), *deletes([second]), *adds([second])])
        return await d.read()

    assert sw.with_driver(body) == [second]


UNSATISFIED_PREREQ = FlowRule(
    match=FlowMatch(in_port=1, l4_dst=80), priority=5, actions=(Output(2),)
)  # tcp_dst without eth_type/ip_proto
BAD_OUTPUT = FlowRule(match=FlowMatch(in_port=2), priority=5, actions=(Output(70000),))


@fabric
@pytest.mark.parametrize(
    ("bad", "code"),
    [(UNSATISFIED_PREREQ, "OFPBMC_BAD_PREREQ"), (BAD_OUTPUT, "OFPBAC_BAD_OUT_PORT")],
)
def test_a_rejected_change_leaves_the_table_unchanged(sw: Switch, bad: FlowRule, code: str) -> None:
    before = RULES[:2]
    batch = [*adds(host_rules(3)), FlowChange(op=FlowOp.ADD, rule=bad), *deletes(before)]

    async def body(d: OvsDriver) -> tuple[DeviceRejected, list[FlowRule]]:
        await d.apply(adds(before))
        with pytest.raises(DeviceRejected) as info:
            await d.apply(batch)
        return info.value, await d.read()

    error, table = sw.with_driver(body)
    assert error.code == code
    assert "#3" in str(error) and str(bad) in str(error)
    assert error.__cause__ is not None
    assert set(table) == set(before)


@fabric
def test_an_unencodable_change_is_refused_and_nothing_is_applied(sw: Switch) -> None:
    bad_vid = FlowRule(match=FlowMatch(in_port=1), priority=5, actions=(PushVlan(5000),))

    async def body(d: OvsDriver) -> tuple[DeviceRejected, list[FlowRule]]:
        with pytest.raises(DeviceRejected) as info:
            await d.apply(adds([*host_rules(2), bad_vid]))
        return info.value, await d.read()

    error, table = sw.with_driver(body)
    assert "#2" in str(error) and isinstance(error.__cause__, ofp13.CodecError)
    assert table == []


@fabric
def test_a_batch_of_several_chunks_is_applied_or_refused_whole(sw: Switch) -> None:
    """The adds are written a chunk at a time: all of them land, and an unencodable change
    in a later chunk (earlier chunks already written) leaves the table as it was."""
    many = host_rules(2 * _CHUNK + 3)
    bad_vid = FlowRule(match=FlowMatch(in_port=2), priority=5, actions=(PushVlan(5000),))
    before = RULES[:2]

    async def body(d: OvsDriver) -> tuple[DeviceRejected, list[FlowRule], list[FlowRule]]:
        await d.apply(adds(before))
        with pytest.raises(DeviceRejected) as info:
            await d.apply([*deletes(before), *adds(many), *adds([bad_vid])])
        after_refusal = await d.read()
        await d.apply(adds(many))
        return info.value, after_refusal, await d.read()

    error, refused, applied = sw.with_driver(body, timeout=30.0)
    assert f"#{len(many) + 2}" in str(error) and isinstance(error.__cause__, ofp13.CodecError)
    assert set(refused) == set(before)
    assert set(applied) == {*before, *many} and len(applied) == len(many) + 2


@fabric
def test_a_change_failing_at_commit_reverts_the_whole_batch(sw: Switch) -> None:
    sw.ovs.vsctl(
        "--", "--id=@ft", "create", "Flow_Table", "flow_limit=2", "overflow_policy=refuse",
        "--", "set", "Bridge", BRIDGE, "flow_tables:1=@ft",
    )  # fmt: skip
    in_table_1 = [
        FlowRule(match=FlowMatch(in_port=p), priority=1, actions=(Output(1),), table=1)
        for p in (1, 2, 3)
    ]

    async def body(d: OvsDriver) -> tuple[DeviceRejected, list[FlowRule]]:
        await d.apply(adds(RULES[2:]))
        with pytest.raises(DeviceRejected) as info:
            await d.apply([*deletes(RULES[2:]), *adds(in_table_1)])
        return info.value, await d.read()

    try:
        error, table = sw.with_driver(body)
    finally:
        sw.ovs.vsctl("clear", "Bridge", BRIDGE, "flow_tables")
    assert error.code == "OFPFMFC_TABLE_FULL"
    assert str(in_table_1[2]) in str(error)
    assert table == RULES[2:]


@fabric
def test_ten_thousand_flows_in_one_batch(sw: Switch) -> None:
    rules = host_rules(10_000)

    async def body(d: OvsDriver) -> list[FlowRule]:
        await d.apply(adds(rules))
        return await d.read(cookie=0xBE)

    table = sw.with_driver(body, timeout=20.0)
    assert len(table) == len(rules)
    assert set(table) == set(rules)


@fabric
def test_port_state_follows_the_link(sw: Switch) -> None:
    async def until(d: OvsDriver, port: int, state: PortState) -> dict[int, PortState]:
        deadline = time.monotonic() + 5.0
        while (states := await d.port_states())[port] != state:
            assert time.monotonic() < deadline, f"port {port} still not {state}: {states}"
            await asyncio.sleep(0.02)
        return states

    async def body(d: OvsDriver) -> tuple[dict[int, PortState], ...]:
        initial = await until(d, 1, PortState.UP)
        run(["ip", "link", "set", "v2", "down"], ns=NS)
        down = await until(d, 1, PortState.DOWN)
        run(["ip", "link", "set", "v2", "up"], ns=NS)
        return initial, down, await until(d, 1, PortState.UP)

    initial, down, up = sw.with_driver(body)
    assert initial == {1: PortState.UP, 2: PortState.UP, 3: PortState.UP, 4: PortState.UP}
    assert down[1] == down[2] == PortState.DOWN and down[3] == PortState.UP
    assert up == initial


@fabric
def test_port_status_events_report_the_link_going_down_and_up(sw: Switch) -> None:
    """PortEvents: OVS sends PORT_STATUS to our management connection once asked (it sends
    a passive-listener connection none by default): a lock gate awaits them."""

    async def body(d: OvsDriver) -> tuple[int, list[tuple[int, PortState]]]:
        seen: list[tuple[int, PortState]] = []
        changed = asyncio.Event()

        def listener(port: int, state: PortState) -> None:
            seen.append((port, state))
            changed.set()

        async def until(port: int, state: PortState) -> None:
            start = len(seen)
            async with asyncio.timeout(5.0):
                while (port, state) not in seen[start:]:
                    changed.clear()
                    await changed.wait()

        async with d.port_events(listener):
            run(["ip", "link", "set", "v2", "down"], ns=NS)
            await until(1, PortState.DOWN)
            run(["ip", "link", "set", "v2", "up"], ns=NS)
            await until(1, PortState.UP)
            await asyncio.sleep(0.1)  # port 2's events too
        inside = len(seen)
        run(["ip", "link", "set", "v2", "down"], ns=NS)  # after leaving: not reported
        await asyncio.sleep(0.2)
        run(["ip", "link", "set", "v2", "up"], ns=NS)
        return inside, seen

    try:
        inside, seen = sw.with_driver(body)
    finally:
        run(["ip", "link", "set", "v2", "up"], ns=NS)
    assert isinstance(OvsDriver(BRIDGE, sw.target), PortEvents)
    downs = [i for i, e in enumerate(seen) if e == (1, PortState.DOWN)]
    ups = [i for i, e in enumerate(seen) if e == (1, PortState.UP)]
    assert downs and ups and downs[-1] < ups[-1]
    assert len(seen) == inside  # nothing after the listener left
    assert {p for p, _ in seen} <= {1, 2}  # the veth's two ends, nothing else


@fabric
def test_missing_compares_encoded_entries_and_finds_what_is_not_there(sw: Switch) -> None:
    """FlowVerifier: the rules read back match their encoding byte for byte (the fast
    path: nothing decoded), and a rule not in the table is reported missing."""
    rules = [*RULES, *host_rules(1000, cookie=0x11)]
    absent = FlowRule(match=FlowMatch(in_port=3), priority=7, actions=(Output(1),), cookie=0x11)

    async def body(d: OvsDriver) -> tuple[set[bytes], list[FlowRule], list[FlowRule]]:
        await d.apply(adds(rules))
        chan = await d._channel()
        parts = await chan.multipart(encode_flow_stats_request(chan.xids(1), 0, 0))
        keys = {k for part in parts for k in flow_entry_keys(part.body)}
        ours = [r for r in rules if r.cookie == 0x11]
        return keys, await d.missing(rules, 0, 0), await d.missing([absent, *ours], 0x11)

    keys, none, gone = sw.with_driver(body)
    assert {entry_key(r) for r in rules} == keys  # as sent = as read back, no decoding
    assert none == [] and gone == [absent]
    assert isinstance(OvsDriver(BRIDGE, sw.target), FlowVerifier)


# --------------------------------------------------------------------------------------
# connection failures (no switch needed)


async def _silent_server(answer_handshake: bool) -> asyncio.Server:
    """Accepts and never answers (or answers only HELLO and FEATURES_REQUEST)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while answer_handshake:
                head = await reader.readexactly(8)
                _, msg_type, length, xid = ofp13.HEADER.unpack(head)
                await reader.readexactly(length - 8)
                if msg_type == ofp13.MsgType.HELLO:
                    writer.write(ofp13.encode_hello(xid))
                elif msg_type == ofp13.MsgType.FEATURES_REQUEST:
                    body = bytes(24)
                    writer.write(ofp13.header(ofp13.MsgType.FEATURES_REPLY, 32, xid) + body)
            await reader.read()  # until the driver hangs up
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize("answer_handshake", [False, True], ids=["at-hello", "at-apply"])
def test_a_switch_that_does_not_answer_times_out(answer_handshake: bool) -> None:
    async def main() -> None:
        server = await _silent_server(answer_handshake)
        port = server.sockets[0].getsockname()[1]
        async with server:
            driver = OvsDriver("mute", f"tcp:127.0.0.1:{port}", timeout=0.3)
            with pytest.raises(DeviceTimeout) as info:
                async with driver:
                    await driver.apply(adds(RULES))
            await driver.close()
        assert info.value.device == "mute"
        assert isinstance(info.value.__cause__, TimeoutError)

    asyncio.run(main())


def test_echo_requests_are_answered() -> None:
    async def main() -> tuple[int, bytes]:
        replies: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(ofp13.encode_hello(1) + ofp13.encode_echo_request(0x77, b"ping"))
            while True:
                _, msg_type, length, xid = ofp13.HEADER.unpack(await reader.readexactly(8))
                body = await reader.readexactly(length - 8)
                if msg_type == ofp13.MsgType.ECHO_REPLY:
                    await replies.put((xid, body))
                    break
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        async with server:
            port = server.sockets[0].getsockname()[1]
            chan = await Channel.open("echo", f"tcp:127.0.0.1:{port}", timeout=1.0)
            try:
                return await asyncio.wait_for(replies.get(), 1.0)
            finally:
                await chan.close()

    assert asyncio.run(main()) == (0x77, b"ping")


def test_nothing_listening_is_unreachable() -> None:
    async def main() -> None:
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        with pytest.raises(DeviceUnreachable) as info:
            async with OvsDriver("gone", f"tcp:127.0.0.1:{port}", timeout=1.0):
                pass
        assert info.value.device == "gone"
        assert isinstance(info.value.__cause__, OSError)

    asyncio.run(main())


# --------------------------------------------------------------------------------------
# codec (no switch needed)


@pytest.mark.parametrize("rule", [*RULES, *host_rules(1)], ids=str)
def test_flow_mod_decodes_to_the_rule_encoded(rule: FlowRule) -> None:
    decoded = decode_flow_mod(encode_flow_mod(rule, 7))
    assert decoded.rule == rule and decoded.xid == 7
    assert decoded.command == FlowModCommand.ADD


def test_flow_mod_bytes() -> None:
    rule = FlowRule(match=FlowMatch(in_port=1), priority=0x10, actions=(Output(2),), cookie=5)
    wire = encode_flow_mod(rule, 0x42, FlowModCommand.ADD).hex()
    assert wire == (
        "040e0058" "00000042"  # header: version 4, FLOW_MOD, length 88, xid
        "0000000000000005" "0000000000000000"  # cookie, cookie_mask
        "00" "00" "0000" "0000" "0010"  # table, ADD, idle/hard timeouts, priority
        "ffffffff" "ffffffff" "ffffffff" "0000" "0000"  # buffer, out_port/group, flags
        "0001000c" "80000004" "00000001" "00000000"  # OXM match: in_port=1, padded
        "00040018" "00000000"  # APPLY_ACTIONS, 24 bytes
        "00000010" "00000002" "0000" "000000000000"  # OUTPUT port 2, max_len 0
    )  # fmt: skip


def test_delete_strict_carries_no_instructions() -> None:
    msg = encode_flow_mod(RULES[0], 9, FlowModCommand.DELETE_STRICT)
    decoded = decode_flow_mod(msg)
    assert decoded.command == FlowModCommand.DELETE_STRICT
    assert decoded.rule.match == RULES[0].match and decoded.rule.actions == ()


def test_bundle_add_wraps_a_message_with_its_xid() -> None:
    inner = encode_flow_mod(RULES[2], 0x1234)
    outer = ofp13.encode_bundle_add(7, ofp13.OFPBF_ATOMIC | ofp13.OFPBF_ORDERED, inner)
    version, msg_type, length, xid = ofp13.HEADER.unpack_from(outer)
    assert (version, msg_type, length, xid) == (4, 4, 24 + len(inner), 0x1234)
    assert outer[8:24].hex() == "4f4e4600" "000008fd" "00000007" "0000" "0003"  # fmt: skip
    assert outer[24:] == inner


def test_error_names() -> None:
    assert error_name(4, 9) == "OFPET_BAD_MATCH/OFPBMC_BAD_PREREQ"
    assert error_name(0xFFFF, 2313, ONF_EXPERIMENTER) == "ONF/OFPBFC_MSG_FAILED"
    assert error_name(42, 7) == "OFPET_42/7"


@fabric
def test_a_later_master_fences_the_earlier_one(sw: Switch) -> None:
    """OpenFlow 1.3 roles on the real OVS: a master claimed with a higher generation id
    demotes the earlier one, whose flow-mods the switch then refuses; re-claiming with its
    older id is refused as stale. (How replicas fence a device: services/reroute/store/etcd.)"""

    async def main() -> tuple[str, str, list[FlowRule]]:
        async with (
            OvsDriver(BRIDGE, sw.target) as old,
            OvsDriver(BRIDGE, sw.target) as new,
        ):
            await old.claim_master(5)
            await old.apply(adds(RULES[:1]))
            await new.claim_master(6)
            with pytest.raises(DeviceRejected) as refused:
                await old.apply(deletes(RULES[:1]))
            with pytest.raises(DeviceRejected) as stale:
                await old.claim_master(5)
            await new.claim_master(6)  # the same generation again: still master
            await new.apply(deletes(RULES[:1]))
            return str(refused.value), str(stale.value), await new.read()

    refused, stale, left = asyncio.run(main())
    assert "IS_SLAVE" in refused, refused
    assert "STALE" in stale, stale
    assert left == []


@fabric
def test_a_superseded_connection_reconnects_as_a_slave_that_reads(sw: Switch) -> None:
    """A replica whose claim another superseded, and whose connection then dropped: on
    reconnecting its old generation is refused as stale; it follows as a slave (reads work,
    its flow-mods are refused, not taken as an equal's), tells the switch's generation, and
    a claim with a current token makes it master again."""

    async def main() -> tuple[list[FlowRule], str, int, list[FlowRule]]:
        async with (
            OvsDriver(BRIDGE, sw.target) as old,
            OvsDriver(BRIDGE, sw.target) as new,
        ):
            base = await old.generation_seen()  # the shared switch's, from earlier tests
            await old.claim_master(base + 5)
            await new.claim_master(base + 6)
            await new.apply(adds(RULES[:1]))
            chan = old._link.current
            assert chan is not None
            await chan.close()  # the connection dropped
            table = await old.read()  # reconnected: its generation is stale
            with pytest.raises(DeviceRejected) as refused:
                await old.apply(adds(RULES[1:2]))
            seen = await old.generation_seen() - base
            await old.claim_master(base + 7)
            await old.apply(adds(RULES[1:2]))
            return table, str(refused.value), seen, await new.read()

    table, refused, seen, after = asyncio.run(main())
    assert table == RULES[:1]
    assert "IS_SLAVE" in refused, refused
    assert seen == 6
    assert sorted(after, key=str) == sorted(RULES[:2], key=str)
