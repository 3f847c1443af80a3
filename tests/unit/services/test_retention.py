"""Journal retention: ended reroutes beyond N reroutes or N days are removed, oldest first;
pending and running ones never are; where pruned reroutes left their flows is still known
(resync); the service config takes ``retention:`` strictly."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.reroute.engine.resync import intended
from services.reroute.errors import ConfigError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning import plan
from services.reroute.rules import initial_rules
from services.reroute.service.config import load_config
from services.reroute.store.records import RerouteState, Retention
from services.reroute.store.sqlite import Journal
from services.reroute.tables import tables_from

ROOT = Path(__file__).resolve().parents[3]
TOPO = load_topology(ROOT / "topologies" / "ngncs-ost.yaml")
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
DIRECT = FlowSpec.parse("10.0.0.1>10.0.0.4")
START = tables_from(initial_rules(TOPO))


def ended(journal: Journal, reroute_id: str, to: str, state: RerouteState) -> None:
    journal.create(reroute_id, plan(TOPO, START, Intent(flows=(FLOW,), to_path=to), now=0.0))
    journal.finish(reroute_id, state)


def test_only_ended_reroutes_beyond_the_count_are_removed_oldest_first() -> None:
    journal = Journal(None)
    ended(journal, "a", "temporary", RerouteState.DONE)
    journal.enqueue("queued", Intent(flows=(FLOW,), to_path="short"))
    journal.create("cut", plan(TOPO, START, Intent(flows=(FLOW,), to_path="temporary"), now=0))
    for n in range(5):
        ended(journal, f"b{n}", "temporary", RerouteState.ROLLED_BACK)
    assert journal.prune(Retention(reroutes=3)) == 3  # a, b0, b1
    left = {r.id for r in journal.history(100)}
    assert left == {"queued", "cut", "b2", "b3", "b4"}
    assert journal.steps("a") == []
    assert journal.prune(Retention(reroutes=3)) == 0  # nothing more: idempotent


def test_reroutes_older_than_the_days_are_removed_whatever_the_count() -> None:
    journal = Journal(None)
    ended(journal, "old", "temporary", RerouteState.DONE)
    ended(journal, "new", "temporary", RerouteState.DONE)
    old = journal.get("old")
    assert old is not None and old.finished is not None
    in_two_days = old.finished + 2 * 86400
    journal.db.execute("UPDATE reroutes SET finished = ? WHERE id = 'new'", (in_two_days,))
    assert journal.prune(Retention(reroutes=100, days=1), now=in_two_days + 1) == 1
    assert [r.id for r in journal.history(10)] == ["new"]


def test_resync_still_knows_where_pruned_reroutes_left_the_flows(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    ended(journal, "moved", "temporary", RerouteState.DONE)
    for n in range(3):  # ended reroutes that placed nothing (refused)
        journal.enqueue(f"r{n}", Intent(flows=(FLOW,), to_path="short"))
        journal.finish(f"r{n}", RerouteState.REJECTED, "no")
    assert journal.prune(Retention(reroutes=1)) == 3
    assert journal.get("moved") is None
    assert intended(TOPO, journal) == {"direct": (DIRECT,), "temporary": (FLOW,)}
    journal.close()
    again = Journal(tmp_path / "j.sqlite")  # kept on disk
    assert intended(TOPO, again) == {"direct": (DIRECT,), "temporary": (FLOW,)}
    assert again.size() > 0
    again.close()


def test_the_config_takes_a_retention_and_refuses_unknown_keys(tmp_path: Path) -> None:
    file = tmp_path / "serve.yaml"
    file.write_text(f"topology: {ROOT / 'topologies' / 'ngncs-ost.yaml'}\n")
    assert load_config(file).retention.reroutes == 10_000
    file.write_text(file.read_text() + "retention: {reroutes: 500, days: 7}\n")
    assert load_config(file).retention.days == 7
    file.write_text(file.read_text().replace("days: 7", "dayz: 7"))
    with pytest.raises(ConfigError, match="dayz"):
        load_config(file)
