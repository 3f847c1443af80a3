"""The journal in etcd: the same records as the SQLite journal, shared by every replica.

Keys under the store's prefix ``P``:

- ``P/reroutes/<id>``: the reroute (JSON: what ``journal.Record`` holds);
- ``P/steps/<id>``: its step records (JSON list);
- ``P/pending/<id>``, ``P/running/<id>``: the queue and the reroutes in flight (the
  queue's order is the keys' creation order, etcd's global one); valued with the groups of
  devices the reroute holds (``label``: ``terms.py``, empty without ownership);
- ``P/keys/<idempotency key>``: the reroute created with it;
- ``P/settled/<flow>``: where pruned reroutes left a flow (``Journal.prune``).
- ``P/debts/<device>``: a device whose cleanup a reroute left (it did not answer): the reroute.
- ``P/unqueued/<id>``: an enqueue settled as never applied (below), valued with when
  (pruned; not the locks' ``P/void/``).

Every write is one transaction. **An enqueue in doubt** (no answer, or an answer after a
retry that did not succeed: the first attempt may have been applied, before or after it)
is settled as the locks settle theirs: the enqueue compares ``P/unqueued/<id>`` absent, and one
more transaction reads whether the row is there and puts that void key when it is not.
The row there: the reroute was queued (the request is answered as if it had been); the
void key put: it never will be (the request fails, 503). Without an answer to that either,
the outcome stays unknown (503 all the same, the reroute maybe queued: the admission's
read before it keeps that window to a quorum lost in between).
**A change of a running reroute in doubt** (its finish, say: no answer, or "changed"
answered to a retry) is settled by reading its row: this replica is its only writer, so
the row holding what the write put means it was applied (the answer it would have had);
when even that read fails, ``InDoubt``, and the reroute's next change (a rollback's
finish) settles it first, so the row ends saying what the devices hold.
A write about a reroute this replica runs also compares that the replica's own key
``P/owners/<owner>`` still exists (``fence``): a replica whose lease expired -- paused, or
cut off from etcd -- has its write-ahead records refused, so it stops before its next step
(``JournalError``), while another replica recovers the reroute.
Reads are linearizable (etcd's default): any replica answers what every other wrote.

The scheduler reads the queue and the reroutes in flight at one revision ``R`` (``queue``:
one transaction of two ranges): a reroute is in one of them, never missed between two
reads. A running reroute whose owner died keeps its devices through that read only (its
locks went with its lease), so the transaction that locks a reroute's devices compares
that no key under ``P/running/`` was created after ``R`` (``Queue.guard``, one range
compare): a reroute started since -- whose owner may have died since, too -- makes it
fail, and the scheduler reads again. Chosen over durable per-device reservations: no key
more per device in any transaction (etcd allows 128 operations in one), nothing to hand
over on takeover; the price is a lock transaction that fails when any reroute started
in between, disjoint or not (rare: one replica's own starts retry at once,
``started_since``; another's wake it through the watch).

With device ownership (``terms.py``) that price grows with the replicas, since each master
starts its own groups' reroutes at once: the guard is then narrowed to what the keys
touch (``Queue.narrow``, ``Narrow``). Each start also puts ``P/busy/<unit>`` (no lease,
never deleted: only its mod revision counts) for each *unit* of what it holds -- the group
of each switch, each optical port (``terms.units``) -- or ``P/busy/*`` when it has none (it
holds ``EVERYTHING``, a whole optical switch, or many keys), in the same durable write. A
lock transaction compares that neither its keys' units nor ``*`` were marked busy since
the read: a reroute started since that overlaps it shares a switch (its group) or a port,
so it fails, and one on other groups no longer does. Keys without units compare the broad
guard (no reroute at all started since), which every start also passes through
``P/running/``. A replica without ownership marks ``*`` busy at each start, so that one
configured otherwise on the same prefix still fails every narrow guard (a replica of a
version before ownership marks nothing: upgrade all replicas of a prefix together).

What each reroute costs: **three durable writes** (each a Raft round, fsynced on a
quorum) when it was read from the queue here. 1. Its admission (``enqueue``: the row,
the queue's key, the idempotency key). 2. Its start: the lock transaction that claims it
also moves its row to running under this owner with what it holds (``start_ops``, added
by ``EtcdLocks.try_acquire``; the scheduler starts one reroute at a time under the
queue's guard, which moves past its own starts, ``rebase``). Its plan is kept in memory
(``create`` writes only when the plan holds more than the row says). 3. Its finish: the
state, the plan, every step's record and the locks let go (``release_with``), in one
transaction. On the request's path beside them, one linearizable read: the admission's
(``look``: is anything queued or running, was the idempotency key used). The enqueue's
transaction also reads the queue's indexes, and the scheduler starts from that read when
nothing this replica knows of changed since (``queue``'s ``reuse``); the answer reads no
debts for a reroute that ended here and left none (``owed``). Step records are never
written ahead of their steps: nothing but displays reads them -- a takeover plans from
the devices (``engine.restore``: forward once a shift landed, back otherwise), from the
row's intent and what it held -- so a crash loses only their timings. What keeps a
replica whose lease ended from its next step is the lease's timing (``executor``: a step
starts only while the lease surely outlives its cap) and the devices' fencing or
lock-delay (``locks``), no more a refused write-ahead. A checkpoint (optical MBB) is a
fourth write. The replica that runs a reroute is its only writer (fenced): it keeps the
row as written, with its revision, and writes without reading first (the transaction
compares that revision: a change by anyone else is refused, never overwritten). While
its lease surely lives (``leased``) no other replica can change such a reroute, so
reading it answers from memory. Ended reroutes never change again: the latest ones
written here are answered from memory (``ENDED_KEPT``). Everything else is read from
etcd. Every call blocks its thread up to the client's deadline: the service runs them
off the event loop (``journal.offload``), several at once; what the journal keeps in
memory is guarded by a lock never held across a call.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from aetcd import rpc

from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.planning.plan import Plan
from services.reroute.planning.resources import EVERYTHING, covers
from services.reroute.store.etcd.client import (
    KV,
    Compare,
    Etcd,
    Op,
    StoreUnavailable,
    TxnResult,
    absent,
    delete,
    exists,
    get_op,
    prefix_end,
    put,
    unchanged,
)
from services.reroute.store.records import (
    Ended,
    InDoubt,
    JournalError,
    LeaseLost,
    Queue,
    Record,
    RerouteState,
    Retention,
    StepRecord,
    StepState,
    decode_flows,
    decode_intent,
    encode_flows,
    encode_intent,
    queued_summary,
)

log = logging.getLogger("reroute.etcd")
PRUNE_CHUNK = 40  # reroutes removed per transaction (etcd allows 128 operations)
VOID = "unqueued"  # enqueues settled as never applied (module docstring)
VOID_KEPT_S = 3600.0  # an enqueue's void key (settled as never applied) kept this long
ENDED_KEPT = 64  # ended reroutes of this replica answered from memory
SEEN_KEPT = 64  # pending rows read here, kept for ``create``'s compare


class EtcdJournal:
    # its calls wait on the network: the service runs them off the event loop
    # (``journal.offload``), several at once; what it keeps in memory is guarded by ``_mem``
    networked = True

    def __init__(self, etcd: Etcd, prefix: str) -> None:
        self._mem = threading.Lock()  # never held across a call to etcd
        self.etcd = etcd
        self.prefix = prefix.rstrip("/") + "/"
        self.fence: list[Compare] = []  # compares every write of a running reroute makes
        # this replica's lease surely lives: no other replica can have taken over (and
        # changed) a reroute it runs, so that reroute is read from memory
        self.leased: Callable[[], bool] = lambda: False
        self._steps: dict[str, dict[int, list[Any]]] = {}  # of reroutes running here
        self._live: dict[str, tuple[_Row, int]] = {}  # running here: row as written, revision
        self._seen: OrderedDict[str, tuple[_Row, int]] = OrderedDict()  # pending rows read
        self._ended: OrderedDict[str, tuple[Record, list[StepRecord]]] = OrderedDict()
        self._owing: set[str] = set()  # of ``_ended``: those that left a debt (``owe``)
        self._started = 0  # the revision of the latest reroute started here (``create``)
        self._begun: dict[str, bool] = {}  # started by their lock transaction, not planned
        self._holds: dict[str, Any] = {}  # let go by the reroute's finish (``release_with``)
        self._doubt: dict[str, bytes] = {}  # a running reroute's row as a write in doubt put it
        # the value of a reroute's index keys: the groups of what it holds (``terms.py``)
        self.label: Callable[[frozenset[str]], bytes] = lambda _: b""
        # what a reroute's start marks busy and a narrow guard compares (``terms.units``;
        # None: the broad guard; with no ownership, ``queue`` gives no narrow guard)
        self.units: Callable[[frozenset[str]], list[str] | None] | None = None
        self._last_start = (0, ["*"])  # the latest start under a guard here, its units
        # how many times the locks woke the scheduler so far (``EtcdLocks.nudges``; None:
        # no locks' watch here, so a queue read by an enqueue is never reused: ``queue``)
        self.nudges: Callable[[], int] | None = None
        self._enqueued: _Enqueued | None = None  # the queue the latest enqueue read

    def _key(self, kind: str, name: str = "") -> str:
        return f"{self.prefix}{kind}/{name}"

    def close(self) -> None:
        """Nothing to close: the client is the store's."""

    # -- writes ------------------------------------------------------------------------

    def enqueue(
        self,
        reroute_id: str,
        intent: Intent,
        *,
        idem_key: str | None = None,
        fingerprint: str | None = None,
        resources: frozenset[str] = frozenset({EVERYTHING}),
    ) -> None:
        summary = queued_summary(intent)
        record = _Row(
            id=reroute_id,
            created=time.time(),
            summary=summary,
            state=RerouteState.PENDING,
            intent=encode_intent(intent),
            flows=[str(f) for f in intent.flows],
            idem_key=idem_key,
            fingerprint=fingerprint,
            resources=sorted(resources),
        )
        compares = [absent(self._key("reroutes", reroute_id))]
        ops = [self._put(record), put(self._key("pending", reroute_id), self.label(resources))]
        if idem_key is not None:
            compares.append(absent(self._key("keys", idem_key)))
            ops.append(put(self._key("keys", idem_key), reroute_id.encode()))
        compares.append(absent(self._key(VOID, reroute_id)))  # not settled as never applied
        nudges = None if self.nudges is None else self.nudges()  # before: none is missed
        ops += [get_op(self._key(k), prefix=True) for k in ("running", "pending")]  # after it
        try:
            result = self.etcd.txn(compares, ops)
        except StoreUnavailable as exc:
            if self._settle_enqueue(reroute_id, exc):
                return  # queued: no read of the queue to reuse
            raise JournalError(f"journal: {exc}") from exc
        if not result.succeeded:
            if result.retried and self._settle_enqueue(reroute_id, None):
                return
            raise JournalError(f"reroute {reroute_id} or its idempotency key exists")
        if nudges is not None:
            running, pending = (
                [kv.key[len(self._key(k)) :] for kv in kvs]
                for k, kvs in zip(("running", "pending"), result.ranges, strict=True)
            )
            row = _Row(**json.loads(record.encode()))  # as a read of it would give it
            with self._mem:
                self._enqueued = _Enqueued(result.revision, nudges, running, pending, row)

    def _settle_enqueue(self, reroute_id: str, doubt: StoreUnavailable | None) -> bool:
        """An enqueue in doubt (module docstring): True when it was applied (its row is
        there), False when it never will be (its void key is put now). JournalError when
        etcd answers this neither."""
        row, void = self._key("reroutes", reroute_id), self._key(VOID, reroute_id)
        try:
            result = self.etcd.txn([exists(row)], [], [put(void, f"{time.time():.0f}".encode())])
        except StoreUnavailable as exc:
            raise InDoubt(
                f"journal: {doubt or exc}; reroute {reroute_id} may be queued all the same"
            ) from exc
        if result.succeeded:
            log.warning("reroute %s: an enqueue whose answer was lost was applied", reroute_id)
        return result.succeeded

    def create(
        self,
        reroute_id: str,
        plan: Plan,
        *,
        owner: str | None = None,
        resources: frozenset[str] = frozenset({EVERYTHING}),
    ) -> None:
        with self._mem:
            seen = self._seen.pop(reroute_id, None)
            begun = self._begun.pop(reroute_id, False)
        if begun:  # started by its lock transaction: running under this owner already
            row, revision = self._live[reroute_id]
            self._live[reroute_id] = (_Row(**row.fields), revision)
            self._live[reroute_id][0].update(**_planned(plan, owner, resources))
            if covers(frozenset(row.fields["resources"]), resources):  # within what it wrote
                return  # the plan is written with the finish (display only: module docstring)
            seen = (self._live.pop(reroute_id)[0], revision)
        try:
            self._create(reroute_id, plan, owner, resources, seen or self._read(reroute_id))
        except LeaseLost:
            raise
        except JournalError:
            if seen is None:
                raise
            # the row changed since this replica read it: judged again on what it is now
            self._create(reroute_id, plan, owner, resources, self._read(reroute_id))

    def _read(self, reroute_id: str) -> tuple[_Row, int] | None:
        kv = self.etcd.get(self._key("reroutes", reroute_id))
        return None if kv is None else (_Row.of(kv), kv.mod_revision)

    def _create(
        self,
        reroute_id: str,
        plan: Plan,
        owner: str | None,
        resources: frozenset[str],
        base: tuple[_Row, int] | None,
    ) -> None:
        now = time.time()
        row = _Row(**base[0].fields) if base is not None else _Row(id=reroute_id, created=now)
        mine = row.state is RerouteState.RUNNING and row.fields["owner"] == owner
        if base is not None and row.state is not RerouteState.PENDING and not mine:
            raise JournalError(f"reroute {reroute_id} exists and is not pending: not run again")
        row.update(started=row.fields["started"] or now, **_planned(plan, owner, resources))
        key = self._key("reroutes", reroute_id)
        compares = [unchanged(key, base[1] if base else 0)]
        ops = [
            self._put(row),
            delete(self._key("pending", reroute_id)),
            put(self._key("running", reroute_id), self.label(resources)),
            *self._busy(self._units(resources)),
        ]
        changed = f"reroute {reroute_id} changed meanwhile: not run"
        revision = self._fenced(compares, ops, changed, (key, row.encode()))
        self._started = max(self._started, revision)
        self._live[reroute_id] = (row, revision)
        self._steps[reroute_id] = {}

    def start_ops(self, reroute_id: str, owner: str, resources: frozenset[str]) -> Start | None:
        """What the lock transaction that claims a pending reroute adds so that it also
        starts it (module docstring): the row, as the queue read it here, running under
        ``owner`` and holding ``resources``; None when this replica has not read it."""
        with self._mem:
            seen = self._seen.get(reroute_id)
        if seen is None:
            return None
        base, revision = seen
        row = _Row(**base.fields)
        row.update(
            state=RerouteState.RUNNING,
            owner=owner,
            started=time.time(),
            resources=sorted(resources),
        )
        units = self._units(resources)
        ops = [
            self._put(row),
            delete(self._key("pending", reroute_id)),
            put(self._key("running", reroute_id), self.label(resources)),
            *self._busy(units),
        ]

        def started(at: int) -> None:
            with self._mem:
                self._seen.pop(reroute_id, None)
                self._begun[reroute_id] = True
                self._started = max(self._started, at)
                self._last_start = (at, units)
            self._live[reroute_id] = (row, at)
            self._steps[reroute_id] = {}

        return Start(compares=[unchanged(self._key("reroutes", reroute_id), revision)], ops=ops,
                     started=started)  # fmt: skip

    def _units(self, resources: frozenset[str]) -> list[str]:
        """What a start of a reroute holding ``resources`` marks busy (``*``: it has no
        units, and every narrow guard compares ``*``)."""
        units = None if self.units is None else self.units(resources)
        return ["*"] if units is None else units

    def _busy(self, units: list[str]) -> list[Op]:
        """Mark busy the ``units`` of a reroute starting (``*`` without ownership: a replica
        configured without it still fails the narrow guards of those with it)."""
        return [put(self._key("busy", u), b"") for u in units]

    def rebase(self, queue: Queue) -> Queue:
        """``queue`` just after this replica started a reroute under its guard (the
        latest start here, ``_started``): every reroute started since it was read is this
        replica's own, so its guard moves past them (the next start compares no later
        one), and the scheduler starts the next reroute under it without reading again.
        Under a narrow guard (``Narrow``), only what the start marked busy moves: its
        transaction compared that nothing else started there since the read; elsewhere
        another replica may have started something."""
        if isinstance(queue.narrow, Narrow):
            at, units = self._last_start
            if at <= queue.revision:
                return queue
            return replace(queue, revision=at, narrow=queue.narrow.past(units, at))
        if self._started <= queue.revision:
            return queue
        guard = _created_before(self._key("running"), self._started + 1)
        return Queue(
            running=queue.running, pending=queue.pending, revision=self._started, guard=(guard,)
        )

    def expect(self, reroute_id: str, resources: frozenset[str]) -> None:
        with self._mem:
            begun = self._begun.pop(reroute_id, False)
        live = self._live.get(reroute_id)
        if begun and live is not None:  # started by its lock transaction: queued again
            row, revision = live
            row = _Row(**row.fields)
            row.update(
                state=RerouteState.PENDING, owner=None, started=None, resources=sorted(resources)
            )
            ops = [
                self._put(row),
                delete(self._key("running", reroute_id)),
                put(self._key("pending", reroute_id), self.label(resources)),
            ]
            key = self._key("reroutes", reroute_id)
            self._fenced([unchanged(key, revision)], ops, f"reroute {reroute_id} changed")
            self._live.pop(reroute_id, None)
            self._steps.pop(reroute_id, None)
            return
        self._update(reroute_id, {"resources": sorted(resources)}, RerouteState.PENDING)

    def cancel(self, reroute_id: str) -> bool:
        changes = {
            "state": RerouteState.CANCELLED,
            "error": "cancelled while pending: nothing changed",
            "finished": time.time(),
        }
        extra = [delete(self._key("pending", reroute_id))]
        claimed = absent(self._key("claims", reroute_id))  # not being planned by a replica
        return bool(self._update(reroute_id, changes, RerouteState.PENDING, extra, [claimed]))

    # Step records are kept in memory and stored with the next write of the reroute (its
    # checkpoint or its finish): nothing reads them but displays (recovery plans from the
    # devices, ``engine.restore``), and a crash that loses them loses only their timings.

    def step(self, reroute_id: str, idx: int, state: StepState, error: str | None = None) -> None:
        steps = self._ends(reroute_id, ())
        now = time.time()
        if state is StepState.STARTED:
            steps[idx] = [idx, str(state), now, None, None]
        else:
            entry = steps.setdefault(idx, [idx, str(state), now, None, None])
            entry[1], entry[3], entry[4] = str(state), now, error
        self._steps[reroute_id] = steps

    def steps_started(self, reroute_id: str, indexes: range, ended: Ended = ()) -> None:
        now = time.time()  # the previous batch ended as this one starts
        steps = self._ends(reroute_id, ended, now)
        for i in indexes:
            steps[i] = [i, str(StepState.STARTED), now, None, None]
        self._steps[reroute_id] = steps

    def steps_ended(self, reroute_id: str, ended: Ended) -> None:
        self._steps[reroute_id] = self._ends(reroute_id, ended)

    def release_with(self, reroute_id: str, held: object) -> None:
        """Let ``held`` go in the reroute's finish (one durable write for both), when it
        can (``EtcdHeld.let_go_ops``); its own ``release`` then has nothing left."""
        if held is None:
            self._holds.pop(reroute_id, None)
        else:
            self._holds[reroute_id] = held

    def _ends(
        self, reroute_id: str, ended: Ended, now: float | None = None
    ) -> dict[int, list[Any]]:
        """A copy of the reroute's steps with how ``ended`` ended at ``now`` (default: now;
        the time of the write that carries them), kept once written."""
        steps = {i: list(s) for i, s in self._steps_of(reroute_id).items()}
        now = time.time() if now is None else now
        for i, state, error in ended:
            entry = steps.setdefault(i, [i, str(state), now, None, None])
            entry[1], entry[3], entry[4] = str(state), now, error
        return steps

    def checkpoint(
        self,
        reroute_id: str,
        rest: tuple[tuple[str, tuple[FlowSpec, ...]], ...],
        ended: Ended = (),
    ) -> None:
        origins = {p: encode_flows(f) for p, f in rest}
        self._change(reroute_id, {"origins": origins}, [], ended)

    def finish(
        self,
        reroute_id: str,
        state: RerouteState,
        error: str | None = None,
        ended: Ended = (),
    ) -> None:
        now = time.time()  # the last steps ended as the reroute does
        changes = {"state": state, "error": error, "finished": now}
        extra = [
            delete(self._key("running", reroute_id)),
            delete(self._key("pending", reroute_id)),
        ]
        held = self._holds.pop(reroute_id, None)
        lets = _let_go_ops(held)
        row, revision = self._change(reroute_id, changes, extra, ended, now, lets)
        if lets is not None and revision:
            held.released(revision)
        steps = self._steps.pop(reroute_id, None)
        self._live.pop(reroute_id, None)
        with self._mem:
            self._begun.pop(reroute_id, None)
        if row is not None and steps is not None:
            self._keep(self._record(row, steps), _step_records(steps))

    def _change(
        self,
        reroute_id: str,
        changes: dict[str, Any],
        extra: list[Op],
        ended: Ended,
        now: float | None = None,
        lets: tuple[list[Compare], list[Op]] | None = None,
    ) -> tuple[_Row | None, int]:
        """A fenced change of a reroute (and its steps' ends at ``now``, in the same
        transaction; ``lets``: locks let go in it too): of the row as written here when it
        runs here, else read first. The row written (None: not kept here) and the revision
        of the write (0: the row is gone)."""
        live = self._live.get(reroute_id)
        lets_cmp, lets_ops = lets if lets is not None else ([], [])
        if live is None:
            if ended:
                self._write_steps(reroute_id, self._ends(reroute_id, ended, now))
            wrote = self._update(
                reroute_id, changes, None, [*extra, *lets_ops], lets_cmp, fenced=True
            )
            return None, wrote
        steps = self._ends(reroute_id, ended, now)
        row, revision = live
        key = self._key("reroutes", reroute_id)
        if doubt := self._doubt.get(reroute_id):  # an earlier change in doubt: did it land?
            revision = self._landed(key, doubt) or revision
            del self._doubt[reroute_id]
        row = _Row(**row.fields)
        row.update(**changes)
        ops = [self._put(row), self._steps_put(reroute_id, steps), *extra, *lets_ops]
        compares = [unchanged(key, revision), *lets_cmp]
        value = row.encode()
        try:
            revision = self._fenced(compares, ops, f"reroute {reroute_id} changed", (key, value))
        except InDoubt:
            self._doubt[reroute_id] = value  # settled by the next change (a rollback's)
            raise
        self._live[reroute_id] = (row, revision)
        self._steps[reroute_id] = steps
        return row, revision

    def _keep(self, record: Record, steps: list[StepRecord]) -> None:
        """An ended reroute written here (it never changes again but for ``prune``)."""
        with self._mem:
            self._ended[record.id] = (record, steps)
            while len(self._ended) > ENDED_KEPT:
                self._owing.discard(self._ended.popitem(last=False)[0])

    def look(self, idem_key: str | None) -> tuple[bool, Record | None]:
        """Whether a reroute is pending or running (any owner) and the reroute of
        ``idem_key``, in one linearizable read (and the reroute's row in a second one when
        the key was used: a replay)."""
        ops = [get_op(self._key(kind), prefix=True, limit=1) for kind in ("pending", "running")]
        if idem_key is not None:
            ops.append(get_op(self._key("keys", idem_key)))
        ranges = self._txn([], ops).ranges
        used = ranges[2] if idem_key is not None else []
        return any(ranges[:2]), self.get(used[0].value.decode()) if used else None

    def prune(self, keep: Retention, now: float | None = None) -> int:
        cutoff = (time.time() if now is None else now) - keep.days * 86400
        ended = [r for r in self._rows() if r.state.final]  # newest first
        gone = [r for n, r in enumerate(ended) if n >= keep.reroutes or r.ended < cutoff]
        for start in range(0, len(gone), PRUNE_CHUNK):
            chunk = list(reversed(gone))[start : start + PRUNE_CHUNK]  # oldest first
            ops: list[Op] = []
            placed: dict[str, str] = {}
            for row in chunk:
                with self._mem:
                    self._ended.pop(row.id, None)
                placed |= {str(f): p for f, p in row.record([]).placed().items()}
                ops += [delete(self._key("reroutes", row.id)), delete(self._key("steps", row.id))]
                if row.idem_key:
                    ops.append(delete(self._key("keys", row.idem_key)))
            ops += [put(self._key("settled", f), p.encode()) for f, p in placed.items()]
            self._txn([], ops)
        self._prune_voids(time.time() if now is None else now)
        return len(gone)

    def _prune_voids(self, now: float) -> None:
        """Delete the void keys of enqueues settled more than ``VOID_KEPT_S`` ago: a late
        attempt of such an enqueue reached etcd long before (its deadline is seconds)."""
        old = [kv for kv in self.etcd.get_prefix(self._key(VOID))
               if float(kv.value or 0) < now - VOID_KEPT_S]  # fmt: skip
        for start in range(0, len(old), PRUNE_CHUNK):
            chunk = old[start : start + PRUNE_CHUNK]
            self._txn([], [delete(kv.key) for kv in chunk])

    # -- reads -------------------------------------------------------------------------

    def settled(self) -> dict[FlowSpec, str]:
        kvs = self.etcd.get_prefix(self._key("settled"))
        start = len(self._key("settled"))
        return {FlowSpec.parse(kv.key[start:]): kv.value.decode() for kv in kvs}

    def owe(self, devices: Sequence[str], reroute_id: str) -> None:
        if devices:
            with self._mem:  # before the write: a view meanwhile reads etcd
                self._owing.add(reroute_id)
            self.etcd.txn([], [put(self._key("debts", d), reroute_id.encode()) for d in devices])

    def debts(self) -> dict[str, str]:
        kvs = self.etcd.get_prefix(self._key("debts"))
        start = len(self._key("debts"))
        return {kv.key[start:]: kv.value.decode() for kv in kvs}

    def owed(self, reroute_id: str) -> list[str]:
        """The devices whose cleanup ``reroute_id`` left, still owed. A reroute that ended
        here and left none owes none for ever (only the replica that runs a reroute writes
        its debts, after its finish): answered from memory, with no read."""
        with self._mem:
            clear = reroute_id in self._ended and reroute_id not in self._owing
        if clear:
            return []
        return sorted(d for d, r in self.debts().items() if r == reroute_id)

    def paid(self, device: str) -> None:
        self.etcd.txn([], [delete(self._key("debts", device))])

    def size(self) -> int:
        """The bytes of this journal's keys and values (etcd's own files are etcd's)."""
        return sum(len(kv.key) + len(kv.value) for kv in self.etcd.get_prefix(self.prefix))

    def get(self, reroute_id: str) -> Record | None:
        if reroute_id in self._ended:
            return self._ended[reroute_id][0]
        if reroute_id in self._live and self.leased():
            return self._record(self._live[reroute_id][0])
        kv = self.etcd.get(self._key("reroutes", reroute_id))
        if kv is None:
            return None
        return self._record(self._run_here(kv) or self._saw(kv))

    def _run_here(self, kv: KV) -> _Row | None:
        """The row as this replica keeps it when it runs that reroute and etcd's row is
        still the one it wrote (the plan is written with the finish): so a running
        reroute's plan and steps show on its replica (API, page) whether or not its
        lease surely lives now, in a list as in a read of one."""
        live = self._live.get(kv.key[len(self._key("reroutes")) :])
        return live[0] if live is not None and live[1] == kv.mod_revision else None

    def _saw(self, kv: KV) -> _Row:
        """A reroute's row read from etcd; a pending one is kept with its revision, which
        ``create`` compares (its next write, often) without reading it again."""
        row = _Row.of(kv)
        if row.state is RerouteState.PENDING:
            self._keep_seen(row, kv.mod_revision)
        return row

    def _keep_seen(self, row: _Row, revision: int) -> None:
        with self._mem:
            self._seen[row.id] = (row, revision)
            self._seen.move_to_end(row.id)
            while len(self._seen) > SEEN_KEPT:
                self._seen.popitem(last=False)

    def by_key(self, idem_key: str) -> Record | None:
        kv = self.etcd.get(self._key("keys", idem_key))
        return None if kv is None else self.get(kv.value.decode())

    def in_flight(self) -> list[Record]:
        return self._indexed("running")

    def pending(self) -> list[Record]:
        return self._indexed("pending")

    def queue(self, *, reuse: bool = False) -> Queue:
        """The reroutes in flight and the queue at one revision: one transaction of two
        ranges (the indexes), one of reads for the rows (records without step records:
        the scheduler needs none). Its guard (module docstring) compares that no reroute
        started running after that revision.

        ``reuse`` (the scheduler's look): the queue as this replica's latest enqueue read
        it in its own transaction, once, when nothing this replica knows of changed since:
        it wrote nothing after it, and its locks (their watch, the terms) woke its
        scheduler for nothing since just before it (what changes later wakes the scheduler
        again). Then only the rows of
        the others are read (none when it queued the only one): as good as a read at that
        revision, which the guard compares."""
        if reuse and (reused := self._reused()) is not None:
            return reused
        kinds = ("running", "pending")
        result = self._txn([], [get_op(self._key(k), prefix=True) for k in kinds])
        running_ids, pending_ids = (
            [kv.key[len(self._key(k)) :] for kv in kvs]
            for k, kvs in zip(kinds, result.ranges, strict=True)
        )
        return self._queue_at(result.revision, running_ids, pending_ids, {})

    def _reused(self) -> Queue | None:
        with self._mem:
            enqueued, self._enqueued = self._enqueued, None
        if enqueued is None or self.nudges is None or self.nudges() != enqueued.nudges:
            return None
        if self.etcd.last_written > enqueued.revision:  # a write of its own since
            return None
        row = enqueued.row
        self._keep_seen(row, enqueued.revision)  # as a read of it keeps it
        rows = {row.id: row}
        return self._queue_at(enqueued.revision, enqueued.running, enqueued.pending, rows)

    def _queue_at(
        self, revision: int, running_ids: list[str], pending_ids: list[str], held: dict[str, _Row]
    ) -> Queue:
        """The queue of these ids at ``revision``: the rows not ``held`` read."""
        kvs = self._many("reroutes", [i for i in running_ids + pending_ids if i not in held])
        rows = held | {i: self._saw(kv) for i, kv in kvs.items()}
        running, pending = (
            [self._record(rows[i], {}) for i in ids if i in rows]
            for ids in (running_ids, pending_ids)
        )
        guard = _created_before(self._key("running"), revision + 1)
        narrow = None if self.units is None else Narrow(self, revision, {})
        return Queue(
            running=running, pending=pending, revision=revision, guard=(guard,), narrow=narrow
        )

    def started_since(self, queue: Queue) -> bool:
        """A reroute started here after ``queue`` was read: a lock transaction under its
        guard failed because of this replica's own start (no watch event wakes it)."""
        return self._started > queue.revision

    def history(
        self,
        limit: int = 50,
        *,
        state: RerouteState | None = None,
        flows: tuple[FlowSpec, ...] = (),
    ) -> list[Record]:
        names = {str(f) for f in flows}
        rows = self._rows(limit=limit if state is None and not flows else 0)
        chosen = [
            r
            for r in rows
            if (state is None or r.state is state) and (not names or names & set(r.flows))
        ]
        return [self._record(r) for r in (chosen if limit < 0 else chosen[:limit])]

    def steps(self, reroute_id: str) -> list[StepRecord]:
        if reroute_id in self._ended:
            return self._ended[reroute_id][1]
        steps = self._steps.get(reroute_id)
        return _step_records(self._load_steps(reroute_id) if steps is None else steps)

    # -- helpers -----------------------------------------------------------------------

    def _rows(self, limit: int = 0) -> list[_Row]:
        kvs = self.etcd.get_prefix(self._key("reroutes"), newest_first=True, limit=max(limit, 0))
        return [self._run_here(kv) or _Row.of(kv) for kv in kvs]

    def _indexed(self, kind: str) -> list[Record]:
        """The reroutes of an index (pending, running), in its order: one read for the
        index, one transaction of reads for the reroutes (and one for the steps of those
        run by other replicas)."""
        start = len(self._key(kind))
        ids = [kv.key[start:] for kv in self.etcd.get_prefix(self._key(kind))]
        rows = [_Row.of(kv) for kv in self._many("reroutes", ids).values()]
        theirs = [r.id for r in rows if r.state is not RerouteState.PENDING]
        theirs = [i for i in theirs if i not in self._steps]
        steps = {i: json.loads(kv.value) for i, kv in self._many("steps", theirs).items()}
        loaded = {i: {s[0]: s for s in steps.get(i, [])} for i in theirs}
        return [self._record(r, loaded.get(r.id)) for r in rows]

    def _many(self, kind: str, ids: list[str]) -> dict[str, KV]:
        """The keys of ``kind`` of reroutes ``ids`` that exist, in that order (one
        transaction per ``PRUNE_CHUNK``)."""
        out: dict[str, KV] = {}
        for first in range(0, len(ids), PRUNE_CHUNK):
            chunk = ids[first : first + PRUNE_CHUNK]
            result = self._txn([], [get_op(self._key(kind, i)) for i in chunk])
            out |= {i: kvs[0] for i, kvs in zip(chunk, result.ranges, strict=True) if kvs}
        return out

    def _record(self, row: _Row, steps: dict[int, list[Any]] | None = None) -> Record:
        steps = self._steps.get(row.id) if steps is None else steps
        if steps is None:
            steps = self._load_steps(row.id) if row.state is not RerouteState.PENDING else {}
        return row.record([i for i, s in steps.items() if s[1] != StepState.UNDONE])

    def _steps_of(self, reroute_id: str) -> dict[int, list[Any]]:
        if reroute_id not in self._steps:
            self._steps[reroute_id] = self._load_steps(reroute_id)
        return self._steps[reroute_id]

    def _load_steps(self, reroute_id: str) -> dict[int, list[Any]]:
        kv = self.etcd.get(self._key("steps", reroute_id))
        return {} if kv is None else {s[0]: s for s in json.loads(kv.value)}

    def _write_steps(self, reroute_id: str, steps: dict[int, list[Any]]) -> None:
        self._fenced([], [self._steps_put(reroute_id, steps)], "")
        self._steps[reroute_id] = steps

    def _steps_put(self, reroute_id: str, steps: dict[int, list[Any]]) -> Op:
        return put(self._key("steps", reroute_id), json.dumps(sorted(steps.values())).encode())

    def _update(
        self,
        reroute_id: str,
        changes: dict[str, Any],
        only_in: RerouteState | None,
        extra: list[Op] | None = None,
        compares: list[Compare] | None = None,
        *,
        fenced: bool = False,
    ) -> int:
        """The revision of the change written (0: none: no such row, or not ``only_in``,
        or changed meanwhile when not ``fenced``)."""
        kv = self.etcd.get(self._key("reroutes", reroute_id))
        if kv is None:
            return 0
        row = _Row.of(kv)
        if only_in is not None and row.state is not only_in:
            return 0
        row.update(**changes)
        cmp = [unchanged(kv.key, kv.mod_revision), *(compares or [])]
        ops = [self._put(row), *(extra or [])]
        if fenced:
            changed = f"reroute {reroute_id} changed meanwhile"
            return self._fenced(cmp, ops, changed, (kv.key, row.encode()))
        result = self._txn(cmp, ops)
        return result.revision if result.succeeded else 0

    def _fenced(
        self,
        compares: list[Compare],
        ops: list[Op],
        changed: str,
        wrote: tuple[str, bytes] | None = None,
    ) -> int:
        """A write about a reroute this replica runs: refused once its lease expired. The
        revision it made. **In doubt** (no answer; or "changed" answered to a retry, after
        an attempt that may have been applied): when the row (``wrote``: its key and the
        value this write puts) holds what this write put, it was applied (this replica is
        the row's only writer while it runs the reroute), and its revision is the one made;
        when it does not, nothing was; when it cannot be read, ``InDoubt``."""
        try:
            result = self._txn([*compares, *self.fence], ops)
        except JournalError as exc:
            if wrote is None:
                raise
            if landed := self._landed(*wrote, exc):
                return landed
            raise
        if result.succeeded:
            return result.revision
        if result.retried and wrote is not None and (landed := self._landed(*wrote)):
            return landed
        if self.fence and not self._txn(self.fence, []).succeeded:
            raise LeaseLost(
                "this replica's lease in etcd expired: its reroutes may have been taken "
                "over by another replica; stopped"
            )
        raise JournalError(changed or "the journal changed meanwhile")

    def _landed(self, key: str, value: bytes, doubt: JournalError | None = None) -> int:
        """The mod revision of ``key`` when it holds ``value`` (a write in doubt that was
        applied), else 0; ``InDoubt`` when it cannot be read."""
        try:
            kv = self.etcd.get(key)
        except StoreUnavailable as exc:
            raise InDoubt(
                f"{doubt or 'journal: a write in doubt'}; reading whether it was applied "
                f"failed too: {exc}"
            ) from exc
        if kv is None or kv.value != value:
            return 0
        log.warning("journal: a write in doubt was applied (%s, revision %d)", key, kv.mod_revision)
        return kv.mod_revision

    def _txn(self, compares: list[Compare], ops: list[Op]) -> TxnResult:
        try:
            return self.etcd.txn(compares, ops)
        except StoreUnavailable as exc:
            raise JournalError(f"journal: {exc}") from exc

    def _put(self, row: _Row) -> Op:
        return put(self._key("reroutes", row.id), row.encode())


