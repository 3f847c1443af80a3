"""The etcd store against real etcd members on loopback (Debian's etcd-server): the journal
keeps what the SQLite one keeps; a replica whose lease expired writes nothing; locks and
claims hold across owners; two replicas of the service share one queue and journal; and
without quorum the API answers 503 naming etcd, touching no device, until quorum returns."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from drivers.base import FlowChange
from fabric.etcdcluster import EtcdCluster
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology, load_topology
from services.reroute.planning import plan
from services.reroute.planning.resources import EVERYTHING
from services.reroute.rules import initial_rules
from services.reroute.store.config import EtcdStore
from services.reroute.store.etcd import follow
from services.reroute.store.etcd.client import Etcd, EtcdSettings
from services.reroute.store.etcd.journal import VOID_KEPT_S, EtcdJournal
from services.reroute.store.etcd.locks import EtcdLocks, holder
from services.reroute.store.locks import Universe
from services.reroute.store.records import (
    InDoubt,
    JournalError,
    LeaseLost,
    Queue,
    RerouteState,
    Retention,
    StepState,
)
from services.reroute.tables import tables_from
from tests.unit.services.lossy import LossySync
from tests.unit.services.service.conftest import NGNCS, ServerThread, settings
from tests.unit.services.service.fakes import FakeFabric, FakeSwitch
from tests.unit.services.test_etcd_lease import until

pytestmark = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is missing (make setup installs etcd-server)"
)
TOPO = load_topology(NGNCS)
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
START = tables_from(initial_rules(TOPO))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), size=3) as members:
        yield members


def etcd_of(cluster: EtcdCluster) -> Etcd:
    return Etcd(EtcdSettings(endpoints=tuple(cluster.endpoints)))


def test_the_journal_in_etcd_keeps_what_the_sqlite_one_keeps(cluster: EtcdCluster) -> None:
    journal = EtcdJournal(etcd_of(cluster), "/test/journal")
    journal.enqueue("a", Intent(flows=(FLOW,), to_path="temporary"), idem_key="k", fingerprint="f")
    with pytest.raises(JournalError, match="exists"):
        journal.enqueue("b", Intent(flows=(FLOW,), to_path="short"), idem_key="k")
    assert [r.id for r in journal.pending()] == ["a"] and journal.by_key("k") is not None
    moved = plan(TOPO, START, Intent(flows=(FLOW,), to_path="temporary"), now=0.0)
    journal.create("a", moved, owner="me", resources=frozenset({"br1"}))
    with pytest.raises(JournalError, match="not pending"):
        journal.create("a", moved)  # never run twice
    journal.steps_started("a", range(2))
    journal.steps_ended("a", [(0, StepState.DONE, None), (1, StepState.FAILED, "boom")])
    assert journal.pending() == [] and [r.id for r in journal.in_flight()] == ["a"]
    journal.finish("a", RerouteState.ROLLED_BACK, "boom")
    record = journal.get("a")
    assert record is not None and record.state is RerouteState.ROLLED_BACK
    assert record.owner == "me" and record.resources == {"br1"}
    assert [s.state for s in journal.steps("a")] == [StepState.DONE, StepState.FAILED]
    assert journal.in_flight() == []
    assert [r.id for r in journal.history(10, flows=(FLOW,))] == ["a"]
    assert journal.history(10, state=RerouteState.DONE) == []
    journal.enqueue("c", Intent(flows=(FLOW,), to_path="short"))
    assert journal.cancel("c") and not journal.cancel("c")
    assert journal.prune(Retention(reroutes=1)) == 1  # a (c is newer)
    assert journal.get("a") is None and journal.settled() == {FLOW: "long"}  # its origins


def test_an_enqueue_in_doubt_is_settled_queued_once_or_never(cluster: EtcdCluster) -> None:
    """An enqueue applied but its answer lost, or applied and answered "exists" to the
    client's retry: settled as applied, queued once, no error (before: a 503, or the key's
    "exists", for a reroute that then ran). One stuck and not answered: settled as never
    applied (its void key put), an error, and its late arrival is refused. A settling that
    gets no answer either says the reroute may be queued all the same."""
    etcd = etcd_of(cluster)
    journal = EtcdJournal(etcd, "/test/doubt")
    net = LossySync(etcd)
    intent = Intent(flows=(FLOW,), to_path="temporary")
    for n, what in enumerate(("lost", "twice"), start=1):
        net.plan = [what]
        journal.enqueue(f"r{n}", intent, idem_key=f"k{n}")
        assert not net.plan, what
        assert [r.id for r in journal.pending()] == [f"r{i}" for i in range(1, n + 1)], what
    net.plan = ["stuck"]
    with pytest.raises(JournalError, match="no answer") as refused:
        journal.enqueue("r3", intent, idem_key="k3")
    assert not isinstance(refused.value, InDoubt)  # known: never applied
    assert etcd.get("/test/doubt/unqueued/r3") is not None
    (late,) = net.deliver()
    assert not late.succeeded  # refused: settled as never applied
    assert [r.id for r in journal.pending()] == ["r1", "r2"] and journal.by_key("k3") is None
    net.plan = ["lost", "unsent"]
    with pytest.raises(InDoubt, match="r4 may be queued all the same"):
        journal.enqueue("r4", intent)
    assert [r.id for r in journal.pending()] == ["r1", "r2", "r4"]  # it was
    journal.prune(Retention(reroutes=100), now=time.time() + VOID_KEPT_S + 1)
    assert etcd.get("/test/doubt/unqueued/r3") is None  # void keys do not pile up
    assert [r.id for r in journal.pending()] == ["r1", "r2", "r4"]


def test_what_a_reroute_ended_here_owes_is_known_without_a_read(cluster: EtcdCluster) -> None:
    """A reroute that ended on this replica and left no debt owes none: its view reads
    nothing; one that left a debt is read (it may be paid by any replica), as is every
    reroute on a replica that did not run it."""
    journal = EtcdJournal(etcd_of(cluster), "/test/owed")
    other = EtcdJournal(etcd_of(cluster), "/test/owed")
    moved = plan(TOPO, START, Intent(flows=(FLOW,), to_path="temporary"), now=0.0)
    for reroute_id in ("clear", "owing"):
        journal.create(reroute_id, moved, owner="me")
        journal.finish(reroute_id, RerouteState.DONE)
    journal.owe(["s2", "s1"], "owing")
    reads = journal.etcd.calls["read"]
    assert journal.owed("clear") == [] and journal.etcd.calls["read"] == reads
    assert journal.owed("owing") == ["s1", "s2"] == other.owed("owing")
    assert journal.etcd.calls["read"] == reads + 1 and other.owed("clear") == []
    other.paid("s1")
    assert journal.owed("owing") == ["s2"] and journal.debts() == {"s2": "owing"}
    for j in (journal, other):
        j.etcd.close()


def test_the_queue_an_enqueue_read_is_reused_once_while_nothing_changed(
    cluster: EtcdCluster,
) -> None:
    """The scheduler's look after an admission takes the queue the enqueue's transaction
    read (only the others' rows are read), once; not after a change of another replica the
    watch told of since, nor after a write of its own."""

    async def main() -> None:
        etcd = etcd_of(cluster)
        locks = await EtcdLocks(etcd, "/test/reuse", Universe.of(TOPO)).open()
        journal = EtcdJournal(etcd, "/test/reuse")
        follow(journal, locks)
        await asyncio.wait_for(locks.watching.wait(), 5)  # it tells of changes from then on
        other = EtcdJournal(etcd_of(cluster), "/test/reuse")
        intent = Intent(flows=(FLOW,), to_path="temporary")

        async def theirs(reroute_id: str) -> None:
            nudged = locks.nudges
            other.enqueue(reroute_id, intent)
            await until(lambda: locks.nudges > nudged, 5)  # the watch told of it

        def ids(queue: Queue) -> list[str]:
            return [r.id for r in queue.pending]

        await theirs("t1")
        await asyncio.to_thread(journal.enqueue, "m1", intent)
        reads = etcd.calls["read"]
        reused = await asyncio.to_thread(journal.queue, reuse=True)
        assert ids(reused) == ["t1", "m1"] and etcd.calls["read"] == reads + 1  # t1's row
        fresh = journal.queue()
        assert (ids(fresh), fresh.revision) == (ids(reused), reused.revision)
        assert journal.start_ops("m1", locks.owner, frozenset({"br1"})) is not None  # its row
        journal.queue(reuse=True)
        assert etcd.calls["read"] == reads + 3 + 2  # once only: the second look reads

        await asyncio.to_thread(journal.enqueue, "m2", intent)
        await theirs("t2")  # after it: read
        assert ids(await asyncio.to_thread(journal.queue, reuse=True)) == ["t1", "m1", "m2", "t2"]
        await asyncio.to_thread(journal.enqueue, "m3", intent)
        assert journal.cancel("m2")  # a write of its own after it: read
        assert ids(await asyncio.to_thread(journal.queue, reuse=True)) == ["t1", "m1", "t2", "m3"]
        other.etcd.close()
        await locks.close()
        await etcd.aclose()

    asyncio.run(main())


def test_a_replica_whose_lease_expired_writes_nothing(cluster: EtcdCluster) -> None:
    async def main() -> None:
        etcd = etcd_of(cluster)
        locks = await EtcdLocks(etcd, "/test/fence", Universe.of(TOPO)).open()
        journal = EtcdJournal(etcd, "/test/fence")
        journal.fence = locks.fence()
        moved = plan(TOPO, START, Intent(flows=(FLOW,), to_path="temporary"), now=0.0)
        journal.create("r", moved, owner=locks.owner)
        journal.steps_started("r", range(1))  # kept here, written with the finish
        await etcd.revoke(locks.lease)  # as if it expired: paused, or cut off from etcd
        with pytest.raises(LeaseLost, match="lease"):
            journal.finish("r", RerouteState.DONE, None, [(0, StepState.DONE, None)])
        other = EtcdJournal(etcd_of(cluster), "/test/fence")  # another replica reads
        record = other.get("r")
        assert record is not None and record.state is RerouteState.RUNNING  # to recover
        assert other.steps("r") == []  # the step records are never in etcd ahead
        other.etcd.close()
        await locks.close()
        await etcd.aclose()

    asyncio.run(main())


def test_locks_and_claims_hold_across_owners(cluster: EtcdCluster) -> None:
    async def main() -> None:
        etcd = etcd_of(cluster)
        universe = Universe.of(TOPO)
        one = await EtcdLocks(etcd, "/test/locks", universe).open()
        two = await EtcdLocks(etcd, "/test/locks", universe).open()
        journal = EtcdJournal(etcd, "/test/locks")
        journal.enqueue("q", Intent(flows=(FLOW,), to_path="temporary"))
        held = await one.try_acquire(frozenset({EVERYTHING}), claim="q")
        assert held is not None and held.revision("br1") > 0
        assert await two.try_acquire(frozenset({"br4"})) is None
        assert await two.try_acquire(frozenset(), claim="q") is None  # claimed by one
        await held.narrow(frozenset({"br1", "ost1/in2"}))
        other = await two.try_acquire(frozenset({"br4", "ost1/in3"}))
        assert other is not None
        assert await two.try_acquire(frozenset({"ost1"})) is None  # a port of it is held
        assert await one.alive(two.owner) and await two.alive(one.owner)
        await one.close()  # its lease revoked: its locks and claim go at once
        assert not await two.alive(one.owner)
        assert await two.try_acquire(frozenset({"br1", "ost1/in2"})) is not None
        await two.close()
        await etcd.aclose()

    asyncio.run(main())


def test_a_rebuilt_cluster_fences_with_tokens_above_the_old_ones(
    cluster: EtcdCluster, tmp_path: Path
) -> None:
    """A switch keeps the highest generation it saw; a new etcd counts revisions from 1: its
    epoch (the second it was first met) puts its tokens above every token of the old."""

    async def tokens(members: EtcdCluster) -> tuple[int, int]:
        etcd = etcd_of(members)
        locks = await EtcdLocks(etcd, "/test/epoch", Universe.of(TOPO)).open()
        taken = []
        for _ in range(2):
            held = await locks.try_acquire(frozenset({"br1"}))
            assert held is not None
            taken.append(held.revision("br1"))
            await held.release()
        await locks.close()
        await etcd.aclose()
        return taken[0], taken[1]

    old = asyncio.run(tokens(cluster))
    for _ in range(1000):
        writes = etcd_of(cluster)
        writes.txn([], [])  # the old cluster's revisions run far ahead of the new one's
        writes.close()
    time.sleep(1.0)  # epochs are seconds
    with EtcdCluster(tmp_path / "rebuilt", size=1) as rebuilt:
        new = asyncio.run(tokens(rebuilt))
    assert old[0] < old[1] < new[0] < new[1]
    assert (new[0] & (2**33 - 1)) < (old[0] & (2**33 - 1))  # the revisions alone: stale


def _replica(topo: Topology, tmp: Path, cluster: EtcdCluster, prefix: str) -> object:
    store = EtcdStore(kind="etcd", endpoints=tuple(cluster.endpoints), prefix=prefix)
    return settings(topo, tmp / "unused.sqlite", store=store)


def test_two_replicas_share_one_queue_and_journal(cluster: EtcdCluster, tmp_path: Path) -> None:
    fake = FakeFabric(TOPO)
    config = _replica(TOPO, tmp_path, cluster, "/test/replicas")
    with (
        ServerThread(config, fake.drivers) as a,  # type: ignore[arg-type]
        ServerThread(config, fake.drivers) as b,  # type: ignore[arg-type]
    ):
        view = a.client().create([str(FLOW)], "temporary", wait_s=10)
        assert view.state is RerouteState.DONE, view.error
        assert b.client().get(view.id).state is RerouteState.DONE  # read from etcd
        back = b.client().create([str(FLOW)], "long", wait_s=10)
        assert back.state is RerouteState.DONE, back.error
        assert [v.id for v in a.client().list()] == [back.id, view.id]
        assert a.client().flows()["long"] == ("10.0.0.2/32>10.0.0.3/32",)


def test_without_quorum_the_api_answers_503_and_touches_nothing(
    tmp_path: Path,
) -> None:
    fake = FakeFabric(TOPO)
    with EtcdCluster(tmp_path / "etcd", size=3) as members:
        config = _replica(TOPO, tmp_path, members, "/test/quorum")
        with ServerThread(config, fake.drivers) as srv:  # type: ignore[arg-type]
            members.kill("m1")  # one member lost: reroutes go on
            # once the two left have a leader: when m1 led, they elect one (etcd's election
            # timeout, 1 s), and until then the replica answers 503, which the client retries
            one = srv.client(retries=7).create([str(FLOW)], "temporary", wait_s=10)
            assert one.state is RerouteState.DONE, one.error
            before = fake.snapshot()
            members.kill("m2")  # no quorum
            with srv.http() as http:
                answer = http.post("/v1/reroutes", json={"flows": [str(FLOW)], "to_path": "long"})
            assert answer.status_code == 503, answer.text
            assert "etcd" in answer.json()["detail"]
            assert fake.snapshot() == before
            members.restart("m1")  # quorum again: within a few seconds, service resumes
            # the client's own retries of a 503 (same Idempotency-Key), ~6 s in all: the
            # replica fails its etcd calls at once until its client saw an answer again
            back = srv.client(retries=7).create([str(FLOW)], "long", wait_s=10)
            assert back.state is RerouteState.DONE, back.error


def test_overlapping_requests_to_three_replicas_never_run_at_once(
    cluster: EtcdCluster, tmp_path: Path
) -> None:
    """40 requests moving one flow, sent to three replicas at once: each gets one answer,
    and no two of them ever ran at the same time (one device, one reroute)."""
    from concurrent.futures import ThreadPoolExecutor

    fake = FakeFabric(TOPO)
    config = _replica(TOPO, tmp_path, cluster, "/test/hammer")
    with (
        ServerThread(config, fake.drivers) as a,  # type: ignore[arg-type]
        ServerThread(config, fake.drivers) as b,  # type: ignore[arg-type]
        ServerThread(config, fake.drivers) as c,  # type: ignore[arg-type]
    ):
        targets = ["temporary", "long", "long"]  # the same condition asked twice, too
        jobs = [((a, b, c)[n % 3], targets[n // 3 % 3]) for n in range(40)]

        def send(job: tuple[ServerThread, str]) -> str:
            srv, to = job
            return srv.client().create([str(FLOW)], to).id

        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(send, jobs))
        assert len(set(ids)) == 40  # one reroute per request
        views = [a.client().get(i, wait_s=60) for i in ids]
    assert all(v.final for v in views), [v.state for v in views]
    ran = sorted((v.started, v.finished) for v in views if v.started and v.finished)
    assert ran and all(ran[i][1] <= ran[i + 1][0] for i in range(len(ran) - 1)), ran
    # (rolled back: a replica whose loop stalled past its lease margin on a busy machine
    # stops before a step, and the reroute is recovered)
    assert {v.state for v in views} <= {
        RerouteState.DONE, RerouteState.REJECTED, RerouteState.ROLLED_BACK,
    }  # fmt: skip


def test_a_reroute_runs_in_etcd_before_a_device_is_written_its_steps_after(
    cluster: EtcdCluster, tmp_path: Path
) -> None:
    """At the moment a switch is written, a second client reads etcd: the reroute runs,
    under this replica, holding the switch (what a takeover needs: it plans from the
    devices); no step record is there yet. Once done, every step's record is (written
    with the finish, in the same transaction that lets the locks go)."""
    fake = FakeFabric(TOPO)
    prefix = "/test/ahead/"
    reader = etcd_of(cluster)
    seen: list[tuple[str, str, list[str]]] = []  # (device, state, its steps started, open)

    def watched(switch: FakeSwitch) -> None:
        apply = switch.apply

        async def apply_read(changes: Sequence[FlowChange]) -> None:
            (running,) = reader.get_prefix(prefix + "running/")
            rid = running.key.rsplit("/", 1)[1]
            row, steps = reader.get(prefix + "reroutes/" + rid), reader.get(prefix + "steps/" + rid)
            assert row is not None and steps is None
            lock = reader.get(prefix + "locks/" + switch.name)
            owner = json.loads(row.value)["owner"]
            held = [owner] if lock is not None and holder(lock.value) == owner else []
            seen.append((switch.name, json.loads(row.value)["state"], held))
            await apply(changes)

        switch.apply = apply_read  # type: ignore[method-assign]

    for switch in fake.switches.values():
        watched(switch)
    config = _replica(TOPO, tmp_path, cluster, prefix.rstrip("/"))
    with ServerThread(config, fake.drivers) as srv:  # type: ignore[arg-type]
        view = srv.client().create([str(FLOW)], "temporary", wait_s=10)
        assert view.state is RerouteState.DONE, view.error
        steps = reader.get(prefix + "steps/" + view.id)
        assert reader.get_prefix(prefix + "locks/") == []  # let go with the finish
    reader.close()
    assert len(seen) >= 3  # make, shift, remove
    for device, state, held in seen:
        assert state == "running" and held, (device, state, held)
    assert steps is not None
    assert {s[1] for s in json.loads(steps.value)} == {"done"}


def test_a_replica_whose_lease_expired_writes_no_batch_boundary(cluster: EtcdCluster) -> None:
    """The writes that carry step records (the checkpoint, the finish) are fenced like the
    others: refused once the lease is gone, nothing of them stored (the starts and ends
    of steps are kept in memory until then)."""

    async def main() -> None:
        etcd = etcd_of(cluster)
        locks = await EtcdLocks(etcd, "/test/fence2", Universe.of(TOPO)).open()
        journal = EtcdJournal(etcd, "/test/fence2")
        journal.fence = locks.fence()
        moved = plan(TOPO, START, Intent(flows=(FLOW,), to_path="temporary"), now=0.0)
        journal.create("r", moved, owner=locks.owner)
        journal.steps_started("r", range(1))
        await etcd.revoke(locks.lease)  # as if it expired: paused, or cut off from etcd
        done = [(0, StepState.DONE, None)]
        journal.steps_started("r", range(1, 2), done)
        with pytest.raises(LeaseLost, match="lease"):
            journal.checkpoint("r", moved.origins, done)
        with pytest.raises(LeaseLost, match="lease"):
            journal.finish("r", RerouteState.DONE, None, done)
        other = EtcdJournal(etcd_of(cluster), "/test/fence2")  # another replica reads
        record = other.get("r")
        assert record is not None and record.state is RerouteState.RUNNING
        assert other.steps("r") == []
        here = [(s.index, s.state) for s in journal.steps("r")]
        assert here == [(0, StepState.DONE), (1, StepState.STARTED)]
        other.etcd.close()
        await locks.close()
        await etcd.aclose()

    asyncio.run(main())


def test_a_reroute_changed_by_another_replica_is_judged_as_it_is_now(
    cluster: EtcdCluster,
) -> None:
    """``create`` compares the pending row this replica last read: changed since by another
    replica (its resources), it is read again; cancelled, it is not run."""
    one = EtcdJournal(etcd_of(cluster), "/test/seen")
    two = EtcdJournal(etcd_of(cluster), "/test/seen")
    moved = plan(TOPO, START, Intent(flows=(FLOW,), to_path="temporary"), now=0.0)
    for rid in ("x", "y"):
        one.enqueue(rid, Intent(flows=(FLOW,), to_path="temporary"))
        assert one.get(rid) is not None  # read here: pending
    assert two.cancel("x")
    with pytest.raises(JournalError, match="not pending"):
        one.create("x", moved, owner="one")
    two.expect("y", frozenset({"br1"}))
    one.create("y", moved, owner="one", resources=frozenset({"br2"}))
    one.finish("y", RerouteState.DONE)
    record = two.get("y")  # what one wrote, read by the other
    assert record is not None and record.state is RerouteState.DONE and record.owner == "one"
    assert record.resources == {"br2"}
    assert two.get("x") is not None and two.get("x").state is RerouteState.CANCELLED  # type: ignore[union-attr]
    one.etcd.close()
    two.etcd.close()


def test_the_watch_wakes_a_replica_on_other_replicas_changes_only(cluster: EtcdCluster) -> None:
    """Its own changes wake its scheduler directly (each wake costs a read of the queue);
    another replica's resources let go wake it."""

    async def main() -> None:
        universe = Universe.of(TOPO)
        one = await EtcdLocks(etcd_of(cluster), "/test/wake", universe).open()
        two = await EtcdLocks(etcd_of(cluster), "/test/wake", universe).open()
        for locks in (one, two):  # both watches up
            await asyncio.wait_for(locks.watching.wait(), 5)
        one.changed.clear()
        EtcdJournal(one.etcd, "/test/wake").enqueue("q", Intent(flows=(FLOW,), to_path="long"))
        held = await one.try_acquire(frozenset({"br1"}), claim="q")
        assert held is not None
        await held.release()
        with pytest.raises(TimeoutError):  # none of those woke it
            await asyncio.wait_for(one.changed.wait(), 0.5)
        other = await two.try_acquire(frozenset({"br4"}))  # taken: starts nothing
        assert other is not None
        await other.release()
        await asyncio.wait_for(one.changed.wait(), 5)  # let go by another replica
        for locks in (one, two):
            await locks.close()
            await locks.etcd.aclose()

    asyncio.run(main())
