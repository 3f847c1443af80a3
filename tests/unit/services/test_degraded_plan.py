"""Planning on a degraded fabric (issue 29, part 1), on in-memory switches: which devices a
reroute reads, what a hung one costs, what is refused and what is owed. The same on real
OVS bridges behind fault relays: tests/e2e/test_degraded.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from drivers.base import Session
from drivers.errors import DeviceTimeout, DeviceUnreachable, DriverError
from services.reroute.engine.engine import Engine, needs, plan_on_devices, reroute
from services.reroute.engine.executor import Driver
from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning.electronic import initial_optics
from services.reroute.reach import Devices, ask, what_it_did
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from tests.unit.services.service.fakes import FakeFabric, FakeOptical

ROOT = Path(__file__).resolve().parents[3]
TOPO = load_topology(ROOT / "topologies" / "ngncs-ost.yaml")
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
HUNG_S = 0.2
DIAMOND = ROOT / "topologies" / "diamond.yaml"  # upper h1-s1-s2-s3-h2, lower via s4


def fabric() -> tuple[FakeFabric, FakeOptical, dict[str, Driver]]:
    fake = FakeFabric(TOPO)
    ost = FakeOptical("ost1", {c.ingress: c.egress for c in initial_optics(TOPO)})
    return fake, ost, {**fake.switches, "ost1": ost}  # type: ignore[dict-item]


def hang(driver: object) -> list[str]:
    """Make every call of ``driver`` hang; the calls made are listed in what it returns."""
    calls: list[str] = []

    def hung(name: str):  # type: ignore[no-untyped-def]
        async def call(*args: object, **kwargs: object) -> None:
            calls.append(name)
            await asyncio.sleep(3600)

        return call

    for name in ("read", "survey", "connections", "apply", "connect", "disconnect"):
        setattr(driver, name, hung(name))
    return calls


def test_a_reroute_reads_the_devices_of_its_paths_and_needs_those_of_the_new_one() -> None:
    need = needs(TOPO, Intent(flows=(FLOW,), to_path="temporary"), TOPO.nodes)
    assert set(need.needed) == {"br1", "br2", "br3", "br4"}
    assert need.spare == set()  # ost1's circuits do not matter to this move
    need = needs(TOPO, Intent(flows=(FLOW,), to_path="short", via="temporary"), TOPO.nodes)
    assert set(need.needed) == {"br1", "br2", "br3", "br4", "ost1"}
    assert "the temporary path" in need.needed["br1"] and "the new path" in need.needed["ost1"]
    with pytest.raises(PlanError, match="no path 'nowhere'"):
        needs(TOPO, Intent(flows=(FLOW,), to_path="nowhere"), TOPO.nodes)


def test_a_hung_device_the_reroute_does_not_need_costs_it_nothing(tmp_path: Path) -> None:
    _, ost, drivers = fabric()
    calls = hang(ost)  # on long (where the flows are) and short: not on temporary
    journal = Journal(tmp_path / "journal.db")
    plan, outcome = asyncio.run(
        reroute(TOPO, drivers, journal, Intent(flows=(FLOW,), to_path="temporary"))
    )
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert calls == []  # not even asked
    assert plan.debt == () and outcome.debt == ()  # an optical switch holds no rules of ours
    assert journal.debts() == {}
    journal.close()


def test_a_hung_device_of_the_new_path_refuses_the_plan_naming_it() -> None:
    fake, _, drivers = fabric()
    before = fake.snapshot()
    hang(fake.switches["br4"])
    intent = Intent(flows=(FLOW,), to_path="temporary")
    with pytest.raises(PlanError) as info:
        asyncio.run(plan_on_devices(TOPO, drivers, intent, timeout=HUNG_S))
    said = str(info.value)
    assert "br4 (on temporary, the new path) timed out" in said, said
    assert "nothing changed" in said and fake.snapshot() == before


def test_a_dead_switch_only_on_the_old_path_is_owed_then_cleaned(tmp_path: Path) -> None:
    topo = load_topology(DIAMOND)
    fake = FakeFabric(topo)
    s2 = fake.switches["s2"]
    left = dict(s2.table)
    working = {n: getattr(s2, n) for n in ("read", "survey", "apply")}
    calls = hang(s2)
    journal = Journal(tmp_path / "journal.db")
    flow = FlowSpec.parse("10.0.0.1>10.0.0.2")
    drivers: dict[str, Driver] = dict(fake.switches)  # type: ignore[arg-type]
    plan, outcome = asyncio.run(
        reroute(topo, drivers, journal, Intent(flows=(flow,), to_path="lower"))
    )
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert plan.debt == outcome.debt == ("s2",) and journal.debts() == {"s2": outcome.reroute_id}
    assert "cleanup pending on s2" in plan.describe() + outcome.describe()
    assert calls == ["survey"] and s2.table == left  # asked, not waited for, not written

    engine = Engine(topo=topo, drivers=drivers, journal=journal, device_timeout_s=HUNG_S)
    assert asyncio.run(engine.settle()) == {}  # still hung: still owed
    assert journal.debts() == {"s2": outcome.reroute_id}
    assert journal.owed(outcome.reroute_id) == ["s2"]
    for name, method in working.items():
        setattr(s2, name, method)
    done = asyncio.run(engine.settle())
    assert "removed 2 rule(s)" in done["s2"], done
    assert s2.table == {} and journal.debts() == {} and journal.owed(outcome.reroute_id) == []
    asyncio.run(engine.close())
    journal.close()


class Flaky:
    """A session that fails to open ``fails`` times, then opens."""

    def __init__(self, name: str, fails: int) -> None:
        self.name, self.fails, self.opens, self.closed = name, fails, 0, False

    async def open(self) -> None:
        self.opens += 1
        if self.opens <= self.fails:
            raise DeviceUnreachable(self.name, "connection refused")

    async def close(self) -> None:
        self.closed = True


def test_devices_open_in_the_background_and_are_not_asked_until_open() -> None:
    async def main() -> None:
        good, bad = Flaky("good", 0), Flaky("bad", 2)
        sessions: Mapping[str, Session] = {"good": good, "bad": bad}  # type: ignore[dict-item]

        async def open_one(name: str, session: Session) -> None:
            await session.open()

        devices = Devices(sessions, open_one)
        await devices.open_all(background=True, wait=0.1)
        assert devices.unready("good") is None
        error = devices.unready("bad")
        assert isinstance(error, DeviceUnreachable) and "refused" in str(error)
        assert devices.down_since("bad") is not None
        for _ in range(60):
            if devices.unready("bad") is None:
                break
            await asyncio.sleep(0.1)
        assert devices.unready("bad") is None and bad.opens == 3
        await devices.close()
        assert good.closed and bad.closed

    asyncio.run(main())


def test_devices_opened_strictly_raise_the_first_error_and_close_the_rest() -> None:
    async def main() -> None:
        good, bad = Flaky("good", 0), Flaky("bad", 1)
        sessions: Mapping[str, Session] = {"good": good, "bad": bad}  # type: ignore[dict-item]

        async def open_one(name: str, session: Session) -> None:
            await session.open()

        devices = Devices(sessions, open_one)
        with pytest.raises(DeviceUnreachable, match="bad"):
            await devices.open_all(background=False)
        assert good.closed and bad.closed

    asyncio.run(main())


def test_a_silent_device_is_hung_and_one_reconnecting_is_unreachable() -> None:
    class Silent:
        down_since: float | None = None

        async def read(self) -> None:
            await asyncio.sleep(3600)

    async def main() -> tuple[BaseException, BaseException]:
        silent, lost = Silent(), Silent()
        lost.down_since = time.time() - 3
        drivers = {"a": silent, "b": lost}
        errors = []
        for name, d in drivers.items():
            try:
                await ask(drivers, name, d.read, HUNG_S)
            except DriverError as exc:
                errors.append(exc)
        return errors[0], errors[1]

    hung, unreachable = asyncio.run(main())
    assert isinstance(hung, DeviceTimeout) and "timed out" in what_it_did(hung)
    assert isinstance(unreachable, DeviceUnreachable) and "reconnecting" in str(unreachable)
    assert "is unreachable" in what_it_did(unreachable)