def _planned(plan: Plan, owner: str | None, resources: frozenset[str]) -> dict[str, Any]:
    """A row's fields once its plan is made."""
    text = plan.describe()
    return {
        "summary": text.splitlines()[0],
        "plan_text": text,
        "origins": {p: encode_flows(f) for p, f in plan.origins},
        "touched": [*plan.from_paths, plan.to_path],
        "state": RerouteState.RUNNING,
        "intent": encode_intent(plan.intent),
        "flows": [str(f) for f in plan.intent.flows],
        "step_names": [s.describe() for s in plan.steps()],
        "owner": owner,
        "resources": sorted(resources),
    }


@dataclass(frozen=True, slots=True)
class _Enqueued:
    """What an enqueue read in its transaction (``EtcdJournal.queue``'s ``reuse``)."""

    revision: int  # the enqueue's
    nudges: int  # the scheduler's wakes by the locks before it (``EtcdLocks.nudges``)
    running: list[str]
    pending: list[str]
    row: _Row  # the reroute queued


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """A reroute started in its lock transaction (``EtcdJournal.start_ops``): the
    compares and operations added, and what to call with the revision it committed at."""

    compares: list[Compare]
    ops: list[Op]
    started: Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Narrow:
    """The narrow guard of a queue read at ``revision`` (``Queue.narrow``, module
    docstring): a lock transaction taking some keys compares that no start marked their
    units, nor ``*``, busy after the read (after ``moved[unit]`` where this replica's own
    start moved it: ``rebase``); keys without units (``EVERYTHING``, a whole optical
    switch, too many keys) compare the broad guard, that no reroute at all started."""

    journal: EtcdJournal
    revision: int
    moved: dict[str, int]

    def __call__(self, keys: frozenset[str]) -> tuple[object, ...]:
        units = None if self.journal.units is None else self.journal.units(keys)
        if units is None:
            return (_created_before(self.journal._key("running"), self.revision + 1),)
        return tuple(
            _changed_before(self.journal._key("busy", u), self.moved.get(u, self.revision) + 1)
            for u in sorted({*units, "*"})
        )

    def past(self, units: list[str], at: int) -> Narrow:
        """This guard once this replica's own start at ``at`` marked ``units`` busy."""
        return Narrow(self.journal, self.revision, {**self.moved, **dict.fromkeys(units, at)})


