"""The journal's disk fills up in the middle of a reroute: the executor stops, rolls back
what it started (journaling the undo where it still can), and reports why; every device is
left as before. The journal is the real one (SQLite in memory) whose writes fail from the
N-th on, as SQLite's do on a full disk (``sqlite3.OperationalError``)."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from typing import Any

import pytest

from services.reroute.engine.executor import Executor
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.planning.order import PhaseName
from services.reroute.planning.plan import Disruption, Phase, Plan, Step, StepKind
from services.reroute.store.records import JournalError, RerouteState, StepState
from services.reroute.store.sqlite import Journal
from tests.unit.services.test_executor_guard import ATOMIC, BEFORE, OneByOne, add, delete, rule


class FillingDb:
    """A sqlite3 connection whose writes fail once ``room`` of them have been made."""

    def __init__(self, db: sqlite3.Connection, room: int) -> None:
        self._db = db
        self.room = room

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if sql.lstrip().upper().startswith(("INSERT", "UPDATE")):
            if self.room <= 0:
                raise sqlite3.OperationalError("database or disk is full")
            self.room -= 1
        return self._db.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def two_step_plan(s1: OneByOne, s2: OneByOne) -> Plan:
    """make on s2, then shift on s1 (a checkpointless MBB in miniature)."""
    make = Step(kind=StepKind.INSTALL, device=s2.name, changes=tuple(add(rule(4))),
                undo=tuple(delete(rule(4))))  # fmt: skip
    shift = Step(kind=StepKind.SHIFT, device=s1.name, changes=tuple(add(rule(1, port=3))),
                 undo=tuple(add(rule(1))))  # fmt: skip
    return Plan(
        intent=Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.2"),), to_path="p"),
        from_paths=("q",), to_path="p", disruption=Disruption.HITLESS,
        phases=(Phase(name=PhaseName.MAKE, steps=(make,)),
                Phase(name=PhaseName.SHIFT, steps=(shift,))),
        planned_at=0.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("room", "ran"),
    [(1, 0), (2, 1), (3, 1), (4, 2), (5, 2)],
    ids=["at-make-start", "at-make-done", "at-shift-start", "at-shift-done", "at-finish"],
)
def test_a_journal_that_fills_up_mid_reroute_rolls_it_back(room: int, ran: int) -> None:
    """Writes: 1 the reroute row, 2 make started, 3 make done, 4 shift started, 5 shift
    done, 6 finished. ``room`` of them succeed after the row; ``ran``: steps that ran."""
    s1, s2 = OneByOne("s1", BEFORE, capabilities=ATOMIC), OneByOne("s2", [], capabilities=ATOMIC)
    journal = Journal(None)
    journal.db = FillingDb(journal.db, room=room)  # type: ignore[assignment]
    outcome = asyncio.run(Executor({"s1": s1, "s2": s2}, journal).run("r1", two_step_plan(s1, s2)))
    assert outcome.state is RerouteState.ROLLED_BACK, outcome.describe()
    assert "cannot be written (database or disk is full)" in (outcome.error or "")
    assert "rolled back: every flow is on its previous path" in (outcome.error or "")
    assert sorted(s1.table.values()) == sorted(BEFORE) and s2.table == {}  # as before
    assert len(s1.batches) + len(s2.batches) == 2 * ran  # each step that ran, and its undo
    record = journal.get("r1")
    assert record is not None and record.state is RerouteState.RUNNING  # could not say more:
    # recovery after a restart restores the origins, where the rollback put every flow
    assert len(journal.steps("r1")) == (room - 1 + 1) // 2  # the starts it could write


def test_a_full_journal_is_a_journal_error_on_each_write() -> None:
    journal = Journal(None)
    journal.db = FillingDb(journal.db, room=0)  # type: ignore[assignment]
    with pytest.raises(JournalError, match="cannot be written"):
        journal.step("r1", 0, StepState.STARTED)
    with pytest.raises(JournalError, match="cannot be written"):
        journal.finish("r1", RerouteState.DONE)


class Stamped(OneByOne):
    """A ``OneByOne`` that notes when each batch came (``time.monotonic``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[float] = []

    async def apply(self, changes: Any) -> None:
        self.times.append(time.monotonic())
        await super().apply(changes)


@pytest.mark.parametrize("drain_s", [0.0, 0.15])
def test_a_rollback_drains_the_new_path_before_undoing_its_make(drain_s: float) -> None:
    """The shift ran and its end cannot be journaled: the shift is undone at once, and the
    make only ``undo_drain_s`` later (packets sent on the new path arrive first)."""
    s1, s2 = Stamped("s1", BEFORE, capabilities=ATOMIC), Stamped("s2", [], capabilities=ATOMIC)
    journal = Journal(None)
    journal.db = FillingDb(journal.db, room=4)  # type: ignore[assignment]  # at-shift-done
    plan = dataclasses.replace(two_step_plan(s1, s2), undo_drain_s=drain_s)
    outcome = asyncio.run(Executor({"s1": s1, "s2": s2}, journal).run("r1", plan))
    assert outcome.state is RerouteState.ROLLED_BACK, outcome.describe()
    assert sorted(s1.table.values()) == sorted(BEFORE) and s2.table == {}  # as before
    (_, shift_undone), (_, make_undone) = s1.times, s2.times
    assert drain_s <= make_undone - shift_undone < drain_s + 0.1
