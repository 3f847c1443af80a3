"""``Journaling``: what the engine, the executor and the service need of a journal
(``sqlite.Journal`` or ``etcd.journal.EtcdJournal``); ``offload``: a call to a journal that
waits on the network, off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import ParamSpec, Protocol, TypeVar

from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.planning.plan import Plan
from services.reroute.planning.resources import EVERYTHING
from services.reroute.store.records import (
    Ended,
    Queue,
    Record,
    RerouteState,
    Retention,
    StepRecord,
    StepState,
)

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def offload(
    journal: object, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """``call`` (a method of ``journal``) off the event loop when the journal waits on the
    network (``networked``: etcd, whose calls may wait their whole deadline when it is cut
    off), so that the loop goes on renewing the lease, cancelling steps at their cap and
    answering; in the loop otherwise (SQLite: local, sub-millisecond, one connection)."""
    if getattr(journal, "networked", False):
        return await asyncio.to_thread(call, *args, **kwargs)
    return call(*args, **kwargs)


class Journaling(Protocol):
    """What the engine, the executor and the service need of a journal: ``Journal``
    (SQLite, this module) or ``EtcdJournal`` (``services/reroute/store/etcd``). Writes raise
    ``JournalError`` (a ``StoreUnavailable`` for etcd) when they cannot be stored.

    ``ended`` (of ``steps_started``, ``checkpoint``, ``finish``): how the previous batch of
    steps ended, stored with the same write (SQLite: one local write per batch boundary;
    etcd: kept in memory until the checkpoint or the finish). Step records are for
    display: recovery plans from the devices (``engine.restore``). A networked journal
    (``networked``: etcd) is called off the event loop (``offload``)."""

    def create(
        self,
        reroute_id: str,
        plan: Plan,
        *,
        owner: str | None = None,
        resources: frozenset[str] = frozenset({EVERYTHING}),
    ) -> None: ...

    def enqueue(
        self,
        reroute_id: str,
        intent: Intent,
        *,
        idem_key: str | None = None,
        fingerprint: str | None = None,
        resources: frozenset[str] = frozenset({EVERYTHING}),
    ) -> None: ...

    def expect(self, reroute_id: str, resources: frozenset[str]) -> None: ...

    def release_with(self, reroute_id: str, held: object) -> None:
        """Let ``held`` (the reroute's locks) go in the same write as the reroute's finish
        where the store can (etcd); else the caller's release does."""
        ...

    def cancel(self, reroute_id: str) -> bool: ...

    def step(
        self, reroute_id: str, idx: int, state: StepState, error: str | None = None
    ) -> None: ...

    def steps_started(self, reroute_id: str, indexes: range, ended: Ended = ()) -> None: ...

    def steps_ended(self, reroute_id: str, ended: Ended) -> None: ...

    def checkpoint(
        self,
        reroute_id: str,
        rest: tuple[tuple[str, tuple[FlowSpec, ...]], ...],
        ended: Ended = (),
    ) -> None: ...

    def finish(
        self,
        reroute_id: str,
        state: RerouteState,
        error: str | None = None,
        ended: Ended = (),
    ) -> None: ...

    def look(self, idem_key: str | None) -> tuple[bool, Record | None]: ...

    def prune(self, keep: Retention, now: float | None = None) -> int: ...

    def settled(self) -> dict[FlowSpec, str]: ...

    def owe(self, devices: Sequence[str], reroute_id: str) -> None: ...

    def debts(self) -> dict[str, str]: ...

    def owed(self, reroute_id: str) -> list[str]: ...

    def paid(self, device: str) -> None: ...

    def size(self) -> int: ...

    def get(self, reroute_id: str) -> Record | None: ...

    def by_key(self, idem_key: str) -> Record | None: ...

    def in_flight(self) -> list[Record]: ...

    def pending(self) -> list[Record]: ...

    def queue(self, *, reuse: bool = False) -> Queue:
        """The reroutes in flight and the queue at one moment (``reuse``: etcd may answer
        with what this replica's latest enqueue read, as good as a read then)."""
        ...

    def started_since(self, queue: Queue) -> bool: ...

    def rebase(self, queue: Queue) -> Queue:
        """``queue`` after this replica started a reroute under its guard (etcd: the
        guard moved past its own start); SQLite: ``queue``."""
        ...

    def history(
        self,
        limit: int = 50,
        *,
        state: RerouteState | None = None,
        flows: tuple[FlowSpec, ...] = (),
    ) -> list[Record]: ...

    def steps(self, reroute_id: str) -> list[StepRecord]: ...

    def close(self) -> None: ...
