"""Locks in etcd (services/reroute/store/etcd/locks.py) against real etcd members on loopback: a
replica lets go only of what is still its own, any number of keys is taken all or nothing,
a lock transaction whose answer was lost leaks nothing, fencing tokens outgrow what a
device saw (and a superseded holder raises nothing), and a device with no fencing waits
out the lock-delay after its holder died, not after a clean release."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import cast

import pytest

from drivers.errors import DeviceRejected
from drivers.p4runtime import P4RuntimeDriver
from fabric.etcdcluster import EtcdCluster
from services.reroute.engine.executor import Executor
from services.reroute.errors import DriverError
from services.reroute.planning.resources import EVERYTHING
from services.reroute.service.scheduler import Waking
from services.reroute.store.etcd import locks as etcd_locks
from services.reroute.store.etcd.client import Etcd, EtcdSettings, StoreUnavailable, get_op, put
from services.reroute.store.etcd.locks import REVISION_BITS, EtcdLocks
from services.reroute.store.journaling import Journaling
from services.reroute.store.locks import Universe
from tests.drivers.test_p4runtime import add, emulator, host
from tests.unit.services.lossy import Lossy

pytestmark = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is missing (make setup installs etcd-server)"
)
SMALL = Universe(switches=frozenset({"br1", "br2"}), ports={"ost1": ("ost1/in1", "ost1/in2")})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), size=1) as members:
        yield members


@asynccontextmanager
async def replicas(
    cluster: EtcdCluster, prefix: str, universe: Universe, count: int = 2, delay: float = 3.0
) -> AsyncIterator[tuple[Etcd, list[EtcdLocks]]]:
    etcd = Etcd(EtcdSettings(endpoints=tuple(cluster.endpoints)))
    owners = [
        await EtcdLocks(etcd, prefix, universe, lock_delay_s=delay).open() for _ in range(count)
    ]
    try:
        yield etcd, owners
    finally:
        for owner in owners:
            await owner.close()
        await etcd.aclose()


async def holder(etcd: Etcd, locks: EtcdLocks, key: str) -> str | None:
    kv = await etcd.aget(f"{locks.prefix}locks/{key}")
    return None if kv is None else etcd_locks.holder(kv.value)


def test_a_replica_whose_lease_expired_lets_go_of_nothing_of_its_successor(
    cluster: EtcdCluster,
) -> None:
    async def main() -> None:
        async with replicas(cluster, "/t/release", SMALL) as (etcd, (a, b)):
            held = await a.try_acquire(frozenset({"br1", "ost1"}), claim=None)
            assert held is not None
            await etcd.revoke(a.lease)  # as if it expired: paused past the TTL
            taken = await b.try_acquire(frozenset({"br1", "ost1/in2"}))
            assert taken is not None
            with pytest.raises(StoreUnavailable):
                await held.narrow(frozenset({"br1"}))  # ost1's ports are b's to keep
            await held.release()  # resumes and lets go: raises nothing, deletes nothing
            assert await holder(etcd, b, "br1") == b.owner
            assert await holder(etcd, b, "ost1/in2") == b.owner

    asyncio.run(main())


def test_a_hold_of_an_owner_whose_lease_was_let_go_takes_nothing_more(
    cluster: EtcdCluster,
) -> None:
    """The replica let its lease go and is a new owner: a run of the old one can neither
    extend its hold nor narrow it to ports (which would be put under the new lease, held
    by no run of the new owner); it can still let go."""

    async def main() -> None:
        async with replicas(cluster, "/t/old", SMALL) as (etcd, (a, b)):
            held = await a.try_acquire(frozenset({"ost1", "br1"}))
            assert held is not None
            old = a.owner
            a.forsake("test")
            async with asyncio.timeout(5):
                while a.owner == old:
                    await asyncio.sleep(0.02)
            with pytest.raises(StoreUnavailable, match="take nothing more"):
                await held.extend(frozenset({"br2"}))
            with pytest.raises(StoreUnavailable, match="take nothing more"):
                await held.narrow(frozenset({"ost1/in1"}))
            assert await holder(etcd, a, "br2") is None
            assert await holder(etcd, a, "ost1/in1") is None
            await held.release()
            async with asyncio.timeout(5):  # (the old lease is revoked, its keys gone)
                await b.acquire(frozenset({EVERYTHING}))

    asyncio.run(main())


def test_narrowing_to_ports_of_a_device_held_whole_is_one_write(cluster: EtcdCluster) -> None:
    """A reroute admitted unplanned holds every device; planned, it keeps a bridge and a
    port of the optical switch: the port is taken and the rest let go in one durable
    write, and the others may take the rest at once."""

    async def main() -> None:
        async with replicas(cluster, "/t/narrow", SMALL) as (etcd, (a, b)):
            held = await a.try_acquire(frozenset({EVERYTHING}))
            assert held is not None
            writes = etcd.calls["write"]
            await held.narrow(frozenset({"br1", "ost1/in1"}))
            assert etcd.calls["write"] - writes == 1
            assert await holder(etcd, a, "ost1/in1") == a.owner
            assert await holder(etcd, a, "ost1") is None and await holder(etcd, a, "br2") is None
            assert held.revision("br1") > 0
            other = await b.try_acquire(frozenset({"br2", "ost1/in2"}))
            assert other is not None
            assert await b.try_acquire(frozenset({"ost1/in1"})) is None
            await held.release()
            assert [await holder(etcd, a, k) for k in ("ost1/in1", "br1")] == [None, None]

    asyncio.run(main())


def test_a_narrowing_put_off_writes_nothing_until_a_queued_reroute_needs_it(
    cluster: EtcdCluster,
) -> None:
    """The scheduler's hold of a reroute admitted alone (``Waking``) only notes its plan's
    keys: nothing is written, the scheduler sees the plan's keys, the devices stay held.
    Narrowed for real once a queued reroute needs the rest (``narrow_now``), the others take
    the rest. A hold whose finish lets it all go (``let_go_ops``) narrows no more."""

    async def main() -> None:
        async with replicas(cluster, "/t/later", SMALL) as (etcd, (a, b)):
            plan = frozenset({"br1", "ost1/in1"})
            woken: list[bool] = []
            waking = await _waking(a, woken)
            writes = etcd.calls["write"]
            await waking.narrow(plan)
            assert etcd.calls["write"] == writes
            assert waking.keys == plan and waking.wider and woken  # the scheduler looks
            assert await holder(etcd, a, "ost1") == a.owner
            assert await b.try_acquire(frozenset({"br2"})) is None
            writes = etcd.calls["write"]
            await waking.narrow_now()
            assert etcd.calls["write"] - writes == 1 and not waking.wider
            assert [await holder(etcd, a, k) for k in ("br1", "ost1/in1", "ost1", "br2")] == [
                a.owner, a.owner, None, None,
            ]  # fmt: skip
            other = await b.try_acquire(frozenset({"br2", "ost1/in2"}))
            assert other is not None
            await other.release()
            await waking.release()

            finishing = await _waking(a, [])
            await finishing.narrow(plan)
            ops = await asyncio.to_thread(finishing.let_go_ops)  # the finish's thread
            assert ops is not None
            writes = etcd.calls["write"]
            await finishing.narrow_now()
            assert etcd.calls["write"] == writes and finishing.wider
            compares, let_go = ops
            result = await etcd.atxn(compares, let_go)  # as the finish's write carries them
            assert result.succeeded
            finishing.released(result.revision)
            assert [await holder(etcd, a, k) for k in ("br1", "br2", "ost1")] == [None] * 3

    asyncio.run(main())


def test_a_finish_never_lets_go_what_a_narrowing_under_way_lets_go(
    cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finish that meets the put-off narrowing under way carries no release (its write
    would compare keys the narrowing deletes, and fail); the run's ``release`` waits for
    the narrowing to end, then lets go of what it left: nothing stays held."""

    async def main() -> None:
        async with replicas(cluster, "/t/race", SMALL) as (etcd, (a, _)):
            waking = await _waking(a, [])
            await waking.narrow(frozenset({"br1", "ost1/in1"}))
            held = waking._held
            gate, narrow = asyncio.Event(), held.narrow

            async def late(keys: frozenset[str]) -> None:  # its write still on its way
                await gate.wait()
                await narrow(keys)

            monkeypatch.setattr(held, "narrow", late)
            narrowing = asyncio.create_task(waking.narrow_now())
            await asyncio.sleep(0.01)
            assert await asyncio.to_thread(waking.let_go_ops) is None
            releasing = asyncio.create_task(waking.release())
            await asyncio.sleep(0.05)
            assert not releasing.done()
            gate.set()
            await narrowing
            await releasing
            for key in ("br1", "br2", "ost1", "ost1/in1"):
                assert await holder(etcd, a, key) is None, key
            writes = etcd.calls["write"]
            await waking.narrow_now()
            assert etcd.calls["write"] == writes

    asyncio.run(main())


