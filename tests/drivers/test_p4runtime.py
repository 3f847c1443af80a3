"""The ``p4runtime`` driver and the P4Runtime switch EMULATOR (``emulators.p4rt``).

Most tests run the emulator in process on a fake bridge (an in-memory flow table that can
be told to refuse beyond a size, as OVS does with ``flow_limit``); the ``fabric`` ones run
it as a subprocess on a private OVS (conftest.py, p4rt_site.py) and send real packets.
The driver's conformance is in test_conformance.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2, text_format

from drivers.base import (
    DeviceRejected,
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
    PushVlan,
)
from drivers.p4runtime import P4RuntimeDriver, mapping, program
from drivers.p4runtime.driver import P4RuntimeWithGnmi
from drivers.p4runtime.proto import (
    STATUS_DETAILS_KEY,
    code_pb2,
    election,
    p4runtime_pb2,
    p4runtime_pb2_grpc,
    status_pb2,
)
from drivers.p4runtime.rpc import update_statuses
from drivers.p4runtime.spec import P4RuntimeSpec
from drivers.spec import Expect, TlsFiles
from emulators.p4rt.flow import BridgeRefused, Change, Flow
from emulators.p4rt.program import DEFAULT_P4INFO, Pipeline, load
from emulators.p4rt.server import P4RuntimeEmulator, serve
from emulators.p4rt.table import Table
from fabric.run import run
from tests.drivers.p4rt_site import NS, P4rtSite
from tests.pki import Pki

P4R = p4runtime_pb2
PROGRAM = program.default()  # the ids of p4/reroute.p4info.txtpb, by name

RULE = FlowRule(
    match=FlowMatch(
        in_port=1, eth_type=0x0800, ipv4_src=Prefix.parse("10.0.0.0/24"),
        ipv4_dst=Prefix.parse("10.1.2.3"), ip_proto=6, l4_dst=80,
    ),
    priority=200, actions=(PushVlan(10), Output(2)), cookie=0xC1,
)  # fmt: skip
RULE_ENTRY = """
table_id: 39628224  # MyIngress.reroute, as p4c numbers it
match { field_id: 1 ternary { value: "\\001" mask: "\\001\\377" } }
match { field_id: 4 ternary { value: "\\001" mask: "\\001" } }
match { field_id: 5 ternary { value: "\\n\\000\\000\\000" mask: "\\377\\377\\377\\000" } }
match { field_id: 6 ternary { value: "\\n\\001\\002\\003" mask: "\\377\\377\\377\\377" } }
match { field_id: 7 ternary { value: "\\006" mask: "\\377" } }
match { field_id: 9 ternary { value: "P" mask: "\\377\\377" } }
action { action { action_id: 26366270  # MyIngress.push_vlan_forward
                  params { param_id: 1 value: "\\n" } params { param_id: 2 value: "\\002" } } }
