"""Resources held in etcd, bound to each replica's lease (``locks.Locks`` for replicas).

Each replica is an *owner*: at start it takes a lease (TTL ``ttl_s``, 2 s by default) and
puts ``P/owners/<owner>`` under it, then renews the lease every quarter of its TTL. Its key
disappears when the lease expires -- the replica died, hangs, or lost etcd -- and with it
every lock it held: ``alive`` is that key's existence. Every write of the owner compares
that key's creation revision (``fence``): not only that a key of that name exists.

**A lost lease** (etcd answers a renewal with TTL 0: the replica was cut off or paused past
its TTL) is never resumed: the replica takes a new lease under a **new owner** (its base
name and the lease's number, ``<base>-2``, ...), so that nothing of the old one goes on:
writes fenced by the old key keep failing, the runs that began under it stop
(``lease_left``, below), and their reroutes -- the old owner's, dead -- are recovered by the
usual takeover, by another replica or by this one as the new owner. ``lease_left`` is
taken once by each run (an executor) and answers for the lease of that moment: after a new
lease, minus infinity. While it has no lease it surely holds, the replica starts nothing
and its health says so (``service/core.py``).

**Timing.** A live replica's lease has at least 3/4 of its TTL left (renewed every quarter)
less the renewal's delay. A device step is capped at ``step_s`` = 3/8 of the TTL and starts
only with ``executor.lease_needed(step_s)`` = 1/2 of the TTL left (the cap and a margin of
1/8 TTL, ``executor.LEASE_MARGIN`` of the cap), which leaves a quarter TTL for a late
renewal. A blocking etcd call (the
journal's) is bounded to end the margin before the lease (``call_left``), so that it
cannot hold back past the lease the cancellation of a step that reached its cap.

A resource key is ``P/locks/<device>`` (the whole device) or ``P/locks/<device>/<port>``
(one optical port). A set is taken in **one transaction**, all or nothing: a device is free
when neither its key nor any of its port keys exists; a port when neither it nor its
device's key does; and the owner's own key must still exist (a replica whose lease expired
takes nothing). ``claim`` adds the reroute's claim ``P/claims/<id>`` to the same
transaction, so two replicas never start one pending reroute.

The fencing token of a device (``revision``: OpenFlow's ``generation_id``, P4Runtime's
election id) is the revision of the transaction that took it, under the cluster's
**epoch**: ``P/epoch`` holds the second (since 2020) when the first replica met this
prefix, and the token is ``epoch * 2**33 + revision``. A switch remembers the highest
generation it saw for as long as it runs, and a rebuilt etcd counts its revisions from 1
again: without the epoch, every claim of the new cluster would be refused as stale.

``changed`` is set on the changes under the prefix (one watch) that another replica made
and that may let a reroute start: the scheduler wakes on it when another replica queues a
reroute, starts or ends one, lets resources go or dies (this replica's own changes wake it
directly; a key taken starts nothing; each wake costs a read of the queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

from services.reroute.etcd.client import (
    Change,
    Compare,
    Etcd,
    Op,
    StoreUnavailable,
    absent,
    created,
    delete,
    exists,
    get_op,
    put,
)
from services.reroute.executor import LEASE_MARGIN
from services.reroute.locks import Universe, new_owner
from services.reroute.resources import EVERYTHING, Keys, covers, device_of

log = logging.getLogger("reroute.etcd")
RETRY_S = 0.05  # ``acquire`` tries again after this, or on a change
RENEWALS = 4  # per TTL: a live replica's lease has at least 3/4 of its TTL left, less delays
# the changes that may let a waiting reroute start (not step records, not reroute rows):
# a reroute queued, or a key of these gone (let go, started, ended, died)
QUEUED = "pending/"
GONE = ("pending/", "running/", "claims/", "locks/", "owners/")
EPOCH_BASE = 1577836800  # 2020-01-01T00:00:00Z: epochs count seconds from here
REVISION_BITS = 33  # revisions below 2**33 (8.6e9 writes) fit under an epoch
STEP_SHARE = 3 / 8  # of the TTL: a device step's cap (``step_s``; module docstring)


def token(epoch: int, revision: int) -> int:
    """The fencing token of a lock taken at ``revision`` in a cluster of ``epoch``."""
    if not 0 < revision < 1 << REVISION_BITS:
        raise StoreUnavailable(
            f"etcd revision {revision} is beyond what a fencing token holds (2**33): "
            "start the prefix anew (a new epoch)"
        )
    return epoch << REVISION_BITS | revision


class EtcdLocks:
    def __init__(
        self, etcd: Etcd, prefix: str, universe: Universe, *, ttl_s: int = 2, owner: str = ""
    ) -> None:
        self.etcd = etcd
        self.prefix = prefix.rstrip("/") + "/"
        self.universe = universe
        self.ttl_s = ttl_s
        self.base = owner or new_owner()  # this replica; each lease it takes: an owner
        self.owner = self.base
        self.lease = 0
        self.created = 0  # the revision that created this owner's key (``fence``)
        self.leases = 0  # owners tried (the number in the next one's name)
        self.expired = False  # etcd said the lease expired: a new one is being taken
        self.epoch = 0  # the cluster's (``P/epoch``), read at ``open``
        # called with the new owner once it has its lease (the journal's fence follows it)
        self.on_owner: list[Callable[[EtcdLocks], None]] = []
        self._changed = asyncio.Event()
        self._valid_until = 0.0  # monotonic: the lease surely lives until then
        self._tasks: list[asyncio.Task[None]] = []
        self.lease_left: Callable[[], float | None] = self._lease_of(self.owner)

    @property
    def changed(self) -> asyncio.Event:
        return self._changed

    @property
    def me(self) -> str:
        """This owner's key."""
        return f"{self.prefix}owners/{self.owner}"

    def fence(self) -> list[Compare]:
        """What every write of this owner compares: its key is the one it created (gone
        with its lease, it is never made again: a later owner has another name; compared
        by creation revision all the same, not by existence)."""
        return [created(self.me, self.created)]

    def valid_for(self) -> float:
        """Seconds the lease surely lives (from the last renewal's answer; negative: since
        when it does not surely live)."""
        return self._valid_until - time.monotonic()

    def call_left(self) -> float:
        """Seconds a blocking etcd call may take: it ends the step's margin before the
        lease (module docstring; the client's floor, ``NO_LEASE_CALL_S``, is below the
        margin of a TTL of 1 s, the shortest)."""
        return self.valid_for() - self.step_s * LEASE_MARGIN

    def _lease_of(self, owner: str) -> Callable[[], float | None]:
        """``valid_for`` while ``owner`` is this replica's owner, minus infinity after."""

        def left() -> float | None:
            return self.valid_for() if self.owner == owner else -math.inf

        return left

    @property
    def step_s(self) -> float:
        """A device step's cap: 3/8 of the TTL (module docstring)."""
        return self.ttl_s * STEP_SHARE

    async def open(self) -> EtcdLocks:
        """Take the lease, announce this owner, renew and watch from now on."""
        self.epoch = await self._epoch()
        await self._register()
        self._tasks = [
            asyncio.create_task(self._renew(), name="etcd-lease"),
            asyncio.create_task(self._watch(), name="etcd-watch"),
        ]
        return self

    async def _epoch(self) -> int:
        """The prefix's epoch: set by the first replica to meet it, read by the others."""
        key = f"{self.prefix}epoch"
        now = str(int(time.time()) - EPOCH_BASE).encode()
        result = await self.etcd.atxn([absent(key)], [put(key, now)], [get_op(key)])
        value = now if result.succeeded else result.ranges[0][0].value
        try:
            return int(value)
        except ValueError:
            raise StoreUnavailable(f"{key} in etcd holds {value!r}, not an epoch") from None

    async def close(self) -> None:
        """Stop renewing and revoke the lease: every key of this owner goes at once."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self.lease:
            with contextlib.suppress(StoreUnavailable):
                await self.etcd.revoke(self.lease)
            self.lease = 0

    async def _register(self) -> None:
        """Take a new lease and put a new owner's key under it: the first is the base
        name, each later one the base and the lease's number (never an earlier name)."""
        self.leases += 1
        owner = self.base if self.leases == 1 else f"{self.base}-{self.leases}"
        key = f"{self.prefix}owners/{owner}"
        sent = time.monotonic()
        lease = await self.etcd.grant(self.ttl_s)
        try:
            result = await self.etcd.atxn([absent(key)], [put(key, b"", lease)])
        except StoreUnavailable:
            with contextlib.suppress(StoreUnavailable):
                await self.etcd.revoke(lease)
            raise
        if not result.succeeded:
            raise StoreUnavailable(f"owner {owner} exists in etcd already")
        # all at once (no await): the old owner's runs see minus infinity from now on
        self.owner, self.lease, self.created = owner, lease, result.revision
        self._valid_until = sent + self.ttl_s
        self.expired = False
        self.lease_left = self._lease_of(owner)
        for hook in self.on_owner:
            hook(self)

    async def _renew(self) -> None:
        """Renew the lease every quarter TTL (sooner after a failure); once etcd says it
        expired, take a new one under a new owner (module docstring)."""
        pause = self.ttl_s / RENEWALS
        while True:
            await asyncio.sleep(pause)
            pause = self.ttl_s / RENEWALS
            try:
                if self.expired:
                    await self._reregister()
                    continue
                sent = time.monotonic()
                ttl = await self.etcd.keep_alive(self.lease)
            except StoreUnavailable as exc:
                log.warning("lease %x of %s not renewed: %s", self.lease, self.owner, exc)
                pause = RETRY_S  # try again soon: steps wait for a renewed lease
                continue
            if ttl <= 0:
                log.error(
                    "lease %x expired: owner %s holds nothing any more", self.lease, self.owner
                )
                self._valid_until = min(self._valid_until, time.monotonic())
                self.expired = True
                pause = 0
                continue
            self._valid_until = sent + ttl

    async def _reregister(self) -> None:
        """A new lease and owner after the old lease expired (module docstring)."""
        old = self.owner
        await self._register()
        log.warning(
            "new lease %x: this replica is owner %s now (%s's reroutes are recovered as a "
            "dead owner's)", self.lease, self.owner, old,
        )  # fmt: skip
        self._changed.set()  # the scheduler looks again: the old owner's reroutes

    async def _watch(self) -> None:
        while True:
            try:
                async for changes in self.etcd.changes(self.prefix):
                    if any(self._waking(change) for change in changes):
                        self._changed.set()
            except StoreUnavailable as exc:
                log.debug("watch: %s", exc)
            self._changed.set()  # something may have changed unseen
            await asyncio.sleep(RETRY_S)

    def _waking(self, change: Change) -> bool:
        """A change that may let a reroute start, made by another replica (this one's own
        wake its scheduler directly: queued, let go, ended). Its own: a revision its client
        wrote, or a lock or claim whose value is this owner (an asyncio write may be seen
        here before its answer)."""
        name = change.key[len(self.prefix) :]
        if not (name.startswith(GONE) if change.deleted else name.startswith(QUEUED)):
            return False
        mine = change.revision in self.etcd.written or change.value == self.owner.encode()
        return not mine

    # -- locks -----------------------------------------------------------------------

    def _lock(self, key: str) -> str:
        return f"{self.prefix}locks/{key}"

    def _expand(self, keys: Keys) -> list[str]:
        out = set(keys)
        if EVERYTHING in out:
            out.discard(EVERYTHING)
            out |= self.universe.devices
        return sorted(out)

    def _free(self, key: str) -> list[Compare]:
        if "/" in key:
            return [absent(self._lock(device_of(key))), absent(self._lock(key))]
        return [absent(self._lock(key)), absent(self._lock(key) + "/", prefix=True)]

    async def try_acquire(self, keys: Keys, claim: str | None = None) -> EtcdHeld | None:
        wanted = self._expand(keys)
        compares = [c for k in wanted for c in self._free(k)] + self.fence()
        ops = [put(self._lock(k), self.owner.encode(), self.lease) for k in wanted]
        if claim is not None:
            compares += [
                exists(f"{self.prefix}pending/{claim}"),
                absent(f"{self.prefix}claims/{claim}"),
            ]
            ops.append(put(f"{self.prefix}claims/{claim}", self.owner.encode(), self.lease))
        result = await self.etcd.atxn(compares, ops)
        if not result.succeeded:
            return None
        taken = token(self.epoch, result.revision)
        return EtcdHeld(self, keys, dict.fromkeys(wanted, taken), claim)

    async def acquire(self, keys: Keys) -> EtcdHeld:
        while True:
            held = await self.try_acquire(keys)
            if held is not None:
                return held
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), RETRY_S)

    async def alive(self, owner: str | None) -> bool:
        if owner is None:
            return False
        if owner == self.owner:
            return self.valid_for() > 0
        return await self.etcd.aget(f"{self.prefix}owners/{owner}") is not None


