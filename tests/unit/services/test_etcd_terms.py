"""Device ownership in etcd (services/reroute/store/etcd/terms.py) against a real etcd member on
loopback: groups are balanced across the live replicas, a dead master's groups are taken
by the others, a master that gave a group up starts nothing more of it (its term is
compared), only the master of a queued reroute's group is woken for it, and a start on
other groups does not fail the queue's narrow guard (etcd/journal.py)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from fabric.etcdcluster import EtcdCluster
from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import parse_topology
from services.reroute.store.config import EtcdStore
from services.reroute.store.etcd import follow
from services.reroute.store.etcd.client import Etcd, EtcdSettings, put
from services.reroute.store.etcd.journal import EtcdJournal
from services.reroute.store.etcd.locks import EtcdLocks
from services.reroute.store.etcd.terms import UNIT_KEYS, Terms
from services.reroute.store.locks import Universe
from services.reroute.store.records import RerouteState
from tests.unit.services.service.conftest import ServerThread, settings
from tests.unit.services.service.fakes import FakeFabric
from tests.unit.services.test_etcd_lease import until

pytestmark = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is missing (make setup installs etcd-server)"
)
# six rack pairs: leaf1+leaf2 is group leaf1, ...
GROUPS = {f"leaf{i}": f"leaf{i - (i + 1) % 2}" for i in range(1, 13)}
UNIVERSE = Universe(switches=frozenset(GROUPS), ports={})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), size=1) as members:
        yield members


async def replica(cluster: EtcdCluster, prefix: str) -> Terms:
    """A replica's locks and terms, on a client of its own (as a process has)."""
    etcd = Etcd(EtcdSettings(endpoints=tuple(cluster.endpoints)))
    locks = await EtcdLocks(etcd, prefix, UNIVERSE, lock_delay_s=0).open()
    locks.terms = Terms(locks, GROUPS)
    return await locks.terms.open()


async def stop(terms: Terms) -> None:
    """A replica gone: its lease revoked, its terms with it (a second stop does nothing)."""
    await terms.close()
    await terms.locks.close()
    await terms.locks.etcd.aclose()


@asynccontextmanager
async def replicas(cluster: EtcdCluster, prefix: str, count: int) -> AsyncIterator[list[Terms]]:
    started = [await replica(cluster, prefix) for _ in range(count)]
    try:
        yield started
    finally:
        for terms in started:
            await stop(terms)


def shares(terms: list[Terms]) -> list[int]:
    """How many groups each replica masters, every group by exactly one of them."""
    held = [t.held() for t in terms]
    flat = sorted(g for h in held for g in h)
    return sorted(len(h) for h in held) if flat == sorted(set(GROUPS.values())) else []


def test_groups_are_balanced_and_a_leaving_or_dead_master_s_are_taken(
    cluster: EtcdCluster,
) -> None:
    async def main() -> None:
        async with replicas(cluster, "/t/terms", 3) as (a, b, c):
            await until(lambda: shares([a, b, c]) == [2, 2, 2], 5)
            await until(lambda: a.owners() == b.owners() == c.owners(), 5)  # each knows all
            assert not a.alone()  # so its admissions are planned ahead (scheduler.busy)
            await c.step_down()  # draining: its groups go while its lease still lives
            await until(lambda: shares([a, b]) == [3, 3], 5)
            assert c.locks.valid_for() > 0 and not c.held()
            before = max(term for _, term in a.masters.values())
            await stop(b)  # dead: its terms go with its lease
            await until(lambda: shares([a]) == [6], 5)
            await until(a.alone, 5)  # c stands no more, b is gone
            assert sum(term > before for _, term in a.masters.values()) == 3  # new terms

    asyncio.run(main())