priority: 200
metadata: "\\000\\000\\000\\000\\000\\000\\000\\301"
"""
OTHERS = [
    FlowRule(
        match=FlowMatch(vlan_vid=10, eth_type=0x0800, ip_proto=17, l4_src=53),
        priority=100, actions=(PopVlan(), Output(1)), cookie=0xC2,
    ),
    FlowRule(match=FlowMatch(in_port=2), priority=1, actions=(), cookie=0),
    FlowRule(match=FlowMatch(), priority=7, actions=(Output(511),), cookie=2**64 - 1),
]  # fmt: skip


def add(rule: FlowRule) -> FlowChange:
    return FlowChange(op=FlowOp.ADD, rule=rule)


def delete(rule: FlowRule) -> FlowChange:
    return FlowChange(op=FlowOp.DELETE, rule=rule)


def host(i: int, *, port: int = 2, priority: int = 100, cookie: int = 0xB0) -> FlowRule:
    match = FlowMatch(in_port=1, eth_type=0x0800, ipv4_dst=Prefix(0x0A09_0000 + i, 32))
    return FlowRule(match=match, priority=priority, actions=(Output(port),), cookie=cookie)


# --------------------------------------------------------------------------------------
# mapping


def test_a_rule_maps_to_the_exact_table_entry_and_back() -> None:
    want = text_format.Parse(RULE_ENTRY, P4R.TableEntry())
    assert mapping.to_entry(PROGRAM, RULE) == want
    assert mapping.to_rule(PROGRAM, want) == RULE


@pytest.mark.parametrize("rule", [RULE, *OTHERS], ids=str)
def test_every_expressible_rule_round_trips(rule: FlowRule) -> None:
    assert mapping.unsupported(rule) is None
    entry = mapping.to_entry(PROGRAM, rule)
    wire = P4R.TableEntry.FromString(entry.SerializeToString())
    assert mapping.to_rule(PROGRAM, wire) == rule


def test_a_delete_carries_only_the_key() -> None:
    entry = mapping.key_entry(PROGRAM, RULE)
    assert not entry.HasField("action") and entry.metadata == b""
    assert entry.priority == 200 and len(entry.match) == 6


@pytest.mark.parametrize(
    "rule",
    [
        RULE.__class__(match=RULE.match, priority=0, actions=()),
        RULE.__class__(match=RULE.match, priority=1, actions=(), table=1),
        FlowRule(match=FlowMatch(eth_type=0x0806), priority=1, actions=()),
        FlowRule(match=FlowMatch(in_port=512), priority=1, actions=()),
        FlowRule(match=FlowMatch(ipv4_dst=Prefix(0, 0)), priority=1, actions=()),
        FlowRule(match=FlowMatch(), priority=1, actions=(Output(1), Output(2))),
        FlowRule(match=FlowMatch(), priority=1, actions=(PushVlan(10),)),
        FlowRule(match=FlowMatch(), priority=1, actions=(Output(600),)),
    ],
    ids=str,
)
def test_what_the_program_cannot_express_is_named(rule: FlowRule) -> None:
    assert mapping.unsupported(rule)


@pytest.mark.parametrize(
    "change",
    [
        "match { field_id: 6 ternary { value: '\\n' mask: '\\377\\000\\377\\000' } }",
        "match { field_id: 1 ternary { value: '\\001' mask: '\\001' } }",
        "match { field_id: 2 ternary { value: '\\001' mask: '\\001' } }",  # tagged, any vid
        "match { field_id: 4 ternary { value: '\\000' mask: '\\001' } }",
        "match { field_id: 42 exact { value: '\\001' } }",
        "metadata: '123456789'",
    ],
)
def test_an_entry_rules_cannot_say_is_a_mapping_error(change: str) -> None:
    entry = mapping.to_entry(PROGRAM, OTHERS[1])
    text_format.Merge(change, entry)
    with pytest.raises(mapping.MappingError):
        mapping.to_rule(PROGRAM, entry)


# --------------------------------------------------------------------------------------
# the emulator in process, on a fake bridge


class FakeBridge:
    """An OVS table in memory; refuses (atomically) beyond ``limit`` flows, as OVS does."""

    name = "fake-bridge"

    def __init__(self) -> None:
        self.flows: dict[Any, Flow] = {}
        self.limit: int | None = None

    async def apply(self, changes: Sequence[Change]) -> None:
        state = dict(self.flows)
        for change in changes:
            if change.delete:
                state.pop(change.flow.key, None)
            else:
                state[change.flow.key] = change.flow
        if self.limit is not None and len(state) > self.limit:
            raise BridgeRefused("table full", code="OFPFMFC_TABLE_FULL")
        self.flows = state

    async def read(self) -> list[Flow]:
        return list(self.flows.values())

    async def clear(self) -> None:
        self.flows = {}


class Recording(P4RuntimeEmulator):
    """The emulator, keeping every Write request it gets."""

    def __init__(self, table: Table, *, installed: bool = True) -> None:
        super().__init__(1, table, installed=installed)
        self.writes: list[Any] = []

    async def Write(self, request: Any, context: Any) -> Any:
        self.writes.append(request)
        return await super().Write(request, context)


@contextlib.asynccontextmanager
async def emulator(
    *,
    installed: bool = True,
    info: Any = None,
    tls: tuple[bytes, bytes, bytes | None] | None = None,
) -> AsyncIterator[tuple[Recording, FakeBridge, str]]:
    """The EMULATOR in this event loop, running ``info`` (default: p4/reroute.p4's P4Info),
    installed from the start or not."""
    bridge = FakeBridge()
    pipeline = Pipeline.of(load(DEFAULT_P4INFO) if info is None else info)
    servicer = Recording(Table(bridge, pipeline), installed=installed)
    server, port = await serve(servicer, "127.0.0.1:0", tls)
    try:
        yield servicer, bridge, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def raw_client(address: str, election_id: int) -> AsyncIterator[tuple[Any, Any, Any]]:
    """A bare stub with an arbitrated stream; (stub, stream call, first arbitration reply)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        call = stub.StreamChannel()
        update = P4R.MasterArbitrationUpdate(device_id=1, election_id=election(election_id))
        await call.write(P4R.StreamMessageRequest(arbitration=update))
        reply = await asyncio.wait_for(call.read(), 2.0)
        try:
            yield stub, call, reply
        finally:
            call.cancel()


def write_request(election_id: int, *updates: Any) -> Any:
    request = P4R.WriteRequest(device_id=1, election_id=election(election_id))
    request.updates.extend(updates)
    return request


def insert(rule: FlowRule, kind: int = P4R.Update.INSERT) -> Any:
    return P4R.Update(type=kind, entity=P4R.Entity(table_entry=mapping.to_entry(PROGRAM, rule)))


def test_one_write_per_batch_with_exactly_the_updates_an_mbb_shift_needs() -> None:
    old, same, moved = host(1, port=2), host(2, port=2), host(3, port=2)
    new = host(1, port=3, priority=110, cookie=0xB1)  # make: the new path, above the old
    shifted = host(3, port=3)  # the same key, another port: a MODIFY

    async def main() -> tuple[list[Any], list[FlowRule]]:
        async with (
            emulator() as (servicer, _, address),
            P4RuntimeDriver("dut", address, device_id=1) as d,
        ):
            await d.apply([add(old), add(same), add(moved)])
            servicer.writes.clear()
            await d.apply([add(new), add(same), add(shifted), delete(old), delete(host(9))])
            return servicer.writes, await d.read()

    writes, table = asyncio.run(main())
    assert len(writes) == 1
    (request,) = writes
    assert request.device_id == 1 and request.election_id == election(1)
    assert request.atomicity == P4R.WriteRequest.CONTINUE_ON_ERROR
    assert list(request.updates) == [
        insert(new),
        insert(shifted, P4R.Update.MODIFY),
        P4R.Update(
            type=P4R.Update.DELETE, entity=P4R.Entity(table_entry=mapping.key_entry(PROGRAM, old))
        ),
    ]  # the unchanged ``same`` and the absent host(9) send nothing
    assert set(table) == {new, same, shifted}


def test_a_second_client_with_a_lower_election_id_cannot_write() -> None:
    async def main() -> tuple[Any, grpc.StatusCode, DeviceRejected]:
        async with (
            emulator() as (_, _, address),
            P4RuntimeDriver("dut", address, device_id=1, election_id=5),
        ):
            async with raw_client(address, 3) as (stub, _, reply):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.Write(write_request(3, insert(RULE)))
            with pytest.raises(DeviceRejected) as refused:
                async with P4RuntimeDriver("backup", address, device_id=1, election_id=4):
                    pass
            return reply, info.value.code(), refused.value

    reply, code, refused = asyncio.run(main())
    assert reply.arbitration.status.code == code_pb2.ALREADY_EXISTS
    assert reply.arbitration.election_id == election(5)
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert refused.code == "not-primary"


def test_a_driver_that_lost_primacy_is_refused_as_not_primary() -> None:
    async def main() -> tuple[DeviceRejected, Any]:
        async with (
            emulator() as (_, _, address),
            P4RuntimeDriver("dut", address, device_id=1) as driver,
        ):
            async with raw_client(address, 9):
                with pytest.raises(DeviceRejected) as info:
                    await driver.apply([add(RULE)])
            async with asyncio.timeout(2):  # primacy comes back when the other goes
                while not driver._arbitration.primary:
                    await asyncio.sleep(0.01)
            await driver.apply([add(RULE)])
            return info.value, await driver.read()

    refused, table = asyncio.run(main())
    assert refused.code == "not-primary"
    assert table == [RULE]


def test_a_later_generation_fences_the_writer_it_replaced() -> None:
    """Two replicas' drivers on one device: each claims it with the revision of its etcd
    lock; the server refuses the writes of the one a later claim replaced, and its claim
    with an older generation (fencing by election id)."""

    async def main() -> tuple[list[Any], DeviceRejected, DeviceRejected, list[FlowRule]]:
        async with (
            emulator() as (servicer, _, address),
            P4RuntimeDriver("old", address, device_id=1, election_id=1) as old,
            P4RuntimeDriver("new", address, device_id=1, election_id=2) as new,
        ):
            await old.claim_master(5)  # the old replica's lock, revision 5
            await old.apply([add(host(1))])
            await new.claim_master(7)  # took over: its lock is revision 7
            with pytest.raises(DeviceRejected) as fenced:
                await old.apply([add(host(2))])
            with pytest.raises(DeviceRejected) as stale:
                await old.claim_master(6)
            await new.apply([add(host(3))])
            ids = [w.election_id for w in servicer.writes]
            return ids, fenced.value, stale.value, await new.read()

    ids, fenced, stale, table = asyncio.run(main())
    assert fenced.code == "not-primary" and stale.code == "not-primary"
    assert "another writer took the device" in str(stale)
    # the refused write reached the server and was refused there (PERMISSION_DENIED)
    assert ids == [election(5 << 64 | 1), election(5 << 64 | 1), election(7 << 64 | 2)]
    assert set(table) == {host(1), host(3)}


def test_replicas_sharing_one_inventory_open_as_backups_and_write_once_they_claim() -> None:
    """Replicas share the inventory's election id, which a server gives one client only:
    shared sessions open with a random id below every claim's (a backup is no error), a
    backup's write is refused, and the claims decide who writes."""

    def replica(name: str) -> P4RuntimeDriver:
        driver = P4RuntimeDriver(name, address, device_id=1, election_id=1)
        driver.share()
        return driver

    async def main() -> tuple[DeviceRejected, DeviceRejected, list[FlowRule]]:
        nonlocal address
        async with emulator() as (_, _, address), replica("a") as a, replica("b") as b:
            await a.claim_master(5)
            with pytest.raises(DeviceRejected) as backup:
                await b.apply([add(host(2))])  # opened, a backup: it has not claimed
            await a.apply([add(host(1))])
            await b.claim_master(6)
            with pytest.raises(DeviceRejected) as fenced:
                await a.apply([add(host(2))])
            await b.apply([add(host(3))])
            return backup.value, fenced.value, await a.read()  # reads need no primacy

    address = ""
    backup, fenced, table = asyncio.run(main())
    assert backup.code == fenced.code == "not-primary"
    assert set(table) == {host(1), host(3)}


def test_the_emulator_reports_each_failed_update_in_the_trailer() -> None:
    async def main() -> list[Any]:
        async with (
            emulator() as (_, _, address),
            P4RuntimeDriver("dut", address, device_id=1) as driver,
        ):
            await driver.apply([add(RULE)])
            async with raw_client(address, 2) as (stub, _, _):
                request = write_request(
                    2, insert(RULE), insert(host(1)), insert(host(2), P4R.Update.MODIFY)
                )
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.Write(request)
                assert info.value.code() is grpc.StatusCode.UNKNOWN
                return [info.value.trailing_metadata(), await driver.read()]

    trailers, table = asyncio.run(main())
    codes = [u.code for u in update_statuses(trailers)]
    assert codes == [code_pb2.ALREADY_EXISTS, code_pb2.OK, code_pb2.NOT_FOUND]
    assert set(table) == {RULE, host(1)}  # the valid update stays applied


def test_update_statuses_parses_the_trailer_and_refuses_garbage() -> None:
    status = status_pb2.Status(code=code_pb2.UNKNOWN)
    for code in (code_pb2.OK, code_pb2.RESOURCE_EXHAUSTED):
        detail = any_pb2.Any()
        detail.Pack(P4R.Error(canonical_code=code, message="m"))
        status.details.append(detail)
    got = update_statuses([("x", "y"), (STATUS_DETAILS_KEY, status.SerializeToString())])
    assert [(u.ok, u.name) for u in got] == [(True, "OK"), (False, "RESOURCE_EXHAUSTED")]
    with pytest.raises(ValueError):
        update_statuses([])
    with pytest.raises(ValueError):
        update_statuses([(STATUS_DETAILS_KEY, b"\xff\xff")])


def test_a_partly_refused_batch_is_undone_and_logged_on_the_wire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    base = [host(i) for i in range(3)]

    async def main() -> tuple[DeviceRejected, list[FlowRule], int]:
        async with (
            emulator() as (servicer, bridge, address),
            P4RuntimeDriver("dut", address, device_id=1) as d,
        ):
            await d.apply([add(r) for r in base])
            bridge.limit = 4
            servicer.writes.clear()
            with pytest.raises(DeviceRejected) as info:
                await d.apply([delete(base[0]), *(add(host(i)) for i in range(10, 14))])
            return info.value, await d.read(), len(servicer.writes)

    with caplog.at_level(logging.DEBUG, logger="reroute.wire.p4runtime.dut"):
        error, table, writes = asyncio.run(main())
    assert error.code == "RESOURCE_EXHAUSTED"
    assert "change #3" in str(error)  # delete, two adds fit: the third add does not
    assert set(table) == set(base)
    assert writes == 3  # the batch; the undo: deletes of the two adds, then the re-add
    wire = [r.getMessage() for r in caplog.records if r.name == "reroute.wire.p4runtime.dut"]
    assert any(m.startswith("> Write device 1, 5 updates") for m in wire)
    assert any(m.startswith("<   #3 RESOURCE_EXHAUSTED") for m in wire)


def test_unsupported_rules_and_twice_touched_keys_are_refused_before_sending() -> None:
    async def main() -> tuple[list[str], int]:
        async with (
            emulator() as (servicer, _, address),
            P4RuntimeDriver("dut", address, device_id=1) as d,
        ):
            codes = []
            for batch in ([add(host(1)), add(FlowRule(match=FlowMatch(), priority=0, actions=()))],
                          [add(host(1)), delete(host(1))]):  # fmt: skip
                with pytest.raises(DeviceRejected) as info:
                    await d.apply(batch)
                codes.append(info.value.code)
            return codes, len(servicer.writes)

    assert asyncio.run(main()) == (["UNSUPPORTED", "UNSUPPORTED"], 0)


def test_the_driver_installs_the_named_program_only_when_asked_and_only_once() -> None:
    async def main() -> tuple[list[str], Any, list[FlowRule], list[FlowRule]]:
        codes = []
        async with emulator(installed=False) as (servicer, _, address):
            for kwargs in ({}, {"p4info": DEFAULT_P4INFO}):  # no program, and not allowed to
                with pytest.raises(DeviceRejected) as info:
                    async with P4RuntimeDriver("dut", address, device_id=1, **kwargs):
                        pass
                codes.append(info.value.code)
            named: dict[str, Any] = {"p4info": DEFAULT_P4INFO, "install_pipeline": True}
            async with P4RuntimeDriver("dut", address, device_id=1, **named) as driver:
                await driver.apply([add(RULE)])
            installed = servicer.config.p4info
            async with P4RuntimeDriver("dut", address, device_id=1, **named) as driver:  # no reset
                by_file = await driver.read()
            async with P4RuntimeDriver(
                "dut", address, device_id=1
            ) as driver:  # the device's P4Info
                by_device = await driver.read()
            return codes, installed, by_file, by_device

    codes, installed, by_file, by_device = asyncio.run(main())
    assert codes == ["PIPELINE_MISMATCH", "PIPELINE_MISMATCH"]
    assert installed == PROGRAM.info
    assert by_file == by_device == [RULE]


def test_ids_are_looked_up_by_name_in_whatever_p4info_the_device_runs() -> None:
    info = load(DEFAULT_P4INFO)
    for table in info.tables:
        table.preamble.id ^= 0x77
    for action in info.actions:
        action.preamble.id ^= 0x55
    for table in info.tables:
        table.const_default_action_id ^= 0x55
        for ref in table.action_refs:
            ref.id ^= 0x55
        table.match_fields.reverse()  # other field ids for the same names
        for i, field in enumerate(table.match_fields, start=1):
            field.id = i
    moved = program.Program.of(info)
    entry = mapping.to_entry(moved, RULE)
    assert entry.table_id == PROGRAM.table_id ^ 0x77
    assert mapping.to_rule(moved, entry) == RULE
    assert entry != mapping.to_entry(PROGRAM, RULE)


def test_after_the_server_restarts_the_driver_arbitrates_again_with_its_election_id() -> None:
    """The P4Runtime server goes and comes back on the same address (its tables empty, as a
    restarted switch's): a request meanwhile fails within the driver's timeout; the next
    one after it is back arbitrates again with the same election id and is served."""

    async def main() -> tuple[str, list[FlowRule], int | None, float | None]:
        pipeline = Pipeline.of(load(DEFAULT_P4INFO))
        first = Recording(Table(FakeBridge(), pipeline))
        server, port = await serve(first, "127.0.0.1:0")
        address = f"127.0.0.1:{port}"
        again: Recording | None = None
        try:
            async with P4RuntimeDriver(
                "dut", address, device_id=1, election_id=7, timeout=1.0
            ) as driver:
                await driver.apply([add(RULE)])
                await server.stop(None)
                with pytest.raises(DeviceUnreachable) as down:
                    await driver.read()
                again = Recording(Table(FakeBridge(), pipeline))
                server, _ = await serve(again, address)
                await driver.apply([add(RULE)])
                read = await driver.read()
                return str(down.value), read, again.arbiter.primary(), driver.down_since
        finally:
            await server.stop(None)

    error, read, primary, after = asyncio.run(main())
    assert "UNAVAILABLE" in error, error
    assert read == [RULE] and primary == 7 and after is None


def test_a_warm_start_takes_the_table_from_the_bridge() -> None:
    """The emulator restarted with ``--warm`` (as Stratum's warmboot): the entries are
    read back from the flows the bridge kept, the same entries a Read gave before."""

    async def main() -> tuple[list[Any], list[Any], int]:
        bridge = FakeBridge()
        pipeline = Pipeline.of(load(DEFAULT_P4INFO))
        before = Table(bridge, pipeline)
        rules = [RULE, *OTHERS[:2]]
        failures = await before.write([insert(r) for r in rules])
        assert failures == [None] * len(rules)
        after = Table(bridge, pipeline)
        count = await after.restore()
        return before.read(), after.read(), count

    before, after, count = asyncio.run(main())
    assert count == 3 and sorted(map(str, after)) == sorted(map(str, before))


def _tofino_named() -> Any:
    """The program's P4Info as Tofino's bf-p4c names it: the pipeline's name first."""
    info = load(DEFAULT_P4INFO)
    for table in info.tables:
        table.preamble.name = f"pipe.{table.preamble.name}"
    return info


def test_a_p4info_under_another_prefix_is_taken_through_the_inventorys_names() -> None:
    spec = P4RuntimeSpec(
        driver="p4runtime", target="127.0.0.1:1", device_id=1,
        names={"MyIngress.reroute": "pipe.MyIngress.reroute"},
    )  # fmt: skip
    with pytest.raises(ValueError, match="not the program's"):
        P4RuntimeSpec(driver="p4runtime", target="127.0.0.1:1", device_id=1, names={"x": "y"})

    async def main() -> tuple[DeviceRejected, list[FlowRule]]:
        async with emulator(info=_tofino_named()) as (_, _, address):
            with pytest.raises(DeviceRejected) as info:
                await P4RuntimeDriver("dut", address, device_id=1).open()
            built = P4RuntimeDriver.from_spec(
                "dut", spec.model_copy(update={"target": address}), Expect()
            )
            async with built as driver:
                await driver.apply([add(RULE)])
                return info.value, await driver.read()

    refused, read = asyncio.run(main())
    assert refused.code == "PIPELINE_MISMATCH"
    assert "pipe.MyIngress.reroute" in str(refused) and "names:" in str(refused)
    assert read == [RULE]


@pytest.mark.parametrize(
    "change",
    [
        "tables { match_fields { name: 'hdr.ipv4.dstAddr' match_type: LPM } }",
        "actions { params { bitwidth: 16 } }",
        "tables { preamble { name: 'MyIngress.other' } }",
    ],
)
def test_a_p4info_without_what_the_driver_needs_is_refused(change: str) -> None:
    info = load(DEFAULT_P4INFO)
    patch = text_format.Parse(change, program.p4info_pb2.P4Info())
    if patch.tables and patch.tables[0].match_fields:
        next(m for m in info.tables[0].match_fields if m.name == "hdr.ipv4.dstAddr").match_type = (
            patch.tables[0].match_fields[0].match_type
        )
    elif patch.actions:
        info.actions[0].params[0].bitwidth = 16
    else:
        info.tables[0].preamble.name = "MyIngress.other"
    with pytest.raises(program.ProgramError):
        program.Program.of(info)


# --------------------------------------------------------------------------------------
# on a real bridge


@pytest.mark.fabric
def test_gnmi_oper_status_follows_the_bridge_ports(p4rt: P4rtSite) -> None:
    spec = P4RuntimeSpec(
        driver="p4runtime", target=p4rt.emulator.address, device_id=1,
        gnmi=p4rt.emulator.address,
    )  # fmt: skip
    up, down = PortState.UP, PortState.DOWN

    async def follow() -> list[tuple[int, PortState]]:
        heard: list[tuple[int, PortState]] = []
        async with P4RuntimeDriver.from_spec("dut", spec, Expect()) as driver:
            assert isinstance(driver, P4RuntimeWithGnmi)
            assert await driver.port_states() == {1: up, 2: up}
            assert "gNMI" in (await driver.identify()).summary  # reroute inventory check
            async with driver.port_events(lambda n, s: heard.append((n, s))):
                for state, want in (("down", down), ("up", up)):
                    run(["ip", "link", "set", "p4-2p", state], ns=NS)  # the peer: carrier
                    async with asyncio.timeout(10):
                        while (2, want) not in heard:
                            await asyncio.sleep(0.01)
                    assert (await driver.port_states())[2] is want
        return heard

    try:
        heard = asyncio.run(follow())
    finally:
        run(["ip", "link", "set", "p4-2p", "up"], ns=NS)
    assert heard.index((2, down)) < heard.index((2, up)) and {n for n, _ in heard} == {2}


@pytest.mark.fabric
def test_a_packet_follows_a_written_entry(p4rt: P4rtSite) -> None:
    p4rt.reset()
    run(["ip", "addr", "replace", "10.99.0.1/24", "dev", "p4-1p"], ns=NS)
    run(["ip", "neigh", "replace", "10.99.0.2", "lladdr", "02:00:00:00:99:02", "dev", "p4-1p"],
        ns=NS)  # fmt: skip
    rule = FlowRule(
        match=FlowMatch(in_port=1, eth_type=0x0800, ipv4_dst=Prefix.parse("10.99.0.2")),
        priority=10, actions=(Output(2),), cookie=0x99,
    )  # fmt: skip

    def ping(want: int) -> int:
        """Echo requests that left port 2, waiting up to 2 s for ``want`` (0: 0.3 s)."""
        before = p4rt.tx_packets(2)
        run(["ping", "-c", "5", "-i", "0.01", "-W", "0.1", "10.99.0.2"], ns=NS, check=False)
        deadline = time.monotonic() + (2.0 if want else 0.3)
        while (sent := p4rt.tx_packets(2) - before) < max(want, 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        return sent

    async def write(op: FlowOp) -> None:
        async with P4RuntimeDriver("dut", p4rt.emulator.address, device_id=1) as driver:
            await driver.apply([FlowChange(op=op, rule=rule)])

    assert ping(0) == 0  # fail_mode secure: no entry, no forwarding
    asyncio.run(write(FlowOp.ADD))
    assert "cookie=0x99" in p4rt.ofctl("dump-flows")
    assert ping(5) == 5
    asyncio.run(write(FlowOp.DELETE))
    assert ping(0) == 0


def test_a_ports_target_makes_the_driver_a_port_monitor() -> None:
    from drivers.base import PortMonitor
    from drivers.p4runtime.spec import P4RuntimeSpec
    from drivers.spec import Expect

    plain = P4RuntimeSpec(driver="p4runtime", target="127.0.0.1:9559", device_id=0)
    ported = P4RuntimeSpec(
        driver="p4runtime", target="127.0.0.1:9559", device_id=0, ports="unix:/x.mgmt"
    )
    without = P4RuntimeDriver.from_spec("a", plain, Expect())
    with_ports = P4RuntimeDriver.from_spec("b", ported, Expect())
    assert not isinstance(without, PortMonitor) and not without.capabilities.port_state
    assert isinstance(with_ports, PortMonitor) and with_ports.capabilities.port_state


def test_a_gnmi_target_makes_the_driver_a_port_monitor_with_events() -> None:
    from drivers.base import PortEvents, PortMonitor

    spec = P4RuntimeSpec(
        driver="p4runtime", target="127.0.0.1:9559", device_id=1, gnmi="127.0.0.1:9559"
    )
    driver = P4RuntimeDriver.from_spec("c", spec, Expect())
    assert isinstance(driver, PortMonitor) and isinstance(driver, PortEvents)
    assert driver.capabilities.port_state
    with pytest.raises(ValueError, match="one port-state source"):
        P4RuntimeSpec(driver="p4runtime", target="127.0.0.1:9559", device_id=1,
                      gnmi="127.0.0.1:9559", ports="unix:/x.mgmt")  # fmt: skip
    with pytest.raises(ValueError, match="HOST:PORT"):
        P4RuntimeSpec(driver="p4runtime", target="127.0.0.1:9559", device_id=1, gnmi="nowhere")


BAD, WIDE, GONE, NOPE = (
    code_pb2.INVALID_ARGUMENT,
    code_pb2.OUT_OF_RANGE,
    code_pb2.NOT_FOUND,
    code_pb2.UNIMPLEMENTED,
)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ("table_id: 1234", GONE),
        ("match { field_id: 42 ternary { value: '\\001' mask: '\\001' } }", BAD),
        ("match { field_id: 2 exact { value: '\\001' } }", BAD),
        ("match { field_id: 3 ternary { value: '\\001' mask: '\\000' } }", BAD),
        ("match { field_id: 3 ternary { value: '\\003' mask: '\\001' } }", BAD),
        ("match { field_id: 3 ternary { value: '\\020\\000' mask: '\\020\\000' } }", WIDE),
        ("priority: 0", BAD),
        ("action { action { action_id: 7 } }", BAD),
        ("action { action { params { param_id: 1 value: '\\002\\000' } } }", WIDE),
        ("action { action { params { param_id: 1 value: '\\001' } } }", BAD),  # twice
        ("match { field_id: 6 ternary { value: '\\n\\000\\000\\001'"
         " mask: '\\377\\000\\377\\377' } }", NOPE),  # valid, but no OpenFlow prefix
    ],
)  # fmt: skip
def test_the_emulator_checks_each_update_against_its_p4info(change: str, code: int) -> None:
    entry = mapping.to_entry(PROGRAM, OTHERS[1])  # in_port 2 -> drop
    entry.ClearField("action")
    entry.action.action.action_id = PROGRAM.action_ids[program.Action.FORWARD]
    if "param_id: 1 value: '\\002" not in change:
        entry.action.action.params.add(param_id=1, value=b"\x01")
    text_format.Merge(change, entry)
    update = P4R.Update(type=P4R.Update.INSERT, entity=P4R.Entity(table_entry=entry))

    async def main() -> tuple[list[Any], list[Flow]]:
        async with emulator() as (_, bridge, address):
            async with raw_client(address, 2) as (stub, _, _):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.Write(write_request(2, update))
            return info.value.trailing_metadata(), list(bridge.flows.values())

    trailers, flows = asyncio.run(main())
    assert [u.code for u in update_statuses(trailers)] == [code]
    assert flows == []