class EtcdHeld:
    """Lock keys of one owner for one reroute (or recovery)."""

    def __init__(
        self, locks: EtcdLocks, keys: Keys, revisions: dict[str, int], claim: str | None
    ) -> None:
        self._locks = locks
        self._keys = keys
        self._revisions = revisions  # lock key (device or device/port) -> its fencing token
        self._claim = claim

    @property
    def keys(self) -> Keys:
        return self._keys

    def revision(self, device: str) -> int:
        return self._revisions.get(device, 0)

    async def extend(self, keys: Keys) -> bool:
        locks = self._locks
        more = [k for k in locks._expand(keys) if not covers(self._revisions, {k})]
        if not more:
            self._keys = self._keys | keys
            return True
        compares = [c for k in more for c in locks._free(k)] + locks.fence()
        ops = [put(locks._lock(k), locks.owner.encode(), locks.lease) for k in more]
        result = await locks.etcd.atxn(compares, ops)
        if not result.succeeded:
            return False
        self._revisions |= dict.fromkeys(more, token(locks.epoch, result.revision))
        self._keys = self._keys | keys
        return True

    async def narrow(self, keys: Keys) -> None:
        locks = self._locks
        assert covers(self._keys, keys), f"narrowing {sorted(self._keys)} to {sorted(keys)}"
        keep = locks._expand(keys)
        new = [k for k in keep if k not in self._revisions]  # ports of a device held whole
        drop = [k for k in self._revisions if k not in keep]
        ops: list[Op] = [put(locks._lock(k), locks.owner.encode(), locks.lease) for k in new]
        ops += [delete(locks._lock(k)) for k in drop]
        if ops:
            result = await locks.etcd.atxn(locks.fence(), ops)
            if not result.succeeded:
                raise StoreUnavailable("this replica's lease in etcd expired while it held locks")
            for k in drop:
                del self._revisions[k]
            self._revisions |= dict.fromkeys(new, token(locks.epoch, result.revision))
        self._keys = keys

    async def release(self) -> None:
        locks = self._locks
        ops = [delete(locks._lock(k)) for k in self._revisions]
        if self._claim is not None:
            ops.append(delete(f"{locks.prefix}claims/{self._claim}"))
        self._revisions = {}
        self._keys = frozenset()
        if ops:
            try:
                await locks.etcd.atxn([], ops)
            except StoreUnavailable as exc:  # they go with the lease
                log.warning("locks not released (they go when the lease expires): %s", exc)