def _let_go_ops(held: object) -> tuple[list[Compare], list[Op]] | None:
    """The compares and operations that let ``held`` go (``EtcdHeld.let_go_ops``), or
    None (not an etcd hold, or too many keys for one transaction)."""
    let_go = getattr(held, "let_go_ops", None)
    return None if let_go is None else let_go()


def _changed_before(key: str, revision: int) -> Compare:
    """``key`` was last changed before ``revision`` (true when it does not exist)."""
    return rpc.Compare(
        key=key.encode(), target=rpc.Compare.MOD, result=rpc.Compare.LESS, mod_revision=revision
    )


def _created_before(prefix: str, revision: int) -> Compare:
    """Every key under ``prefix`` was created before ``revision`` (true when none is)."""
    return rpc.Compare(
        key=prefix.encode(),
        range_end=prefix_end(prefix).encode(),
        target=rpc.Compare.CREATE,
        result=rpc.Compare.LESS,
        create_revision=revision,
    )


def _step_records(steps: dict[int, list[Any]]) -> list[StepRecord]:
    return [
        StepRecord(index=i, state=StepState(st), started=t0, finished=t1, error=err)
        for i, st, t0, t1, err in sorted(steps.values())
    ]


class _Row:
    """A reroute as stored: a JSON object of ``Record``'s fields."""

    def __init__(self, **fields: Any) -> None:
        self.fields: dict[str, Any] = {
            "summary": "",
            "state": RerouteState.PENDING,
            "error": None,
            "plan_text": "",
            "origins": {},
            "touched": [],
            "intent": None,
            "flows": [],
            "step_names": [],
            "started": None,
            "finished": None,
            "idem_key": None,
            "fingerprint": None,
            "owner": None,
            "resources": [EVERYTHING],
        }
        self.fields |= fields

    @classmethod
    def of(cls, kv: KV) -> _Row:
        return cls(**json.loads(kv.value))

    def update(self, **changes: Any) -> None:
        self.fields |= changes

    def encode(self) -> bytes:
        return json.dumps(
            {k: str(v) if k == "state" else v for k, v in self.fields.items()}
        ).encode()

    @property
    def id(self) -> str:
        return str(self.fields["id"])

    @property
    def state(self) -> RerouteState:
        return RerouteState(self.fields["state"])

    @property
    def flows(self) -> list[str]:
        return list(self.fields["flows"])

    @property
    def idem_key(self) -> str | None:
        key = self.fields["idem_key"]
        return None if key is None else str(key)

    @property
    def ended(self) -> float:
        return float(self.fields["finished"] or self.fields["created"])

    def record(self, started_steps: list[int]) -> Record:
        f = self.fields
        return Record(
            id=f["id"],
            created=f["created"],
            summary=f["summary"],
            state=RerouteState(f["state"]),
            error=f["error"],
            plan_text=f["plan_text"],
            origins={p: decode_flows(v) for p, v in f["origins"].items()},
            touched=tuple(f["touched"]),
            started_steps=tuple(sorted(started_steps)),
            intent=decode_intent(f["intent"]) if f["intent"] else None,
            step_names=tuple(f["step_names"]),
            started=f["started"],
            finished=f["finished"],
            idem_key=f["idem_key"],
            fingerprint=f["fingerprint"],
            owner=f["owner"],
            resources=frozenset(f["resources"]),
        )
