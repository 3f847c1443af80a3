"""The P4Runtime switch EMULATOR never makes two distinct entries one OVS flow.

An entry's identity is its key (table, priority, match by value); a flow's is (priority,
match). If two keys became one flow, the second INSERT would silently replace the first
entry's flow (OVS's ADD of an existing flow), and deleting either would take the other's
flow with it while Read still showed it. The dataplane refuses what it cannot say as its
own flow (UNIMPLEMENTED per update: e.g. an IPv4 field without ``hdr.ipv4.$valid$`` 1,
which OpenFlow needs as a prerequisite), and every key it takes gets a flow of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from drivers.base import FlowChange, FlowMatch, FlowOp, FlowRule, Output, Prefix
from drivers.p4runtime import P4RuntimeDriver
from drivers.p4runtime.rpc import update_statuses
from emulators.p4rt.program import DEFAULT_P4INFO, Pipeline, load
from emulators.p4rt.proto import code_pb2, election, p4runtime_pb2, p4runtime_pb2_grpc
from emulators.p4rt.table import Planned, Table
from tests.drivers.p4rt_site import P4rtSite

P4R = p4runtime_pb2
PIPELINE = Pipeline.of(load(DEFAULT_P4INFO))
TABLE = PIPELINE.table_named("MyIngress.reroute")
FIELD = {name: i for i, (name, _, _) in TABLE.fields.items()}
FORWARD = next(a for a in PIPELINE.actions.values() if a.name == "MyIngress.forward")
ONE = b"\x01"
HOST_1, HOST_2, WHOLE_32 = b"\x0a\0\0\x01", b"\x0a\0\0\x02", b"\xff" * 4  # 10.0.0.1, .2


def entry(priority: int, port: int = 2, **fields: tuple[bytes, bytes]) -> Any:
    """A ``MyIngress.reroute`` entry: match field name -> (value, mask), ``forward(port)``."""
    found = P4R.TableEntry(table_id=TABLE.id, priority=priority)
    for name, (value, mask) in fields.items():
        found.match.add(field_id=FIELD[name]).ternary.CopyFrom(
            P4R.FieldMatch.Ternary(value=value, mask=mask)
        )
    found.action.action.action_id = FORWARD.id
    (param_id,) = FORWARD.params
    found.action.action.params.add(param_id=param_id, value=bytes([port]))
    return found


def insert(table_entry: Any) -> Any:
    return P4R.Update(type=P4R.Update.INSERT, entity=P4R.Entity(table_entry=table_entry))


def matches() -> Iterator[dict[str, tuple[bytes, bytes]]]:
    """Every combination of a few values per field, with and without the validity bits."""
    choices: dict[str, list[tuple[bytes, bytes] | None]] = {
        "standard_metadata.ingress_port": [None, (ONE, b"\x01\xff"), (b"\x02", b"\x01\xff")],
        "hdr.vlan.$valid$": [None, (ONE, ONE)],
        "hdr.vlan.vid": [None, (b"\x0a", b"\x0f\xff")],
        "hdr.ipv4.$valid$": [None, (ONE, ONE)],
        "hdr.ipv4.dstAddr": [None, (HOST_1, WHOLE_32), (b"\x0a\0\0\0", b"\xff\xff\xff\0")],
        "hdr.ipv4.protocol": [None, (b"\x06", b"\xff"), (b"\x11", b"\xff"), (ONE, b"\xff")],
        "meta.l4_dst": [None, (b"\x50", b"\xff\xff")],
    }  # fmt: skip
    for values in itertools.product(*choices.values()):
        yield {n: v for n, v in zip(choices, values, strict=True) if v is not None}


def realisable(fields: dict[str, tuple[bytes, bytes]]) -> bool:
    """The dataplane's rules, restated: VLAN bits both or neither; IPv4 fields need the
    validity bit; a port needs protocol TCP or UDP."""
    vlan = {"hdr.vlan.$valid$", "hdr.vlan.vid"} & set(fields)
    ipv4 = {"hdr.ipv4.dstAddr", "hdr.ipv4.protocol"} & set(fields)
    port = "meta.l4_dst" in fields
    protocol = fields.get("hdr.ipv4.protocol", (b"", b""))[0]
    return (
        len(vlan) in (0, 2)
        and (not ipv4 or "hdr.ipv4.$valid$" in fields)
        and (not port or ("hdr.ipv4.$valid$" in fields and protocol in (b"\x06", b"\x11")))
    )


def test_distinct_entries_are_distinct_flows_and_the_rest_is_refused_per_update() -> None:
    table = Table(bridge=None, pipeline=PIPELINE)  # type: ignore[arg-type]  # check only
    flows: dict[Any, Any] = {}  # flow key -> the entry key it carries
    taken, refused = [], []
    for fields, priority in itertools.product(matches(), (10, 11)):
        got = table.check(insert(entry(priority, **fields)), {})
        if isinstance(got, Planned):
            assert flows.setdefault(got.change.flow.key, got.key) == got.key, fields
            taken.append(fields)
        else:
            assert got.code == code_pb2.UNIMPLEMENTED, (fields, got)
            refused.append(fields)
    assert len(flows) == len(taken)  # one flow per entry
    assert all(realisable(f) for f in taken)
    assert not any(realisable(f) for f in refused)
    names = [set(fields) for fields in refused]
    assert {"hdr.ipv4.dstAddr"} in names  # an IPv4 field without hdr.ipv4.$valid$
    assert {"hdr.ipv4.$valid$", "meta.l4_dst"} in names  # a port without protocol
    assert {"hdr.ipv4.$valid$", "hdr.ipv4.protocol", "meta.l4_dst"} in names  # ICMP, say


# --------------------------------------------------------------------------------------
# on a real bridge


@contextlib.asynccontextmanager
async def raw_client(address: str, election_id: int) -> AsyncIterator[Any]:
    """A bare P4Runtime stub, arbitrated with ``election_id``."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        call = stub.StreamChannel()
        update = P4R.MasterArbitrationUpdate(device_id=1, election_id=election(election_id))
        await call.write(P4R.StreamMessageRequest(arbitration=update))
        await asyncio.wait_for(call.read(), 5.0)
        try:
            yield stub
        finally:
            call.cancel()