def test_the_emulator_reads_back_entries_in_canonical_form() -> None:
    entry = mapping.to_entry(PROGRAM, OTHERS[1])
    entry.match[0].ternary.value = b"\x00\x02"  # in_port 2, padded
    entry.match[0].ternary.mask = b"\x01\xff"
    update = P4R.Update(type=P4R.Update.INSERT, entity=P4R.Entity(table_entry=entry))

    async def main() -> list[Any]:
        async with emulator() as (_, _, address), raw_client(address, 2) as (stub, _, _):
            await stub.Write(write_request(2, update))
            request = P4R.ReadRequest(device_id=1)
            request.entities.add(table_entry=P4R.TableEntry())
            return [e.table_entry async for r in stub.Read(request) for e in r.entities]

    (read,) = asyncio.run(main())
    assert read == mapping.to_entry(PROGRAM, OTHERS[1])


def test_the_driver_installs_the_program_only_when_the_inventory_says_so(tmp_path: Path) -> None:
    config = tmp_path / "reroute.json"
    config.write_bytes(b'{"target": "bmv2"}')
    spec = P4RuntimeSpec(
        driver="p4runtime", target="127.0.0.1:1", device_id=1, install_pipeline=True,
        pipeline=config,
        p4info=DEFAULT_P4INFO,
    )  # fmt: skip

    async def main() -> tuple[DeviceRejected, Any, int, bytes, list[FlowRule]]:
        async with emulator(installed=False) as (servicer, _, address):
            with pytest.raises(DeviceRejected) as info:
                await P4RuntimeDriver("dut", address, device_id=1).open()  # no pipeline, not asked
            untouched = servicer.config
            built = P4RuntimeDriver.from_spec(
                "dut", spec.model_copy(update={"target": address}), Expect()
            )
            async with built as driver:
                await driver.apply([add(RULE)])
            async with built as driver:  # it now runs ours: no second install, entries kept
                table = await driver.read()
            return (
                info.value, untouched, servicer.pipelines_set, servicer.config.p4_device_config,
                table,
            )  # fmt: skip

    error, untouched, installs, device_config, table = asyncio.run(main())
    assert error.code == "PIPELINE_MISMATCH" and "runs no P4 program" in str(error)
    assert "install_pipeline: true" in str(error) and "nothing was changed" in str(error)
    assert untouched is None
    assert (installs, device_config, table) == (1, b'{"target": "bmv2"}', [RULE])


