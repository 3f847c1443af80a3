"""The journal: SQLite, written ahead of every step, so an interrupted reroute is recovered.

Tables: ``reroutes`` (one row per reroute: summary, the plan as text, the *origins* -- the
path each moved flow was on, as JSON -- the paths it touched, state, error) and ``steps``
(one row per step started: state, times, error). A reroute row is committed before its
first step and a step row before the step touches a device.

Recovery does not replay an undo log: it reads the devices afresh and plans the flows back
onto their origins (``planner.plan_restore``). So the journal stays small (a 10,000-flow
plan would take half a second to pickle) and survives code changes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from drivers.base import Prefix
from services.reroute.errors import RerouteError
from services.reroute.model import FlowSpec
from services.reroute.planner import Plan

VERSION = 2
SCHEMA = """
CREATE TABLE IF NOT EXISTS reroutes (
  id TEXT PRIMARY KEY, created REAL NOT NULL, summary TEXT NOT NULL, plan_text TEXT NOT NULL,
  origins TEXT NOT NULL, touched TEXT NOT NULL, state TEXT NOT NULL, error TEXT,
  finished REAL
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
    plan_text: str
    origins: dict[str, tuple[FlowSpec, ...]]  # path -> the flows that were on it
    touched: tuple[str, ...]  # every path the reroute may have written
    started_steps: tuple[int, ...]


class JournalError(RerouteError):
    """The journal file cannot be used."""


def _encode_flows(flows: tuple[FlowSpec, ...]) -> list[tuple[object, ...]]:
    return [(f.src, f.dst, f.ip_proto, f.l4_src, f.l4_dst) for f in flows]


def _decode_flows(rows: list[list[object]]) -> tuple[FlowSpec, ...]:
    out = []
    for src, dst, proto, sport, dport in rows:
        assert isinstance(src, list) and isinstance(dst, list)
        out.append(
            FlowSpec(
                src=Prefix(*src),
                dst=Prefix(*dst),
                ip_proto=proto if isinstance(proto, int) else None,
                l4_src=sport if isinstance(sport, int) else None,
                l4_dst=dport if isinstance(dport, int) else None,
            )
        )
    return tuple(out)


class Journal:
    def __init__(self, path: Path | None) -> None:
        """A journal in the file ``path``; ``None`` keeps it in memory (nothing to recover)."""
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        where = ":memory:" if path is None else path
        self.db = sqlite3.connect(where, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        (version,) = self.db.execute("PRAGMA user_version").fetchone()
        tables = self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables and version != VERSION:
            self.db.close()
            raise JournalError(
                f"journal {path} has format {version}, this version writes {VERSION}: "
                "move the file away (after `reroute recover` with the old version)"
            )
        self.db.executescript(SCHEMA)
        self.db.execute(f"PRAGMA user_version = {VERSION}")

    def close(self) -> None:
        self.db.close()

    def create(self, reroute_id: str, plan: Plan) -> None:
        self.db.execute(
            "INSERT INTO reroutes VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL)",
            (
                reroute_id,
                time.time(),
                plan.describe().splitlines()[0],
                plan.describe(),
                json.dumps({p: _encode_flows(f) for p, f in plan.origins}),
                json.dumps([*plan.from_paths, plan.to_path]),
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

    def checkpoint(
        self, reroute_id: str, rest: tuple[tuple[str, tuple[FlowSpec, ...]], ...]
    ) -> None:
        """A checkpoint passed: from now on recovery restores the flows to ``rest``."""
        self.db.execute(
            "UPDATE reroutes SET origins = ? WHERE id = ?",
            (json.dumps({p: _encode_flows(f) for p, f in rest}), reroute_id),
        )

    def finish(self, reroute_id: str, state: RerouteState, error: str | None = None) -> None:
        self.db.execute(
            "UPDATE reroutes SET state = ?, error = ?, finished = ? WHERE id = ?",
            (state, error, time.time(), reroute_id),
        )

    def get(self, reroute_id: str) -> Record | None:
        row = self.db.execute(
            "SELECT id, created, summary, state, error, plan_text, origins, touched "
            "FROM reroutes WHERE id = ?",
            (reroute_id,),
        ).fetchone()
        return self._record(row) if row else None

    def in_flight(self) -> list[Record]:
        rows = self.db.execute(
            "SELECT id, created, summary, state, error, plan_text, origins, touched "
            "FROM reroutes WHERE state = ?",
            (RerouteState.RUNNING,),
        ).fetchall()
        return [self._record(r) for r in rows]

    def history(self, limit: int = 50) -> list[Record]:
        rows = self.db.execute(
            "SELECT id, created, summary, state, error, plan_text, origins, touched "
            "FROM reroutes ORDER BY created DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [self._record(r) for r in rows]

    def _record(self, row: tuple[str, float, str, str, str | None, str, str, str]) -> Record:
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
            origins={p: _decode_flows(f) for p, f in json.loads(row[6]).items()},
            touched=tuple(json.loads(row[7])),
            started_steps=tuple(s[0] for s in steps),
        )
