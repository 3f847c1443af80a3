"""The service's operator log: one grep-able line per request and one per reroute that
ends (id, state, ms), from a real server on fake switches."""

from __future__ import annotations

import logging
import re
import time

import pytest

from services.reroute.service.oplog import fields
from tests.unit.services.service.conftest import ServerThread

FLOW = "10.0.0.2>10.0.0.3"


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_one_line_per_request_and_one_per_reroute(
    fake_server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reroute.requests")
    caplog.set_level(logging.INFO, logger="reroute.reroutes")
    http = fake_server.http()
    done = http.post("/v1/reroutes?wait=5", json={"flows": [FLOW], "to_path": "temporary"})
    refused = http.post("/v1/reroutes", json={"flows": [FLOW], "to_path": "temporary"})
    assert done.json()["state"] == "done" and refused.json()["state"] == "rejected"
    assert fake_server.http(None).get("/v1/reroutes").status_code == 401
    deadline = time.monotonic() + 5  # each line is written once its answer has gone
    while time.monotonic() < deadline and (
        len(lines(caplog, "reroute.requests")) < 3 or len(lines(caplog, "reroute.reroutes")) < 2
    ):
        time.sleep(0.01)
    ok, no = done.json()["id"], refused.json()["id"]
    requests = lines(caplog, "reroute.requests")
    assert len(requests) == 3
    (created,) = [r for r in requests if r.endswith(f"reroute={ok}")]
    assert re.fullmatch(
        rf"request method=POST path=/v1/reroutes\?wait=5 status=201 ms=[\d.]+ "
        rf"client=127\.0\.0\.1 reroute={ok}",
        created,
    ), created
    (rejected,) = [r for r in requests if r.endswith(f"reroute={no}")]
    assert rejected.startswith("request method=POST path=/v1/reroutes status=201 ms=")
    (anonymous,) = [r for r in requests if "status=401" in r]
    assert re.fullmatch(
        r"request method=GET path=/v1/reroutes status=401 ms=[\d.]+ client=127\.0\.0\.1 "
        "reroute=-",
        anonymous,
    )
    ended = sorted(lines(caplog, "reroute.reroutes"), key=lambda line: no in line)
    assert len(ended) == 2
    assert re.fullmatch(rf"reroute id={ok} state=done ms=[\d.]+", ended[0]), ended[0]
    assert re.fullmatch(
        rf'reroute id={no} state=rejected ms=[\d.]+ error=".*already on path temporary.*"',
        ended[1],
    ), ended[1]


def test_values_with_spaces_or_quotes_are_quoted_so_a_line_splits_on_spaces() -> None:
    assert fields(a="x", b=None, c=1.25, d='say "hi" now', e="k=v") == (
        r'a=x b=- c=1.2 d="say \"hi\" now" e=k=v'
    )