def test_a_program_differing_only_in_bytes_is_used_as_it_is() -> None:
    theirs = load(DEFAULT_P4INFO)
    theirs.pkg_info.version = "2.0-built-elsewhere"
    theirs.tables[0].preamble.annotations.append('@brief("reroute entries")')
    extra = theirs.tables.add()
    extra.preamble.id, extra.preamble.name = 0x0200_0099, "MyIngress.acl"
    assert theirs != load(DEFAULT_P4INFO)
    named: dict[str, Any] = {"p4info": DEFAULT_P4INFO, "install_pipeline": True}

    async def main() -> tuple[int, list[FlowRule]]:
        async with emulator(info=theirs) as (servicer, _, address):
            async with P4RuntimeDriver("dut", address, device_id=1, **named) as driver:
                await driver.apply([add(RULE)])
            async with P4RuntimeDriver("dut", address, device_id=1, **named) as driver:
                return servicer.pipelines_set, await driver.read()

    assert asyncio.run(main()) == (0, [RULE])


def test_another_program_is_refused_naming_what_differs() -> None:
    other = load(DEFAULT_P4INFO)
    forward = next(a for a in other.actions if a.preamble.name == "MyIngress.forward")
    forward.params[0].bitwidth = 16

    async def main() -> tuple[DeviceRejected, int]:
        async with emulator(info=other) as (servicer, _, address):
            with pytest.raises(DeviceRejected) as info:
                await P4RuntimeDriver("dut", address, device_id=1).open()
            return info.value, servicer.pipelines_set

    error, installs = asyncio.run(main())
    assert error.code == "PIPELINE_MISMATCH" and installs == 0
    assert "MyIngress.forward" in str(error) and "nothing was changed" in str(error)


