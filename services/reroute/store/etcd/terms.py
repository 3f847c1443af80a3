"""Device ownership in etcd: each group of devices (``ownership.py``) has one master
replica for a *term*, so that a reroute is read, claimed and run by one replica, not raced
for by all.

**Terms.** A group's term is the key ``P/terms/<group>``, valued with its master (an owner:
``locks.py``) and put under that owner's lease; its create revision is the term's number.
It is claimed in one transaction that compares the key absent and the owner's own key
(``EtcdLocks.fence``: a replica whose lease is gone claims nothing), and given up with a
compare of that create revision (never a successor's term). A master's term ends when it
gives it up (rebalance), when its lease ends (it died, paused or was cut off past its TTL:
the key goes with the lease), or when it lets its lease go (``forsake``). A replica that
takes a new lease is a new owner: it holds no term until it claims one again.

**Election and balance.** A replica that masters devices announces itself under its lease
(``P/candidates/<owner>``: a CLI process holding locks does not), and every replica
computes the same assignment from the live candidates and the groups
(``ownership.assign``). It claims each group assigned to it that has no term, and gives up
each term it holds whose group is assigned to another live candidate; that one claims it
once it sees it free. It looks again when a candidate or a term key changes (the locks'
watch) and every TTL all the same. While a group changes hands it has no master for a
moment: its reroutes wait in the queue.

**What the term fences, and what it does not.** A reroute starts in the transaction that
takes its locks and claims it (``EtcdLocks.try_acquire``); the coordinating group's
master adds the compare of its term there (``fences``): a replica that lost the term
(gave it up, or its lease ended) starts nothing more of that group, and a deposed master
cannot start a reroute after its successor's term began. Everything Deliver 1 and 2 built
stays underneath, unchanged: the locks per reroute, compared in every lock and release
transaction, their fencing tokens for the devices (OpenFlow ``generation_id``, P4Runtime
election id), the lock-delay of unfenced devices, the queue's guard, the owner fence of
every journal write. So two replicas that both believe they master a group (a watch late
for a moment) can only race for a reroute's claim, as every replica did before, and one
that believes no one does only waits: ownership routes work, the locks keep it safe.

**Only the owner wakes.** The queue's and in-flight index keys (``P/pending/<id>``,
``P/running/<id>``) hold the groups of the reroute (``label``); a replica's watch wakes its
scheduler for a queued reroute, or for a reroute or lock gone, only when it masters one of
their groups (or cannot tell: an unlabelled key, a lock of optical ports, an owner gone).
A request sent to a replica that does not master its devices is queued there and run by
the master; the receiving replica waits for that reroute's own row (``EtcdLocks.rows``),
not for every change.

**Owner death, rebalance, drain.** When a master dies its terms end with its lease; the replicas
assign its groups anew and their new masters claim them. A reroute it was running is
recovered by the new master of its coordinating group (``Scheduler``: takeover as before,
from the devices' own state), before any queued reroute on those devices starts. On a
rebalance the old master keeps the reroutes it runs (their locks) to their end; the new
master sees them running under a live owner and waits for their locks. A replica that
drains (SIGTERM) steps down first (``step_down``): no longer a candidate, it gives its
terms up, so its groups' queued reroutes run elsewhere while its own running ones end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from services.reroute.planning.resources import EVERYTHING, device_of
from services.reroute.store.etcd.client import (
    Change,
    Compare,
    StoreUnavailable,
    absent,
    created,
    delete,
    get_op,
    put,
)
from services.reroute.store.etcd.locks import MAX_TXN_OPS
from services.reroute.store.ownership import assign, coordinator, groups_of

if TYPE_CHECKING:
    from services.reroute.store.etcd.locks import EtcdLocks

log = logging.getLogger("reroute.etcd")
RETRY_S = 0.2  # a balance etcd did not answer is tried again after this
ANY = b"*"  # the label of a reroute that may touch every group
# a reroute holding more keys starts under the queue's broad guard: its lock transaction
# compares up to 4 per key, 1 per unit (at most one per key) and ``*``, and up to 6 more
# (claim, owner, term, row, its void key: locks.py), within etcd's MAX_TXN_OPS:
# 5 * 24 + 7 <= 128. An optical MBB from one OCS's circuit to another's via a third holds
# 18 (2 leaves, 16 optical ports).
UNIT_KEYS = (MAX_TXN_OPS - 7) // 5


class Terms:
    """This replica's terms and what it knows of the others' (module docstring)."""

    def __init__(self, locks: EtcdLocks, group_of: Mapping[str, str]) -> None:
        self.locks = locks
        self.group_of = dict(group_of)  # device -> group
        self.groups = sorted(set(group_of.values()))
        self.masters: dict[str, tuple[str, int]] = {}  # group -> (owner, term)
        self.changes = 0  # terms claimed or given up here (a metric)
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._announced = ""  # the owner this replica last announced as a candidate
        self.live: list[str] = []  # the candidates, as last read

    def key(self, group: str) -> str:
        return f"{self.locks.prefix}terms/{group}"

    # -- what the scheduler and the watch ask ------------------------------------------

    def mine(self, keys: Iterable[str]) -> bool:
        """This replica runs a reroute holding ``keys``: it masters its coordinating group
        (or it touches none)."""
        group = coordinator(keys, self.group_of)
        return group is None or self._masters(group)

    def fences(self, keys: Iterable[str]) -> list[Compare]:
        """What the transaction that starts such a reroute compares: this replica's term of
        its coordinating group (none when it touches no group)."""
        group = coordinator(keys, self.group_of)
        if group is None or not self._masters(group):
            return []
        return [created(self.key(group), self.masters[group][1])]

    def label(self, keys: Iterable[str]) -> bytes:
        """The groups of ``keys``, for the index keys' values (``ANY``: ``EVERYTHING``)."""
        given = set(keys)
        return ANY if EVERYTHING in given else ",".join(groups_of(given, self.group_of)).encode()

    def units(self, keys: Iterable[str]) -> list[str] | None:
        """What a start of a reroute holding ``keys`` marks busy, for the queue's narrow
        guard (``journal.Narrow``): the group of each switch in one, any other switch and
        each optical port by its name; None (the broad guard) for ``EVERYTHING``, a whole
        optical switch (it overlaps each of its ports), or more than ``UNIT_KEYS`` keys
        (each unit is one compare more in every lock transaction, which etcd caps)."""
        given = set(keys)
        if len(given) > UNIT_KEYS or EVERYTHING in given:
            return None
        if any(k in self.locks.universe.ports for k in given):
            return None
        return sorted({self.group_of.get(k, k) for k in given})

    def alone(self) -> bool:
        """No other candidate stands, as last read (``Routing.alone``)."""
        return all(owner == self.locks.owner for owner in self.live)

    def held(self) -> list[str]:
        """The groups this replica masters now."""
        return [g for g in self.groups if self._masters(g)]

    def owners(self) -> dict[str, str]:
        """Each device in a group -> its master ("": none now; a device in no group is
        mastered by no one: its locks alone coordinate it)."""
        return {d: self.masters.get(g, ("", 0))[0] for d, g in sorted(self.group_of.items())}

    def wakes(self, change: Change, name: str) -> bool:
        """Whether another replica's ``change`` (of key ``name`` under the prefix) may let a
        reroute of this replica's start (module docstring)."""
        kind, _, rest = name.partition("/")
        if kind in ("pending", "running"):
            return self._touches(change.value)
        if kind == "claims":  # the claimant is the master: it knows (else: CHECK_S)
            return False
        if kind == "locks":
            group = self.group_of.get(device_of(rest))
            return group is None or self._masters(group)
        return True  # an owner gone: its terms, and what it ran, are handed over

    def _touches(self, label: bytes) -> bool:
        if not label or label == ANY:
            return True
        return any(self._masters(g) for g in label.decode().split(","))

    def _masters(self, group: str) -> bool:
        master = self.masters.get(group)
        return master is not None and master[0] == self.locks.owner

    # -- keeping up ----------------------------------------------------------------------

    def seen(self, changes: list[Change]) -> None:
        """The locks' watch saw ``changes``: terms put or gone are noted, and a change of
        a candidate or a term makes this replica look at the balance again."""
        start = len(self.key(""))
        for change in changes:
            if change.key.startswith(self.key("")):
                group = change.key[start:]
                if change.deleted:
                    self.masters.pop(group, None)
                else:
                    self.masters[group] = (change.value.decode(), change.revision)
                self._dirty.set()
            elif change.key.startswith(self._candidates):
                self._dirty.set()

    def stir(self, *_: object) -> None:
        """Look at the balance again soon (a new owner here, for one)."""
        self._dirty.set()

    @property
    def _candidates(self) -> str:
        return f"{self.locks.prefix}candidates/"

    async def open(self) -> Terms:
        """Balance from now on (the first look at once, in the background)."""
        self.locks.on_changes.append(self.seen)
        self.locks.on_owner.append(self.stir)
        self._dirty.set()
        self._task = asyncio.create_task(self._run(), name="etcd-terms")
        return self

    async def close(self) -> None:
        """Stop balancing (the terms go with the lease, revoked by the locks' close)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def step_down(self) -> None:
        """Stand no more and give every term up (a replica draining): the others take its
        groups while the reroutes it runs end under their locks."""
        await self.close()
        locks = self.locks
        await locks.etcd.atxn([], [delete(f"{self._candidates}{locks.owner}")])
        for group in self.held():
            await self._resign(group, self.masters[group][1])

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):  # (not wait_for: on 3.11 it may swallow
                async with asyncio.timeout(self.locks.ttl_s):  # the cancel of close())
                    await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.balance()
            except StoreUnavailable as exc:
                log.debug("terms: %s", exc)
                self._dirty.set()
                await asyncio.sleep(RETRY_S)

    async def balance(self) -> None:
        """Read the live owners and the terms; claim this replica's free groups, give up
        the terms of groups now another live replica's (module docstring)."""
        await self._announce()
        live = await self._read()
        me = self.locks.owner
        if me not in live or self.locks.valid_for() <= 0:
            return  # no lease it surely holds: it claims nothing
        want = assign(self.groups, live)
        gained = False
        for group in self.groups:
            now = self.masters.get(group)
            if now is None and want[group] == me:
                gained = await self._claim(group) or gained
            elif now is not None and now[0] == me and want[group] != me:
                await self._resign(group, now[1])
        if gained:
            self.locks.nudge()  # its queued reroutes are this replica's now

    async def _announce(self) -> None:
        """This replica's owner as a candidate, under its lease (once per owner)."""
        locks = self.locks
        if self._announced == locks.owner or locks.valid_for() <= 0:
            return
        owner, key = locks.owner, f"{self._candidates}{locks.owner}"
        result = await locks.etcd.atxn(locks.fence(), [put(key, b"", locks.lease)])
        if result.succeeded:
            self._announced = owner

    async def _read(self) -> list[str]:
        """The live candidates, sorted; ``masters`` as etcd has them (one read)."""
        owners, terms = self._candidates, self.key("")
        result = await self.locks.etcd.atxn(
            [], [get_op(owners, prefix=True), get_op(terms, prefix=True)]
        )
        self.masters = {
            kv.key[len(terms) :]: (kv.value.decode(), kv.create_revision) for kv in result.ranges[1]
        }
        self.live = sorted(kv.key[len(owners) :] for kv in result.ranges[0])
        return self.live

    async def _claim(self, group: str) -> bool:
        locks, key = self.locks, self.key(group)
        result = await locks.etcd.atxn(
            [absent(key), *locks.fence()], [put(key, locks.owner.encode(), locks.lease)]
        )
        if not result.succeeded:
            return False
        self.masters[group] = (locks.owner, result.revision)
        self.changes += 1
        log.info("group %s: term %d, master %s", group, result.revision, locks.owner)
        return True

    async def _resign(self, group: str, term: int) -> None:
        key = self.key(group)
        result = await self.locks.etcd.atxn([created(key, term)], [delete(key)])
        self.masters.pop(group, None)
        if result.succeeded:
            self.changes += 1
            log.info("group %s: term %d given up (rebalanced)", group, term)
