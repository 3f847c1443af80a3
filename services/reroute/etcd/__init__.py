"""The etcd store: several ``reroute serve`` replicas share one fabric through one etcd
cluster (``client``: etcd's v3 API; ``journal``: the journal; ``locks``: resources held
under each replica's lease). The embedded default is SQLite and file locks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from services.reroute.etcd.client import Etcd, EtcdSettings
from services.reroute.etcd.journal import EtcdJournal
from services.reroute.etcd.locks import EtcdLocks
from services.reroute.locks import Universe

if TYPE_CHECKING:
    from services.reroute.store import EtcdStore


@asynccontextmanager
async def open_etcd(
    spec: EtcdStore, universe: Universe
) -> AsyncIterator[tuple[EtcdJournal, EtcdLocks]]:
    """The journal and this replica's locks (its lease taken) in the cluster of ``spec``."""
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
        locks = await EtcdLocks(etcd, spec.prefix, universe, ttl_s=spec.lease_ttl_s).open()
        try:
            journal = EtcdJournal(etcd, spec.prefix)
            journal.fence = locks.fence()
            journal.leased = lambda: locks.valid_for() > 0
            yield journal, locks
        finally:
            await locks.close()
    finally:
        await etcd.aclose()
