"""The lease of a replica on etcd: a lost lease is taken again under a new owner (nothing of
the old one resumes) and health says so while there is none; the fence compares the owner
key's creation; no blocking etcd call outlives the lease (one deadline across endpoints,
bounded by the lease), and no step starts with less lease than its cap and a margin.

Real etcd members on loopback; cut off through ``tests/e2e/service/partition.py``'s relays
(a black hole: no answer, no reset)."""

from __future__ import annotations

import asyncio
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from drivers.base import FlowChange
from fabric.etcdcluster import EtcdCluster
from services.reroute.engine.executor import Executor, Outcome, StepEvent
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning import plan
from services.reroute.rules import initial_rules
from services.reroute.store.config import EtcdStore
from services.reroute.store.etcd import follow
from services.reroute.store.etcd.client import Etcd, EtcdSettings, StoreUnavailable, put
from services.reroute.store.etcd.journal import EtcdJournal
from services.reroute.store.etcd.locks import EtcdLocks
from services.reroute.store.locks import Universe
from services.reroute.store.records import RerouteState, StepState
from services.reroute.store.sqlite import Journal
from services.reroute.tables import tables_from
from tests.e2e.service.partition import Partition, partitionable
from tests.unit.services.service.conftest import NGNCS, ServerThread, settings
from tests.unit.services.service.fakes import FakeFabric

pytestmark = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is missing (make setup installs etcd-server)"
)
TOPO = load_topology(NGNCS)
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
START = tables_from(initial_rules(TOPO))
MOVED = plan(TOPO, START, Intent(flows=(FLOW,), to_path="temporary"), now=0.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), size=3) as members:
        yield members


def etcd_of(endpoints: Sequence[str], timeout_s: float = 1.0) -> Etcd:
    return Etcd(EtcdSettings(endpoints=tuple(endpoints), timeout_s=timeout_s))