def test_a_master_that_gave_a_group_up_starts_nothing_of_it(cluster: EtcdCluster) -> None:
    async def main() -> None:
        async with replicas(cluster, "/t/resign", 2) as (a, b):
            await until(lambda: shares([a, b]) == [3, 3], 5)
            fences = {g: a.fences({g}) for g in a.held()}
            c = await replica(cluster, "/t/resign")
            try:
                await until(lambda: shares([a, b, c]) == [2, 2, 2], 5)
                lost = next(g for g in fences if g not in a.held())
                assert not a.mine({lost}) and (b.mine({lost}) or c.mine({lost}))
                old = a.locks
                assert await old.try_acquire(frozenset({lost}), extra=fences[lost]) is None
                kept = a.held()[0]
                held = await old.try_acquire(frozenset({kept}), extra=a.fences({kept}))
                assert held is not None  # a term it holds passes
                await held.release()
            finally:
                await stop(c)

    asyncio.run(main())


def test_only_the_master_of_a_queued_reroute_s_group_wakes(cluster: EtcdCluster) -> None:
    async def main() -> None:
        async with replicas(cluster, "/t/wake", 2) as (a, b):
            await until(lambda: shares([a, b]) == [3, 3], 5)
            await asyncio.sleep(0.3)  # the terms' own changes seen
            group = b.held()[0]
            a.locks.changed.clear()
            b.locks.changed.clear()
            client = Etcd(EtcdSettings(endpoints=tuple(cluster.endpoints)))
            try:  # another replica queues a reroute on b's devices
                await client.atxn([], [put("/t/wake/pending/q1", group.encode())])
                await until(lambda: b.locks.changed.is_set(), 2)
                assert not a.locks.changed.is_set()
                await client.atxn([], [put("/t/wake/pending/q2", b"")])  # unlabelled: all
                await until(lambda: a.locks.changed.is_set(), 2)
            finally:
                await client.aclose()

    asyncio.run(main())


def test_a_start_on_other_groups_does_not_fail_the_queue_s_narrow_guard(
    cluster: EtcdCluster,
) -> None:
    """The queue's guard fails a lock transaction only for a reroute started since the read
    on its groups (or ports), not for one on another master's groups; a replica's own start
    moves its guard past that start on the groups it marked busy."""
    intent = Intent(flows=(FlowSpec.parse("10.0.0.2>10.0.0.3"),), to_path="temporary")

    async def main() -> None:
        clients = [Etcd(EtcdSettings(endpoints=tuple(cluster.endpoints))) for _ in range(2)]
        (a, ja), (b, jb) = [await wired(c, "/t/narrow") for c in clients]
        try:
            for n, device in (("r1", "leaf1"), ("r2", "leaf3"), ("r3", "leaf2")):
                ja.enqueue(n, intent, resources=frozenset({device}))
            seen_b = jb.queue()
            seen_a = ja.queue()
            r1 = frozenset({"leaf1"})
            assert await a.try_acquire(r1, claim="r1", extra=seen_a.guard_for(r1))
            leaf3, leaf2 = frozenset({"leaf3"}), frozenset({"leaf2"})
            assert await b.try_acquire(leaf3, extra=seen_b.guard) is None  # broad: fails
            assert await b.try_acquire(leaf3, claim="r2", extra=seen_b.guard_for(leaf3))
            assert await b.try_acquire(leaf2, claim="r3", extra=seen_b.guard_for(leaf2)) is None
            moved = ja.rebase(seen_a)  # a's own start on group leaf1: its guard moves
            assert await a.try_acquire(leaf2, claim="r3", extra=moved.guard_for(leaf2))
        finally:
            for locks in (a, b):
                await locks.close()
            for client in clients:
                await client.aclose()

    asyncio.run(main())


async def wired(etcd: Etcd, prefix: str) -> tuple[EtcdLocks, EtcdJournal]:
    """A replica's locks and journal as ``open_etcd`` joins them, with GROUPS' units."""
    locks = await EtcdLocks(etcd, prefix, UNIVERSE, lock_delay_s=0).open()
    journal = EtcdJournal(etcd, prefix)
    follow(journal, locks)
    journal.units = lambda keys: sorted({GROUPS[k] for k in keys})
    return locks, journal


