"""Level-triggered recovery (``engine.restore``): a takeover plans from what the devices
hold, never from step records (the etcd store writes them with the finish only), and
rolls a reroute forward once a shift of it landed, back otherwise.

Fake switches (``service/fakes.py``): an electronic MBB is stopped after each of its
steps in turn (its changes applied as a dead owner would have left them), then recovered
from a record without step records, plan, origins or touched paths (what etcd holds of a
reroute started by its lock transaction). Each ends with the tables of a reroute run
whole (forward) or never run (back), and the flow on one path."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.reroute.engine.engine import restore
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning import plan
from services.reroute.planning.plan import StepKind
from services.reroute.planning.resources import EVERYTHING
from services.reroute.store.records import Record, RerouteState
from services.reroute.store.sqlite import Journal
from services.reroute.tables import tables_from
from tests.unit.services.service.conftest import NGNCS
from tests.unit.services.service.fakes import FakeFabric

TOPO = load_topology(NGNCS)
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
INTENT = Intent(flows=(FLOW,), to_path="temporary")


def _tables(fake: FakeFabric) -> dict[str, dict[object, object]]:
    return {n: dict(s.table) for n, s in fake.switches.items()}


def _moved(fake: FakeFabric) -> object:
    start = tables_from({n: s.table.values() for n, s in fake.switches.items()})
    return plan(TOPO, start, INTENT, now=time.time())


async def _stop_after(fake: FakeFabric, n: int) -> bool:
    """Apply the MBB's first ``n`` steps as its owner would have; True: a shift was."""
    steps = _moved(fake).steps()  # type: ignore[attr-defined]
    shifted = False
    for step in steps[:n]:
        if step.changes:
            await fake.switches[step.device].apply(step.changes)
        shifted |= step.kind is StepKind.SHIFT
    return shifted


def _bare(reroute_id: str) -> Record:
    """A running reroute as etcd keeps it until its finish: its intent and what it held."""
    return Record(
        id=reroute_id,
        created=time.time(),
        summary="",
        state=RerouteState.RUNNING,
        error=None,
        plan_text="",
        origins={},
        touched=(),
        started_steps=(),
        intent=INTENT,
        owner="dead",
        resources=frozenset({EVERYTHING}),
    )


def _reference(whole: bool) -> dict[str, dict[object, object]]:
    fake = FakeFabric(TOPO)
    if whole:
        asyncio.run(_stop_after(fake, len(_moved(fake).steps())))  # type: ignore[attr-defined]
    return _tables(fake)


@pytest.mark.parametrize("n", range(len(_moved(FakeFabric(TOPO)).steps()) + 1))  # type: ignore[attr-defined]
def test_a_dead_owners_reroute_is_recovered_from_the_devices(n: int) -> None:
    fake = FakeFabric(TOPO)
    journal = Journal(None)
    journal.enqueue("r", INTENT)
    journal.create("r", _moved(fake))  # type: ignore[arg-type]
    shifted = asyncio.run(_stop_after(fake, n))
    asyncio.run(restore(TOPO, fake.switches, journal, _bare("r")))  # type: ignore[arg-type]
    after = journal.get("r")
    assert after is not None
    if shifted:
        assert after.state is RerouteState.DONE, after.error
        assert _tables(fake) == _reference(whole=True)
    else:
        assert after.state is RerouteState.ROLLED_BACK, after.error
        assert _tables(fake) == _reference(whole=False)
    journal.close()
