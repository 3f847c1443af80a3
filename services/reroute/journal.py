"""The journal: SQLite, written ahead of every step, so an interrupted reroute is recovered.

Tables: ``reroutes`` (one row per reroute: intent summary, pickled plan, state, error) and
``steps`` (one row per step started: state, times, error). A step row is committed before
the step touches a device; recovery undoes every step that was started, newest first.
The plan is pickled: the journal is this process's own file, never input from outside.
"""

from __future__ import annotations

import pickle
import sqlite3
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from services.reroute.planner import Plan

SCHEMA = """
CREATE TABLE IF NOT EXISTS reroutes (
  id TEXT PRIMARY KEY, created REAL NOT NULL, summary TEXT NOT NULL, plan BLOB NOT NULL,
  state TEXT NOT NULL, error TEXT, finished REAL
);
CREATE TABLE IF NOT EXISTS steps (
  reroute_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL,
  started REAL NOT NULL, finished REAL, error TEXT, PRIMARY KEY (reroute_id, idx)
);
"""


class RerouteState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"  # rollback itself failed: needs an operator


class StepState(StrEnum):
    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    UNDONE = "undone"


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    id: str
    created: float
    summary: str
    state: RerouteState
    error: str | None
    plan: Plan
    started_steps: tuple[int, ...]


class Journal:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def create(self, reroute_id: str, plan: Plan) -> None:
        self.db.execute(
            "INSERT INTO reroutes VALUES (?, ?, ?, ?, ?, NULL, NULL)",
            (
                reroute_id,
                time.time(),
                plan.describe().splitlines()[0],
                pickle.dumps(plan),
                RerouteState.RUNNING,
            ),
        )

    def step(self, reroute_id: str, idx: int, state: StepState, error: str | None = None) -> None:
        if state is StepState.STARTED:
            self.db.execute(
                "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, NULL, NULL)",
                (reroute_id, idx, state, time.time()),
            )
        else:
            self.db.execute(
                "UPDATE steps SET state = ?, finished = ?, error = ? "
                "WHERE reroute_id = ? AND idx = ?",
                (state, time.time(), error, reroute_id, idx),
            )

    def finish(self, reroute_id: str, state: RerouteState, error: str | None = None) -> None:
        self.db.execute(
            "UPDATE reroutes SET state = ?, error = ?, finished = ? WHERE id = ?",
            (state, error, time.time(), reroute_id),
        )

    def get(self, reroute_id: str) -> Record | None:
        row = self.db.execute(
            "SELECT id, created, summary, state, error, plan FROM reroutes WHERE id = ?",
            (reroute_id,),
        ).fetchone()
        return self._record(row) if row else None

    def in_flight(self) -> list[Record]:
        rows = self.db.execute(
            "SELECT id, created, summary, state, error, plan FROM reroutes WHERE state = ?",
            (RerouteState.RUNNING,),
        ).fetchall()
        return [self._record(r) for r in rows]

    def history(self, limit: int = 50) -> list[Record]:
        rows = self.db.execute(
            "SELECT id, created, summary, state, error, plan FROM reroutes "
            "ORDER BY created DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [self._record(r) for r in rows]

    def _record(self, row: tuple[str, float, str, str, str | None, bytes]) -> Record:
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
            plan=pickle.loads(row[5]),
            started_steps=tuple(s[0] for s in steps),
        )
