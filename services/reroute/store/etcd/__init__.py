"""The etcd store: several ``reroute serve`` replicas share one fabric through one etcd
cluster (``client``: etcd's v3 API; ``journal``: the journal; ``locks``: resources held
under each replica's lease; ``terms``: which replica masters which devices). The embedded
default is SQLite and file locks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from services.reroute.store.etcd.client import Etcd, EtcdSettings
from services.reroute.store.etcd.journal import EtcdJournal
from services.reroute.store.etcd.locks import LOCK_DELAY_S, EtcdLocks
from services.reroute.store.etcd.terms import Terms
from services.reroute.store.locks import Universe

if TYPE_CHECKING:
    from services.reroute.store.config import EtcdStore


def follow(journal: EtcdJournal, locks: EtcdLocks) -> None:
    """The journal writes as the locks' owner of the moment (``fence``). It answers from
    memory (``leased``) only under the first owner: after a lost lease, what it remembers
    of the reroutes the old owner ran may have been changed by the replica that took them
    over."""
    first = locks.owner
    journal.fence = locks.fence()
    journal.leased = lambda: locks.owner == first and locks.valid_for() > 0
    locks.on_owner.append(lambda now: setattr(journal, "fence", now.fence()))
    locks.starting = lambda claim, keys: journal.start_ops(claim, locks.owner, keys)
    journal.nudges = lambda: locks.nudges  # its watch wakes the scheduler: ``queue``


@asynccontextmanager
async def open_etcd(
    spec: EtcdStore,
    universe: Universe,
    *,
    lock_delay_s: float = LOCK_DELAY_S,
    groups: Mapping[str, str] | None = None,
) -> AsyncIterator[tuple[EtcdJournal, EtcdLocks]]:
    """The journal and this replica's locks (its lease taken) in the cluster of ``spec``;
    ``lock_delay_s``: how long an unfenced device whose holder died is held back;
    ``groups``: device -> group, mastered by one replica per term (``terms``; None, or
    ``spec.ownership`` off: every replica runs any reroute, as before)."""
    etcd = Etcd(
        EtcdSettings(
            endpoints=spec.endpoints,
            tls=spec.tls,
            user=spec.user,
            password=spec.password,
            timeout_s=spec.timeout_s,
        )
    )
    try:
        locks = EtcdLocks(
            etcd, spec.prefix, universe, ttl_s=spec.lease_ttl_s, lock_delay_s=lock_delay_s
        )
        await locks.open()
        etcd.lease_left = locks.call_left  # no blocking call outlives the lease
        try:
            journal = EtcdJournal(etcd, spec.prefix)
            follow(journal, locks)
            if groups and spec.ownership:
                terms = Terms(locks, groups)
                locks.terms, journal.label, journal.units = terms, terms.label, terms.units
                await terms.open()
            try:
                yield journal, locks
            finally:
                if locks.terms is not None:
                    await locks.terms.close()
        finally:
            await locks.close()
    finally:
        await etcd.aclose()