async def _waking(locks: EtcdLocks, woken: list[bool]) -> Waking:
    """A scheduler's hold of every device, as a reroute admitted alone starts."""
    held = await locks.try_acquire(frozenset({EVERYTHING}))
    assert held is not None
    return Waking(held, lambda: woken.append(True), cast(Journaling, None))


def test_two_hundred_devices_are_taken_all_or_nothing(cluster: EtcdCluster) -> None:
    """etcd allows 128 operations per transaction: 200 devices (2 compares each) and a
    claim are taken in chunks; a chunk that is not free gives the earlier ones back."""
    big = Universe(switches=frozenset(f"s{i:03}" for i in range(200)), ports={})

    async def main() -> None:
        async with replicas(cluster, "/t/big", big) as (etcd, (a, b)):
            await etcd.atxn([], [put("/t/big/pending/q", b"")])
            one = await b.try_acquire(frozenset({"s150"}))
            assert one is not None
            assert await a.try_acquire(frozenset({EVERYTHING}), claim="q") is None
            assert await holder(etcd, a, "s000") is None  # the first chunks given back
            assert await etcd.aget("/t/big/claims/q") is None
            await one.release()
            held = await a.try_acquire(frozenset({EVERYTHING}), claim="q")
            assert held is not None and all(held.revision(f"s{i:03}") > 0 for i in range(200))
            assert await b.try_acquire(frozenset({"s199"})) is None
            await held.narrow(frozenset({"s000"}))
            assert await holder(etcd, a, "s199") is None and await holder(etcd, a, "s000")
            await held.release()
            assert await etcd.aget("/t/big/claims/q") is None
            assert await b.try_acquire(frozenset({EVERYTHING})) is not None

    asyncio.run(main())