async def until(check: Callable[[], bool], within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "not within time"
        await asyncio.sleep(0.02)


# -- a lost lease -----------------------------------------------------------------------


def test_a_lost_lease_is_taken_again_under_a_new_owner(cluster: EtcdCluster) -> None:
    """etcd says the lease expired (revoked here, as after a pause or a cut): the replica
    takes a new lease under a new owner; the old owner is dead for everyone (its reroutes
    are taken over), its fence keeps failing, a run begun under it sees no lease; the
    journal writes as the new owner."""

    async def main() -> None:
        etcd = etcd_of(cluster.endpoints)
        locks = await EtcdLocks(etcd, "/test/relet", Universe.of(TOPO), ttl_s=1).open()
        journal = EtcdJournal(etcd, "/test/relet")
        follow(journal, locks)
        old, old_fence, old_run = locks.owner, locks.fence(), locks.lease_left
        journal.create("r", MOVED, owner=old)
        await etcd.revoke(locks.lease)
        await until(lambda: locks.owner != old, within_s=5)
        assert locks.owner.startswith(old) and (locks.lease_left() or 0) > 0
        assert not await locks.alive(old) and await locks.alive(locks.owner)
        assert not (await etcd.atxn(old_fence, [put("/test/relet/x", b"")])).succeeded
        assert old_run() == -float("inf")  # a run begun under the old lease goes no further
        fake = FakeFabric(TOPO)
        before = fake.snapshot()
        stale = Executor(fake.switches, journal, lease=old_run, lease_step_s=locks.step_s)  # type: ignore[arg-type]
        outcome = await stale.run("q", MOVED, owner=old)
        assert outcome.state is RerouteState.RUNNING and fake.snapshot() == before
        journal.create("s", MOVED, owner=locks.owner)  # the new owner writes
        journal.steps_started("s", range(1))
        record = journal.get("r")
        assert record is not None and record.state is RerouteState.RUNNING  # for a takeover
        await locks.close()
        await etcd.aclose()

    asyncio.run(main())


def test_the_fence_compares_the_owner_keys_creation(cluster: EtcdCluster) -> None:
    """The owner's key gone and made again (by anyone, under any lease): the fence fails."""

    async def main() -> None:
        etcd = etcd_of(cluster.endpoints)
        locks = await EtcdLocks(etcd, "/test/created", Universe.of(TOPO)).open()
        assert (await etcd.atxn(locks.fence(), [])).succeeded
        await etcd.revoke(locks.lease)
        await etcd.atxn([], [put(locks.me, b"")])  # the same name, another key
        assert not (await etcd.atxn(locks.fence(), [])).succeeded
        await locks.close()
        await etcd.aclose()

    asyncio.run(main())


def test_health_says_no_lease_while_cut_off_then_a_new_owner(
    cluster: EtcdCluster, tmp_path: Path
) -> None:
    """Cut off from etcd past its TTL: /healthz and /v1/health say degraded, "no lease in
    etcd since ...", and the gauge counts; etcd back: ok again, as a new owner."""
    with partitionable(cluster.endpoints) as part:
        store = EtcdStore(kind="etcd", endpoints=tuple(part.endpoints), prefix="/test/health")
        config = settings(TOPO, tmp_path / "unused.sqlite", store=store)
        with ServerThread(config, FakeFabric(TOPO).drivers) as srv, srv.http() as http:
            before = http.get("/healthz").json()
            assert before["status"] == "ok" and before["reason"] == ""
            assert "br1" in _actionable(http) and set(_actionable(http).values()) == {1.0}
            part.cut()
            # degraded at once (etcd cannot be read), then: no lease
            lost = _wait_health(http, lambda h: h["reason"].startswith("no lease"), within_s=6)
            assert lost["status"] == "degraded" and "no lease in etcd since " in lost["reason"]
            assert "no lease in etcd since " in http.get("/v1/health").json()["reason"]
            assert _gauge(http, "reroute_lease_lost_seconds") > 0
            assert set(_actionable(http).values()) == {0.0}  # no device can be acted on here
            time.sleep(2.5)  # past the TTL (2 s): etcd has let the lease go
            for relay in part.relays:
                relay.cut.clear()
            back = _wait_health(http, lambda h: h["status"] == "ok", within_s=10)
            assert back["replica"] != before["replica"]
            assert back["replica"].startswith(before["replica"])
            assert _gauge(http, "reroute_lease_lost_seconds") == 0
            assert set(_actionable(http).values()) == {1.0}


def test_the_old_owners_running_reroute_is_recovered_by_the_new_owner(
    cluster: EtcdCluster, tmp_path: Path
) -> None:
    """The lease lost while a step runs (revoked here, as when paused past the TTL): the
    run stops at its next check, the replica takes a new lease as a new owner, and that
    owner recovers the old owner's reroute, which ends (rolled back), with every flow on
    one path."""
    fake = FakeFabric(TOPO)
    entered, gate = threading.Event(), threading.Event()
    switch = fake.switches[MOVED.steps()[0].device]
    apply = switch.apply

    async def held_back(changes: Sequence[FlowChange]) -> None:
        if not gate.is_set():
            entered.set()
            while not gate.is_set():
                await asyncio.sleep(0.01)
        await apply(changes)

    switch.apply = held_back  # type: ignore[method-assign]
    store = EtcdStore(kind="etcd", endpoints=tuple(cluster.endpoints), prefix="/test/reown")
    config = settings(TOPO, tmp_path / "unused.sqlite", store=store)
    with ServerThread(config, fake.drivers) as srv, srv.http() as http:
        first = http.get("/healthz").json()["replica"]
        view = srv.client().create([str(FLOW)], "temporary")
        assert entered.wait(10)
        etcd = etcd_of(cluster.endpoints)
        asyncio.run(etcd.revoke(srv.server.app.state.service.engine.lock.lease))
        etcd.close()
        now = _wait_health(http, lambda h: h["replica"] != first, within_s=5)
        assert now["replica"].startswith(first)
        gate.set()
        done = srv.client().get(view.id, wait_s=15)
        assert done.state is RerouteState.ROLLED_BACK, (done.state, done.error)
        assert srv.client().flows()["long"] == ("10.0.0.2/32>10.0.0.3/32",)


def _wait_health(
    http: httpx.Client, ok: Callable[[dict[str, str]], bool], within_s: float
) -> dict[str, str]:
    deadline = time.monotonic() + within_s
    while True:
        health: dict[str, str] = http.get("/healthz").json()
        if ok(health):
            return health
        assert time.monotonic() < deadline, health
        time.sleep(0.05)


def _actionable(http: httpx.Client) -> dict[str, float]:
    """``reroute_device_actionable`` by device."""
    found = re.findall(
        r'reroute_device_actionable\{device="(\w+)"\} (\S+)', http.get("/metrics").text
    )
    return {d: float(v) for d, v in sorted(found)}


def _gauge(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name}")


def test_cut_off_the_loop_is_never_held_longer_than_one_call(
    cluster: EtcdCluster, tmp_path: Path
) -> None:
    """A replica cut off from etcd, read by a client every 100 ms (each read an etcd call,
    run off the event loop: ``journal.offload``): its event loop's lag, sampled every 10
    ms, stays under 50 ms at p99 and never nears one call's deadline (1 s: the first call
    after the cut held the loop that long before the journal's calls left it). Prints the
    lag's p50/p99/max."""
    with partitionable(cluster.endpoints) as part:
        store = EtcdStore(kind="etcd", endpoints=tuple(part.endpoints), prefix="/test/lag")
        config = settings(TOPO, tmp_path / "unused.sqlite", store=store)
        with ServerThread(config, FakeFabric(TOPO).drivers) as srv:
            svc = srv.server.app.state.service
            loop = svc.engine.lock._tasks[0].get_loop()
            part.cut()
            lags = asyncio.run_coroutine_threadsafe(_lags(4.0), loop)
            with srv.http() as http:
                while not lags.done():
                    http.get("/v1/reroutes")  # 503 while cut off: etcd cannot be read
                    time.sleep(0.1)
            got = sorted(lags.result())
            p50, p99 = got[len(got) // 2], got[int(len(got) * 0.99)]
            print(f"loop lag during a cut: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
                  f"max {got[-1] * 1000:.1f} ms over {len(got)} samples")  # fmt: skip
    assert got[-1] < 0.5 and p99 < 0.05


async def _lags(for_s: float, every_s: float = 0.01) -> list[float]:
    """How late each of the loop's wake-ups every ``every_s`` was, for ``for_s``."""
    out: list[float] = []
    end = time.monotonic() + for_s
    while time.monotonic() < end:
        before = time.monotonic()
        await asyncio.sleep(every_s)
        out.append(time.monotonic() - before - every_s)
    return out


# -- deadlines --------------------------------------------------------------------------


def _cut_off(cluster: EtcdCluster, part: Partition, timeout_s: float = 1.0) -> Etcd:
    """A client to ``cluster`` through ``part``'s relays, connected, then cut off."""
    etcd = etcd_of(part.endpoints, timeout_s)
    for _ in part.endpoints:  # a channel to each member, connected
        etcd.get("/test/nothing")
        etcd._at = (etcd._at + 1) % len(part.endpoints)
    part.cut()
    return etcd


def test_a_blocking_call_cut_off_ends_within_one_timeout_not_one_per_endpoint(
    cluster: EtcdCluster,
) -> None:
    """Three members black-holed: a journal write fails (StoreUnavailable) after the
    client's timeout, not 3x it; sooner when the lease ends sooner."""
    with partitionable(cluster.endpoints) as part:
        etcd = _cut_off(cluster, part)
        sent = time.monotonic()
        with pytest.raises(StoreUnavailable):
            etcd.txn([], [put("/test/cut/x", b"")])
        took = time.monotonic() - sent
        print(f"a write cut off from 3 members fails after {took * 1000:.0f} ms")
        assert took < 1.3
        etcd.lease_left = lambda: 0.3
        sent = time.monotonic()
        with pytest.raises(StoreUnavailable):
            etcd.txn([], [put("/test/cut/x", b"")])
        assert time.monotonic() - sent < 0.5
        etcd.close()


def test_a_step_never_starts_with_less_lease_than_its_cap_and_a_margin() -> None:
    """A lease clock the test controls: every device write happens with more lease left
    than the step's cap (strictly), the write-ahead counted (it took 0.5 s of lease here,
    as a slow etcd would); at exactly the cap, no step starts at all."""
    for start, steps in ((1.6, True), (1.0, False), (0.75, False)):
        touched, cap, outcome = _run_on_lease(start, ahead_s=0.5, step_s=0.75)
        assert all(t > cap for t in touched), (start, touched)
        assert bool(touched) is steps, (start, touched)
        assert outcome.state is RerouteState.RUNNING  # abandoned: taken over elsewhere
        assert cap <= 0.75


def test_a_run_whose_lease_ended_during_a_step_writes_nothing_more() -> None:
    """The lease replaced while the last step runs (a new owner: minus infinity for this
    run): the step's end and the finish are not written; the reroute stays running in the
    journal, for the takeover."""
    left = [2.0]
    last = len(MOVED.steps())  # (events count from 1)

    def replaced(event: StepEvent) -> None:
        if event.index == last and event.state is StepState.STARTED:
            left[0] = -float("inf")  # re-registered meanwhile: this run's lease is gone

    journal = Journal(None)
    executor = Executor(
        FakeFabric(TOPO).switches,
        journal,
        lease=lambda: left[0],
        lease_step_s=0.75,
        on_event=replaced,
    )
    outcome = asyncio.run(executor.run("r", MOVED))
    record = journal.get("r")
    assert outcome.state is RerouteState.RUNNING, outcome
    assert record is not None and record.state is RerouteState.RUNNING
    assert journal.steps("r")[-1].state is StepState.STARTED  # its end not written


def _run_on_lease(
    start: float, *, ahead_s: float, step_s: float
) -> tuple[list[float], float, Outcome]:
    """Run ``MOVED`` with ``start`` s of lease, each write-ahead taking ``ahead_s`` of it:
    the lease left at each device write, the step cap, the outcome."""
    left = [start]

    class SlowAhead(Journal):
        def steps_started(self, *args: object, **kw: object) -> None:
            left[0] -= ahead_s
            super().steps_started(*args, **kw)  # type: ignore[arg-type]

    fake = FakeFabric(TOPO)
    touched: list[float] = []
    for switch in fake.switches.values():
        _record_lease(switch, touched, lambda: left[0])
    executor = Executor(fake.switches, SlowAhead(None), lease=lambda: left[0], lease_step_s=step_s)
    outcome = asyncio.run(executor.run("r", MOVED))
    return touched, executor.step_timeout, outcome


def _record_lease(switch: object, touched: list[float], lease: Callable[[], float]) -> None:
    apply = switch.apply  # type: ignore[attr-defined]

    async def recorded(changes: Sequence[FlowChange]) -> None:
        touched.append(lease())
        await apply(changes)

    switch.apply = recorded  # type: ignore[attr-defined]


def test_locks_a_cut_kept_from_being_released_go_with_a_lease_let_go(
    cluster: EtcdCluster,
) -> None:
    """A hold released while etcd does not answer, the cut shorter than the TTL: the lease
    lives on (its renewals resume), and so would the locks, under an owner that no longer
    knows them (a reroute waiting behind them would wait for ever). The replica lets that
    lease go: the locks go with it, and it goes on as a new owner that can take them."""

    async def main() -> None:
        with partitionable(cluster.endpoints) as part:
            etcd = _cut_off(cluster, part, timeout_s=0.3)
            part.heal()
            locks = await EtcdLocks(etcd, "/test/unreleased", Universe.of(TOPO), ttl_s=3).open()
            old = locks.owner
            held = await locks.try_acquire(frozenset({"br2"}))
            assert held is not None
            part.cut()
            await held.release()  # not answered: not released
            part.heal()
            await until(lambda: locks.owner != old, within_s=5)
            assert not await locks.alive(old)  # revoked: its locks went with it
            again = await locks.try_acquire(frozenset({"br2"}))
            assert again is not None  # the new owner takes what the old one could not free
            await again.release()
            await locks.close()
            await etcd.aclose()

    asyncio.run(main())