@pytest.mark.fabric
def test_an_entry_that_would_share_a_flow_is_refused_and_the_other_kept(p4rt: P4rtSite) -> None:
    """Host 10.0.0.1 with hdr.ipv4.$valid$ (the driver's), then the same match without the
    validity bit and another port: were it "eth_type added for it", it would replace the
    first entry's flow. It is refused on its own; another entry of that Write is applied."""
    p4rt.reset()
    host = Prefix.parse("10.0.0.1")
    first = FlowRule(
        match=FlowMatch(eth_type=0x0800, ipv4_dst=host), priority=10, actions=(Output(2),)
    )
    other = FlowRule(
        match=FlowMatch(eth_type=0x0800, ipv4_dst=Prefix.parse("10.0.0.2")),
        priority=10, actions=(Output(1),),
    )  # fmt: skip
    alike = entry(10, port=1, **{"hdr.ipv4.dstAddr": (HOST_1, WHOLE_32)})
    valid = {"hdr.ipv4.$valid$": (ONE, ONE)}
    second = entry(10, port=1, **valid, **{"hdr.ipv4.dstAddr": (HOST_2, WHOLE_32)})

    async def main() -> tuple[list[int], list[FlowRule]]:
        async with P4RuntimeDriver(
            "dut", p4rt.emulator.address, device_id=1, election_id=5
        ) as driver:
            await driver.apply([FlowChange(op=FlowOp.ADD, rule=first)])
            async with raw_client(p4rt.emulator.address, 9) as stub:
                request = P4R.WriteRequest(device_id=1, election_id=election(9))
                request.updates.extend([insert(alike), insert(second)])
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.Write(request)
            codes = [u.code for u in update_statuses(info.value.trailing_metadata() or ())]
        async with P4RuntimeDriver(
            "dut", p4rt.emulator.address, device_id=1, election_id=5
        ) as driver:
            return codes, await driver.read()

    codes, table = asyncio.run(main())
    assert codes == [code_pb2.UNIMPLEMENTED, code_pb2.OK]
    assert sorted(table, key=str) == sorted([first, other], key=str)
    flows = [line for line in p4rt.ofctl("dump-flows").splitlines() if "priority=10" in line]
    assert len(flows) == 2
    assert any("nw_dst=10.0.0.1" in f and "actions=output:2" in f for f in flows), flows
    assert any("nw_dst=10.0.0.2" in f and "actions=output:1" in f for f in flows), flows
