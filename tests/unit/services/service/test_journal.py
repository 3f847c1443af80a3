"""The journal's service states: pending -> running (create) -> final, cancel, filters,
idempotency keys, and the upgrade of a format-2 file."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import pytest

from services.reroute.model.intent import FlowSpec, Intent, Strategy
from services.reroute.model.topology import Topology
from services.reroute.planning import plan
from services.reroute.rules import initial_rules
from services.reroute.store.records import (
    JournalError,
    RerouteState,
    decode_intent,
    encode_intent,
)
from services.reroute.store.sqlite import Journal
from services.reroute.tables import tables_from

FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3,udp,dport=5001")
INTENT = Intent(flows=(FLOW,), to_path="temporary", strategy=Strategy.MBB, drain_s=0.25)


def test_pending_then_running_then_done(topo: Topology) -> None:
    journal = Journal(None)
    journal.enqueue("r1", INTENT, idem_key="k", fingerprint="f")
    record = journal.get("r1")
    assert record is not None and record.state is RerouteState.PENDING
    assert record.intent == INTENT and record.idem_key == "k" and record.fingerprint == "f"
    assert [r.id for r in journal.pending()] == ["r1"] and journal.in_flight() == []
    the_plan = plan(topo, tables_from(initial_rules(topo)), _host_intent(), now=time.time())
    journal.create("r1", the_plan)
    running = journal.get("r1")
    assert running is not None and running.state is RerouteState.RUNNING
    assert running.step_names == tuple(s.describe() for s in the_plan.steps())
    assert journal.in_flight()[0].id == "r1" and journal.pending() == []
    with pytest.raises(JournalError):
        journal.create("r1", the_plan)  # never run twice
    assert journal.by_key("k") is not None and journal.by_key("other") is None


def test_only_pending_reroutes_cancel(topo: Topology) -> None:
    journal = Journal(None)
    journal.enqueue("r1", INTENT)
    journal.enqueue("r2", INTENT)
    journal.finish("r2", RerouteState.DONE)
    assert journal.cancel("r1") and not journal.cancel("r1") and not journal.cancel("r2")
    cancelled = journal.get("r1")
    assert cancelled is not None and cancelled.state is RerouteState.CANCELLED
    assert cancelled.finished is not None


def test_history_filters_by_state_and_flow() -> None:
    journal = Journal(None)
    journal.enqueue("a", INTENT)
    other = Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.4"),), to_path="direct")
    journal.enqueue("b", other)
    journal.finish("b", RerouteState.REJECTED, "no")
    assert [r.id for r in journal.history()] == ["b", "a"]
    assert [r.id for r in journal.history(state=RerouteState.REJECTED)] == ["b"]
    assert [r.id for r in journal.history(flows=(FLOW,))] == ["a"]
    assert journal.history(flows=(FLOW.reverse(),)) == []


def test_intent_round_trips() -> None:
    journal = Journal(None)
    journal.enqueue("a", INTENT)
    row = journal.db.execute("SELECT intent FROM reroutes").fetchone()[0]
    assert decode_intent(row) == INTENT


def test_a_lock_timeout_round_trips_and_an_earlier_default_reads_as_the_default() -> None:
    for lock in (None, 3.0, 0.4):
        intent = replace(INTENT, lock_timeout_s=lock)
        assert decode_intent(encode_intent(intent)) == intent
    # written before it could be left out: every intent carried one, 3 s unless asked
    earlier = json.loads(encode_intent(INTENT))
    del earlier["lock_timeout_nullable"]
    for lock, read in ((3.0, None), (0.4, 0.4)):
        assert decode_intent(json.dumps({**earlier, "lock_timeout_s": lock})).lock_timeout_s == read


def test_a_format_2_journal_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE reroutes (id TEXT PRIMARY KEY, created REAL NOT NULL, summary TEXT "
        "NOT NULL, plan_text TEXT NOT NULL, origins TEXT NOT NULL, touched TEXT NOT NULL, "
        "state TEXT NOT NULL, error TEXT, finished REAL);"
        "CREATE TABLE steps (reroute_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT "
        "NULL, started REAL NOT NULL, finished REAL, error TEXT, PRIMARY KEY (reroute_id, idx));"
        "INSERT INTO reroutes VALUES ('old', 1.0, 's', 'p', '{}', '[]', 'running', NULL, NULL);"
        "PRAGMA user_version = 2;"
    )
    db.close()
    journal = Journal(path)
    assert [r.id for r in journal.in_flight()] == ["old"]
    journal.enqueue("new", INTENT, idem_key="k")
    assert journal.by_key("k") is not None


def _host_intent() -> Intent:
    return Intent(flows=(FlowSpec.parse("10.0.0.2>10.0.0.3"),), to_path="temporary")


def test_an_unwritable_journal_refuses_the_reroute(topo: Topology, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.db")
    the_plan = plan(topo, tables_from(initial_rules(topo)), _host_intent(), now=time.time())
    journal.db.execute("PRAGMA query_only = 1")  # every write fails, as on a full disk
    with pytest.raises(JournalError, match=r"cannot be written .* reroute refused"):
        journal.create("r1", the_plan)
    journal.close()
    (tmp_path / "dir").mkdir()  # a directory where the journal's file would be
    with pytest.raises(JournalError, match="cannot be written"):
        Journal(tmp_path / "dir")
