"""Where the service keeps its journal, queue and locks: the ``store:`` of its config.

- ``{kind: sqlite}`` (the default): the journal in an SQLite file, locks as ``flock`` files
  (``journal.py``, ``locks.py``); one ``reroute serve`` per journal.
- ``{kind: etcd, endpoints: [...], prefix: ..., tls: ..., user: ..., password: ...}``:
  everything in an etcd cluster (``services/reroute/store/etcd``), shared by several replicas of
  ``reroute serve`` on one fabric. The password, like an inventory's, comes from an
  environment variable or a file (``{env: VAR}`` / ``{file: PATH}``), never inline.

``open_store`` yields the journal and the locks, and closes them (the etcd lease revoked:
this replica's locks go at once) when the block ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from drivers.spec import SecretRef, TlsFiles, host_port
from services.reroute.store.flock import file_or_memory
from services.reroute.store.journaling import Journaling
from services.reroute.store.locks import Locks, Universe
from services.reroute.store.sqlite import Journal

STEP_SHARE = 3 / 8  # of the lease's TTL: a device step's cap under etcd (etcd.locks)


def _endpoint(text: str) -> str:
    host_port(text, "endpoint")
    return text


class SqliteStore(BaseModel):
    """The embedded default: an SQLite journal and file locks on this machine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sqlite"] = "sqlite"


class EtcdStore(BaseModel):
    """An etcd cluster (3.4 or later) shared by the replicas of one fabric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["etcd"]
    endpoints: tuple[Annotated[str, AfterValidator(_endpoint)], ...] = Field(
        min_length=1, description="client endpoints HOST:PORT of the cluster's members"
    )
    prefix: str = Field(
        default="/reroute", pattern=r"^/[A-Za-z0-9_./-]*$", description="key prefix (per fabric)"
    )
    tls: TlsFiles | None = None
    user: str | None = Field(default=None, min_length=1)
    password: SecretRef | None = None
    lease_ttl_s: int = Field(default=2, ge=1, le=60, description="a dead replica's lease ends")
    timeout_s: float = Field(default=1.0, gt=0, le=30, description="longest wait for etcd")
    ownership: bool = Field(
        default=True,
        description="each group of devices mastered by one replica per term, which alone "
        "runs its reroutes (etcd/terms.py); false: every replica races for every reroute",
    )

    @property
    def step_cap_s(self) -> float:
        """The longest a device step may take: ``STEP_SHARE`` of the lease (etcd.locks)."""
        return STEP_SHARE * self.lease_ttl_s


StoreSpec = Annotated[SqliteStore | EtcdStore, Field(discriminator="kind")]


@asynccontextmanager
async def open_store(
    spec: SqliteStore | EtcdStore,
    *,
    journal_file: Path | None,
    lock_dir: Path | None,
    universe: Universe,
    lock_delay_s: float | None = None,
    groups: Mapping[str, str] | None = None,
) -> AsyncIterator[tuple[Journaling, Locks]]:
    """The journal and locks of ``spec`` (module docstring); ``lock_delay_s``: etcd's
    hold-back of an unfenced device whose holder died (None: ``etcd.locks.LOCK_DELAY_S``);
    ``groups``: etcd's device groups, one master each (``ownership.device_groups``)."""
    if isinstance(spec, SqliteStore):
        journal = Journal(journal_file)
        locks = file_or_memory(lock_dir, universe)
        try:
            yield journal, locks
        finally:
            await locks.close()
            journal.close()
        return
    from services.reroute.store.etcd import open_etcd  # grpc only when asked for
    from services.reroute.store.etcd.locks import LOCK_DELAY_S

    delay = LOCK_DELAY_S if lock_delay_s is None else lock_delay_s
    async with open_etcd(spec, universe, lock_delay_s=delay, groups=groups) as (
        etcd_journal,
        etcd_locks,
    ):
        yield etcd_journal, etcd_locks
