"""The service on a real fabric (OVS, its own name): auth and dry runs change no device,
events and metrics report a reroute, 100 concurrent requests never interleave."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fabric.fabric import Fabric
from services.reroute.errors import ApiError
from services.reroute.model.topology import Topology
from services.reroute.service.client import Event, RerouteView
from services.reroute.store.records import RerouteState
from tests.unit.services.service.conftest import READER, ServerThread, settings
from tests.unit.services.service.fabric_state import journal_records, path_of_flow, tables

pytestmark = pytest.mark.fabric
FLOW = "10.0.0.2>10.0.0.3"
Live = tuple[ServerThread, Topology, Fabric, Path]


@pytest.fixture(scope="module")
def live(
    svc_fabric: tuple[Topology, Fabric], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    topo, fab = svc_fabric
    journal = tmp_path_factory.mktemp("svc") / "journal.sqlite"
    with ServerThread(settings(topo, journal)) as srv:
        yield srv, topo, fab, journal
    assert path_of_flow(topo, fab) == "long"


def test_callers_without_operator_token_and_dry_runs_change_no_device(live: Live) -> None:
    srv, topo, fab, journal = live
    before, history = tables(topo, fab), journal_records(journal)
    body = {"flows": [FLOW], "to_path": "temporary"}
    for token in (None, "not-a-token-at-all", READER):
        with srv.http(token) as http:
            assert http.post("/v1/reroutes", json=body).status_code in (401, 403)
            assert http.delete("/v1/reroutes/abc").status_code in (401, 403)
    plan = srv.client().create([FLOW], "temporary", dry_run=True)
    assert plan.from_paths == ("long",) and plan.disruption == "hitless"
    assert srv.client(READER).flows()["long"] == ("10.0.0.2/32>10.0.0.3/32",)
    assert tables(topo, fab) == before
    assert journal_records(journal) == history


def test_events_and_metrics_report_a_reroute(live: Live) -> None:
    srv, topo, fab, _ = live
    client = srv.client()
    seen: list[Event] = []
    stream = client.events()  # subscribed when it returns
    listening = threading.Thread(target=lambda: seen.extend(_until_done(stream, 2)), daemon=True)
    listening.start()
    there = client.create([FLOW], "temporary", wait_s=10, idempotency_key="evt-1")
    assert there.state is RerouteState.DONE, there.error
    assert path_of_flow(topo, fab) == "temporary"
    back = client.create([FLOW], "long", wait_s=10, drain_ms=0)
    assert back.state is RerouteState.DONE and path_of_flow(topo, fab) == "long"
    listening.join(10)
    stream.close()
    steps = [e.data for e in seen if e.kind == "step" and e.data["reroute_id"] == there.id]
    done = sorted(s["index"] for s in steps if s["state"] == "done")
    assert done == list(range(1, len(there.steps) + 1))
    assert all(s["ms"] is not None for s in steps if s["state"] == "done")
    text = client.metrics()
    assert _metric(text, 'reroute_reroutes_total{state="done",strategy="mbb"}') >= 2
    steps_counted = sum(
        float(v) for v in re.findall(r"^reroute_step_duration_seconds_count\S* (\S+)$", text, re.M)
    )
    assert steps_counted >= len(there.steps)
    assert _metric(text, "reroute_reroute_duration_seconds_count") >= 2
    assert _metric(text, "reroute_queue_length") == 0 == _metric(text, "reroute_in_flight")


def _until_done(stream: Iterator[Event], count: int) -> list[Event]:
    out = []
    for event in stream:
        out.append(event)
        count -= event.kind == "reroute" and event.data["state"] == "done"
        if count == 0:
            break
    return out


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in metrics"
    return float(match.group(1))


def test_100_concurrent_requests_never_interleave(live: Live) -> None:
    srv, topo, fab, journal = live
    targets = ["temporary" if i % 2 == 0 else "long" for i in range(100)]

    def post(to: str) -> RerouteView | ApiError:
        try:
            return srv.client().create([FLOW], to, drain_ms=0)
        except ApiError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(post, targets))
    refused = [a for a in answers if isinstance(a, ApiError)]
    assert not refused, refused  # a refused intent is a reroute ``rejected``, never a 422
    ids = {a.id for a in answers if isinstance(a, RerouteView)}
    finals = [srv.client().get(i, wait_s=60) for i in ids]
    assert {v.state for v in finals} <= {RerouteState.DONE, RerouteState.REJECTED}
    rejected = [v for v in finals if v.state is RerouteState.REJECTED]
    assert all("already on path" in (v.error or "") for v in rejected)
    ran = sorted(
        ((r, steps) for r, steps in journal_records(journal) if r.id in ids and steps),
        key=lambda rs: rs[0].started or 0,
    )
    assert len(ran) == sum(v.state is RerouteState.DONE for v in finals) > 0
    spans = []
    for record, steps in ran:
        start, end = record.started or 0, record.finished or 0
        assert all(start <= s.started <= (s.finished or 0) <= end for s in steps)
        spans.append((min(s.started for s in steps), max(s.finished or 0 for s in steps)))
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), "interleaved"
    last = max(ran, key=lambda rs: rs[0].finished or 0)[0]
    assert last.intent is not None
    assert path_of_flow(topo, fab) == last.intent.to_path
    if last.intent.to_path != "long":
        assert srv.client().create([FLOW], "long", wait_s=10).state is RerouteState.DONE