def test_a_reroute_sent_to_any_replica_runs_on_its_devices_master(
    cluster: EtcdCluster, tmp_path: Path
) -> None:
    """Two replicas of the service split a leaf-spine fabric's two groups (its rack pairs'
    leaves); a move of rack pair 1-2 sent to the replica that does not master leaf1 is run
    by the one that does; the health and the metrics name the masters."""
    topo = parse_topology(to_yaml(leaf_spine(racks=4, spines=2, ocs=0, name="own4")))
    store = EtcdStore(kind="etcd", endpoints=tuple(cluster.endpoints), prefix="/t/route")
    config = settings(topo, tmp_path / "unused.sqlite", store=store)
    fake = FakeFabric(topo)
    with (
        ServerThread(config, fake.drivers) as a,  # type: ignore[arg-type]
        ServerThread(config, fake.drivers) as b,  # type: ignore[arg-type]
    ):
        deadline = time.monotonic() + 10
        while True:  # balanced, and a knows b's terms (its watch)
            health = {s: s.http().get("/healthz").json() for s in (a, b)}
            devices = a.http().get("/v1/health").json()["devices"]
            owners = {d["name"]: d["owner"] for d in devices}
            masters = {health[a]["replica"], health[b]["replica"]}
            balanced = sorted(len(h["groups"]) for h in health.values()) == [1, 1]
            if balanced and {owners[f"leaf{i}"] for i in range(1, 5)} == masters:
                break
            assert time.monotonic() < deadline, (health, owners)
            time.sleep(0.05)
        master = owners["leaf1"]
        other = b if health[a]["replica"] == master else a
        path = topo.paths["r1-2-s2"]
        view = other.client().create([f"{path.src_ip}>{path.dst_ip}"], "r1-2-s2", wait_s=10)
        assert view.state is RerouteState.DONE, view.error
        etcd = Etcd(EtcdSettings(endpoints=tuple(cluster.endpoints)))
        try:
            record = EtcdJournal(etcd, "/t/route").get(view.id)
        finally:
            etcd.close()
        assert record is not None and record.owner == master
        assert owners["spine1"] == ""  # in no group: its locks alone coordinate it
        assert "reroute_groups_mastered 1.0" in other.http().get("/metrics").text


def test_the_widest_start_under_a_narrow_guard_fits_one_etcd_transaction(
    cluster: EtcdCluster,
) -> None:
    """A reroute of ``UNIT_KEYS`` keys, all ports of an unfenced optical switch (4 compares
    each, the most a key costs), starts with its claim, its row and one compare per unit in
    one transaction that etcd accepts (128 compares at most); one key more falls back to
    the broad guard."""
    ports = tuple(f"ocs/in{i}" for i in range(UNIT_KEYS + 1))
    universe = Universe(switches=frozenset(), ports={"ocs": ports}, unfenced=frozenset({"ocs"}))
    intent = Intent(flows=(FlowSpec.parse("10.0.0.2>10.0.0.3"),), to_path="temporary")

    async def main() -> None:
        etcd = Etcd(EtcdSettings(endpoints=tuple(cluster.endpoints)))
        locks = await EtcdLocks(etcd, "/t/wide", universe, lock_delay_s=0).open()
        journal = EtcdJournal(etcd, "/t/wide")
        follow(journal, locks)
        journal.units = lambda keys: None if len(keys) > UNIT_KEYS else sorted(keys)
        try:
            widest = frozenset(ports[:UNIT_KEYS])
            journal.enqueue("w1", intent, resources=widest)
            seen = journal.queue()
            assert len(seen.guard_for(widest)) == UNIT_KEYS + 1  # its units and "*"
            held = await locks.try_acquire(widest, claim="w1", extra=seen.guard_for(widest))
            assert held is not None
            assert len(seen.guard_for(frozenset(ports))) == 1  # the broad guard
        finally:
            await locks.close()
            await etcd.aclose()

    asyncio.run(main())
