"""The journal: SQLite, written ahead of every step, so an interrupted reroute is recovered.

Tables: ``reroutes`` (one row per reroute: summary, the intent and the plan, the *origins*
-- the path each moved flow was on, as JSON -- the paths it touched, state, error, times,
an optional idempotency key) and ``steps`` (one row per step started: state, times,
error). A reroute row is committed before its first step and a step row before the step
touches a device. ``debts``: devices that did not answer while a reroute left their paths,
whose rules of those paths are removed when they return (``Engine.settle``).

States: ``pending`` (queued by the service; no plan yet, nothing touched) -> ``running``
(``create``: planned, executing) -> ``done`` | ``rolled_back`` | ``failed``. A pending
reroute may instead end ``cancelled`` or ``rejected`` (its plan failed: nothing changed).
Only ``running`` reroutes need recovery; ``pending`` ones are the service's queue.

Recovery does not replay an undo log: it reads the devices afresh and plans the flows back
onto their origins (``restore.plan_restore``). So the journal stays small (a 10,000-flow
plan would take half a second to pickle) and survives code changes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.planning.plan import Plan
from services.reroute.planning.resources import EVERYTHING
from services.reroute.store.records import (
    Ended,
    JournalError,
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

VERSION = 4
CACHE_KIB = 2048  # SQLite's page cache: the bound on what the journal keeps in memory
WAL_BYTES = 1 << 20  # the write-ahead log is cut back to this after each checkpoint
SCHEMA = """
CREATE TABLE IF NOT EXISTS reroutes (
  id TEXT PRIMARY KEY, created REAL NOT NULL, summary TEXT NOT NULL, plan_text TEXT NOT NULL,
  origins TEXT NOT NULL, touched TEXT NOT NULL, state TEXT NOT NULL, error TEXT,
  finished REAL, started REAL, intent TEXT, flows TEXT NOT NULL DEFAULT '[]',
  step_names TEXT NOT NULL DEFAULT '[]', idem_key TEXT, fingerprint TEXT,
  owner TEXT, resources TEXT NOT NULL DEFAULT '["*"]'
);
CREATE TABLE IF NOT EXISTS steps (
  reroute_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL,
  started REAL NOT NULL, finished REAL, error TEXT, PRIMARY KEY (reroute_id, idx)
);
CREATE TABLE IF NOT EXISTS settled (flow TEXT PRIMARY KEY, path TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS debts (device TEXT PRIMARY KEY, reroute_id TEXT NOT NULL);
"""
INDEXES = """
CREATE INDEX IF NOT EXISTS reroutes_state ON reroutes (state);
CREATE UNIQUE INDEX IF NOT EXISTS reroutes_key ON reroutes (idem_key);
"""
# format 2 -> 3: the columns the service added (a pending state needs no change of its own)
MIGRATE_2 = """
ALTER TABLE reroutes ADD COLUMN started REAL;
ALTER TABLE reroutes ADD COLUMN intent TEXT;
ALTER TABLE reroutes ADD COLUMN flows TEXT NOT NULL DEFAULT '[]';
ALTER TABLE reroutes ADD COLUMN step_names TEXT NOT NULL DEFAULT '[]';
ALTER TABLE reroutes ADD COLUMN idem_key TEXT;
ALTER TABLE reroutes ADD COLUMN fingerprint TEXT;
"""
# format 3 -> 4: who runs a reroute (its owner) and what it holds (resources.py)
MIGRATE_3 = """
ALTER TABLE reroutes ADD COLUMN owner TEXT;
ALTER TABLE reroutes ADD COLUMN resources TEXT NOT NULL DEFAULT '["*"]';
"""


def _keys(resources: frozenset[str]) -> str:
    return json.dumps(sorted(resources))


def _intent_columns(intent: Intent) -> tuple[str, str]:
    """The ``intent`` and ``flows`` columns (each flow's text made once: 100,000s of them)."""
    names = [str(f) for f in intent.flows]
    return encode_intent(intent, names), json.dumps(names)


_START = "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, NULL, NULL)"
_END = "UPDATE steps SET state = ?, finished = ?, error = ? WHERE reroute_id = ? AND idx = ?"
_COLUMNS = (
    "id, created, summary, state, error, plan_text, origins, touched, intent, step_names, "
    "started, finished, idem_key, fingerprint, owner, resources"
)
_Row = tuple[
    str, float, str, str, str | None, str, str, str, str | None, str,
    float | None, float | None, str | None, str | None, str | None, str,
]  # fmt: skip


class Journal:
    def __init__(self, path: Path | None) -> None:
        """A journal in the file ``path``; ``None`` keeps it in memory (nothing to recover)."""
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        where = ":memory:" if path is None else path
        try:
            self.db = sqlite3.connect(where, isolation_level=None, check_same_thread=False)
        except sqlite3.OperationalError as exc:
            raise self._unwritable(exc) from exc
        try:
            self._open()
        except sqlite3.OperationalError as exc:  # e.g. its disk is full: "disk I/O error"
            self.db.close()
            raise self._unwritable(exc) from exc

    def _unwritable(
        self, exc: sqlite3.OperationalError, then: str = ": reroute refused, nothing changed"
    ) -> JournalError:
        return JournalError(f"journal {self.path or ':memory:'} cannot be written ({exc}){then}")

    def _open(self) -> None:
        path = self.path
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")  # the memory it may keep
        self.db.execute(f"PRAGMA journal_size_limit = {WAL_BYTES}")  # the WAL kept on disk
        (version,) = self.db.execute("PRAGMA user_version").fetchone()
        tables = self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables and version in (2, 3):
            steps = (MIGRATE_2 if version == 2 else "") + MIGRATE_3
            self.db.executescript(f"BEGIN; {steps} PRAGMA user_version = {VERSION}; COMMIT;")
            version = VERSION
        if tables and version != VERSION:
            self.db.close()
            raise JournalError(
                f"journal {path} has format {version}, this version writes {VERSION}: "
                "move the file away (after `reroute recover` with the old version)"
            )
        self.db.executescript(SCHEMA + INDEXES)
        self.db.execute(f"PRAGMA user_version = {VERSION}")

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    def create(
        self,
        reroute_id: str,
        plan: Plan,
        *,
        owner: str | None = None,
        resources: frozenset[str] = frozenset({EVERYTHING}),
    ) -> None:
        """The reroute starts running ``plan``, run by ``owner`` holding ``resources``: a new
        row, or its ``pending`` row updated."""
        now = time.time()
        try:
            cur = self._insert_running(reroute_id, plan, now, owner, _keys(resources))
        except sqlite3.OperationalError as exc:  # its disk is full: before any device changes
            raise self._unwritable(exc) from exc
        if cur.rowcount != 1:
            raise JournalError(f"reroute {reroute_id} exists and is not pending: not run again")

    def _insert_running(
        self, reroute_id: str, plan: Plan, now: float, owner: str | None, resources: str
    ) -> sqlite3.Cursor:
        text = plan.describe()
        return self.db.execute(
            "INSERT INTO reroutes (id, created, started, summary, plan_text, origins, touched, "
            "state, intent, flows, step_names, owner, resources) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET started = excluded.started, "
            "summary = excluded.summary, plan_text = excluded.plan_text, "
            "origins = excluded.origins, touched = excluded.touched, state = excluded.state, "
            "step_names = excluded.step_names, owner = excluded.owner, "
            "resources = excluded.resources WHERE reroutes.state = ?",
            (
                reroute_id,
                now,
                now,
                text.splitlines()[0],
                text,
                json.dumps({p: encode_flows(f) for p, f in plan.origins}),
                json.dumps([*plan.from_paths, plan.to_path]),
                RerouteState.RUNNING,
                *_intent_columns(plan.intent),
                json.dumps([s.describe() for s in plan.steps()]),
                owner,
                resources,
                RerouteState.PENDING,
            ),
        )

    def enqueue(
        self,
        reroute_id: str,
        intent: Intent,
        *,
        idem_key: str | None = None,
        fingerprint: str | None = None,
        resources: frozenset[str] = frozenset({EVERYTHING}),
    ) -> None:
        """A ``pending`` reroute: planned and run later (``create``), or cancelled.
        ``resources``: what it is expected to hold (``EVERYTHING`` when unknown)."""
        summary = queued_summary(intent)
        try:
            self.db.execute(
                "INSERT INTO reroutes (id, created, summary, plan_text, origins, touched, state, "
                "intent, flows, idem_key, fingerprint, resources) VALUES (?, ?, ?, '', '{}', "
                "'[]', ?, ?, ?, ?, ?, ?)",
                (
                    reroute_id,
                    time.time(),
                    summary,
                    RerouteState.PENDING,
                    *_intent_columns(intent),
                    idem_key,
                    fingerprint,
                    _keys(resources),
                ),
            )
        except sqlite3.IntegrityError as exc:
            raise JournalError(f"reroute {reroute_id} or its idempotency key exists") from exc

    def release_with(self, reroute_id: str, held: object) -> None:
        """Nothing: file locks are let go by their holder (``Journaling.release_with``)."""

    def expect(self, reroute_id: str, resources: frozenset[str]) -> None:
        """A pending reroute is now expected to hold ``resources`` (its plan changed)."""
        self._write(
            "UPDATE reroutes SET resources = ? WHERE id = ? AND state = ?",
            (_keys(resources), reroute_id, RerouteState.PENDING),
        )

    def cancel(self, reroute_id: str) -> bool:
        """Cancel a pending reroute; False if it is not pending (any more)."""
        cur = self.db.execute(
            "UPDATE reroutes SET state = ?, error = ?, finished = ? WHERE id = ? AND state = ?",
            (
                RerouteState.CANCELLED,
                "cancelled while pending: nothing changed",
                time.time(),
                reroute_id,
                RerouteState.PENDING,
            ),
        )
        return cur.rowcount == 1

    def step(self, reroute_id: str, idx: int, state: StepState, error: str | None = None) -> None:
        """Record that step ``index`` of a reroute started, finished or failed
        (``JournalError`` when the file cannot be written, e.g. its disk is full)."""
        if state is StepState.STARTED:
            self._write(
                "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, NULL, NULL)",
                (reroute_id, idx, state, time.time()),
            )
        else:
            self._write(
                "UPDATE steps SET state = ?, finished = ?, error = ? "
                "WHERE reroute_id = ? AND idx = ?",
                (state, time.time(), error, reroute_id, idx),
            )

    def steps_started(self, reroute_id: str, indexes: range, ended: Ended = ()) -> None:
        """Record that steps ``indexes`` start (one write for a batch run at once, with how
        the previous batch ``ended``)."""
        now = time.time()  # the previous batch ended as this one starts
        starts = [(reroute_id, i, StepState.STARTED, now) for i in indexes]
        self._many([*self._ends(reroute_id, ended, now), *((_START, row) for row in starts)])

    def steps_ended(self, reroute_id: str, ended: Ended) -> None:
        """Record how steps run at once ended: (index, done or failed, error), one write."""
        self._many(self._ends(reroute_id, ended, time.time()))

    @staticmethod
    def _ends(reroute_id: str, ended: Ended, now: float) -> list[tuple[str, tuple[object, ...]]]:
        """The writes of how ``ended`` ended, at ``now`` (the time of the write that carries
        them: no later than what it records next)."""
        return [(_END, (state, now, error, reroute_id, i)) for i, state, error in ended]

    def checkpoint(
        self,
        reroute_id: str,
        rest: tuple[tuple[str, tuple[FlowSpec, ...]], ...],
        ended: Ended = (),
    ) -> None:
        """A checkpoint passed: from now on recovery restores the flows to ``rest``."""
        origins = json.dumps({p: encode_flows(f) for p, f in rest})
        sql = "UPDATE reroutes SET origins = ? WHERE id = ?"
        self._many([*self._ends(reroute_id, ended, time.time()), (sql, (origins, reroute_id))])

    def finish(
        self,
        reroute_id: str,
        state: RerouteState,
        error: str | None = None,
        ended: Ended = (),
    ) -> None:
        """Record a reroute's final state and error."""
        sql = "UPDATE reroutes SET state = ?, error = ?, finished = ? WHERE id = ?"
        now = time.time()  # the last steps ended as the reroute does
        self._many([*self._ends(reroute_id, ended, now), (sql, (state, error, now, reroute_id))])

    def look(self, idem_key: str | None) -> tuple[bool, Record | None]:
        """What an admission reads: whether a reroute is pending or running (any owner),
        and the reroute created with ``idem_key`` (None: none, or no key)."""
        active = self.db.execute(
            "SELECT 1 FROM reroutes WHERE state IN (?, ?) LIMIT 1",
            (RerouteState.PENDING, RerouteState.RUNNING),
        ).fetchone()
        return active is not None, None if idem_key is None else self.by_key(idem_key)

    def _write(self, sql: str, params: tuple[object, ...]) -> None:
        try:
            self.db.execute(sql, params)
        except sqlite3.OperationalError as exc:  # its disk filled up meanwhile
            raise self._unwritable(exc, then="") from exc

    def _many(self, statements: list[tuple[str, tuple[object, ...]]]) -> None:
        """Each (sql, parameters) of ``statements``, in one transaction."""
        if len(statements) <= 1:
            for sql, row in statements:
                self._write(sql, row)
            return
        try:
            self.db.execute("BEGIN")
            for sql, row in statements:
                self.db.execute(sql, row)
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise self._unwritable(exc, then="") from exc

    def prune(self, keep: Retention, now: float | None = None) -> int:
        """Remove the ended reroutes beyond ``keep`` (oldest first; pending and running ones
        are never removed); where they placed their flows is kept (``settled``), so resync
        still knows every flow's path. Returns how many were removed."""
        final = tuple(str(s) for s in RerouteState if s.final)
        marks = ", ".join("?" * len(final))
        cutoff = (time.time() if now is None else now) - keep.days * 86400
        nth = self.db.execute(
            f"SELECT rowid FROM reroutes WHERE state IN ({marks}) ORDER BY rowid DESC "
            "LIMIT 1 OFFSET ?",
            (*final, keep.reroutes),
        ).fetchone()
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM reroutes WHERE state IN ({marks}) "
            "AND (coalesce(finished, created) < ? OR rowid <= ?) ORDER BY rowid",
            (*final, cutoff, nth[0] if nth else 0),
        ).fetchall()
        if not rows:
            return 0
        gone = [self._record(r) for r in rows]
        ids = [(r.id,) for r in gone]
        try:
            self.db.execute("BEGIN")
            for record in gone:
                self.db.executemany(
                    "INSERT OR REPLACE INTO settled VALUES (?, ?)",
                    [(str(f), path) for f, path in record.placed().items()],
                )
            self.db.executemany("DELETE FROM steps WHERE reroute_id = ?", ids)
            self.db.executemany("DELETE FROM reroutes WHERE id = ?", ids)
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise self._unwritable(exc, then="") from exc
        return len(gone)

    def settled(self) -> dict[FlowSpec, str]:
        """Where the pruned reroutes left their flows (``prune``)."""
        rows = self.db.execute("SELECT flow, path FROM settled").fetchall()
        return {FlowSpec.parse(f): p for f, p in rows}

    def owe(self, devices: Sequence[str], reroute_id: str) -> None:
        """Reroute ``reroute_id`` left its old paths' rules on ``devices`` (they did not
        answer): their cleanup is owed until ``paid``."""
        sql = "INSERT OR REPLACE INTO debts (device, reroute_id) VALUES (?, ?)"
        self._many([(sql, (d, reroute_id)) for d in devices])

    def debts(self) -> dict[str, str]:
        """The devices whose cleanup is owed, each with the (last) reroute that left it."""
        return dict(self.db.execute("SELECT device, reroute_id FROM debts").fetchall())

    def owed(self, reroute_id: str) -> list[str]:
        """The devices whose cleanup ``reroute_id`` left and is still owed, sorted."""
        sql = "SELECT device FROM debts WHERE reroute_id = ? ORDER BY device"
        return [d for (d,) in self.db.execute(sql, (reroute_id,)).fetchall()]

    def paid(self, device: str) -> None:
        """The cleanup of ``device`` is done."""
        self._many([("DELETE FROM debts WHERE device = ?", (device,))])

    def size(self) -> int:
        """Bytes the journal takes on disk (database and write-ahead log; 0 in memory)."""
        if self.path is None:
            return 0
        files = (self.path, self.path.with_name(self.path.name + "-wal"))
        return sum(f.stat().st_size for f in files if f.exists())

    def get(self, reroute_id: str) -> Record | None:
        """The record of ``reroute_id``, or None."""
        row = self.db.execute(
            f"SELECT {_COLUMNS} FROM reroutes WHERE id = ?", (reroute_id,)
        ).fetchone()
        return self._record(row) if row else None

    def by_key(self, idem_key: str) -> Record | None:
        """The reroute created with this idempotency key."""
        row = self.db.execute(
            f"SELECT {_COLUMNS} FROM reroutes WHERE idem_key = ?", (idem_key,)
        ).fetchone()
        return self._record(row) if row else None

    def in_flight(self) -> list[Record]:
        """The reroutes still marked running (their process died mid-plan), oldest first."""
        return self._select("state = ?", (RerouteState.RUNNING,), "rowid")

    def pending(self) -> list[Record]:
        """The queued reroutes, oldest first (the order they run in)."""
        return self._select("state = ?", (RerouteState.PENDING,), "rowid")

    def queue(self, *, reuse: bool = False) -> Queue:
        """The reroutes running and pending, read in one transaction (one snapshot); its
        revision is the highest row id then (a reroute started without being queued, as
        the CLI's ``apply`` does, is a row inserted after it). ``reuse``: nothing to reuse
        (a read is local)."""
        self.db.execute("BEGIN")
        try:
            (last,) = self.db.execute("SELECT coalesce(max(rowid), 0) FROM reroutes").fetchone()
            return Queue(running=self.in_flight(), pending=self.pending(), revision=last)
        finally:
            self.db.execute("COMMIT")

    def started_since(self, queue: Queue) -> bool:
        """A reroute started running that ``queue`` did not show (one queued then was in
        it, pending): file locks compare nothing, so the scheduler asks this once it holds
        its locks, and lets them go when so (the starter may have died since: no lock of
        it would have stopped this one)."""
        row = self.db.execute(
            "SELECT 1 FROM reroutes WHERE state = ? AND rowid > ? LIMIT 1",
            (RerouteState.RUNNING, queue.revision),
        ).fetchone()
        return row is not None

    def rebase(self, queue: Queue) -> Queue:
        """``queue``: file locks take no guard (``Journaling.rebase``)."""
        return queue

    def history(
        self,
        limit: int = 50,
        *,
        state: RerouteState | None = None,
        flows: tuple[FlowSpec, ...] = (),
    ) -> list[Record]:
        """Newest first; only those in ``state`` and moving any of ``flows``, when given."""
        where, args = ["1"], []
        if state is not None:
            where.append("state = ?")
            args.append(str(state))
        if flows:
            marks = ", ".join("?" * len(flows))
            where.append(f"EXISTS (SELECT 1 FROM json_each(flows) WHERE value IN ({marks}))")
            args += [str(f) for f in flows]
        return self._select(" AND ".join(where), tuple(args), "rowid DESC", limit)

    def steps(self, reroute_id: str) -> list[StepRecord]:
        """The step records of a reroute, in plan order."""
        rows = self.db.execute(
            "SELECT idx, state, started, finished, error FROM steps WHERE reroute_id = ? "
            "ORDER BY idx",
            (reroute_id,),
        ).fetchall()
        return [
            StepRecord(index=i, state=StepState(st), started=t0, finished=t1, error=err)
            for i, st, t0, t1, err in rows
        ]

    def _select(
        self, where: str, args: tuple[object, ...], order: str, limit: int = -1
    ) -> list[Record]:
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM reroutes WHERE {where} ORDER BY {order} LIMIT ?",
            (*args, limit),
        ).fetchall()
        return [self._record(r) for r in rows]

    def _record(self, row: _Row) -> Record:
        steps = self.db.execute(
            "SELECT idx FROM steps WHERE reroute_id = ? AND state != ? ORDER BY idx",
            (row[0], StepState.UNDONE),
        ).fetchall()
        return Record(
            id=row[0],
            created=row[1],
            summary=row[2],
            state=RerouteState(row[3]),
            error=row[4],
            plan_text=row[5],
            origins={p: decode_flows(f) for p, f in json.loads(row[6]).items()},
            touched=tuple(json.loads(row[7])),
            started_steps=tuple(s[0] for s in steps),
            intent=decode_intent(row[8]) if row[8] else None,
            step_names=tuple(json.loads(row[9])),
            started=row[10],
            finished=row[11],
            idem_key=row[12],
            fingerprint=row[13],
            owner=row[14],
            resources=frozenset(json.loads(row[15])),
        )
