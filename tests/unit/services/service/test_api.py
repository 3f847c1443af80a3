"""The HTTP API over real HTTP, on fake switches (no fabric): auth, validation,
idempotency, dry run, the FIFO queue and cancel, events, drain and restart."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from services.reroute.errors import ApiError
from services.reroute.model.topology import Topology
from services.reroute.service.app import api, openapi_json
from services.reroute.service.client import Event, RerouteClient
from services.reroute.service.schemas import RerouteRequest
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from tests.unit.services.service.conftest import OPERATOR, READER, ROOT, ServerThread, settings
from tests.unit.services.service.fakes import FakeFabric

FLOW = "10.0.0.2>10.0.0.3"
BODY = {"flows": [FLOW], "to_path": "temporary"}


def journal_ids(path: Path) -> list[str]:
    journal = Journal(path)
    try:
        return [r.id for r in journal.history(1000)]
    finally:
        journal.close()


def test_callers_without_an_operator_token_change_nothing(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    before = fake.snapshot()
    anonymous, stranger, reader = (
        fake_server.http(None),
        fake_server.http("x" * 20),
        fake_server.http(READER),
    )
    for http in (anonymous, stranger):
        for answer in (http.post("/v1/reroutes", json=BODY), http.get("/v1/reroutes")):
            assert answer.status_code == 401
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert http.post("/v1/reroutes", content=b"{not json").status_code == 401
    assert reader.post("/v1/reroutes", json=BODY).status_code == 403
    assert reader.delete("/v1/reroutes/abc").status_code == 403
    assert reader.get("/v1/reroutes").status_code == 200
    assert anonymous.get("/healthz").json()["status"] == "ok"
    assert fake.snapshot() == before
    assert journal_ids(tmp_path / "journal.sqlite") == []


def test_bad_requests_name_the_field_and_change_nothing(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    http = fake_server.http()
    before = fake.snapshot()

    def loc(body: object) -> list[object]:
        answer = http.post("/v1/reroutes", json=body)
        assert answer.status_code == 422, answer.text
        return [e["loc"] for e in answer.json()["detail"]]

    assert loc({"flows": [FLOW, "10.0.0.2-10.0.0.3"], "to_path": "temporary"}) == [
        ["body", "flows", 1]
    ]
    assert loc({**BODY, "drain_ms": "50"}) == [["body", "drain_ms"]]
    assert loc({**BODY, "drain_ms": -1}) == [["body", "drain_ms"]]
    assert loc({**BODY, "colour": "red"}) == [["body", "colour"]]
    assert loc({**BODY, "strategy": "fast"}) == [["body", "strategy"]]
    assert loc({"flows": [], "to_path": "temporary"}) == [["body", "flows"]]
    assert loc({**BODY, "to_path": "nowhere"}) == [["body", "to_path"]]
    assert loc({**BODY, "via": "nowhere"}) == [["body", "via"]]
    assert http.get("/v1/reroutes?state=bogus").status_code == 422
    assert http.get("/v1/reroutes?flow=nonsense").json()["detail"][0]["loc"] == ["query", "flow"]
    assert http.get("/v1/reroutes/nope").status_code == 404
    assert fake.snapshot() == before
    assert journal_ids(tmp_path / "journal.sqlite") == []


def test_a_refused_intent_is_a_rejected_reroute_whether_judged_at_once_or_queued(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    """One condition, one answer: 201 ``rejected`` when the worker is idle (judged at
    once), 202 ``pending`` then ``rejected`` at its turn when queued; never a 422."""
    http = fake_server.http()
    before = fake.snapshot()
    at_once = http.post("/v1/reroutes", json={**BODY, "to_path": "long"})
    assert at_once.status_code == 201, at_once.text
    assert at_once.json()["state"] == "rejected"
    assert "already on path long" in at_once.json()["error"]
    assert at_once.headers["Location"] == f"/v1/reroutes/{at_once.json()['id']}"
    unknown = http.post("/v1/reroutes", json={**BODY, "flows": ["10.0.0.1>10.0.0.3"]})
    assert unknown.status_code == 201 and unknown.json()["state"] == "rejected"
    assert "not installed: no path carries it" in unknown.json()["error"]
    assert "rejected, not run" in unknown.json()["summary"]  # no longer "(queued)"
    assert fake.snapshot() == before  # nothing changed
    client = fake_server.client()
    first = client.create([FLOW], "temporary", drain_ms=1000)  # still running when the next arrives
    queued = http.post("/v1/reroutes", json=BODY)  # behind the first: judged at its turn
    assert queued.status_code == 202 and queued.json()["state"] == "pending", queued.text
    assert client.get(first.id, wait_s=5).state is RerouteState.DONE
    later = client.get(queued.json()["id"], wait_s=5)
    assert later.state is RerouteState.REJECTED
    assert "already on path temporary" in (later.error or "")
    idle = http.post("/v1/reroutes", json=BODY)  # the same condition, worker idle
    assert idle.status_code == 201 and idle.json()["state"] == "rejected", idle.text
    assert idle.json()["error"] == later.error
    assert len(journal_ids(tmp_path / "journal.sqlite")) == 5


def test_idempotency_key_same_body_same_reroute_other_body_409(
    fake_server: ServerThread, tmp_path: Path
) -> None:
    http = fake_server.http()
    key = {"Idempotency-Key": "degradation-42"}
    first = http.post("/v1/reroutes?wait=5", json=BODY, headers=key)
    assert first.status_code in (201, 202), first.text
    again = http.post("/v1/reroutes", json=BODY, headers=key)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert again.headers["Location"] == f"/v1/reroutes/{first.json()['id']}"
    other = http.post("/v1/reroutes", json={**BODY, "drain_ms": 1}, headers=key)
    assert other.status_code == 409 and first.json()["id"] in other.json()["detail"]
    assert journal_ids(tmp_path / "journal.sqlite") == [first.json()["id"]]


def test_requests_at_once_under_one_key_make_one_reroute(
    fake_server: ServerThread, tmp_path: Path
) -> None:
    """The key is read before the admission lock: requests racing under one key all answer
    the one reroute the journal let the first create (the others' writes are refused)."""
    key = {"Idempotency-Key": "burst-7"}

    def post(_: int) -> httpx.Response:
        with fake_server.http() as http:
            return http.post("/v1/reroutes", json=BODY, headers=key)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(post, range(8)))
    codes = sorted(a.status_code for a in answers)
    assert codes[:7] == [200] * 7 and codes[7] in (201, 202), [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert journal_ids(tmp_path / "journal.sqlite") == [answers[0].json()["id"]]


def test_dry_run_returns_the_plan_and_changes_nothing(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    before = fake.snapshot()
    plan = fake_server.client().create([FLOW], "temporary", dry_run=True)
    assert plan.from_paths == ("long",) and plan.to_path == "temporary"
    assert plan.disruption == "hitless" and any(s.startswith("shift") for s in plan.steps)
    assert plan.text.startswith("MBB: 1 flow(s) long -> temporary")
    assert fake.snapshot() == before
    assert journal_ids(tmp_path / "journal.sqlite") == []


def test_reroutes_queue_fifo_and_a_pending_one_can_be_cancelled(
    fake_server: ServerThread, fake: FakeFabric
) -> None:
    client = fake_server.client()
    slow = client.create([FLOW], "temporary", drain_ms=400)
    queued = client.create([FLOW], "long", drain_ms=0)
    last = client.create([FLOW], "long", drain_ms=0)
    assert slow.status == 202 and queued.state is RerouteState.PENDING
    assert (queued.queue_position, last.queue_position) == (1, 2)
    assert client.cancel(queued.id).state is RerouteState.CANCELLED
    assert client.cancel(queued.id).state is RerouteState.CANCELLED  # idempotent
    with pytest.raises(ApiError) as running:
        client.cancel(slow.id)
    assert running.value.is_conflict and "running" in running.value.message
    assert client.get(slow.id, wait_s=5).state is RerouteState.DONE
    assert client.get(last.id, wait_s=5).state is RerouteState.DONE  # planned at its turn
    with pytest.raises(ApiError) as finished:
        client.cancel(slow.id)
    assert finished.value.status == 409
    with pytest.raises(ApiError) as unknown:
        client.cancel("nope")
    assert unknown.value.status == 404
    steps = client.get(last.id).steps
    assert steps and all(s.state == "done" and s.ms is not None for s in steps)
    history = client.list(flow=FLOW)
    assert [r.id for r in history] == [last.id, queued.id, slow.id]
    assert [r.id for r in client.list(state="cancelled")] == [queued.id]


def test_a_queued_reroute_is_planned_when_its_turn_comes(fake_server: ServerThread) -> None:
    client = fake_server.client()
    first = client.create([FLOW], "temporary", drain_ms=200)
    twice = client.create([FLOW], "temporary")  # judged after the first: already there
    assert twice.state is RerouteState.PENDING
    done = client.get(twice.id, wait_s=5)
    assert done.state is RerouteState.REJECTED and "already on path temporary" in (done.error or "")
    assert client.get(first.id).state is RerouteState.DONE


def test_events_stream_steps_and_state_changes(fake_server: ServerThread) -> None:
    client = fake_server.client()
    seen: list[Event] = []
    with client.events() as stream:
        view = client.create([FLOW], "temporary", wait_s=5)
        for event in stream:
            seen.append(event)
            if event.kind == "reroute" and event.data["state"] == "done":
                break
    states = [(e.kind, e.data["state"]) for e in seen]
    assert states[0] == ("reroute", "pending") and states[1] == ("reroute", "running")
    steps = [e.data for e in seen if e.kind == "step"]
    assert {s["reroute_id"] for s in steps} == {view.id}
    assert {(s["index"], s["state"]) for s in steps} >= {
        (i, st) for i in range(1, len(view.steps) + 1) for st in ("started", "done")
    }
    ids = [e.id for e in seen]
    assert ids == sorted(ids)


def test_drain_refuses_changes_finishes_the_running_one_keeps_pending(
    topo: Topology, fake: FakeFabric, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "reroute.lifecycle")
    config = settings(topo, tmp_path / "journal.sqlite")
    with ServerThread(config, fake.drivers) as srv:
        client = srv.client(retries=0)
        running = client.create([FLOW], "temporary", drain_ms=500)
        pending = client.create([FLOW], "long", drain_ms=0)
        srv.drain()
        with pytest.raises(ApiError) as refused:
            client.create([FLOW], "long")
        assert refused.value.status == 503 and refused.value.is_unavailable
        srv.thread.join(10)
        assert not srv.thread.is_alive()
    said = [r.getMessage() for r in caplog.records if r.name == "reroute.lifecycle"]
    begun = "shutting down: refusing changes; waiting for 1 running reroute(s); 1 queued"
    assert any(m.startswith(begun) for m in said), said
    assert said.index(next(m for m in said if m.startswith(begun))) < said.index(
        "shut down: no reroute runs here any more"
    )
    journal = Journal(tmp_path / "journal.sqlite")
    states = {r.id: r.state for r in journal.history()}
    journal.close()
    assert states == {running.id: RerouteState.DONE, pending.id: RerouteState.PENDING}
    with ServerThread(config, fake.drivers) as again:  # a restart runs what was pending
        assert again.client().get(pending.id, wait_s=5).state is RerouteState.DONE
        assert again.client().flows()["long"] == ("10.0.0.2/32>10.0.0.3/32",)


def test_two_instances_each_manage_their_site(fake: FakeFabric, tmp_path: Path) -> None:
    """The two-site scenario: one instance per border switch, each with its own journal."""
    from services.reroute.model.topology import load_topology

    topo = load_topology(ROOT / "topologies" / "two-site-longhaul.yaml")
    fake = FakeFabric(topo)
    site1 = settings(topo, tmp_path / "j1.sqlite", scope=frozenset({"sw1"}))
    site2 = settings(topo, tmp_path / "j2.sqlite", scope=frozenset({"sw2"}))
    with ServerThread(site1, fake.drivers) as a, ServerThread(site2, fake.drivers) as b:
        for srv, switch in ((a, "sw1"), (b, "sw2")):
            before = fake.snapshot()
            view = srv.client().create(["10.10.0.1>10.10.0.2"], "standby", wait_s=5)
            assert view.state is RerouteState.DONE, view.error
            changed = {n for n, t in fake.snapshot().items() if t != before[n]}
            assert changed == {switch}
            assert srv.client().flows()["standby"] == ("10.10.0.1/32>10.10.0.2/32",)
        managed = [n["name"] for n in a.client().topology()["nodes"] if n["managed"]]
        assert managed == ["sw1"]
    assert journal_ids(tmp_path / "j1.sqlite") != journal_ids(tmp_path / "j2.sqlite")


def test_client_retries_with_the_same_idempotency_key() -> None:
    keys: list[str] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["Idempotency-Key"])
        if len(keys) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(keys) == 2:
            return httpx.Response(503, json={"detail": "shutting down"})
        return httpx.Response(202, json=_view())

    transport = httpx.MockTransport(flaky)
    client = RerouteClient("http://x", OPERATOR, backoff_s=0.001, transport=transport)
    view = client.create([FLOW], "temporary")
    assert view.id == "r1" and view.status == 202
    assert len(keys) == 3 and len(set(keys)) == 1

    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": [{"loc": ["body", "to_path"], "msg": "no"}]})

    client = RerouteClient("http://x", OPERATOR, transport=httpx.MockTransport(broken))
    with pytest.raises(ApiError) as err:
        client.create([FLOW], "x")
    assert err.value.is_plan_error and err.value.message == "body.to_path: no"


def _view() -> dict[str, object]:
    return {
        "id": "r1",
        "state": "pending",
        "summary": "",
        "intent": None,
        "plan": None,
        "steps": [],
        "error": None,
        "created": 0.0,
        "started": None,
        "finished": None,
        "queue_position": 0,
    }


def test_openapi_document_is_current(fake_server: ServerThread) -> None:
    """docs/openapi.json is `reroute serve --openapi docs/openapi.json`."""
    written = (ROOT / "docs" / "openapi.json").read_text()
    assert written == openapi_json(), "run: reroute serve --openapi docs/openapi.json"
    served = fake_server.http(None).get("/openapi.json").json()
    assert served == json.loads(written)
    assert set(served["paths"]) >= {"/v1/reroutes", "/v1/reroutes/{reroute_id}", "/v1/events"}
    assert served["paths"]["/v1/reroutes"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in served["paths"]["/healthz"]["get"]
    assert api().openapi() == served


def test_a_body_that_is_not_utf8_is_a_422_not_a_500(
    fake_server: ServerThread, fake: FakeFabric
) -> None:
    """Found by the fuzz test: FastAPI's default handler echoed the bad bytes and crashed."""
    before = fake.snapshot()
    answer = fake_server.http(OPERATOR).post(
        "/v1/reroutes?wait=R", content=b"V\xf2\x91@\x97\xab\xff\x833"
    )
    assert answer.status_code == 422, answer.text
    assert ["query", "wait"] in [d["loc"] for d in answer.json()["detail"]]
    assert fake.snapshot() == before


def test_flows_in_every_form_plan_alike_and_a_flow_without_destination_is_a_422(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    before = fake.snapshot()
    client = fake_server.client()
    forms = (FLOW, "10.0.0.2->10.0.0.3", "src=10.0.0.2,dst=10.0.0.3")
    plans = [client.create([f], "temporary", dry_run=True).text for f in forms]
    assert plans[0].startswith("MBB: 1 flow(s) long -> temporary") and len(set(plans)) == 1
    answer = fake_server.http().post("/v1/reroutes", json={**BODY, "flows": ["10.0.0.2"]})
    assert answer.status_code == 422
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "flows", 0] and "no destination" in error["msg"]
    assert fake.snapshot() == before
    assert journal_ids(tmp_path / "journal.sqlite") == []


def test_health_asks_every_device_and_names_the_ones_down(
    fake_server: ServerThread, fake: FakeFabric
) -> None:
    reader = fake_server.http(READER)
    assert fake_server.http(None).get("/v1/health").status_code == 401
    up = reader.get("/v1/health").json()
    assert up["status"] == "ok" and all(d["up"] for d in up["devices"])
    assert {d["name"] for d in up["devices"]} == set(fake.switches)
    fake.switches["br3"].down = "cannot connect to unix:/run/x/br3.mgmt: No such file"
    down = reader.get("/v1/health").json()
    assert down["status"] == "degraded"
    (br3,) = [d for d in down["devices"] if not d["up"]]
    assert br3["name"] == "br3" and "No such file" in br3["detail"]
    assert br3["state"] == "down" and "No such file" in br3["error"] and br3["since"]
    alive = fake_server.http(None).get("/healthz")  # still alive: 200, but degraded
    assert alive.status_code == 200
    assert alive.json()["status"] == "degraded" and alive.json()["devices"] == {"br3": "down"}
    fake.switches["br3"].down = None
    again = reader.get("/v1/health").json()
    assert again["status"] == "ok" and all(d["state"] == "up" for d in again["devices"])
    healthy = fake_server.http(None).get("/healthz").json()
    assert healthy["status"] == "ok" and healthy["devices"] == {}


def test_host_names_of_the_topology_stand_for_their_addresses(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    before = fake.snapshot()
    client, http = fake_server.client(), fake_server.http()
    named = client.create(["vm2>vm3"], "temporary", dry_run=True).text
    assert named == client.create([FLOW], "temporary", dry_run=True).text
    answer = http.post("/v1/reroutes", json={**BODY, "flows": [FLOW, "vm9>vm3"]})
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "flows", 1]
    assert "'vm9' is not a host of the topology; hosts: vm1, vm2, vm3, vm4" in error["msg"]
    assert http.get("/v1/reroutes", params={"flow": "vm2>vm3"}).status_code == 200
    assert fake.snapshot() == before
    assert journal_ids(tmp_path / "journal.sqlite") == []


def test_an_option_the_strategy_would_ignore_is_refused_naming_it(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    before = fake.snapshot()
    http = fake_server.http()
    for body, field in (
        ({**BODY, "bbm_gap_ms": 3000}, "bbm_gap_ms"),  # MBB has no gap
        ({**BODY, "to_path": "short", "strategy": "bbm", "via": "temporary"}, "via"),
        ({**BODY, "strategy": "bbm", "drain_ms": 50}, "drain_ms"),
    ):
        answer = http.post("/v1/reroutes", json=body)
        assert answer.status_code in (201, 422), answer.text
        said = answer.json().get("error") or answer.json()["detail"][0]["msg"]
        assert f"{field} " in said and "leave it out" in said, said
        assert answer.status_code == 422 or answer.json()["state"] == "rejected"
    assert fake.snapshot() == before


def test_a_lock_timeout_is_honoured_on_an_optical_move_and_refused_where_nothing_locks(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    """``lock_timeout_ms`` bounds an optical move's await-lock (null: 3000 ms); a move with
    no optical step refuses it naming it: a 422 for a path that crosses no optical switch
    (whatever the devices hold), a rejected reroute for one whose cross-connects are made."""
    http, client = fake_server.http(), fake_server.client()
    before = fake.snapshot()
    # on a move that needs new cross-connects it is the await-lock's wait (the planner's
    # tests: tests/unit/services/planning/test_optical.py); null: the default 3000 ms
    optical = RerouteRequest.model_validate({**BODY, "to_path": "short", "lock_timeout_ms": 400})
    assert optical.intent().lock_timeout_s == 0.4
    assert RerouteRequest.model_validate(BODY).intent().lock_timeout_s is None
    for body in (
        {**BODY, "lock_timeout_ms": 3000},
        {**BODY, "lock_timeout_ms": 1, "dry_run": True},
    ):
        answer = http.post("/v1/reroutes", json=body)
        assert answer.status_code == 422, answer.text
        (error,) = answer.json()["detail"]
        assert error["loc"] == ["body", "lock_timeout_ms"]
        assert "crosses no optical switch" in error["msg"] and "leave it out" in error["msg"]
    assert fake.snapshot() == before
    assert journal_ids(tmp_path / "journal.sqlite") == []
    moved = client.create([FLOW], "temporary", wait_s=5)
    assert moved.state is RerouteState.DONE, moved.error
    assert http.get(f"/v1/reroutes/{moved.id}").json()["intent"]["lock_timeout_ms"] is None
    after = fake.snapshot()
    # back to long: it crosses ost1, but its cross-connects are made: nothing to lock
    back = http.post("/v1/reroutes", json={**BODY, "to_path": "long", "lock_timeout_ms": 3000})
    assert back.status_code == 201 and back.json()["state"] == "rejected", back.text
    assert "lock_timeout_ms bounds the wait" in back.json()["error"], back.text
    assert "leave it out" in back.json()["error"]
    assert fake.snapshot() == after
    assert client.flows()["temporary"] == ("10.0.0.2/32>10.0.0.3/32",)


def test_a_body_not_declared_json_is_a_415_naming_its_type(
    fake_server: ServerThread, fake: FakeFabric, tmp_path: Path
) -> None:
    before = fake.snapshot()
    http = fake_server.http()
    raw = json.dumps(BODY).encode()
    for headers, named in (({}, "no Content-Type"), ({"Content-Type": "text/plain"}, "text/plain")):
        answer = http.post("/v1/reroutes", content=raw, headers=headers)
        assert answer.status_code == 415, answer.text
        assert named in answer.json()["detail"] and "application/json" in answer.json()["detail"]
    assert fake.snapshot() == before
    assert journal_ids(tmp_path / "journal.sqlite") == []