def test_an_inventory_p4info_file_is_read_as_text_or_binary(tmp_path: Path) -> None:
    binary = tmp_path / "p.bin"
    binary.write_bytes(load(DEFAULT_P4INFO).SerializeToString())
    assert program.load(binary) == program.load(DEFAULT_P4INFO) == load(DEFAULT_P4INFO)
    (tmp_path / "bad").write_bytes(b"\xff\x00 not a p4info")
    with pytest.raises(program.ProgramError, match="not a readable P4Info"):
        program.load(tmp_path / "bad")


def test_a_tls_channel_checks_the_servers_certificate(tmp_path: Path) -> None:
    pki = Pki.make(tmp_path / "pki")
    server = pki.issue("p4switch", ips=["127.0.0.1"])
    client = pki.issue("reroute")
    other = Pki.make(tmp_path / "other", name="other-ca")
    files = TlsFiles(private_key=client.key, certificate=client.cert, ca_certificate=pki.ca)
    tls = (server.key.read_bytes(), server.cert.read_bytes(), pki.ca.read_bytes())

    async def main() -> tuple[list[FlowRule], DriverError]:
        async with emulator(tls=tls) as (_, _, address):
            async with P4RuntimeDriver("dut", address, device_id=1, tls=files) as driver:
                await driver.apply([add(RULE)])
                table = await driver.read()
            wrong = files.model_copy(update={"ca_certificate": other.ca})
            with pytest.raises(DriverError) as info:
                await P4RuntimeDriver("dut", address, device_id=1, tls=wrong, timeout=2).open()
            return table, info.value

    table, error = asyncio.run(main())
    assert table == [RULE]
    assert isinstance(error, DeviceUnreachable), error