def test_a_revision_beyond_the_token_gives_back_what_it_took(
    cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with replicas(cluster, "/t/limit", SMALL, count=1) as (etcd, (a,)):
            first = await a.try_acquire(frozenset({"br2"}))
            assert first is not None
            await first.release()
            now = (await etcd.atxn([], [])).revision
            monkeypatch.setattr(etcd_locks, "REVISION_LIMIT", now + 5, raising=False)
            for _ in range(10):  # another writer passes the limit meanwhile
                await etcd.atxn([], [put("/t/limit/other", b"")])
            with pytest.raises(StoreUnavailable, match="2\\*\\*33"):
                await a.try_acquire(frozenset({"br1"}))
            assert await holder(etcd, a, "br1") is None  # not leaked
            with pytest.raises(StoreUnavailable, match="2\\*\\*33"):
                await a.try_acquire(frozenset({"br1"}))  # refused before writing
            assert (await etcd.atxn([], [])).revision == now + 10 + 2  # taken, given back

    asyncio.run(main())


def test_a_lock_transaction_whose_answer_was_lost_is_settled_and_leaks_nothing(
    cluster: EtcdCluster,
) -> None:
    """Applied with its answer lost, or applied and answered "not free" to the client's
    retry: taken all the same (and let go in full). Not applied: the error, nothing held;
    held back on its way while the retry was refused: it is refused when it arrives, once
    the lock is free. No answer to the settling either: the owner's lease goes, and the
    keys it may have put with it."""

    async def main() -> None:
        async with replicas(cluster, "/t/doubt", SMALL, delay=0.1) as (etcd, (a, b)):
            net = Lossy(etcd)
            await etcd.atxn([], [put("/t/doubt/pending/q", b"")])
            for lossy in ("lost", "twice"):
                net.plan = [lossy]
                held = await a.try_acquire(frozenset({"br1"}), claim="q")
                assert held is not None and held.revision("br1") > 0, lossy
                assert await holder(etcd, a, "br1") == a.owner
                await held.release()
                assert await holder(etcd, a, "br1") is None, lossy
                assert await etcd.aget("/t/doubt/claims/q") is None, lossy
            net.plan = ["unsent"]
            with pytest.raises(StoreUnavailable, match="Lossy"):
                await a.try_acquire(frozenset({"br1"}))
            assert await holder(etcd, a, "br1") is None
            theirs = await b.try_acquire(frozenset({"br1"}))
            assert theirs is not None
            net.plan = ["late"]
            assert await a.try_acquire(frozenset({"br1"})) is None
            await theirs.release()
            (late,) = await net.deliver()
            assert not late.succeeded and await holder(etcd, a, "br1") is None
            voids = (await etcd.atxn([], [get_op("/t/doubt/void/", prefix=True)])).ranges[0]
            assert len(voids) == 4  # each was settled (and stays void under the lease)
            owner = a.owner
            net.plan = ["lost", "unsent"]
            with pytest.raises(StoreUnavailable, match="Lossy"):
                await a.try_acquire(frozenset({"br2"}))
            async with asyncio.timeout(5):
                while a.owner == owner or await holder(etcd, a, "br2") is not None:
                    await asyncio.sleep(0.05)
            assert await b.try_acquire(frozenset({"br2"})) is not None

    asyncio.run(main())


class Switch:
    """A device that keeps the highest generation it saw, as OVS and P4Runtime do."""

    def __init__(self, name: str, seen: int) -> None:
        self.name = name
        self.seen = seen
        self.master = 0

    def share(self) -> None:
        pass

    async def claim_master(self, generation_id: int) -> None:
        if generation_id < self.seen:
            raise DeviceRejected(self.name, f"{generation_id} < {self.seen}", "OFPRRFC_STALE")
        self.seen = self.master = generation_id

    async def generation_seen(self) -> int:
        return self.seen


def test_a_claim_refused_as_stale_raises_the_epoch_while_the_lock_is_ours(
    cluster: EtcdCluster,
) -> None:
    """A switch saw a generation above every token (a clock behind, etcd restored from a
    snapshot): the holder raises ``P/epoch`` above it and claims; a holder superseded
    meanwhile raises nothing and is refused, and the successor's tokens top both."""

    async def main() -> None:
        async with replicas(cluster, "/t/epoch", SMALL) as (etcd, (a, b)):
            held = await a.try_acquire(frozenset({"br1", "br2"}))
            assert held is not None
            switch = Switch("br1", seen=(a.epoch + 7) << REVISION_BITS)
            seen, token = switch.seen, held.revision("br1")
            executor = Executor(
                {"br1": switch}, None, generation=held.revision, outrank=held.outrank
            )  # type: ignore[arg-type,dict-item]
            await executor._claim("br1")
            assert switch.master == held.revision("br1") > seen > token
            assert a.epoch == b.epoch + 8  # b learns it from its next lock transaction
            deposed = await a.try_acquire(frozenset({"ost1"}))
            assert deposed is not None
            other = Switch("ost1", seen=(a.epoch + 100) << REVISION_BITS)
            await etcd.revoke(a.lease)
            later = await b.try_acquire(frozenset({"br1"}))
            assert later is not None and later.revision("br1") > held.revision("br1")
            assert await deposed.outrank("ost1", other.seen) is None
            stale = Executor(
                {"br2": Switch("br2", seen=1 << 62)},
                None,
                generation=held.revision,
                outrank=held.outrank,
            )  # type: ignore[arg-type,dict-item]
            with pytest.raises(DriverError):
                await stale._claim("br2")  # its lock went with its lease: no raise
            assert (await etcd.aget("/t/epoch/epoch")).value == str(b.epoch).encode()  # type: ignore[union-attr]

    asyncio.run(main())


UNFENCED = Universe(
    switches=frozenset({"br1", "rest1"}),
    ports={"pol1": ("pol1/in1", "pol1/in2")},
    unfenced=frozenset({"rest1", "pol1"}),
)


def test_an_unfenced_device_waits_out_the_lock_delay_after_its_holder_died(
    cluster: EtcdCluster,
) -> None:
    async def main() -> None:
        async with replicas(cluster, "/t/delay", UNFENCED, count=3, delay=1.0) as (
            etcd,
            (a, b, c),
        ):
            clean = await c.try_acquire(frozenset({"rest1"}))
            assert clean is not None
            await clean.release()
            again = await b.try_acquire(frozenset({"rest1"}))  # a clean release: no wait
            assert again is not None
            await again.release()
            held = await a.try_acquire(frozenset({"br1", "rest1", "pol1"}))
            assert held is not None
            await etcd.revoke(a.lease)  # died: its REST request may still land
            assert await b.try_acquire(frozenset({"br1"})) is not None  # fenced: at once
            lost = time.monotonic()
            assert await b.try_acquire(frozenset({"rest1"})) is None
            assert await b.try_acquire(frozenset({"pol1/in2"})) is None
            b.changed.clear()
            async with asyncio.timeout(3):
                await b.changed.wait()  # set when the delay ends, not only on a change
            got = await b.acquire(frozenset({"rest1", "pol1/in2"}))
            assert time.monotonic() - lost >= 1.0
            assert await holder(etcd, b, "rest1") == b.owner
            await got.release()
            assert await c.try_acquire(frozenset({"rest1", "pol1"})) is not None  # cleared

    asyncio.run(main())


def replica(address: str, election_id: int) -> P4RuntimeDriver:
    """br1's P4Runtime driver as one replica of several opens it (a backup until it claims)."""
    driver = P4RuntimeDriver("br1", address, device_id=1, election_id=election_id)
    driver.share()
    return driver


def test_a_device_that_saw_more_is_claimed_after_the_epoch_is_raised(cluster: EtcdCluster) -> None:
    """The P4Runtime emulator once had a primary of a generation above every token (a clock
    behind, etcd restored from a snapshot): the executor's claim with the lock's token is
    refused, the epoch raised while the lock is ours, and the claim made again; the writes
    land. A holder whose lease expired then is refused and raises nothing; its successor
    claims at once."""

    async def main() -> None:
        async with (
            emulator() as (_, _, address),
            replicas(cluster, "/t/p4", SMALL) as (etcd, (a, b)),
            replica(address, 3) as ghost,
            replica(address, 1) as mine,
            replica(address, 2) as theirs,
        ):
            await ghost.claim_master((a.epoch + 1000) << REVISION_BITS)
            held = await a.try_acquire(frozenset({"br1"}))
            assert held is not None
            token = held.revision("br1")
            await Executor(
                {"br1": mine}, None, generation=held.revision, outrank=held.outrank
            )._claim("br1")  # type: ignore[arg-type]
            assert held.revision("br1") > (a.epoch - 1) << REVISION_BITS > token
            await mine.apply([add(host(1))])
            await etcd.revoke(a.lease)
            later = await b.try_acquire(frozenset({"br1"}))
            assert later is not None
            await Executor(
                {"br1": theirs}, None, generation=later.revision, outrank=later.outrank
            )._claim("br1")  # type: ignore[arg-type]
            await theirs.apply([add(host(2))])
            epoch = (await etcd.aget("/t/p4/epoch")).value  # type: ignore[union-attr]
            with pytest.raises(DeviceRejected):
                await Executor(
                    {"br1": mine}, None, generation=held.revision, outrank=held.outrank
                )._claim("br1")  # type: ignore[arg-type]
            assert (await etcd.aget("/t/p4/epoch")).value == epoch  # type: ignore[union-attr]
            assert set(await theirs.read()) == {host(1), host(2)}

    asyncio.run(main())


def test_a_claim_stands_until_another_owner_holds_the_device(cluster: EtcdCluster) -> None:
    """A claim is made once while no other owner holds the device (its record of holders):
    the P4Runtime emulator's primary stays this replica's and its writes land with no claim
    made again. Another owner's hold, claiming or not, ends that: the next hold claims
    again. A holder deposed while its claim stood is fenced by its successor's claim."""

    async def claim(held: etcd_locks.EtcdHeld, driver: P4RuntimeDriver) -> int:
        """Claim br1 as a run on ``held`` does; the claims it did not make again."""
        run = Executor({"br1": driver}, None, generation=held.revision, claims=held)  # type: ignore[arg-type]
        kept = held._locks.claims["kept"]
        await run._claim("br1")
        return held._locks.claims["kept"] - kept

    async def main() -> None:
        async with (
            emulator() as (_, _, address),
            replicas(cluster, "/t/kept", SMALL) as (etcd, (a, b)),
            replica(address, 1) as mine,
            replica(address, 2) as theirs,
        ):
            first = await a.acquire(frozenset({"br1"}))
            assert not first.sole("br1") and await claim(first, mine) == 0
            token = first.revision("br1")
            await first.release()
            for n in range(2):  # a's own holds, one after the other: the claim stands
                again = await a.acquire(frozenset({"br1", "br2"}))
                assert again.sole("br1") and await claim(again, mine) == 1
                await mine.apply([add(host(n + 1))])
                await again.release()
            assert mine.master_generation() == token  # the first claim's, still
            passing = await b.acquire(frozenset({"br1"}))  # b holds it and claims nothing
            await passing.release()
            after = await a.acquire(frozenset({"br1"}))
            assert not after.sole("br1") and await claim(after, mine) == 0
            await after.release()
            taken = await b.acquire(frozenset({"br1"}))  # b claims: a's driver a backup
            assert await claim(taken, theirs) == 0
            async with asyncio.timeout(5):  # the server tells every client of a new primary
                while mine.master_generation() is not None:
                    await asyncio.sleep(0.01)
            await taken.release()
            back = await a.acquire(frozenset({"br1"}))
            assert not back.sole("br1") and await claim(back, mine) == 0
            await back.release()
            kept = await a.acquire(frozenset({"br1"}))
            assert await claim(kept, mine) == 1  # a's claim stands: not made again
            await etcd.revoke(a.lease)  # a deposed, its claim standing
            successor = await b.acquire(frozenset({"br1"}))
            assert not successor.sole("br1") and await claim(successor, theirs) == 0
            with pytest.raises(DeviceRejected):
                await mine.apply([add(host(9))])
            await theirs.apply([add(host(8))])
            assert set(await theirs.read()) == {host(1), host(2), host(8)}
            assert (a.claims, b.claims) == ({"made": 3, "kept": 3}, {"made": 2, "kept": 0})

    asyncio.run(main())
