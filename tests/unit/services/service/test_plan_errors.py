"""The API words a refusal in its own fields (``via``, ``strategy``), never in the CLI's
flags: a rejected reroute's error and a dry run's 422 alike."""

from __future__ import annotations

from services.reroute.store.records import RerouteState
from tests.unit.services.service.conftest import ServerThread

FLOW = "10.0.0.2>10.0.0.3"


def test_refusals_name_the_api_fields(fake_server: ServerThread) -> None:
    client = fake_server.client()
    view = client.create([FLOW], "short", wait_s=5)  # the flow is on long, which it cuts
    assert view.state is RerouteState.REJECTED
    error = view.error or ""
    assert "(via=temporary); or strategy=bbm" in error and "--" not in error, error
    with fake_server.http() as http:
        body = {"flows": [FLOW], "to_path": "temporary", "via": "long", "dry_run": True}
        dry = http.post("/v1/reroutes", json=body)
    assert dry.status_code == 422, dry.text
    assert "leave out via" in dry.text and "--" not in dry.text, dry.text
    assert client.flows()["long"] == ("10.0.0.2/32>10.0.0.3/32",)  # nothing changed
