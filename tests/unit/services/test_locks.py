"""Locks on resources: overlapping holders never hold at once, disjoint ones do; a set is
taken all or nothing; an optical switch's ports are locked one by one; an owner that died
is seen dead; resource keys overlap as devices and their ports do."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from services.reroute.model.topology import Topology, load_topology
from services.reroute.planning.resources import EVERYTHING, covers, overlap
from services.reroute.store.flock import FileLocks, MemoryLocks
from services.reroute.store.locks import Universe, holding

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def universe() -> Universe:
    topo: Topology = load_topology(ROOT / "topologies" / "ngncs-ost.yaml")
    return Universe.of(topo)


def test_overlapping_holders_are_serialised_and_disjoint_ones_overlap(
    tmp_path: Path, universe: Universe
) -> None:
    spans: dict[str, tuple[float, float]] = {}

    async def hold(locks: FileLocks, name: str, keys: set[str]) -> None:
        async with holding(locks, frozenset(keys)):
            start = asyncio.get_running_loop().time()
            await asyncio.sleep(0.1)
            spans[name] = (start, asyncio.get_running_loop().time())

    async def main() -> None:
        a, b, c = (FileLocks(tmp_path, universe).open() for _ in range(3))
        await asyncio.gather(
            hold(a, "br1", {"br1"}),
            hold(b, "br2", {"br2", "ost1/in1"}),
            hold(c, "all", {EVERYTHING}),
        )

    asyncio.run(main())

    def both(x: str, y: str) -> bool:
        return spans[x][0] < spans[y][1] and spans[y][0] < spans[x][1]

    assert not both("all", "br1") and not both("all", "br2")
    assert both("br1", "br2")


def test_a_set_is_taken_all_or_nothing(tmp_path: Path, universe: Universe) -> None:
    async def main() -> None:
        one, two = FileLocks(tmp_path, universe).open(), FileLocks(tmp_path, universe).open()
        held = await one.try_acquire(frozenset({"br2"}))
        assert held is not None
        assert await two.try_acquire(frozenset({"br1", "br2"})) is None
        # br1 was let go again: a third taker gets it at once
        other = await two.try_acquire(frozenset({"br1"}))
        assert other is not None
        await other.release()
        await held.release()
        assert await two.try_acquire(frozenset({"br2"})) is not None

    asyncio.run(main())


def test_an_optical_switch_is_locked_port_by_port(universe: Universe) -> None:
    async def main() -> None:
        locks = MemoryLocks(universe)
        port = await locks.try_acquire(frozenset({"ost1/in1", "ost1/out17"}))
        assert port is not None
        assert await locks.try_acquire(frozenset({"ost1/in2"})) is not None  # another port
        assert await locks.try_acquire(frozenset({"ost1"})) is None  # the whole switch
        assert await locks.try_acquire(frozenset({EVERYTHING})) is None
        await port.narrow(frozenset({"ost1/in1"}))
        assert await locks.try_acquire(frozenset({"ost1/out17"})) is not None

    asyncio.run(main())


def test_narrowing_keeps_only_what_a_plan_holds(tmp_path: Path, universe: Universe) -> None:
    async def main() -> None:
        mine, theirs = FileLocks(tmp_path, universe).open(), FileLocks(tmp_path, universe).open()
        held = await mine.try_acquire(frozenset({EVERYTHING}))
        assert held is not None
        assert await theirs.try_acquire(frozenset({"br4"})) is None
        await held.narrow(frozenset({"br1", "ost1/in3"}))
        assert held.keys == {"br1", "ost1/in3"}
        kept = await theirs.try_acquire(frozenset({"br4", "ost1/in4"}))
        assert kept is not None
        assert await theirs.try_acquire(frozenset({"ost1/in3"})) is None
        assert await held.extend(frozenset({"br2"}))
        assert not await held.extend(frozenset({"br4"}))  # taken: nothing changes
        assert held.keys == {"br1", "br2", "ost1/in3"}

    asyncio.run(main())


def test_an_owner_is_alive_while_its_process_runs(tmp_path: Path, universe: Universe) -> None:
    script = (
        "import sys, time; from pathlib import Path; "
        "from services.reroute.store.flock import FileLocks; "
        "from services.reroute.store.locks import Universe; "
        "locks = FileLocks(Path(sys.argv[1]), Universe(switches=frozenset(), ports={})).open(); "
        "print(locks.owner, flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        owner = proc.stdout.readline().strip()
        locks = FileLocks(tmp_path, universe).open()
        assert asyncio.run(locks.alive(owner))
        assert asyncio.run(locks.alive(locks.owner))
    finally:
        proc.kill()
        proc.wait()
    assert not asyncio.run(locks.alive(owner))
    assert not (tmp_path / "owners" / f"{owner}.lock").exists()
    assert not asyncio.run(locks.alive(None))  # a record from before owners were kept


def test_keys_overlap_as_devices_and_their_ports_do() -> None:
    assert overlap({"ocs2/in1"}, {"ocs2"}) and overlap({"ocs2"}, {"ocs2/out17"})
    assert not overlap({"ocs2/in1"}, {"ocs2/in2", "ocs1"})
    assert overlap({EVERYTHING}, {"leaf1"}) and not overlap(set(), {EVERYTHING})
    assert covers({"ocs2"}, {"ocs2/in1"}) and not covers({"ocs2/in1"}, {"ocs2"})
    assert covers({EVERYTHING}, {"leaf9", "ocs2/in1"})