def test_a_superseded_replica_reconnects_as_a_backup_that_reads() -> None:
    """A replica whose claim another superseded, and whose stream then ended: it arbitrates
    again with its kept election id, is refused primacy and stays a backup (no error), so
    it reads while its writes are refused; it tells the primary's generation, and a claim
    with a current one makes it the primary again."""

    async def main() -> tuple[list[FlowRule], DeviceRejected, int, list[FlowRule]]:
        async with emulator() as (_, _, address):
            a = P4RuntimeDriver("a", address, device_id=1, election_id=1)
            b = P4RuntimeDriver("b", address, device_id=1, election_id=1)
            a.share()
            b.share()
            async with a, b:
                await a.claim_master(5)
                await b.claim_master(6)
                await b.apply([add(host(1))])
                await a._arbitration.stop()  # the stream ended (a network blip)
                table = await a.read()  # arbitrated again as 5: a backup
                with pytest.raises(DeviceRejected) as refused:
                    await a.apply([add(host(2))])
                seen = await a.generation_seen()
                await a.claim_master(7)
                await a.apply([add(host(2))])
                return table, refused.value, seen, await b.read()

    table, refused, seen, after = asyncio.run(main())
    assert table == [host(1)]
    assert refused.code == "not-primary"
    assert seen == 6
    assert set(after) == {host(1), host(2)}
