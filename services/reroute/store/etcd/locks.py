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
only with ``locks.lease_needed(step_s)`` = 1/2 of the TTL left (the cap and a margin of
1/8 TTL, ``locks.LEASE_MARGIN`` of the cap), which leaves a quarter TTL for a late
renewal. A blocking etcd call (the
journal's) is bounded to end the margin before the lease (``call_left``), so that it
cannot hold back past the lease the cancellation of a step that reached its cap.

A resource key is ``P/locks/<device>`` (the whole device) or ``P/locks/<device>/<port>``
(one optical port), valued with its owner, under its lease. A device is free when neither
its key nor any of its port keys exists; a port when neither it nor its device's key does;
and the owner's own key must still exist (a replica whose lease expired takes nothing).
``claim`` adds the reroute's claim ``P/claims/<id>`` to the first transaction, so two
replicas never start one pending reroute.

**Any number of keys.** etcd refuses a transaction of more than 128 compares or operations
(``--max-txn-ops``), and a key costs up to 4 compares: a set is taken in chunks of
``CHUNK`` keys in name order, one transaction each. When a later chunk is not free, the
chunks taken are given back before ``try_acquire`` answers None: all or nothing as callers
see it (another replica may meet a chunk for a moment and retry; name order leaves no
cycle to deadlock on).

**In doubt.** A write whose answer was lost may be applied all the same, and later: etcd
commits a proposal whose client gave up, and the client's next endpoint may answer "not
free" to a retry while the first attempt is still on its way (``TxnResult.retried``). A
lock transaction that put keys nobody accounts for would hold them as long as the lease,
which a live replica renews forever. So each transaction that puts locks (and a claim)
values them ``<owner> <tag>``, with a tag of its own, and compares ``P/void/<owner>/<tag>``
absent. When its outcome is in doubt (an error, or an answer after a retry that did not
succeed), one more transaction **settles** it: it puts that void key (under the lease) and
reads back the transaction's first key. Either the key holds the tag -- it was applied:
the take goes on as if answered -- or it never will be (the void key is there before it).
When etcd answers the settling neither, the owner lets its lease go (``forsake``): what the
transaction may have put goes with the lease, and a late one finds no lease to put under.
A release whose answer was lost does the same.

**Only one's own.** Every key a hold took is let go (``release``, ``narrow``) with a compare
of its create revision with the one this hold took it at: a replica that resumes after its
lease expired deletes nothing of its successor's (its own went with the lease).

**Fencing tokens that only grow.** The token of a lock (``revision``: OpenFlow's
``generation_id``, P4Runtime's election id) is ``epoch * 2**33 + r``, ``r`` the revision of
the transaction that took the key and ``epoch`` the value of ``P/epoch`` read in that same
transaction. ``P/epoch`` starts at the second (since 2020) the first replica met the prefix
and only ever grows. A switch keeps the highest generation it saw, so tokens must outgrow
all it saw: a rebuilt etcd counts revisions from 1 again (its later epoch covers that), but
a clock behind, or a snapshot restored without ``--bump-revision``, give tokens below the
switch's. Then the device refuses the claim as stale, and the executor asks the hold to
``outrank`` what the device reports (OpenFlow ROLE_REQUEST NOCHANGE, P4Runtime's
arbitration): while this owner still holds the device's lock (compared in the same
transaction), ``P/epoch`` is raised (compare-and-swap) so its token passes the device's,
and the claim is made again. A holder whose lock is gone was superseded, legitimately: it
raises nothing. An epoch read under a held lock tops the tokens of that key's earlier
holders (an epoch no greater, an earlier revision) and is topped by every later holder's
(a later revision, an epoch never lower). After restoring etcd from a snapshot, restore
with ``etcdutl snapshot restore --bump-revision 1000000000 --mark-compacted`` (etcd 3.5
and later) where possible; otherwise the first claim of each device after the restore
costs one refusal and one epoch raise. Revisions reach 2**33 only after 8.6e9 writes: the
lock transaction is refused before that (from the last revision seen), or, when passed
meanwhile, what was taken is given back before the error is raised.

**A claim kept.** Claiming a fenced device costs a round trip to it before its first
write, and each reroute claims with a token of its own. A claim need not be made again
while it stands: while no other owner has held the device since this one claimed it (only
a holder claims: its token comes with its lock). Each transaction that takes a fenced
device whole also reads, then puts, ``P/holder/<device>`` (valued with the owner, under its
lease): its previous holder. An owner remembers, per device, the revision of its latest
hold in an unbroken line of its own holds since its last claim (``_sole``); a hold that
finds the record its own at that revision continues the line (``EtcdHeld.sole``), any
other finding (another owner, none, a hold settled in doubt) breaks it until the next claim
(``EtcdHeld.claimed``). The executor skips the claim of a device whose line holds and whose
driver still holds the master role it claimed (``drivers.contract.ClaimKept``). A deposed
owner is fenced as before: its successor's hold finds another owner's record and claims.
Replicas that do not write the record (an older version) must not share a prefix with ones
that skip claims.

**Lock-delay** (Chubby's). A device with no fencing (``Universe.unfenced``: REST, OpenFlow
1.0, SCPI) may still receive a deposed holder's last write after its lock went with the
lease (a REST request already sent, a command thread finishing). Each lock of such a device
also puts ``P/held/<key>/`` (no lease), deleted with the lock by a clean release. A marker
whose lock is gone was left by a holder that died: a new taker counts ``lock_delay_s`` from
the moment it first saw that (its own monotonic clock: never before the loss), and only
then clears the marker (compared unchanged) and takes the key; until then ``try_acquire``
answers None, and ``changed`` is set when the delay ends. The delay must cover the step cap
and the longest device timeout: ``lock_delay_s`` defaults to ``LOCK_DELAY_S``; the service
should pass its ``step_timeout_s`` + the inventory's longest device ``timeout_s``. Fenced
devices (``MasterElection``) wait for nothing: the token fences them.

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
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from aetcd import rpc

from services.reroute.planning.resources import EVERYTHING, Keys, covers, device_of
from services.reroute.store.config import STEP_SHARE
from services.reroute.store.etcd.client import (
    KV,
    Change,
    Compare,
    Etcd,
    Op,
    StoreUnavailable,
    TxnResult,
    absent,
    created,
    delete,
    exists,
    get_op,
    prefix_end,
    put,
    unchanged,
)
from services.reroute.store.locks import LEASE_MARGIN, Universe, new_owner

if TYPE_CHECKING:
    from services.reroute.store.etcd.terms import Terms

_T = TypeVar("_T")


class Starting(Protocol):
    """What a lock transaction that claims a reroute adds to start it (the journal's
    ``Start``): compares, operations, and the callback of the revision it committed at."""

    @property
    def compares(self) -> list[Compare]: ...

    @property
    def ops(self) -> list[Op]: ...

    @property
    def started(self) -> Callable[[int], None]: ...


log = logging.getLogger("reroute.etcd")
RETRY_S = 0.05  # ``acquire`` tries again after this, or on a change
RENEWALS = 4  # per TTL: a live replica's lease has at least 3/4 of its TTL left, less delays
# the changes that may let a waiting reroute start (not step records, not reroute rows):
# a reroute queued, or a key of these gone (let go, started, ended, died)
QUEUED = "pending/"
GONE = ("pending/", "running/", "claims/", "locks/", "owners/")
EPOCH_BASE = 1577836800  # 2020-01-01T00:00:00Z: epochs count seconds from here
REVISION_BITS = 33  # revisions below 2**33 (8.6e9 writes) fit under an epoch
REVISION_LIMIT = 1 << REVISION_BITS
TOKEN_LIMIT = 1 << 64  # OpenFlow's generation_id, the high half of P4Runtime's election id
MAX_TXN_OPS = 128  # etcd's --max-txn-ops (default): compares, and operations, per transaction
# keys per transaction: up to 4 compares and 3 operations each (a lock, and its marker or
# its holder's record read and put), within etcd's limit with the start's few
CHUNK = (MAX_TXN_OPS - 8) // 4
HELD = "held/"  # lock-delay markers (module docstring)
VOID = "void/"  # transactions settled as never applied (module docstring, "In doubt")
HOLDER = "holder/"  # a fenced device's last holder (module docstring, "A claim kept")
LOCK_DELAY_S = 3.0  # an unfenced device's wait after its holder died (module docstring)
OUTRANK_TRIES = 5  # epoch raises lost to other raisers before ``outrank`` gives up


def token(epoch: int, revision: int) -> int:
    """The fencing token of a lock taken at ``revision`` in a cluster of ``epoch``."""
    if not 0 < revision < REVISION_LIMIT:
        raise _beyond(revision)
    if epoch << REVISION_BITS >= TOKEN_LIMIT:
        raise StoreUnavailable(f"epoch {epoch} puts fencing tokens beyond 64 bits")
    return epoch << REVISION_BITS | revision


def _beyond(revision: int) -> StoreUnavailable:
    return StoreUnavailable(
        f"etcd revision {revision} is beyond what a fencing token holds (2**33): "
        "start the prefix anew (a new epoch)"
    )


def _keys_under(prefix: str) -> Op:
    """Read the names of every key under ``prefix`` (not their values)."""
    request = rpc.RangeRequest(
        key=prefix.encode(), range_end=prefix_end(prefix).encode(), keys_only=True
    )
    return rpc.RequestOp(request_range=request)


def holder(value: bytes) -> str:
    """The owner that a lock's or a claim's value names (``<owner> <tag>``)."""
    return value.decode(errors="replace").split(" ", 1)[0]


def _chunks(items: list[_T], size: int = CHUNK) -> list[list[_T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Taken:
    """One lock key as a hold took it."""

    revision: int  # its create revision (compared when it is let go)
    token: int  # its fencing token


class EtcdLocks:
    def __init__(
        self,
        etcd: Etcd,
        prefix: str,
        universe: Universe,
        *,
        ttl_s: int = 2,
        owner: str = "",
        lock_delay_s: float = LOCK_DELAY_S,
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
        # what a claiming lock transaction adds to start its reroute (the journal's
        # ``start_ops``: claim, locks and start in one durable write); None: nothing
        self.starting: Callable[[str, Keys], Starting | None] | None = None
        self._changed = asyncio.Event()
        self._valid_until = 0.0  # monotonic: the lease surely lives until then
        self._tasks: list[asyncio.Task[None]] = []
        self.lock_delay_s = lock_delay_s  # unfenced devices' lock-delay (module docstring)
        self._first_seen: dict[tuple[str, int], float] = {}  # (marker, mod revision) -> when
        self._revision = 0  # the highest revision etcd answered this owner's lock calls at
        self._wake: asyncio.TimerHandle | None = None  # sets ``changed`` when a delay ends
        self.lease_left: Callable[[], float | None] = self._lease_of(self.owner)
        # device ownership (``terms.py``): which of the others' changes wake this replica
        self.terms: Terms | None = None
        self.on_changes: list[Callable[[list[Change]], None]] = []  # every batch watched
        # reroute id -> events set when its row changes (by any replica): its waiters'
        self.rows: dict[str, list[asyncio.Event]] = {}
        self.nudges = 0  # times ``changed`` was set (``nudge``)
        self.watching = asyncio.Event()  # the watch is up: it tells of every change now
        # fenced device -> the revision of this owner's latest hold of it in an unbroken
        # line of its own holds since it claimed the device (module docstring)
        self._sole: dict[str, int] = {}
        self.claims = {"made": 0, "kept": 0}  # fenced devices claimed, and found still ours

    @property
    def changed(self) -> asyncio.Event:
        return self._changed

    def nudge(self) -> None:
        """Wake the scheduler (``changed``), counted (``nudges``): a queue this replica
        read before a nudge may miss what it was for."""
        self.nudges += 1
        self._changed.set()

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
            if self.expired:  # let go meanwhile (``forsake``): not renewed, a new owner
                pause = 0
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

    def forsake(self, why: str) -> None:
        """Let this owner's lease go and go on as a new owner: for keys this replica holds
        under it and no longer accounts for (``why``), which would otherwise live as long
        as the lease, and the lease may outlive a cut (etcd renews every lease when it
        elects a leader, and the renewals resume): they go with it, revoked at once where
        etcd answers, else at its TTL; the owner's reroutes are recovered as a dead owner's
        (by this replica as the new owner, or another). Runs under it start no more
        steps from now on."""
        if self.expired or not self.lease:
            return
        log.warning("lease %x of %s let go (%s): a new owner next", self.lease, self.owner, why)
        self._valid_until = min(self._valid_until, time.monotonic())
        self.expired = True  # the renewals take a new lease and owner next
        task = asyncio.create_task(self._revoke(self.lease), name="etcd-forsake")
        self._tasks.append(task)

    async def _revoke(self, lease: int) -> None:
        with contextlib.suppress(StoreUnavailable):
            await self.etcd.revoke(lease)

    async def _reregister(self) -> None:
        """A new lease and owner after the old lease expired (module docstring)."""
        old = self.owner
        await self._register()
        log.warning(
            "new lease %x: this replica is owner %s now (%s's reroutes are recovered as a "
            "dead owner's)", self.lease, self.owner, old,
        )  # fmt: skip
        self.nudge()  # the scheduler looks again: the old owner's reroutes

    async def _watch(self) -> None:
        while True:
            try:
                async for changes in self.etcd.changes(self.prefix, self.watching):
                    self._seen_changes(changes)
                    waking = [c for c in changes if self._waking(c)]
                    if waking and self.etcd.writing:  # one of ours, its answer not in yet?
                        await self.etcd.writes_done()
                        waking = [c for c in waking if self._waking(c)]
                    if waking:
                        self.nudge()
            except StoreUnavailable as exc:
                log.debug("watch: %s", exc)
            self.watching.clear()
            self.nudge()  # something may have changed unseen
            await asyncio.sleep(RETRY_S)

    def _seen_changes(self, changes: list[Change]) -> None:
        """Tell the hooks (``on_changes``) and the waiters on a reroute's row (``rows``)."""
        for hook in self.on_changes:
            hook(changes)
        rows = f"{self.prefix}reroutes/"
        for change in changes:
            if change.key.startswith(rows):
                for waiter in self.rows.get(change.key[len(rows) :], ()):
                    waiter.set()

    def _waking(self, change: Change) -> bool:
        """A change that may let a reroute start, made by another replica (this one's own
        wake its scheduler directly: queued, let go, ended). Its own: a revision its client
        wrote, or a lock or claim whose value is this owner (an asyncio write may be seen
        here before its answer)."""
        name = change.key[len(self.prefix) :]
        if not (name.startswith(GONE) if change.deleted else name.startswith(QUEUED)):
            return False
        mine = self.etcd.wrote(change.revision) or holder(change.value) == self.owner
        if mine:
            return False
        return self.terms is None or self.terms.wakes(change, name)

    # -- locks -----------------------------------------------------------------------

    def _lock(self, key: str) -> str:
        return f"{self.prefix}locks/{key}"

    def _marker(self, key: str) -> str:
        """The lock-delay marker of lock ``key``; it ends in "/" so that a device's range
        holds its own and its ports' markers, and no other device's (``br1`` vs ``br10``)."""
        return f"{self.prefix}{HELD}{key}/"

    @property
    def _epoch_key(self) -> str:
        return f"{self.prefix}epoch"

    def _unfenced(self, key: str) -> bool:
        return device_of(key) in self.universe.unfenced

    def _expand(self, keys: Keys) -> list[str]:
        out = set(keys)
        if EVERYTHING in out:
            out.discard(EVERYTHING)
            out |= self.universe.devices
        return sorted(out)

    def _free(self, key: str) -> list[Compare]:
        """No lock on ``key`` nor on what overlaps it; for an unfenced device, no lock-delay
        marker either (a clean release deletes it)."""
        if "/" in key:
            device = device_of(key)
            free = [absent(self._lock(device)), absent(self._lock(key))]
            markers = [absent(self._marker(device)), absent(self._marker(key))]
        else:
            free = [absent(self._lock(key)), absent(self._lock(key) + "/", prefix=True)]
            markers = [absent(self._marker(key), prefix=True)]
        return free + markers if self._unfenced(key) else free

    def _tag(self) -> bytes:
        """The value of the keys one transaction puts: this owner and a tag of its own
        (module docstring, "In doubt")."""
        return f"{self.owner} {uuid.uuid4().hex[:16]}".encode()

    def _holder(self, device: str) -> str:
        return f"{self.prefix}{HOLDER}{device}"

    def _whole_fenced(self, keys: list[str]) -> list[str]:
        """Of ``keys``, the fenced devices taken whole: each gets a token, and a claim."""
        return [k for k in keys if "/" not in k and not self._unfenced(k)]

    def _held_ops(self, keys: list[str], tag: bytes) -> list[Op]:
        """Put the locks of ``keys`` (and their markers), read then put their fenced
        devices' holder records, and read the epoch they are under (last)."""
        ops = [put(self._lock(k), tag, self.lease) for k in keys]
        ops += [put(self._marker(k), self.owner.encode()) for k in keys if self._unfenced(k)]
        fenced = self._whole_fenced(keys)
        ops += [get_op(self._holder(k)) for k in fenced]
        ops += [put(self._holder(k), self.owner.encode(), self.lease) for k in fenced]
        return [*ops, get_op(self._epoch_key)]

    def _line(self, keys: list[str], result: TxnResult) -> None:
        """Go on with the line of this owner's holds of each fenced device of ``keys``
        taken in ``result`` (module docstring, "A claim kept"), or end it here."""
        fenced = self._whole_fenced(keys)
        read = result.ranges[-1 - len(fenced) : -1] if fenced else []
        if len(read) != len(fenced):  # a result settled in doubt: the records unread
            read = [[] for _ in fenced]
        for device, kvs in zip(fenced, read, strict=True):
            was = kvs[0] if kvs else None
            if (
                was is not None
                and was.value == self.owner.encode()
                and (self._sole.get(device) == was.mod_revision)
            ):
                self._sole[device] = result.revision
            else:
                self._sole.pop(device, None)

    def _seen(self, result: TxnResult) -> TxnResult:
        self._revision = max(self._revision, result.revision)
        return result

    def _epoch_in(self, result: TxnResult) -> int:
        """The epoch a lock transaction read (its last range is ``P/epoch``)."""
        kvs = result.ranges[-1]
        if kvs:
            try:
                self.epoch = int(kvs[0].value)
            except ValueError:
                raise StoreUnavailable(f"{self._epoch_key} holds {kvs[0].value!r}") from None
        return self.epoch

    async def _take(
        self,
        keys: list[str],
        claim: str | None,
        extra: Sequence[Compare] = (),
        again: bool = True,
        start: Starting | None = None,
    ) -> TxnResult | None:
        """``keys`` (at most ``CHUNK``) and ``claim`` in one transaction, under the
        caller's ``extra`` compares too (the journal's ``Queue.guard``: no reroute started
        since its read); None: not free, or an unfenced one still held back (lock-delay)."""
        compares = [c for k in keys for c in self._free(k)] + self.fence() + list(extra)
        tag = self._tag()
        ops = self._held_ops(keys, tag)
        if claim is not None:
            compares += [
                exists(f"{self.prefix}pending/{claim}"),
                absent(f"{self.prefix}claims/{claim}"),
            ]
            ops.insert(0, put(f"{self.prefix}claims/{claim}", tag, self.lease))
        if start is not None:  # the journal's start of the reroute (``EtcdJournal.start_ops``)
            compares += start.compares
            ops = [*start.ops, *ops]  # (the epoch's range stays last)
        delayed = any(self._unfenced(k) for k in keys)
        failure = [get_op(self.prefix + HELD, prefix=True), _keys_under(self._lock(""))]
        first = self._lock(keys[0]) if keys else f"{self.prefix}claims/{claim}"
        result = await self._settled(
            compares, ops, failure if delayed else [], (tag, first) if keys or claim else None
        )
        if result.succeeded:
            return result
        if delayed and again and await self._clear(keys, result.ranges[0], result.ranges[1]):
            return await self._take(keys, claim, extra, again=False, start=start)
        return None

    async def _settled(
        self,
        compares: list[Compare],
        ops: list[Op],
        failure: list[Op],
        witness: tuple[bytes, str] | None,
    ) -> TxnResult:
        """One transaction, its outcome known (module docstring, "In doubt"): ``witness``,
        the tag of the keys it puts and the first of them (None: it puts none). A result
        that did not succeed was not applied and never will be."""
        if witness is None:
            return self._seen(await self.etcd.atxn(compares, ops, failure))
        tag, first = witness
        void = f"{self.prefix}{VOID}{tag.decode().replace(' ', '/')}"
        try:
            result = await self.etcd.atxn([*compares, absent(void)], ops, failure)
        except StoreUnavailable:
            if (applied := await self._settle(tag, first, void)) is None:
                raise
            return applied
        self._seen(result)
        if result.succeeded or not result.retried:
            return result
        return await self._settle(tag, first, void) or result

    async def _settle(self, tag: bytes, first: str, void: str) -> TxnResult | None:
        """Settle a transaction in doubt: put its ``void`` key, so that it can no longer
        be applied, and read its ``first`` key; its result as if answered (its revision,
        the epoch now) when it was applied, None when it was not. No answer: the owner
        lets its lease go, and with it what the transaction may have put."""
        reads = [get_op(first), get_op(self._epoch_key)]
        try:
            result = await self.etcd.atxn(
                [absent(void)], [put(void, b"", self.lease), *reads], reads
            )
        except StoreUnavailable:
            self.forsake("a lock transaction whose outcome etcd did not tell")
            raise
        self._seen(result)
        got = result.ranges[0]
        if not got or got[0].value != tag:
            return None
        log.warning("a lock transaction whose answer was lost was applied: taken (%s)", first)
        return TxnResult(succeeded=True, revision=got[0].create_revision, ranges=[result.ranges[1]])

    async def _clear(self, keys: list[str], markers: list[KV], locks: list[KV]) -> bool:
        """Delete the markers in the way of ``keys`` whose holders died at least
        ``lock_delay_s`` ago (as first seen here); False: none, or some are still young
        (``changed`` is set when the youngest comes of age)."""
        taken = {kv.key for kv in locks}
        start = len(self.prefix + HELD)
        dead = [m for m in markers if self._lock(m.key[start:-1]) not in taken]
        now = time.monotonic()
        self._first_seen = {
            (m.key, m.mod_revision): self._first_seen.get((m.key, m.mod_revision), now)
            for m in dead
        }
        blocking = [m for m in dead if _blocks(m.key[start:-1], keys)]
        if not blocking:
            return False
        wait = max(self._first_seen[m.key, m.mod_revision] for m in blocking)
        left = wait + self.lock_delay_s - now
        if left > 0:
            if self._wake is not None:
                self._wake.cancel()
            self._wake = asyncio.get_running_loop().call_later(left, self.nudge)
            return False
        for batch in _chunks(blocking, MAX_TXN_OPS // 2):
            compares = [unchanged(m.key, m.mod_revision) for m in batch]
            compares += [absent(self._lock(m.key[start:-1])) for m in batch]
            self._seen(await self.etcd.atxn(compares, [delete(m.key) for m in batch]))
        return True

    def _check_revision(self) -> None:
        """Refuse to lock (before any transaction) once revisions near what a token holds."""
        if self._revision + 1 >= REVISION_LIMIT:
            raise _beyond(self._revision + 1)

    async def try_acquire(
        self, keys: Keys, claim: str | None = None, extra: Sequence[Compare] = ()
    ) -> EtcdHeld | None:
        self._check_revision()
        held = EtcdHeld(self, frozenset(), {}, None)
        start = None if claim is None or self.starting is None else self.starting(claim, keys)
        if not await held.take(self._expand(keys), claim, extra, start):
            return None
        held._keys = keys
        return held

    async def acquire(self, keys: Keys) -> EtcdHeld:
        while True:
            held = await self.try_acquire(keys)
            if held is not None:
                return held
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RETRY_S):
                    await self._changed.wait()

    async def alive(self, owner: str | None) -> bool:
        if owner is None:
            return False
        if owner == self.owner:
            return self.valid_for() > 0
        return await self.etcd.aget(f"{self.prefix}owners/{owner}") is not None


def _blocks(marked: str, keys: list[str]) -> bool:
    """A marker of lock key ``marked`` is in the way of one of ``keys`` (they overlap)."""
    return any(marked == k or device_of(marked) == k or marked == device_of(k) for k in keys)


class EtcdHeld:
    """Lock keys of one owner for one reroute (or recovery). Once the replica is another
    owner (a new lease), the hold takes nothing more: ``extend`` and ``narrow`` raise (the
    run under the old owner stops; what it held goes with the old lease)."""

    def __init__(
        self, locks: EtcdLocks, keys: Keys, taken: dict[str, Taken], claim: str | None
    ) -> None:
        self._locks = locks
        self._owner = locks.owner  # the owner it holds for
        self._keys = keys
        self._taken = taken  # lock key (device or device/port) -> as taken
        self._claim = claim
        self._claim_at = 0  # the create revision of the claim's key

    @property
    def keys(self) -> Keys:
        return self._keys

    def revision(self, device: str) -> int:
        """The fencing token of ``device`` (0: not held whole)."""
        taken = self._taken.get(device)
        return 0 if taken is None else taken.token

    def sole(self, device: str) -> bool:
        """Whether no other owner has held ``device`` since this one last claimed it: that
        claim stands (``KeepsClaims``; module docstring, "A claim kept"): the owner's line
        of holds of it reaches this one."""
        taken = self._taken.get(device)
        return taken is not None and self._locks._sole.get(device) == taken.revision

    def claimed(self, device: str, *, kept: bool) -> None:
        """``device`` was claimed under this hold (a line of this owner's holds starts), or
        its earlier claim found standing (``kept``); counted in ``EtcdLocks.claims``."""
        self._locks.claims["kept" if kept else "made"] += 1
        taken = self._taken.get(device)
        if not kept and taken is not None and self._locks.owner == self._owner:
            self._locks._sole[device] = taken.revision

    async def take(
        self,
        keys: list[str],
        claim: str | None = None,
        extra: Sequence[Compare] = (),
        start: Starting | None = None,
    ) -> bool:
        """Also hold ``keys`` (sorted) and ``claim``, chunk by chunk, each under ``extra``;
        all or nothing: what this call took is given back when a chunk is not free, or on
        an error."""
        self._still_mine()
        got: list[str] = []
        try:
            chunks = _chunks(keys) or [[]]
            for i, chunk in enumerate(chunks):
                first = claim if i == 0 else None
                last = start if i == len(chunks) - 1 else None  # all taken: it starts
                result = await self._locks._take(chunk, first, extra, start=last)
                if result is None:
                    await self._let_go(got, claim=claim is not None and self._claim == claim)
                    return False
                if first is not None:
                    self._claim, self._claim_at = first, result.revision
                if last is not None:
                    last.started(result.revision)
                got += chunk
                self._record(chunk, result)
        except BaseException:
            try:
                await self._let_go(got, claim=claim is not None and self._claim == claim)
            except Exception as exc:  # they go with the lease: which must then end
                log.warning("locks not given back: %s", exc)
                self._locks.forsake("locks it could not give back")
            raise
        return True

    def _still_mine(self) -> None:
        if self._locks.owner != self._owner:
            raise StoreUnavailable(
                f"this replica is owner {self._locks.owner} now: the locks of {self._owner} "
                "(its lease is gone) take nothing more"
            )

    def _record(self, keys: list[str], result: TxnResult) -> None:
        """``keys``, taken in ``result``: held (so an error can give them back), then
        tokened (``token`` raises past 2**33 revisions)."""
        self._taken |= dict.fromkeys(keys, Taken(revision=result.revision, token=0))
        taken = Taken(
            revision=result.revision, token=token(self._locks._epoch_in(result), result.revision)
        )
        self._taken |= dict.fromkeys(keys, taken)
        self._locks._line(keys, result)

    async def extend(self, keys: Keys, extra: Sequence[Compare] = ()) -> bool:
        more = [k for k in self._locks._expand(keys) if not covers(self._taken, {k})]
        if more and not await self.take(more, extra=extra):
            return False
        self._keys = self._keys | keys
        return True

    async def narrow(self, keys: Keys) -> None:
        locks = self._locks
        assert covers(self._keys, keys), f"narrowing {sorted(self._keys)} to {sorted(keys)}"
        keep = locks._expand(keys)
        new = [k for k in keep if k not in self._taken]  # ports of a device held whole
        if new:
            self._still_mine()
        drop = [k for k in self._taken if k not in keep]
        if new and len(new) <= CHUNK and len(drop) <= CHUNK:  # one write: ports in, rest out
            await self._take_ports(new, drop)
        else:
            for chunk in _chunks(new):
                await self._take_ports(chunk, [])
            if not await self._let_go(drop, claim=False):
                raise StoreUnavailable("this replica's lease in etcd expired while it held locks")
        self._keys = keys

    async def _take_ports(self, ports: list[str], drop: list[str]) -> None:
        """Hold ``ports`` (at most ``CHUNK``) of devices held whole, and let ``drop`` go,
        in one transaction, while every one of them is still this hold's."""
        locks = self._locks
        mine = sorted({device_of(k) for k in ports} | set(drop))
        compares = [created(locks._lock(k), self._taken[k].revision) for k in mine]
        tag = locks._tag()
        ops = locks._held_ops(ports, tag) + [delete(locks._lock(k)) for k in drop]
        ops += [delete(locks._marker(k)) for k in drop if locks._unfenced(k)]
        result = await locks._settled(compares, ops, [], (tag, locks._lock(ports[0])))
        if not result.succeeded:
            raise StoreUnavailable("this replica's lease in etcd expired while it held locks")
        for k in drop:
            del self._taken[k]
        self._record(ports, result)

    def let_go_ops(self) -> tuple[list[Compare], list[Op]] | None:
        """What ``release`` would do, as one transaction's compares and operations for
        another write to carry (the journal's finish: one durable write for both); None
        when they do not fit in one (over ``CHUNK`` keys). ``released`` once it
        committed."""
        locks, keys = self._locks, list(self._taken)
        if len(keys) > CHUNK:
            return None
        compares = [created(locks._lock(k), self._taken[k].revision) for k in keys]
        ops = [delete(locks._lock(k)) for k in keys]
        ops += [delete(locks._marker(k)) for k in keys if locks._unfenced(k)]
        if self._claim is not None:
            key = f"{locks.prefix}claims/{self._claim}"
            compares.append(created(key, self._claim_at))
            ops.append(delete(key))
        return compares, ops

    def released(self, revision: int) -> None:
        """``let_go_ops`` committed at ``revision``: nothing is held any more."""
        self._locks._revision = max(self._locks._revision, revision)
        self._taken.clear()
        self._claim = None
        self._keys = frozenset()

    async def release(self) -> None:
        keys, claim = list(self._taken), self._claim is not None
        if not keys and not claim:
            return
        self._keys = frozenset()
        try:
            if not await self._let_go(keys, claim=claim):
                log.warning("locks no longer this replica's (its lease expired): left alone")
        except StoreUnavailable as exc:  # they go with the lease: which must then end
            log.warning("locks not released: %s", exc)
            self._locks.forsake("locks it could not release")

    async def _let_go(self, keys: list[str], *, claim: bool) -> bool:
        """Delete ``keys`` (and the claim) where they are still the ones this hold took;
        False: some were not (they went with an expired lease, and may be another's)."""
        locks, ok = self._locks, True
        for i, chunk in enumerate(_chunks(keys) or [[]]):
            compares = [created(locks._lock(k), self._taken[k].revision) for k in chunk]
            ops = [delete(locks._lock(k)) for k in chunk]
            ops += [delete(locks._marker(k)) for k in chunk if locks._unfenced(k)]
            if claim and i == 0 and self._claim is not None:
                key = f"{locks.prefix}claims/{self._claim}"
                compares.append(created(key, self._claim_at))
                ops.append(delete(key))
                self._claim = None
            for k in chunk:
                del self._taken[k]
            if ops:
                ok = locks._seen(await locks.etcd.atxn(compares, ops)).succeeded and ok
        return ok

    async def outrank(self, device: str, seen: int) -> int | None:
        """A token for ``device`` above ``seen`` (a generation the device saw), ``P/epoch``
        raised where needed, while this hold still has the device's lock (compared in the
        same transaction); None: it does not (superseded: nothing raised)."""
        locks = self._locks
        taken = self._taken.get(device)
        if taken is None:
            return None
        mine = created(locks._lock(device), taken.revision)
        for _ in range(OUTRANK_TRIES):
            current = await locks.etcd.aget(locks._epoch_key)
            epoch = int(current.value) if current is not None else locks.epoch
            need = max(epoch, (seen >> REVISION_BITS) + 1)
            compares = [mine]
            ops: list[Op] = []
            if need != epoch:  # raise it, unless another raised it meanwhile
                compares.append(unchanged(locks._epoch_key, current.mod_revision if current else 0))
                ops.append(put(locks._epoch_key, str(need).encode()))
            above = token(need, taken.revision)  # raises beyond 64 bits, before any write
            failure = [get_op(locks._lock(device))]
            result = locks._seen(await locks.etcd.atxn(compares, ops, failure))
            if result.succeeded:
                locks.epoch = max(locks.epoch, need)
                self._taken[device] = Taken(revision=taken.revision, token=above)
                log.warning("%s: the device saw generation %d; epoch raised to %d",
                            device, seen, need)  # fmt: skip
                return self._taken[device].token
            now = result.ranges[0]
            if not now or now[0].create_revision != taken.revision:
                return None  # superseded: the device's later generation is legitimate
        raise StoreUnavailable(f"{locks._epoch_key}: raised by others {OUTRANK_TRIES} times")
