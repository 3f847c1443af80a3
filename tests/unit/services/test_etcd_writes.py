"""What one electronic MBB costs the etcd store: durable writes (Raft rounds, fsynced on a
quorum) and linearizable reads, counted by the client (``Etcd.calls``) on a real etcd.

Three durable writes per reroute (issue 30): its admission (the row and the queue), its
start (the claim, the locks), its finish (the state, the plan and every step's record, the
locks let go). The step records are not written ahead of each step: recovery plans from
the devices' own state (``engine.restore``), never from them; meanwhile the replica running
the reroute shows them from memory. A start whose answer was lost is settled, and its
reroute runs once (``tests/unit/services/lossy.py``); so is a finish whose answer was lost,
and the row says what the devices hold."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from fabric.etcdcluster import EtcdCluster
from services.reroute.engine.executor import Driver
from services.reroute.model.intent import FlowSpec
from services.reroute.model.topology import load_topology
from services.reroute.planning.electronic import initial_optics
from services.reroute.service.client import StepView
from services.reroute.service.config import Settings
from services.reroute.store.config import EtcdStore
from services.reroute.store.etcd.client import KV, StoreUnavailable
from services.reroute.store.records import RerouteState
from tests.unit.services.lossy import Lossy, LossySync, puts_under
from tests.unit.services.service.conftest import NGNCS, ServerThread, settings
from tests.unit.services.service.fakes import FakeFabric, FakeOptical

pytestmark = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is missing (make setup installs etcd-server)"
)
TOPO = load_topology(NGNCS)
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
MOVES = 10


def test_an_electronic_mbb_costs_three_durable_writes() -> None:
    """One replica, electronic MBB there and back through the API (each waited for):
    writes and reads per reroute, the lease's renewals apart. The optical switch is managed
    too, as on the real fabric: the reroute, admitted alone, starts holding every device
    and lets it all go with its finish, where narrowing to its plan (the packet switches,
    the optical ports of its circuits) would cost a write of its own."""
    with tempfile.TemporaryDirectory() as tmp, EtcdCluster(Path(tmp) / "etcd", size=1) as c:
        fake = FakeFabric(TOPO)
        ost1 = FakeOptical("ost1", {x.ingress: x.egress for x in initial_optics(TOPO)})

        @asynccontextmanager
        async def drivers(config: Settings) -> AsyncIterator[Mapping[str, Driver]]:
            async with fake.drivers(config) as switches:
                yield {**switches, "ost1": ost1}

        store = EtcdStore(kind="etcd", endpoints=tuple(c.endpoints), prefix="/writes")
        with ServerThread(settings(TOPO, Path(tmp) / "x.sqlite", store=store), drivers) as srv:
            assert "ost1" in srv.server.app.state.service.engine.managed
            calls = srv.server.app.state.service.engine.lock.etcd.calls
            client = srv.client()
            client.create([str(FLOW)], "temporary", wait_s=10)  # warm-up
            before = dict(calls)
            for n in range(MOVES):
                view = client.create([str(FLOW)], ("long", "temporary")[n % 2], wait_s=10)
                assert view.state is RerouteState.DONE, view.error
            per = {k: (calls[k] - before.get(k, 0)) / MOVES for k in ("write", "read")}
    print(f"per electronic MBB: {per['write']:.1f} durable writes, {per['read']:.1f} reads")
    assert per["write"] <= 3, per
    # the admission's one read (the queue and the key), a queue read now and then; none by
    # the waiter (the scheduler's look starts the reroute here: it waits for that look),
    # nor of the queue after the enqueue (it reads it itself), nor of the debts for the
    # answer (none left by a reroute that ended here)
    assert per["read"] <= 2, per


def test_a_running_reroutes_steps_show_on_its_replica() -> None:
    """Step records reach etcd with the finish only: meanwhile the replica running the
    reroute shows its plan and steps from memory (API and page: a read of one, a list),
    even while its lease is not sure to live (the read then goes to etcd, whose row is
    still the one this replica wrote); once finished, the records written with it."""
    with tempfile.TemporaryDirectory() as tmp, EtcdCluster(Path(tmp) / "etcd", size=1) as c:
        fake = FakeFabric(TOPO)
        store = EtcdStore(kind="etcd", endpoints=tuple(c.endpoints), prefix="/shown")
        with ServerThread(settings(TOPO, Path(tmp) / "x.sqlite", store=store), fake.drivers) as srv:
            service = srv.server.app.state.service
            service.journal.leased = lambda: False  # no answer from the lease-guarded memory
            client = srv.client()
            view = client.create([str(FLOW)], "temporary", drain_ms=1500)
            deadline = time.monotonic() + 10
            while not _draining(client.get(view.id).steps):
                assert time.monotonic() < deadline, client.get(view.id)
                time.sleep(0.01)
            assert service.engine.lock.etcd.get(f"/shown/steps/{view.id}") is None  # memory
            (listed,) = [r for r in client.list() if r.id == view.id]
            assert listed.state is RerouteState.RUNNING and _draining(listed.steps), listed
            done = client.get(view.id, wait_s=10)
            assert done.state is RerouteState.DONE, done.error
            assert done.steps and all(s.state == "done" for s in done.steps), done.steps
            assert service.engine.lock.etcd.get(f"/shown/steps/{view.id}") is not None


def test_a_start_whose_answer_was_lost_runs_its_reroute_once() -> None:
    """The lock transaction that starts a reroute (its claim, its locks, its row running)
    is applied but its answer lost, or applied and answered "not free" to the client's
    retry on the next member: the replica settles it, finds it applied and runs the
    reroute, once, and lets every lock go with its finish. (Before, it took the reroute for
    not started, then found it running under its own name with its devices held by its
    own leaked locks, for as long as it renewed its lease.)"""
    with tempfile.TemporaryDirectory() as tmp, EtcdCluster(Path(tmp) / "etcd", size=1) as c:
        fake = FakeFabric(TOPO)
        store = EtcdStore(kind="etcd", endpoints=tuple(c.endpoints), prefix="/lost")
        with ServerThread(settings(TOPO, Path(tmp) / "x.sqlite", store=store), fake.drivers) as srv:
            lock = srv.server.app.state.service.engine.lock
            net = Lossy(lock.etcd, puts_under("/claims/"))
            client = srv.client()
            for n, (lossy, to) in enumerate((("lost", "temporary"), ("twice", "long"))):
                net.plan = [lossy]
                view = client.create([str(FLOW)], to, wait_s=10)
                assert view.state is RerouteState.DONE, (lossy, view.state, view.error)
                assert not net.plan, lossy  # it was a start that was lost
                ran = [r.id for r in client.list() if r.state is RerouteState.DONE]
                assert len(ran) == n + 1 and view.id in ran, (lossy, ran)
            assert lock.etcd.get_prefix("/lost/locks/") == []
            assert lock.etcd.get_prefix("/lost/claims/") == []


def test_an_admission_whose_answer_was_lost_is_answered_as_what_it_did() -> None:
    """The enqueue applied, its answer lost: the request is answered 202 and the reroute
    runs once. Applied, its answer lost and the settling unanswered too: 503 saying the
    reroute may be done all the same, and it does run (it was queued)."""
    with tempfile.TemporaryDirectory() as tmp, EtcdCluster(Path(tmp) / "etcd", size=1) as c:
        fake = FakeFabric(TOPO)
        store = EtcdStore(kind="etcd", endpoints=tuple(c.endpoints), prefix="/admitted")
        with ServerThread(settings(TOPO, Path(tmp) / "x.sqlite", store=store), fake.drivers) as srv:
            journal = srv.server.app.state.service.journal
            enqueue = puts_under("/admitted/reroutes/")
            # the enqueue, and the settling after it (a transaction that puts nothing)
            net = LossySync(journal.etcd, lambda ops: not ops or enqueue(ops))
            client = srv.client()
            net.plan = ["lost"]
            view = client.create([str(FLOW)], "temporary", wait_s=10)
            assert view.state is RerouteState.DONE and not net.plan, view
            net.plan = ["lost", "unsent"]
            with srv.http() as http:
                answer = http.post("/v1/reroutes", json={"flows": [str(FLOW)], "to_path": "long"})
            assert answer.status_code == 503 and not net.plan, answer.text
            assert "may be done all the same" in answer.json()["detail"], answer.text
            deadline = time.monotonic() + 10
            # the flows move before the row says done (its finish is the last write)
            while (
                client.flows().get("long") != ("10.0.0.2/32>10.0.0.3/32",)
                or [r.state for r in client.list()] != [RerouteState.DONE] * 2
            ):
                assert time.monotonic() < deadline, [(r.id, r.state) for r in client.list()]
                time.sleep(0.1)


def test_a_finish_whose_answer_was_lost_is_settled_as_what_it_did() -> None:
    """The finish (the state, the steps, the locks let go) applied, its answer lost ("lost"),
    or applied and answered "changed" to the client's retry ("twice"): the replica reads
    that its row holds what it wrote and the reroute is DONE, as the devices are. Before,
    it took the finish for failed and rolled the devices back under a row saying DONE, and
    then refused the move back ("already on path"). Lost with the read that settles it
    too: the reroute rolls back, and the rollback's finish, once etcd answers, finds the
    DONE in doubt applied and writes over it: the row says what the devices hold."""
    with tempfile.TemporaryDirectory() as tmp, EtcdCluster(Path(tmp) / "etcd", size=1) as c:
        fake = FakeFabric(TOPO)
        store = EtcdStore(kind="etcd", endpoints=tuple(c.endpoints), prefix="/finished")
        with ServerThread(settings(TOPO, Path(tmp) / "x.sqlite", store=store), fake.drivers) as srv:
            journal = srv.server.app.state.service.journal
            net = LossySync(journal.etcd, puts_under("/finished/steps/"))  # the finish
            client = srv.client()
            for n, (lossy, to) in enumerate((("lost", "temporary"), ("twice", "long"))):
                net.plan = [lossy]
                view = client.create([str(FLOW)], to, wait_s=10)
                assert view.state is RerouteState.DONE and not net.plan, (lossy, view)
                assert client.flows()[to] == ("10.0.0.2/32>10.0.0.3/32",), lossy  # devices
                ended = [r.state for r in client.list()]
                assert ended == [RerouteState.DONE] * (n + 1), (lossy, ended)
            net.plan = ["lost"]
            reads = journal.etcd.get
            unread = iter([StoreUnavailable("etcd at loopback cannot be used: (test)")])

            def get(key: str) -> KV | None:
                if (exc := next(unread, None)) is not None:
                    raise exc
                return reads(key)

            journal.etcd.get = get  # type: ignore[method-assign]
            view = client.create([str(FLOW)], "temporary", wait_s=10)
            assert view.state is RerouteState.ROLLED_BACK and not net.plan, view
            assert "reading whether it was applied failed too" in (view.error or ""), view
            assert client.flows()["long"] == ("10.0.0.2/32>10.0.0.3/32",)
            (row,) = [r for r in client.list() if r.id == view.id]
            assert row.state is RerouteState.ROLLED_BACK, row
            lock = srv.server.app.state.service.engine.lock
            assert lock.etcd.get_prefix("/finished/locks/") == []
            view = client.create([str(FLOW)], "temporary", wait_s=10)  # and on it goes
            assert view.state is RerouteState.DONE, view


def _draining(steps: tuple[StepView, ...]) -> bool:
    return any(s.description.startswith("drain") and s.state == "started" for s in steps)
