"""The ODL driver against an emulator answering 500 (``/emulator/faults``): a flow write
the controller failed is sent again (bounded); past the bound the batch is rejected and
undone, the node's flows as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from drivers.base import DeviceRejected, FlowChange, FlowMatch, FlowOp, FlowRule, Output
from drivers.odl import OdlDriver, Style, styles
from drivers.odl.driver import SERVER_RETRIES
from tests.drivers.odl_site import Emulator, OdlSite
from tests.drivers.test_odl import RFC_FLOW, RULE, emulator, site  # noqa: F401 (fixtures)

OTHER = FlowRule(match=FlowMatch(in_port=2), priority=9, actions=(Output(1),), cookie=0xC3)


def inject(emu: Emulator, writes: int) -> None:
    with emu.http() as http:
        answer = http.put("/emulator/faults", json={"flow-writes": writes, "status": 500})
    assert answer.status_code == 200, answer.text


def failed(emu: Emulator) -> int:
    with emu.http() as http:
        return int(http.get("/emulator/faults").json()["failed"])


def test_the_emulator_fails_the_next_writes_then_recovers(emulator: Emulator) -> None:  # noqa: F811
    body = styles.flow_body(Style.RFC8040, "openflow:1", RULE)
    inject(emulator, 2)
    with emulator.http() as http:
        for _ in range(2):
            answer = http.put(RFC_FLOW, json=body)
            assert answer.status_code == 500
            assert answer.json()["errors"]["error"][0]["error-tag"] == "operation-failed"
        assert http.get(f"{RFC_FLOW}?content=config").status_code == 404  # nothing written
        assert http.put(RFC_FLOW, json=body).status_code == 201
        assert http.get("/emulator/faults").json() == {
            "flow-writes": 0, "status": 500, "node": None, "failed": 2,
        }  # fmt: skip
        http.put("/emulator/faults", json={"flow-writes": 1, "node": "openflow:2"})
        assert http.put(RFC_FLOW, json=body).status_code == 204  # openflow:1's: not this one
        assert http.get("/emulator/faults").json()["flow-writes"] == 1
        assert http.delete(RFC_FLOW).status_code == 204
        assert http.put("/emulator/faults", json={"flow-writes": -1}).status_code == 400
        assert http.put("/emulator/faults", json={"flow-writes": 0}).status_code == 200


@pytest.fixture
def faulty(site: OdlSite) -> Iterator[OdlSite]:  # noqa: F811
    yield site
    inject(site.emulator, 0)


@pytest.mark.fabric
def test_writes_answered_500_are_sent_again_and_the_batch_lands(faulty: OdlSite) -> None:
    inject(faulty.emulator, SERVER_RETRIES)  # every retry of the first write fails but one
    before = failed(faulty.emulator)  # (the emulator serves the whole module)

    async def main() -> list[FlowRule]:
        async with OdlDriver("dut", faulty.emulator.base_url, operational_wait_s=5.0) as d:
            await d.apply([FlowChange(op=FlowOp.ADD, rule=r) for r in (RULE, OTHER)])
            return await d.read()

    assert sorted(asyncio.run(main()), key=str) == sorted([RULE, OTHER], key=str)
    assert failed(faulty.emulator) - before == SERVER_RETRIES


@pytest.mark.fabric
def test_writes_failing_past_the_retries_reject_the_batch_and_undo_it(faulty: OdlSite) -> None:
    before = failed(faulty.emulator)  # (the emulator serves the whole module)

    async def main() -> tuple[DeviceRejected, list[FlowRule]]:
        async with OdlDriver("dut", faulty.emulator.base_url, operational_wait_s=5.0) as d:
            await d.apply([FlowChange(op=FlowOp.ADD, rule=RULE)])
            inject(faulty.emulator, 1 + SERVER_RETRIES)  # every attempt at the first write
            with pytest.raises(DeviceRejected) as info:
                await d.apply([
                    FlowChange(op=FlowOp.DELETE, rule=RULE),
                    FlowChange(op=FlowOp.ADD, rule=OTHER),
                ])  # fmt: skip
            return info.value, await d.read()

    error, after = asyncio.run(main())
    assert error.code == "http-500" and "change #0" in str(error), error
    assert after == [RULE]  # the batch undone: nothing of it stays
    assert failed(faulty.emulator) - before == 1 + SERVER_RETRIES
